"""Subcommands of the ``tensorweave`` command that live outside ``cli.py`` (registered there)."""
