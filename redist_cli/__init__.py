"""The ``redist`` command line: the top layer, so it may dispatch to every package below it."""

from redist_cli.main import main

__all__ = ["main"]
