"""Which attribute keeps an object from pickling: for errors that name the culprit.

Engines ship sinks to other processes with cloudpickle. When that fails, the
pickler's own message rarely says where ("cannot pickle '_thread.lock' object");
`find_unpicklable` walks the object's attributes and containers to the deepest
part that still fails, so the error can say ``sink.client._lock``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["find_unpicklable"]

_MAX_DEPTH: Final = 8
_MAX_CHILDREN: Final = 200


def _children(value: object) -> Iterator[tuple[str, object]]:
    """(path suffix, child) for the parts of ``value`` a pickler would visit."""
    if isinstance(value, dict):
        for index, (key, item) in enumerate(value.items()):
            if index >= _MAX_CHILDREN:
                return
            yield f"[{key!r}]", item
        return
    if isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            if index >= _MAX_CHILDREN:
                return
            yield f"[{index}]", item
        return
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict):
        yield from ((f".{name}", item) for name, item in list(state.items())[:_MAX_CHILDREN])
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                yield f".{name}", getattr(value, name)


def find_unpicklable(
    value: object, dumps: Callable[[object], bytes], name: str = "sink"
) -> tuple[str, object] | None:
    """The path and value of the deepest part of ``value`` that ``dumps`` refuses.

    Returns ``None`` if ``value`` pickles. If it fails but no part of it does
    (the object itself refuses, e.g. through ``__reduce__``), the path is ``name``.
    """

    def fails(candidate: object) -> bool:
        try:
            dumps(candidate)
        except Exception:  # noqa: BLE001  # any failure counts: that is the question
            return True
        return False

    if not fails(value):
        return None
    path, current = name, value
    for _ in range(_MAX_DEPTH):
        for suffix, child in _children(current):
            if fails(child):
                path, current = path + suffix, child
                break
        else:
            break
    return path, current
