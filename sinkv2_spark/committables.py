"""The committable stream on Spark, and typed helpers so no sink author decodes bytes.

Pre- and post-commit topologies receive committables as a ``pyspark.sql.DataFrame``
with one row per committable, in this schema (`COMMITTABLE_SCHEMA`):

| column | type | meaning |
|---|---|---|
| ``checkpoint_id`` | long | the checkpoint (``END_OF_INPUT`` for a plain batch run) |
| ``subtask_id`` | int | the subtask the committable belongs to |
| ``number_of_subtasks`` | int | the writer parallelism of this checkpoint (Flink's summary field) |
| ``serializer_version`` | int | version of the serializer that wrote ``payload`` |
| ``payload`` | binary | the committable, framed as Flink frames it (version, length, bytes) |
| ``lineage`` | ``array<string>`` | ids (``"subtask:index"``) of the writer outputs it came from |

``lineage`` is how the runtime proves a topology neither lost nor duplicated
anything: after a pre-commit topology, every writer output must appear in exactly
one row's lineage. The helpers keep it right; a hand-written topology must carry
it along (concatenate the lineages of whatever it merges).

Flink's `CommittableSummary` messages are not rows here: the runtime derives them
from the rows (`summarize`), so they are always right.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import pyarrow as pa

from sinkv2 import (
    CommittableSummary,
    CommittableWithLineage,
    SimpleVersionedSerialization,
    SimpleVersionedSerializer,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "COMMITTABLE_COLUMNS",
    "COMMITTABLE_SCHEMA",
    "aggregate_committables",
    "decode_committables",
    "map_committables",
    "repartition_committables",
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

_SPARK_DDL: Final = (
    "checkpoint_id long, subtask_id int, number_of_subtasks int, "
    "serializer_version int, payload binary, lineage array<string>"
)


def _framed(serializer: SimpleVersionedSerializer[B], value: B) -> tuple[int, bytes]:
    return serializer.get_version(), SimpleVersionedSerialization.write_version_and_serialize(
        serializer, value
    )


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


def _lineage_order(lineage: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Sort key of a lineage: its ids as numbers, so that "0:10" follows "0:2"."""
    return tuple(
        tuple(int(part) if part.isdigit() else -1 for part in item.split(":")) for item in lineage
    )


def map_committables(
    stream: DataFrame,
    mapper: Callable[[A], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame:
    """Each committable replaced by ``mapper(committable)``, lineage and position kept.

    Args:
        stream: A committable stream.
        mapper: Runs on executors, once per committable; must be picklable.
        read: Reads the incoming committables (e.g. the write-result serializer).
        write: Writes the outgoing ones (e.g. the committable serializer).
    """

    def convert(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = batch.to_pydict()
            out = [
                _framed(
                    write,
                    mapper(SimpleVersionedSerialization.read_version_and_deserialize(read, p)),
                )
                for p in columns["payload"]
            ]
            columns["serializer_version"] = [version for version, _ in out]
            columns["payload"] = [payload for _, payload in out]
            yield pa.RecordBatch.from_pydict(columns, schema=COMMITTABLE_SCHEMA)

    return stream.select(*COMMITTABLE_COLUMNS).mapInArrow(convert, _SPARK_DDL)


def aggregate_committables(
    stream: DataFrame,
    aggregate: Callable[[Sequence[A]], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame:
    """One committable per checkpoint: ``aggregate`` of all committables of that checkpoint.

    The Iceberg case: many writers' data files become one commit. The result has
    one subtask (id 0) per checkpoint, and its lineage is the union of the inputs'.
    ``aggregate`` receives the committables ordered by subtask, then by their position
    in the writer's output.
    """

    def combine(table: pa.Table) -> pa.Table:
        columns = table.to_pydict()
        ordered = sorted(
            zip(columns["subtask_id"], columns["lineage"], columns["payload"], strict=True),
            key=lambda row: (row[0], _lineage_order(row[1])),
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

    return (
        stream.select(*COMMITTABLE_COLUMNS)
        .groupBy("checkpoint_id")
        .applyInArrow(combine, _SPARK_DDL)
    )


def repartition_committables(stream: DataFrame, num_partitions: int) -> DataFrame:
    """The same committables spread over ``num_partitions`` Spark partitions.

    Committables keep their subtask ids and lineage; use it to parallelise a
    heavy per-committable step (say, a compaction) in a post-commit topology.
    """
    if (
        not isinstance(num_partitions, int)
        or isinstance(num_partitions, bool)
        or num_partitions < 1
    ):
        raise ValueError(
            f"num_partitions must be a positive int (got {num_partitions!r} of type "
            f"{type(num_partitions).__name__})"
        )
    return stream.repartition(num_partitions)


def committable_stream_ddl() -> str:
    """`COMMITTABLE_SCHEMA` as a Spark DDL string."""
    return _SPARK_DDL


def _rows_to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=COMMITTABLE_SCHEMA)
