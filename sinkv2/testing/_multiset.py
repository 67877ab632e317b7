"""Multisets of arbitrary elements, and readable differences between them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, final

from sinkv2.testing._freeze import freeze

__all__ = ["Multiset", "show"]

_SHOWN = 5


@final
class Multiset:
    """Elements with multiplicity, compared as a reader of a destination counts them.

    Order is ignored and duplicates count. Elements are compared by value: dicts,
    lists, tuples and sets inside, unhashable values by repr, numbers as Python
    compares them (``1 == 1.0 == Decimal(1)``), and NaN equals NaN (a destination
    that stores NaN and reads it back is right). One original of
    each element is kept for messages. The kits compare what a destination shows
    with what it must show with it: `describe_excess` for loss or duplication,
    `describe_value_changes` for values the sink changed.
    """

    __slots__ = ("_counts", "_originals")

    def __init__(self, elements: Iterable[object] = ()) -> None:
        self._counts: Counter[Any] = Counter()
        self._originals: dict[Any, object] = {}
        self.add(elements)

    def add(self, elements: Iterable[object]) -> None:
        """Count ``elements`` in."""
        for element in elements:
            key = freeze(element)
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

    def excess(self, other: Multiset) -> list[object]:
        """What ``self`` holds more often than ``other``, each as often as it is in excess."""
        return [element for element, here, there in self.minus(other) for _ in range(here - there)]

    def describe_value_changes(self, expected: Multiset, *, written: Multiset | None = None) -> str:
        """If ``self`` (what a destination shows) changed values: a diff; ``""`` if not.

        A destination whose sink changes values (a Decimal written as a float, NaN
        stored as NULL, a string cut short) shows elements that were never written
        while written ones are missing. When both happen, the result pairs them up
        side by side where that is obvious (dicts with the same keys and one field
        changed, or as many of each), names the fields and types that changed, and
        says what to compare; otherwise (pure loss, pure duplication) it is ``""``.

        Args:
            expected: What the destination should show (for the kit: what completed
                checkpoints cover); what it holds and ``self`` lacks is "missing".
            written: Everything ever written, if more than ``expected``; only what
                ``self`` holds and ``written`` lacks entirely counts as "unexpected",
                so output that is merely early or duplicated is not a value change.
        """
        from sinkv2.testing._diff import describe_value_changes  # noqa: PLC0415  # it imports us

        source = written if written is not None else expected
        unexpected = [
            element
            for element, here, there in self.minus(source)
            if there == 0
            for _ in range(here)
        ]
        if not unexpected:
            return ""
        missing = expected.excess(self)
        if not missing:
            return ""
        return describe_value_changes(missing, unexpected)

    def count(self, element: object) -> int:
        """How often ``element`` is in the multiset."""
        return self._counts.get(freeze(element), 0)

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
