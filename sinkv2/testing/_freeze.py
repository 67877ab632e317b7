"""Values as hashable stand-ins, equal exactly when the values are: how the kits count rows."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["freeze"]


def freeze(value: object) -> Any:
    """A hashable stand-in for ``value`` that is equal exactly when the values are equal.

    Dicts, lists, sets and tuples are frozen recursively, so rows (dicts) can be
    counted; NaN equals NaN here, as a reader would count it.
    """
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
