"""Values as hashable stand-ins, equal exactly when the values are: how the kits count rows."""

from __future__ import annotations

import math
from typing import Any, Final

__all__ = ["freeze"]

_PLAIN: Final = frozenset({str, int, bool, bytes, type(None)})


def freeze(value: object) -> Any:
    """A hashable stand-in for ``value`` that is equal exactly when the values are equal.

    Dicts, lists, sets and tuples are frozen recursively, so rows (dicts) can be
    counted; NaN equals NaN here, as a reader would count it.
    """
    kind = type(value)
    if kind in _PLAIN or (kind is float and value == value):  # noqa: PLR0124  # NaN != NaN
        return value  # the common case first: hashable, equal exactly when equal
    return _freeze_other(value)


def _freeze_other(value: object) -> Any:
    if isinstance(value, dict):
        return (
            "dict",
            tuple(sorted(((freeze(k), freeze(v)) for k, v in value.items()), key=repr)),
        )
    if isinstance(value, list | tuple):
        return ("seq", tuple(freeze(v) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted((freeze(v) for v in value), key=repr)))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    try:
        hash(value)
    except TypeError:
        return ("repr", type(value).__qualname__, repr(value))
    return value
