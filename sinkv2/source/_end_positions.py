"""An extension beyond Flink: end positions for unbounded splits, told on the driver.

A FLIP-27 reader decides by itself how far to read a split; a log partition (a
Kafka partition, a Redis stream, a replication slot) is read for as long as the job
runs. A micro-batch engine cannot let it: Spark fixes the end of every micro-batch on
the driver before any task reads, and a replay after a crash must read exactly the
same rows. So a source whose splits do not end (or that discovers splits forever)
tells the engine, on the driver, how far each split can be read *now*, and cuts a
split into the slice one micro-batch reads and the rest that goes on. This is
Flink's bounded-Kafka pattern (a split that carries its stopping offset), asked for
at every micro-batch instead of once.

A source without this extension is read by a micro-batch engine only when it is
BOUNDED (each split is read whole in one micro-batch); an unbounded one is refused
with a message that names this class, never read without replay.

A split that ends by itself and whose record count is not known before it is read
gets no end position: it is read whole and a record limit does not count it. A
source whose configuration makes it so (a file format, a filter) says it before any
split is planned (`SupportsUncountedSplits`), so an engine can tell its user at the
start of a query that a record limit will not bound its micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

import attrs

__all__ = ["SplitCut", "SupportsEndPositions", "SupportsUncountedSplits"]

SplitT = TypeVar("SplitT")


def _records(value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"SplitCut.records must be None or an int >= 0 (got {value!r})")
    return value


@attrs.frozen
class SplitCut(Generic[SplitT]):
    """One split, cut at an end position: what one micro-batch reads, and what goes on.

    Attributes:
        read: The split from its current position to the end position, as a split
            whose reader must finish it exactly there (it carries its stop, as
            Flink's bounded Kafka splits do); ``None`` when there is nothing to read
            now (the end position is the current position).
        rest: The split from the end position on, read in a later micro-batch;
            ``None`` when the split is finished with ``read``.
        records: How many records ``read`` holds, when the source knows (a log's
            offsets, a row count); ``None`` when it does not. Engines use it for
            admission control (``maxRecordsPerTrigger``) and check it against what
            the reader emitted: a reader that stops early or reads past its stop
            fails its task, naming the split.
    """

    read: SplitT | None
    rest: SplitT | None
    records: int | None = attrs.field(default=None, converter=_records)


@runtime_checkable
class SupportsEndPositions(Protocol[SplitT]):
    """A source that can tell, on the driver, how far each of its splits can be read now.

    Extension (not in Flink): required of a CONTINUOUS_UNBOUNDED source that Spark
    reads as a stream; optional for a BOUNDED one. Both methods run on the driver,
    between micro-batches, on splits the enumerator assigned (and on their rests);
    they may ask the upstream (a log's latest offset) but must not change it.

    Required: `end_positions` and `cut_split`.
    """

    def end_positions(self, splits: Sequence[SplitT]) -> Sequence[object | None]:
        """For each split, in order, how far it can be read now; ``None`` if it is finite.

        A position is opaque to the engine (an offset, an LSN, a stream id) and is
        only handed back to `cut_split`. ``None`` says the split ends by itself (a
        file, a key range): it is read whole in one micro-batch and never cut. Called
        once per micro-batch for all active splits, so a source can ask its upstream
        once for all of them.
        """
        ...

    def cut_split(self, split: SplitT, end: object, max_records: int | None) -> SplitCut[SplitT]:
        """Cut ``split`` at ``end`` (from `end_positions`), reading at most ``max_records``.

        ``max_records`` is ``None`` when the engine admits everything up to ``end``;
        otherwise the cut ends earlier when ``end`` is further than ``max_records``
        records from the split's position (admission control), and ``records`` must
        then be told. The same split and end must always give the same cut: a replay
        reads what the first attempt read.
        """
        ...


@runtime_checkable
class SupportsUncountedSplits(Protocol):
    """A source with end positions that says, before any split exists, which it cannot count.

    Extension (not in Flink), optional beside `SupportsEndPositions`: a source whose
    `end_positions` gives ``None`` (read whole, not counted by a record limit) for
    splits that ``maxRecordsPerTrigger`` would otherwise bound - files whose records
    are only known once read, a scan whose filter drops an unknown number of rows -
    tells the engine why, so the user learns at the start of the query, not by
    watching micro-batch sizes. Called on the driver (or wherever the engine sets up
    a stream), once per query start, on the configured source: no upstream I/O.

    Required: `uncounted_splits`.
    """

    def uncounted_splits(self) -> str | None:
        """Why this source's splits get no end position (read whole, uncounted), or ``None``.

        ``None`` when `end_positions` gives every split an end (a record count or a
        log position), so a record limit cuts them. Otherwise one clause an engine
        puts in its warning, naming what makes the splits whole, e.g. ``"its JSON
        lines files are read whole: their records are not known before a file is
        read"``.
        """
        ...
