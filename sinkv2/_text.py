"""How values are shown in error messages."""

from __future__ import annotations

__all__ = ["describe"]

_MAX_REPR = 200


def describe(value: object) -> str:
    """A bounded repr of ``value`` plus its type name, e.g. ``0 of type int``."""
    text = repr(value)
    if len(text) > _MAX_REPR:
        text = text[: _MAX_REPR - 3] + "..."
    return f"{text} of type {type(value).__name__}"
