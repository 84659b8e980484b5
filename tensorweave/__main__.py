"""``python -m tensorweave``: the main job (see ``tensorweave/cli.py``)."""
import sys

from tensorweave.cli import main

if __name__ == "__main__":
    sys.exit(main())
