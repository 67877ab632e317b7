"""Value changes: what a destination shows changed, side by side with what was written.

A sink that writes a Decimal as a float, stores NaN as NULL or cuts a string shows
elements nobody wrote while elements that were written are missing. Reported as
loss or as unexpected elements, that points at the wrong place; paired up, the
difference names the field and the types.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Final

from sinkv2._text import short_repr
from sinkv2.testing._freeze import freeze

__all__ = ["describe_value_changes"]

_SHOWN: Final = 5
_REPR: Final = 60
_FIELD_REPR: Final = 40


def _same(a: object, b: object) -> bool:
    """Equal as `Multiset` counts them: NaN equals NaN, containers compared inside."""
    return bool(freeze(a) == freeze(b))


def _loosely_same(a: object, b: object) -> bool:
    """Whether ``b`` looks like ``a`` changed in writing: a number rounded, text cut."""
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=1e-6)
    if isinstance(a, str) and isinstance(b, str):
        return bool(a and b) and (a.startswith(b) or b.startswith(a))
    if (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return a is None or b is None
    return str(a) == str(b)


def _likeness(written: object, shown: object) -> tuple[int, int]:
    """How clearly ``shown`` is ``written`` with some parts changed: (equal, alike) parts.

    ``(0, 0)``: not at all.
    """
    if isinstance(written, dict) and isinstance(shown, dict):
        if written.keys() != shown.keys():
            return (0, 0)
        parts = [(written[key], shown[key]) for key in written]
    elif isinstance(written, list | tuple) and isinstance(shown, list | tuple):
        if len(written) != len(shown):
            return (0, 0)
        parts = list(zip(written, shown, strict=True))
    else:
        return (0, 0)
    equal = sum(_same(a, b) for a, b in parts)
    alike = sum(_loosely_same(a, b) for a, b in parts if not _same(a, b))
    if len(parts) < 2:
        return (1, alike)
    return (equal, alike) if equal else (0, 0)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal | Fraction):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _in_order(values: list[object]) -> list[object]:
    """Numbers by value (so 0.1 meets Decimal('0.1')), anything else as it came."""
    numbers = [_number(v) for v in values]
    keys = [n for n in numbers if n is not None]
    if len(keys) < len(values):
        return values
    return [v for _, v in sorted(zip(keys, values, strict=True), key=lambda kv: kv[0])]


def _pair(
    missing: Sequence[object], unexpected: Sequence[object]
) -> tuple[list[tuple[object, object]], list[object], list[object]]:
    """Pairs (written, shown) where obvious, then what is left of each side."""
    left = list(missing)
    pairs: list[tuple[object, object]] = []
    unpaired: list[object] = []
    for shown in unexpected:
        scores = [_likeness(written, shown) for written in left]
        best = max(range(len(left)), key=scores.__getitem__, default=None)
        if best is not None and scores[best] > (0, 0):
            pairs.append((left.pop(best), shown))
        else:
            unpaired.append(shown)
    if unpaired and len(left) == len(unpaired):  # as many of each: pair them up in order
        pairs.extend(zip(_in_order(left), _in_order(unpaired), strict=True))
        left, unpaired = [], []
    return pairs, left, unpaired


def _kind(value: object) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if value is None:
        return "None"
    return type(value).__name__


def _change(written: object, shown: object) -> str:
    """``Decimal came back as float``, or ``str values change``."""
    if type(written) is not type(shown) or _kind(written) != _kind(shown):
        return f"{_kind(written)} came back as {_kind(shown)}"
    return f"{_kind(written)} values change"


def _field_changes(written: object, shown: object) -> list[tuple[str, object, object]]:
    """(where, written part, shown part) for each part of ``written`` that ``shown`` changed."""
    if isinstance(written, dict) and isinstance(shown, dict) and written.keys() == shown.keys():
        return [
            (f"field {short_repr(key, _FIELD_REPR)}", written[key], shown[key])
            for key in written
            if not _same(written[key], shown[key])
        ]
    if (
        isinstance(written, list | tuple)
        and isinstance(shown, list | tuple)
        and len(written) == len(shown)
    ):
        return [
            (f"item {i}", a, b)
            for i, (a, b) in enumerate(zip(written, shown, strict=True))
            if not _same(a, b)
        ]
    return [("", written, shown)]


def _detail(where: str, written: object, shown: object) -> str:
    change = (
        f"{short_repr(written, _FIELD_REPR)} ({_kind(written)}) -> "
        f"{short_repr(shown, _FIELD_REPR)} ({_kind(shown)})"
    )
    return f"{where}: {change}" if where else change


def _advice(pairs: list[tuple[object, object]]) -> str:
    """What to compare, from the changes seen: the places that change most first."""
    causes: dict[str, dict[str, None]] = {}
    counts: dict[str, int] = {}
    for written, shown in pairs:
        for where, part, shown_part in _field_changes(written, shown):
            place = where or "values"
            causes.setdefault(place, {})[_change(part, shown_part)] = None
            counts[place] = counts.get(place, 0) + 1
    ranked = sorted(causes, key=lambda place: -counts[place])[:3]
    if not ranked:
        return (
            "the sink changes values, or read_back returns elements of another shape: "
            "compare what it writes with what read_back returns"
        )
    return "the sink changes values: compare how it writes and reads back " + "; ".join(
        f"{place} ({', '.join(causes[place])})" for place in ranked
    )


def describe_value_changes(missing: Sequence[object], unexpected: Sequence[object]) -> str:
    """A side-by-side diff of ``missing`` (written) and ``unexpected`` (shown) elements.

    Elements are paired where that is obvious: dicts with the same keys and the
    most fields equal (then the most fields alike: a number rounded, a string cut),
    sequences of one length likewise, or, when there are as many of each, in order
    (numbers by value). The first few pairs are shown with the fields that
    differ; the rest are counted.

    Args:
        missing: Elements that were written and should be visible, but are not.
        unexpected: Elements the destination shows that were never written.

    Returns:
        The report: a first line, the diff, then what it usually means.
    """
    pairs, lone_missing, lone_unexpected = _pair(missing, unexpected)
    rows: list[tuple[str, str]] = [("written (missing)", "read back (unexpected)")]
    notes: list[str] = []
    for written, shown in pairs[:_SHOWN]:
        rows.append((short_repr(written, _REPR), short_repr(shown, _REPR)))
        notes.append("; ".join(_detail(*change) for change in _field_changes(written, shown)))
    width = max(len(left) for left, _ in rows)
    lines = [f"    {rows[0][0]:<{width}}  |  {rows[0][1]}"] if pairs else []
    for (left, right), note in zip(rows[1:], notes, strict=True):
        lines.append(f"    {left:<{width}}  |  {right}")
        lines.append(f"        {note}")
    if len(pairs) > _SHOWN:
        lines.append(f"    ... and {len(pairs) - _SHOWN} more pair(s)")
    for label, lone in (("missing", lone_missing), ("unexpected", lone_unexpected)):
        if lone:
            shown = ", ".join(short_repr(e, _REPR) for e in lone[:_SHOWN])
            more = f" and {len(lone) - _SHOWN} more" if len(lone) > _SHOWN else ""
            lines.append(f"    {label}, not paired: {shown}{more}")
    return (
        f"the destination shows {len(unexpected)} element(s) the kit never wrote, and "
        f"{len(missing)} written element(s) are missing:\n"
        + "\n".join(lines)
        + "\nThis usually means "
        + _advice(pairs)
        + ". read_back must return elements equal to those written (same types, NaN as NaN)"
    )
