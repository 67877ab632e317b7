"""The committable stream as Arrow data, and a local stand-in for its Spark DataFrame.

Pre- and post-commit topologies receive committables as a table with one row per
committable, in this schema (`COMMITTABLE_SCHEMA`):

| column | type | meaning |
|---|---|---|
| ``checkpoint_id`` | long | the checkpoint (``END_OF_INPUT`` for a plain batch run) |
| ``subtask_id`` | int | the subtask the committable belongs to |
| ``number_of_subtasks`` | int | the writer parallelism of this checkpoint (Flink's summary field) |
| ``serializer_version`` | int | version of the serializer that wrote ``payload`` |
| ``payload`` | binary | the committable, framed as Flink frames it (version, length, bytes) |
| ``lineage`` | ``array<string>`` | ids (``"subtask:index"``) of the writer outputs it came from |

On Spark the table is a ``pyspark.sql.DataFrame`` (``sinkv2_spark.committables``); in
the in-process harness of ``sinkv2.testing`` it is a `LocalCommittableStream`. The
pure-Arrow work (decoding, summaries, mapping and aggregating rows, the lineage
check) lives here so both share it.

This module imports pyarrow; ``import sinkv2`` does not load it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar, final

import pyarrow as pa
import pyarrow.compute as pc

from sinkv2._messages import CommittableSummary, CommittableWithLineage
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.errors import SinkConfigurationError

__all__ = [
    "COMMITTABLE_COLUMNS",
    "COMMITTABLE_SCHEMA",
    "LocalCommittableStream",
    "aggregate_table",
    "check_lineage",
    "decode_committables",
    "encode_committables",
    "lineage_order",
    "map_batch",
    "summarize",
]

A = TypeVar("A")
B = TypeVar("B")

COMMITTABLE_SCHEMA: Final = pa.schema(
    [
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("subtask_id", pa.int32(), nullable=False),
        pa.field("number_of_subtasks", pa.int32(), nullable=False),
        pa.field("serializer_version", pa.int32(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("lineage", pa.list_(pa.string()), nullable=False),
    ]
)
"""The Arrow schema of a committable stream."""

COMMITTABLE_COLUMNS: Final = tuple(COMMITTABLE_SCHEMA.names)
"""The column names of `COMMITTABLE_SCHEMA`, in order."""


def _framed(serializer: SimpleVersionedSerializer[B], value: B) -> tuple[int, bytes]:
    return serializer.get_version(), SimpleVersionedSerialization.write_version_and_serialize(
        serializer, value
    )


def encode_committables(
    committables: Iterable[tuple[int, int, int, str, Any]],
    serializer: SimpleVersionedSerializer[Any],
) -> pa.Table:
    """A table in `COMMITTABLE_SCHEMA` from (checkpoint, subtask, subtasks, lineage id, value)."""
    rows = []
    for checkpoint_id, subtask_id, number_of_subtasks, lineage_id, value in committables:
        version, payload = _framed(serializer, value)
        rows.append(
            {
                "checkpoint_id": checkpoint_id,
                "subtask_id": subtask_id,
                "number_of_subtasks": number_of_subtasks,
                "serializer_version": version,
                "payload": payload,
                "lineage": [lineage_id],
            }
        )
    return pa.Table.from_pylist(rows, schema=COMMITTABLE_SCHEMA)


def decode_committables(
    rows: pa.Table | pa.RecordBatch, serializer: SimpleVersionedSerializer[A]
) -> list[CommittableWithLineage[A]]:
    """The committables in ``rows`` (Arrow data in `COMMITTABLE_SCHEMA`), decoded."""
    columns = rows.to_pydict()
    return [
        CommittableWithLineage(
            SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload),
            checkpoint_id,
            subtask_id,
        )
        for payload, checkpoint_id, subtask_id in zip(
            columns["payload"], columns["checkpoint_id"], columns["subtask_id"], strict=True
        )
    ]


def summarize(rows: pa.Table | pa.RecordBatch) -> list[CommittableSummary]:
    """Flink's summaries for ``rows``: one per (checkpoint, subtask), with the right counts.

    ``number_of_subtasks`` is the writer parallelism the rows carry.
    """
    columns = rows.to_pydict()
    counts: dict[tuple[int, int], int] = {}
    parallelism: dict[int, int] = {}
    for checkpoint_id, subtask_id, subtasks in zip(
        columns["checkpoint_id"],
        columns["subtask_id"],
        columns["number_of_subtasks"],
        strict=True,
    ):
        counts[checkpoint_id, subtask_id] = counts.get((checkpoint_id, subtask_id), 0) + 1
        parallelism[checkpoint_id] = max(parallelism.get(checkpoint_id, 0), subtasks)
    return [
        CommittableSummary(subtask_id, parallelism[checkpoint_id], checkpoint_id, count)
        for (checkpoint_id, subtask_id), count in sorted(counts.items())
    ]


def lineage_order(lineage: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Sort key of a lineage: its ids as numbers, so that "0:10" follows "0:2"."""
    return tuple(
        tuple(int(part) if part.isdigit() else -1 for part in item.split(":")) for item in lineage
    )


def map_batch(
    batch: pa.RecordBatch,
    mapper: Callable[[A], B],
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> pa.RecordBatch:
    """``batch`` with each committable replaced by ``mapper(committable)``, lineage kept."""
    columns = batch.to_pydict()
    out = [
        _framed(write, mapper(SimpleVersionedSerialization.read_version_and_deserialize(read, p)))
        for p in columns["payload"]
    ]
    columns["serializer_version"] = [version for version, _ in out]
    columns["payload"] = [payload for _, payload in out]
    return pa.RecordBatch.from_pydict(columns, schema=COMMITTABLE_SCHEMA)


def aggregate_table(
    table: pa.Table,
    aggregate: Callable[[Sequence[A]], B],
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> pa.Table:
    """One row: ``aggregate`` of the committables of ``table`` (all of one checkpoint).

    ``aggregate`` receives them ordered by subtask, then by lineage; the row has
    subtask 0 of 1 and the concatenated lineage.
    """
    columns = table.to_pydict()
    ordered = sorted(
        zip(columns["subtask_id"], columns["lineage"], columns["payload"], strict=True),
        key=lambda row: (row[0], lineage_order(row[1])),
    )
    values = [
        SimpleVersionedSerialization.read_version_and_deserialize(read, payload)
        for _, _, payload in ordered
    ]
    version, payload = _framed(write, aggregate(values))
    return pa.Table.from_pylist(
        [
            {
                "checkpoint_id": columns["checkpoint_id"][0],
                "subtask_id": 0,
                "number_of_subtasks": 1,
                "serializer_version": version,
                "payload": payload,
                "lineage": [item for _, lineage, _ in ordered for item in lineage],
            }
        ],
        schema=COMMITTABLE_SCHEMA,
    )


def check_lineage(written: pa.Table, produced: pa.Table, sink_type: str) -> None:
    """Raise unless every writer output of ``written`` is in exactly one row of ``produced``.

    Raises:
        SinkConfigurationError: A pre-commit topology lost, duplicated or invented
            lineage ids; the message lists them.
    """
    expected = {item for items in written.column("lineage").to_pylist() for item in items}
    seen: dict[str, int] = {}
    for items in produced.column("lineage").to_pylist():
        for item in items:
            seen[item] = seen.get(item, 0) + 1
    lost = sorted(expected - set(seen))
    duplicated = sorted(item for item, count in seen.items() if count > 1)
    unknown = sorted(set(seen) - expected)
    if lost or duplicated or unknown:
        problems = []
        if lost:
            problems.append(f"lost {len(lost)} writer output(s) {lost[:5]}")
        if duplicated:
            problems.append(f"duplicated {len(duplicated)} {duplicated[:5]}")
        if unknown:
            problems.append(f"invented lineage {unknown[:5]}")
        raise SinkConfigurationError(
            f"{sink_type}'s pre-commit topology {' and '.join(problems)} "
            "(lineage ids are 'subtask:index' of writer outputs); every writer output must "
            "end up in exactly one committable's lineage. Nothing was committed"
        )


@final
class LocalCommittableStream:
    """A committable stream held in memory: the harness's stand-in for a Spark DataFrame.

    It offers the part of the DataFrame API that topologies use on committable
    streams (`toArrow`, `columns`, `select`, `repartition`), and the helpers in
    ``sinkv2_spark.committables`` (``map_committables``, ``aggregate_committables``,
    ``repartition_committables``) accept it and do their work locally, with the
    same lineage rules. A topology written with those helpers runs unchanged in
    ``sinkv2.testing``'s harness and on Spark.

    Args:
        table: Rows with (at least) the columns of `COMMITTABLE_SCHEMA`.

    Raises:
        SinkConfigurationError: ``table`` is not a ``pyarrow.Table`` or lacks columns.
    """

    __slots__ = ("_table",)

    def __init__(self, table: pa.Table) -> None:
        if not isinstance(table, pa.Table):
            raise SinkConfigurationError(
                f"LocalCommittableStream needs a pyarrow.Table (got {type(table).__name__}); "
                "build one with sinkv2.runtime.committables.encode_committables"
            )
        self._table = table

    @classmethod
    def empty(cls) -> LocalCommittableStream:
        """A stream without rows."""
        return cls(COMMITTABLE_SCHEMA.empty_table())

    @property
    def columns(self) -> list[str]:
        """The column names, like ``DataFrame.columns``."""
        return list(self._table.column_names)

    def toArrow(self) -> pa.Table:
        """The rows as a ``pyarrow.Table``, like ``DataFrame.toArrow``."""
        return self._table

    def select(self, *cols: str) -> LocalCommittableStream:
        """Only the columns ``cols``, in that order, like ``DataFrame.select``.

        Raises:
            SinkConfigurationError: A column does not exist.
        """
        names = [c for col in cols for c in ([col] if isinstance(col, str) else col)]
        missing = [c for c in names if c not in self._table.column_names]
        if missing:
            raise SinkConfigurationError(
                f"LocalCommittableStream has no column(s) {missing}; it has "
                f"{self._table.column_names}"
            )
        return LocalCommittableStream(self._table.select(names))

    def repartition(self, num_partitions: int, *cols: str) -> LocalCommittableStream:
        """The same stream: a local stream has no partitions, so this changes nothing."""
        return self

    def count(self) -> int:
        """The number of rows, like ``DataFrame.count``."""
        return int(self._table.num_rows)

    def committable_table(self) -> pa.Table:
        """The rows with exactly the columns of `COMMITTABLE_SCHEMA`, cast to it.

        Raises:
            SinkConfigurationError: A committable column is missing.
        """
        missing = [c for c in COMMITTABLE_COLUMNS if c not in self._table.column_names]
        if missing:
            raise SinkConfigurationError(
                f"committable stream lacks the columns {missing}; keep every column of "
                "COMMITTABLE_SCHEMA, e.g. by using the sinkv2_spark.committables helpers"
            )
        return self._table.select(list(COMMITTABLE_COLUMNS)).cast(COMMITTABLE_SCHEMA)

    def map(
        self,
        mapper: Callable[[A], B],
        *,
        read: SimpleVersionedSerializer[A],
        write: SimpleVersionedSerializer[B],
    ) -> LocalCommittableStream:
        """Each committable replaced by ``mapper(committable)``, lineage kept."""
        table = self.committable_table()
        batches = [map_batch(batch, mapper, read, write) for batch in table.to_batches()]
        return LocalCommittableStream(pa.Table.from_batches(batches, schema=COMMITTABLE_SCHEMA))

    def aggregate(
        self,
        aggregate: Callable[[Sequence[A]], B],
        *,
        read: SimpleVersionedSerializer[A],
        write: SimpleVersionedSerializer[B],
    ) -> LocalCommittableStream:
        """One committable per checkpoint, as ``aggregate_committables`` makes it."""
        table = self.committable_table()
        checkpoints = sorted(set(table.column("checkpoint_id").to_pylist()))
        parts = [
            aggregate_table(
                table.filter(pc.equal(table.column("checkpoint_id"), checkpoint)),
                aggregate,
                read,
                write,
            )
            for checkpoint in checkpoints
        ]
        if not parts:
            return LocalCommittableStream.empty()
        return LocalCommittableStream(pa.concat_tables(parts))

    def __repr__(self) -> str:
        return f"LocalCommittableStream({self._table.num_rows} rows, columns={self.columns})"
