"""`CliError`: what ``sinkv2 state`` refuses or fails with, shown as one line."""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A refusal or an error the CLI reports in one line on stderr, exit status 1."""
