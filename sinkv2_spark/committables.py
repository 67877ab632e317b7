"""The committable stream on Spark, and typed helpers so no sink author decodes bytes.

Pre- and post-commit topologies receive committables as a ``pyspark.sql.DataFrame``
with one row per committable, in this schema
(``sinkv2.runtime.committables.COMMITTABLE_SCHEMA``):

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
from the rows (``sinkv2.runtime.committables.summarize``), so they are always right.

The helpers also accept a ``sinkv2.runtime.committables.LocalCommittableStream`` (the in-process
harness's stream) and then do their work locally, so a topology built from them runs
unchanged in the contract-test kit. The schema, the codec and the pure-Arrow helpers
(``decode_committables``, ``summarize``) are ``sinkv2.runtime.committables``'; this
module wraps them for DataFrames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

import pyarrow as pa

from sinkv2 import SimpleVersionedSerializer
from sinkv2.runtime.committables import (
    COMMITTABLE_COLUMNS,
    COMMITTABLE_SCHEMA,
    LocalCommittableStream,
    aggregate_table,
    map_batch,
)
from sinkv2_spark._engine.ddl import ddl_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "aggregate_committables",
    "committable_stream_ddl",
    "map_committables",
    "repartition_committables",
]

A = TypeVar("A")
B = TypeVar("B")

_SPARK_DDL: Final = ddl_of(COMMITTABLE_SCHEMA)
"""`COMMITTABLE_SCHEMA` as the DDL ``mapInArrow`` takes: one spelling, the other derived."""


@overload
def map_committables(
    stream: DataFrame,
    mapper: Callable[[A], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame: ...


@overload
def map_committables(
    stream: LocalCommittableStream,
    mapper: Callable[[A], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> LocalCommittableStream: ...


def map_committables(
    stream: DataFrame | LocalCommittableStream,
    mapper: Callable[[A], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame | LocalCommittableStream:
    """Each committable replaced by ``mapper(committable)``, lineage and position kept.

    Args:
        stream: A committable stream (a DataFrame, or a local stream in the test kit).
        mapper: Runs on executors, once per committable; must be picklable.
        read: Reads the incoming committables (e.g. the write-result serializer).
        write: Writes the outgoing ones (e.g. the committable serializer).
    """
    if isinstance(stream, LocalCommittableStream):
        return stream.map(mapper, read=read, write=write)

    def convert(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield map_batch(batch, mapper, read, write)

    return stream.select(*COMMITTABLE_COLUMNS).mapInArrow(convert, _SPARK_DDL)


@overload
def aggregate_committables(
    stream: DataFrame,
    aggregate: Callable[[Sequence[A]], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame: ...


@overload
def aggregate_committables(
    stream: LocalCommittableStream,
    aggregate: Callable[[Sequence[A]], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> LocalCommittableStream: ...


def aggregate_committables(
    stream: DataFrame | LocalCommittableStream,
    aggregate: Callable[[Sequence[A]], B],
    *,
    read: SimpleVersionedSerializer[A],
    write: SimpleVersionedSerializer[B],
) -> DataFrame | LocalCommittableStream:
    """One committable per checkpoint: ``aggregate`` of all committables of that checkpoint.

    The Iceberg case: many writers' data files become one commit. The result has
    one subtask (id 0) per checkpoint, and its lineage is the union of the inputs'.
    ``aggregate`` receives the committables ordered by subtask, then by their position
    in the writer's output.
    """
    if isinstance(stream, LocalCommittableStream):
        return stream.aggregate(aggregate, read=read, write=write)

    def combine(table: pa.Table) -> pa.Table:
        return aggregate_table(table, aggregate, read, write)

    return (
        stream.select(*COMMITTABLE_COLUMNS)
        .groupBy("checkpoint_id")
        .applyInArrow(combine, _SPARK_DDL)
    )


@overload
def repartition_committables(stream: DataFrame, num_partitions: int) -> DataFrame: ...


@overload
def repartition_committables(
    stream: LocalCommittableStream, num_partitions: int
) -> LocalCommittableStream: ...


def repartition_committables(
    stream: DataFrame | LocalCommittableStream, num_partitions: int
) -> DataFrame | LocalCommittableStream:
    """The same committables spread over ``num_partitions`` Spark partitions.

    Committables keep their subtask ids and lineage; use it to parallelise a
    heavy per-committable step (say, a compaction) in a post-commit topology.
    A local stream has no partitions and comes back unchanged.
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
    """``COMMITTABLE_SCHEMA`` (``sinkv2.runtime.committables``) as a Spark DDL string."""
    return _SPARK_DDL


def _rows_to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=COMMITTABLE_SCHEMA)
