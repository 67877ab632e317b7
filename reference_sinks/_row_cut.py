"""Cutting a finite split at a record count, for a micro-batch engine's record limit.

`FileSource`'s Parquet splits and `IcebergSource`'s data files end by themselves,
and their record count is known on the driver without reading the data: a Parquet
footer's ``num_rows`` (per row group), an Iceberg manifest's ``record_count`` less
the rows its position-delete files name. `sinkv2.source.SupportsEndPositions` lets
such a split be cut, so that ``maxRecordsPerTrigger`` bounds a micro-batch: the
split's end position is its record count, and a cut with ``max_records`` reads
from the split's position to a *stop* (a record number) and leaves the rest for a
later micro-batch.

Positions and stops count records as the split's reader emits them (after deletes),
the unit of the split's ``records_read``: a cut's ``records`` is exactly what the
read emits, which the engine checks. The same split and end give the same cut, so
a replay reads the same rows.

A count that costs a read on the driver (a Parquet footer not read at listing, an
Iceberg split's delete files) is deferred: `end_positions` gives `COUNT_WHEN_CUT`,
and the count is taken only when a cut is asked with ``max_records``; without a
limit the split is read whole from its position, as before. A split whose count
is not known at all (JSON lines, CSV, an Iceberg read with a row filter) gets no
end (``None``): it is read whole, and not counted by the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final, Protocol, Self, TypeVar

import pyarrow as pa

from sinkv2.source import SourceContractError, SplitCut

__all__ = ["COUNT_WHEN_CUT", "CountedSplit", "cut_counted", "until_stop"]

COUNT_WHEN_CUT: Final = "count-when-cut"
"""The end of a finite split whose record count is taken only by a cut with a limit."""


class CountedSplit(Protocol):
    """A finite split with a position, a stop, and a record count when known."""

    @property
    def records_read(self) -> int: ...

    @property
    def stop(self) -> int | None: ...

    @property
    def records(self) -> int | None: ...

    def split_id(self) -> str: ...

    def at(self, records_read: int) -> Self: ...

    def until(self, stop: int | None, records: int) -> Self:
        """This split read up to record ``stop`` (``None``: to its end), of ``records`` in all."""
        ...


SplitT = TypeVar("SplitT", bound=CountedSplit)


def cut_counted(
    split: SplitT,
    end: object,
    max_records: int | None,
    count: Callable[[SplitT], int],
    *,
    source: str,
) -> SplitCut[SplitT]:
    """Cut ``split`` at ``end`` (its record count, or `COUNT_WHEN_CUT`), at most ``max_records``.

    Args:
        split: The split, at its position (a rest carries no stop).
        end: What `end_positions` gave: the split's record count, or
            `COUNT_WHEN_CUT` to take it with ``count`` when a limit asks for it.
        max_records: At most this many records in the read; ``None``: to the end.
        count: The split's record count (emitted records), read on the driver.
        source: The source's class name, for messages.

    Raises:
        SourceContractError: ``end`` is neither a count nor `COUNT_WHEN_CUT`, or is
            before the split's position, or the split already has a stop.
    """
    split_id = split.split_id()
    if split.stop is not None:
        raise SourceContractError(
            f"{source}.cut_split({split_id!r}): the split already stops at record "
            f"{split.stop}; an engine cuts a split or its rest, never a cut's read",
            method="cut_split",
            split_id=split_id,
        )
    if end == COUNT_WHEN_CUT:
        if max_records is None:  # no limit: read whole, count unknown (no read on the driver)
            return SplitCut(split, None, None)
        total = count(split) if split.records is None else split.records
    elif isinstance(end, int) and not isinstance(end, bool):
        total = end
    else:
        raise SourceContractError(
            f"{source}.cut_split({split_id!r}, {end!r}): the end position is not one "
            f"end_positions() gives (a record count, or {COUNT_WHEN_CUT!r})",
            method="cut_split",
            split_id=split_id,
        )
    position = split.records_read
    if total < position:
        raise SourceContractError(
            f"{source}.cut_split({split_id!r}): the split holds {total} record(s) and its "
            f"position is {position}: the file changed after it was listed, or the position "
            "belongs to another split",
            method="cut_split",
            split_id=split_id,
        )
    left = total - position
    take = left if max_records is None else min(left, max_records)
    stop = position + take
    rest = None if stop == total else split.at(stop).until(None, total)
    return SplitCut(split.until(stop, total), rest, take)


def until_stop(split: CountedSplit, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` (the split's records after its position) up to the split's stop.

    The first batch is always asked for, so what opening the split does (a
    dead-letter of a file that does not parse) happens for a cut of no records too.
    """
    if split.stop is None:
        yield from batches
        return
    left = split.stop - split.records_read
    for batch in batches:
        if left <= 0:
            return
        piece = batch.slice(0, left) if batch.num_rows > left else batch
        left -= piece.num_rows
        yield piece
