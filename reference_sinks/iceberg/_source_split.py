"""What `IcebergSource` checkpoints: file scan tasks with positions, and the enumerator's state.

Iceberg's Flink ``IcebergSourceSplit`` is a combined scan task with a file offset
and a record offset; here a split is one data file (one ``FileScanTask``) and its
position is the number of records already emitted from it, after deletes and the
row filter, so a restored reader skips exactly what was read. The enumerator's
state is Iceberg's ``IcebergEnumeratorState``: the splits not yet assigned (with
their positions) and the last snapshot whose added files became splits.
"""

# No `from __future__ import annotations`: the public classes are re-homed in
# reference_sinks.iceberg (publish), where cattrs could not resolve the names of the others.

from typing import final

import attrs

from sinkv2 import AttrsMsgpackSerializer

__all__ = [
    "IcebergEnumeratorState",
    "IcebergSourceSplit",
    "enumerator_state_serializer",
    "split_serializer",
]


@final
@attrs.frozen
class IcebergSourceSplit:
    """One data file of a scan, the position deletes that apply to it, and how far it was read.

    Attributes:
        path: The data file's location (its id: a data file is added to a table once).
        record_count: The data file's records, before deletes and the row filter.
        file_size: The data file's size in bytes.
        snapshot_id: The snapshot the split was planned from: the scanned one (bounded,
            or the first table scan of a stream), or the append that added the file.
        position_deletes: Locations of position-delete files that may hold rows of
            this file; they are applied while reading.
        records_read: The split's position: records already emitted from it, counted
            after deletes and the row filter.
        records: The records the split emits (``record_count`` less the deleted
            rows), when counted; ``None`` when not counted yet.
        stop: Where a reader stops: the record (counted as ``records_read``) a
            micro-batch's cut ends at (``reference_sinks._row_cut``); ``None``: the
            file's end.
        identity: The data file's identity-partition values of the columns read, by
            field id, in Iceberg's single-value serialization (``None``: a null
            value): a column the file does not hold (a file imported with its
            partition values in its path only) reads as its partition value, as
            Iceberg's column projection rules say.
    """

    path: str
    record_count: int
    file_size: int
    snapshot_id: int
    position_deletes: tuple[str, ...] = ()
    records_read: int = 0
    records: int | None = None
    stop: int | None = None
    identity: tuple[tuple[int, bytes | None], ...] = ()

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`: the data file's location."""
        return self.path

    def at(self, records_read: int) -> "IcebergSourceSplit":
        """This split with ``records_read`` records already emitted."""
        return attrs.evolve(self, records_read=records_read)

    def until(self, stop: int | None, records: int) -> "IcebergSourceSplit":
        """This split read up to record ``stop`` (``None``: its end), of ``records`` in all."""
        return attrs.evolve(self, stop=stop, records=records)


@final
@attrs.frozen
class IcebergEnumeratorState:
    """The enumerator's checkpoint (Iceberg's ``IcebergEnumeratorState``).

    Attributes:
        remaining: The splits not assigned yet, with their positions.
        started: Whether the start point was resolved (a stream resolves it at its
            first discovery; a bounded source at planning).
        last_snapshot_id: The last snapshot whose added files became splits; ``None``
            before the first one (then every snapshot from the table's first on is read).
        table_uuid: The ``table-uuid`` of the table the position belongs to (``None``
            before the first discovery): a table dropped and created again under the
            same name is another table, never read as the stream's continuation.
    """

    remaining: tuple[IcebergSourceSplit, ...] = ()
    started: bool = False
    last_snapshot_id: int | None = None
    table_uuid: str | None = None


def split_serializer() -> AttrsMsgpackSerializer[IcebergSourceSplit]:
    """Splits as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(IcebergSourceSplit)


def enumerator_state_serializer() -> AttrsMsgpackSerializer[IcebergEnumeratorState]:
    """Enumerator checkpoints as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(IcebergEnumeratorState)
