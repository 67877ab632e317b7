"""A stream of epochs, as the engine and its tasks see it: offsets, limits, slices.

The source coordinator (`SourceEpochCoordinator`) decides epochs on the driver; what
crosses from it to the engine is small and plain: the offset the engine logs
(`SourceOffset`, a pointer to one epoch record), the engine's admission control
(`ReadLimit`), and per task one `EpochSlice` - the split reads a subtask does in
one epoch - which a task reads with `read_epoch_slice`. `check_streamable` says
which sources a micro-batch engine can replay exactly.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime._source_plan import split_id_of
from sinkv2.runtime._source_task import DEFAULT_BATCH_ROWS, read_subtask
from sinkv2.source import Boundedness, SourceContractError, SupportsEndPositions

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow

__all__ = [
    "OFFSET_VERSION",
    "EpochSlice",
    "ReadLimit",
    "SourceOffset",
    "check_streamable",
    "read_epoch_slice",
]

OFFSET_VERSION: Final = 1
"""The version of `SourceOffset`'s dict form."""


def check_streamable(source: Any) -> None:
    """Refuse a source a micro-batch engine cannot replay exactly.

    A BOUNDED source is read split by split, each split whole in one epoch. A
    CONTINUOUS_UNBOUNDED one may have splits that never end; the engine must be
    able to fix how far each is read before the epoch runs (`SupportsEndPositions`).

    Raises:
        SourceContractError: The source is unbounded and lacks the extension.
    """
    boundedness = source.get_boundedness()
    if boundedness is Boundedness.BOUNDED or isinstance(source, SupportsEndPositions):
        return
    raise SourceContractError(
        f"{describe(source)} is {getattr(boundedness, 'name', boundedness)} and does not "
        "implement sinkv2.source.SupportsEndPositions (end_positions and cut_split): a "
        "micro-batch engine fixes how far each split is read before the micro-batch runs, "
        "and replays exactly that after a crash, so an unbounded source must tell, on the "
        "driver, how far its splits can be read now. Implement the extension (return None "
        "for splits that end by themselves, such as files); for a source you did not "
        "write, read a bounded configuration of it (an end set), in batch or with "
        "streaming=True",
        method="get_boundedness",
    )


@final
@attrs.frozen
class SourceOffset:
    """The engine's offset for a source: a pointer to one epoch record, never the history.

    Attributes:
        source_id: The source id whose epoch records the offset points into.
        epoch: The epoch the offset ends.
    """

    source_id: str
    epoch: int

    def to_dict(self) -> dict[str, Any]:
        """The offset as the engine keeps it (a JSON object with a stable key order)."""
        return {"v": OFFSET_VERSION, "source_id": self.source_id, "epoch": self.epoch}

    @classmethod
    def from_dict(cls, offset: object, *, source_id: str) -> SourceOffset:
        """Read an offset the engine logged, for ``source_id``.

        Raises:
            SinkConfigurationError: The offset is not one of ours, or belongs to
                another source id (the query's checkpoint was written with another
                ``source_id``).
        """
        if (
            not isinstance(offset, Mapping)
            or offset.get("v") != OFFSET_VERSION
            or not isinstance(offset.get("source_id"), str)
            or not isinstance(offset.get("epoch"), int)
        ):
            raise SinkConfigurationError(
                f"the offset {short_repr(offset)} was not written by a sinkv2 source (expected "
                f'{{"v": {OFFSET_VERSION}, "source_id": ..., "epoch": ...}}); the checkpoint '
                "location belongs to another query - start this one from a new checkpoint "
                "location"
            )
        if offset["source_id"] != source_id:
            raise SinkConfigurationError(
                f"the query's checkpoint was written reading source id {offset['source_id']!r}, "
                f"and this query reads source id {source_id!r}; a checkpoint location belongs "
                f"to one source id: use source_id {offset['source_id']!r} again, or a new "
                "checkpoint location"
            )
        return cls(source_id, offset["epoch"])


@final
@attrs.frozen
class ReadLimit:
    """How much one epoch may admit (the engine's admission control).

    Attributes:
        max_records: At most this many records cut from splits with end positions
            (their `SplitCut.records`); ``None`` for no limit. A split read whole
            (one that ends by itself) is not counted: it is limited by ``max_splits``.
        max_splits: At most this many split reads; ``None`` for no limit.

    Every epoch admits at least one read when anything can be read, so a limit
    smaller than one split never stalls the stream.
    """

    max_records: int | None = None
    max_splits: int | None = None


@final
@attrs.frozen
class EpochSlice:
    """What one subtask reads in one epoch: its split reads and the events sent to it.

    Attributes:
        epoch: The epoch.
        subtask: The reader subtask.
        parallelism: The number of reader subtasks of the epoch.
        splits: The split reads, framed by the source's split serializer.
        records: How many records the reads hold, when the source told it for
            every one of them (`SplitCut.records`); ``None`` otherwise.
        events: Events the enumerator sent the subtask (pickled), handed to its
            reader before it reads.
    """

    epoch: int
    subtask: int
    parallelism: int
    splits: tuple[bytes, ...]
    records: int | None
    events: tuple[bytes, ...]

    def split_ids(self, source: Any) -> list[str]:
        """The ids of the splits read, for messages."""
        serializer = source.get_split_serializer()
        return [
            split_id_of(
                SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed),
                "snapshot_state",
            )
            for framed in self.splits
        ]


def read_epoch_slice(
    source: Any,
    schema: pyarrow.Schema,
    piece: EpochSlice,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pyarrow.RecordBatch]:
    """Read one subtask's share of an epoch to its stop positions, as Arrow batches.

    Raises:
        SourceContractError: The reader emitted other than the records the plan
            counted (it stopped early or read past a stop position), or broke a
            rule `read_subtask` checks.
    """
    events = [pickle.loads(event) for event in piece.events]  # our own record
    rows = 0
    for batch in read_subtask(
        source,
        schema,
        subtask=piece.subtask,
        parallelism=piece.parallelism,
        splits=piece.splits,
        events=events,
        batch_rows=batch_rows,
    ):
        rows += batch.num_rows
        yield batch
    if piece.records is not None and rows != piece.records:
        how = "stopped early" if rows < piece.records else "read past its stop position"
        raise SourceContractError(
            f"the reader of subtask {piece.subtask} in epoch {piece.epoch} emitted {rows} "
            f"record(s) from splits {piece.split_ids(source)}, which were cut to hold "
            f"{piece.records}: it {how}. A reader must finish a split exactly at the stop "
            "position its cut_split() gave",
            method="poll_next",
        )
