"""Flink's ``CollectIteratorAssert`` for the source kit: the records a run committed, checked.

Each committed record must be the next expected record of its split: order holds
within a split, not across splits. Exactly-once: nothing missing, nothing extra.
At-least-once: nothing missing; repeats only of records the source holds.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sinkv2._delivery import DeliveryGuarantee
from sinkv2._text import short_repr
from sinkv2.testing._freeze import freeze
from sinkv2.testing._multiset import Multiset
from sinkv2.testing._source_engine import EmittedRecord

__all__ = ["verify_bounded", "verify_unbounded"]

Row = Mapping[str, Any]


def verify_bounded(
    committed: Sequence[EmittedRecord], expected: Sequence[Row], guarantee: DeliveryGuarantee
) -> str | None:
    """What is wrong with ``committed`` as a whole read of a source holding ``expected``."""
    got = Multiset(record.record for record in committed)
    want = Multiset(expected)
    if guarantee is DeliveryGuarantee.EXACTLY_ONCE and got != want:
        lost = want.describe_excess(got, "expected", "committed")
        extra = got.describe_excess(want, "committed", "expected")
        return (
            f"the committed records differ from the source's ({len(got)} committed, "
            f"{len(want)} expected):\n"
            + (f"  missing: {lost}\n" if lost else "")
            + (f"  extra or repeated: {extra}\n" if extra else "")
            + (_under_two_ids(committed, want) if extra else "")
        )
    if guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
        missing = set(map(freeze, expected)) - set(map(freeze, got))
        foreign = set(map(freeze, got)) - set(map(freeze, expected))
        if missing or foreign:
            return (
                f"at-least-once: {len(missing)} records never arrived "
                f"(e.g. {short_repr(sorted(missing, key=repr)[:3])}) and {len(foreign)} arrived "
                f"that the source does not hold (e.g. {short_repr(sorted(foreign, key=repr)[:3])})"
            )
        return None
    return _order_problem(committed, expected)


def _under_two_ids(committed: Sequence[EmittedRecord], want: Multiset) -> str:
    """A line naming a record repeated under two split ids (an id unstable across restarts)."""
    ids: dict[Any, set[str]] = collections.defaultdict(set)
    counts: collections.Counter[Any] = collections.Counter()
    for record in committed:
        key = freeze(record.record)
        counts[key] += 1
        if record.split_id is not None:
            ids[key].add(record.split_id)
    for record in committed:
        key = freeze(record.record)
        if counts[key] > want.count(record.record) and len(ids[key]) > 1:
            return (
                f"  {short_repr(record.record)} was committed through splits "
                f"{sorted(ids[key])}: if these are one split under two ids, its split_id() is "
                "not stable across restarts (a restored enumerator or reader made it anew "
                "from something that changes: a counter, a random token, the listing order)\n"
            )
    return ""


def _order_problem(committed: Sequence[EmittedRecord], expected: Sequence[Row]) -> str | None:
    """A split whose records came in another order than the source holds them."""
    positions: dict[Any, collections.deque[int]] = collections.defaultdict(collections.deque)
    for index, row in enumerate(expected):
        positions[freeze(row)].append(index)
    last: dict[str, tuple[int, Row]] = {}
    for record in committed:
        if record.split_id is None:
            continue
        index = positions[freeze(record.record)].popleft()
        before = last.get(record.split_id)
        if before is not None and index < before[0]:
            return (
                f"split {record.split_id!r}: {short_repr(record.record)} came after "
                f"{short_repr(before[1])}, but the source holds it before; records of one "
                "split must keep their order"
            )
        last[record.split_id] = (index, record.record)
    return None


def verify_unbounded(
    committed: Sequence[EmittedRecord],
    split_records: Callable[[str], Iterable[Row]],
    guarantee: DeliveryGuarantee,
) -> str | None:
    """What is wrong with ``committed`` as a prefix of every split's records."""
    by_split: dict[str | None, list[Row]] = collections.defaultdict(list)
    for record in committed:
        by_split[record.split_id].append(record.record)
    if None in by_split:
        return (
            f"{len(by_split[None])} records were emitted through the reader's main output; "
            "the kit checks unbounded sources split by split, so emit through "
            "output.create_output_for_split(split_id)"
        )
    for split_id, rows in sorted(by_split.items(), key=lambda item: str(item[0])):
        assert split_id is not None
        want = list(itertools.islice(split_records(split_id), len(rows)))
        if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            if [freeze(r) for r in rows] != [freeze(r) for r in want]:
                at = next(
                    (
                        i
                        for i, (a, b) in enumerate(zip(rows, want, strict=False))
                        if freeze(a) != freeze(b)
                    ),
                    min(len(rows), len(want)),
                )
                return (
                    f"split {split_id!r}: committed record {at} is "
                    f"{short_repr(rows[at] if at < len(rows) else None)} where the split holds "
                    f"{short_repr(want[at] if at < len(want) else None)}; exactly-once commits "
                    "each split's records once, in order, without gaps"
                )
        elif not {freeze(r) for r in rows} <= {freeze(r) for r in want}:
            return f"split {split_id!r}: committed records the split does not hold in its prefix"
    return None
