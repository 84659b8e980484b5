"""Runnable examples behind the ``tensorweave`` command (each is also importable)."""
