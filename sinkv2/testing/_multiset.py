"""Multisets of arbitrary elements, and readable differences between them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, final

__all__ = ["Multiset", "show"]

_SHOWN = 5


def _freeze(value: object) -> Any:
    """A hashable stand-in for ``value`` that is equal exactly when the values are equal.

    Dicts, lists, sets and tuples are frozen recursively, so rows (dicts) can be
    counted; NaN equals NaN here, as a reader would count it.
    """
    if isinstance(value, dict):
        return (
            "dict",
            tuple(sorted(((_freeze(k), _freeze(v)) for k, v in value.items()), key=repr)),
        )
    if isinstance(value, list | tuple):
        return ("seq", tuple(_freeze(v) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted((_freeze(v) for v in value), key=repr)))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    try:
        hash(value)
    except TypeError:
        return ("repr", type(value).__qualname__, repr(value))
    return value


@final
class Multiset:
    """Elements with multiplicity; keeps one original of each for messages."""

    __slots__ = ("_counts", "_originals")

    def __init__(self, elements: Iterable[object] = ()) -> None:
        self._counts: Counter[Any] = Counter()
        self._originals: dict[Any, object] = {}
        self.add(elements)

    def add(self, elements: Iterable[object]) -> None:
        """Count ``elements`` in."""
        for element in elements:
            key = _freeze(element)
            self._counts[key] += 1
            self._originals.setdefault(key, element)

    def copy(self) -> Multiset:
        """An independent copy."""
        copied = Multiset()
        copied._counts = Counter(self._counts)
        copied._originals = dict(self._originals)
        return copied

    def __len__(self) -> int:
        return sum(self._counts.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Multiset):
            return NotImplemented
        return +self._counts == +other._counts

    __hash__ = None  # type: ignore[assignment]  # mutable

    def minus(self, other: Multiset) -> list[tuple[object, int, int]]:
        """What ``self`` holds more often than ``other``: (element, here, there)."""
        return [
            (self._originals[key], count, other._counts.get(key, 0))
            for key, count in self._counts.items()
            if count > other._counts.get(key, 0)
        ]

    def describe_excess(self, other: Multiset, here: str, there: str) -> str:
        """What ``self`` holds more often than ``other``, as text; ``""`` if nothing.

        At most a few elements are shown, each as ``element (3x here, 1x there)``;
        ``here`` and ``there`` name the two sides in the message.
        """
        return show(self.minus(other), here, there)

    def count(self, element: object) -> int:
        """How often ``element`` is in the multiset."""
        return self._counts.get(_freeze(element), 0)

    def __iter__(self) -> Iterator[object]:
        for key, count in self._counts.items():
            for _ in range(count):
                yield self._originals[key]

    def __repr__(self) -> str:
        return f"Multiset({len(self)} elements)"


def show(entries: list[tuple[object, int, int]], here: str, there: str) -> str:
    """``entries`` of `Multiset.minus` as text, at most a few of them."""
    text = "; ".join(
        f"{element!r} ({count}x {here}, {other}x {there})"
        for element, count, other in entries[:_SHOWN]
    )
    more = len(entries) - _SHOWN
    return text + (f"; and {more} more" if more > 0 else "")
