"""How values and missing extras are worded in error messages.

Messages say what arrived: a bounded repr (a 10 MB row must not become a 10 MB
message) and, where the type matters, its type name. A missing optional
dependency names the extra that installs it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["describe", "missing_extra", "short_repr"]

REPR_LIMIT: Final = 200
"""The longest repr a message shows by default, in characters."""


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """``repr(value)``, cut to at most ``limit`` characters (ending in ``...`` if cut).

    Raises:
        ValueError: ``limit`` is below 4, too short to show anything before ``...``.
    """
    if limit < 4:
        raise ValueError(f"limit must be at least 4 (got {limit!r}); pass e.g. 200")
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: object, limit: int = REPR_LIMIT) -> str:
    """A bounded repr of ``value`` plus its type name, e.g. ``0 of type int``."""
    return f"{short_repr(value, limit)} of type {type(value).__name__}"


def missing_extra(needed_by: str, package: str, extra: str) -> ImportError:
    """The ImportError for an optional dependency that is not installed; raise it.

    ``raise missing_extra("HttpSink", "aiohttp", "http") from error`` says
    ``HttpSink needs aiohttp; install it with: pip install 'sinkv2[http]'``.

    Args:
        needed_by: What needs the dependency (a class, a module).
        package: The missing distribution, as a user would recognise it.
        extra: The sinkv2 extra that installs it.
    """
    return ImportError(
        f"{needed_by} needs {package}; install it with: pip install 'sinkv2[{extra}]'"
    )
