"""Spark Connect: what the batch writer stage does without py4j.

A Spark Connect session (``SparkSession.builder.remote("sc://...")``) is a gRPC
client: it has no ``SparkContext``, no RDD API and no py4j. A classic session's
writer stage uses py4j for three things; on Connect each is done another way:

- **the single plan execution**: classic ``apply()`` executes the plan to one RDD
  and wraps that RDD back into a DataFrame. On Connect the writer stage is
  ``mapInArrow(WriterTask).toArrow()`` on the DataFrame itself: one request, one
  execution of the plan on the server. Nothing else runs it (no count, no
  ``localCheckpoint``), so a non-deterministic input is still read once.
- **collecting the committables**: ``toArrow()`` streams the tasks' metadata rows
  back over gRPC. The server collects them as a classic ``collect`` does: only the
  first successful attempt of each partition counts (its DAG scheduler keeps one
  result per partition), so attempt isolation is the same.
- **the partition count**: a classic session reads it from the executed RDD
  before the writers start. Connect cannot tell it without executing the plan
  first (twice, or materialised), so writers start without it: their
  ``get_number_of_parallel_subtasks()`` raises `SinkConfigurationError` naming
  Connect (`CONNECT_PARALLELISM`). Spark runs ``mapInArrow``'s function on every
  partition, even an empty one, so each partition returns its subtask row and
  the driver learns the count from them: committables and Flink's summaries carry
  the right ``number_of_subtasks``.

Streaming ``apply()`` (``foreachBatch``) is refused on Connect: Connect runs a
``foreachBatch`` function in a Python process of the server, not in the driver
that holds the commit coordinator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pyarrow as pa

from sinkv2_spark._engine.writer_task import KIND_SUBTASK, WRITER_OUTPUT_SCHEMA

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CONNECT_PARALLELISM",
    "application_id",
    "is_connect",
    "master",
    "number_of_partitions",
    "with_parallelism",
]

CONNECT_PARALLELISM: Final = (
    "get_number_of_parallel_subtasks() is not known to writers on a Spark Connect session: "
    "a Connect client cannot learn the number of partitions without executing the plan "
    "before the writers (twice, or materialised), and sinkv2 executes it once. Run this "
    "sink with apply() on a classic SparkSession, which knows it, or do not depend on it "
    "in the writer (the committables still carry the right number_of_subtasks)"
)
"""The error writers get on Connect when they ask for the parallelism."""

_CONNECT_MODULE: Final = "pyspark.sql.connect."


def is_connect(value: object) -> bool:
    """Whether ``value`` is a Spark Connect DataFrame or SparkSession.

    Decided by the class's module, so it never imports ``pyspark.sql.connect``
    (which needs gRPC, installed only with ``sinkv2[connect]``).
    """
    return type(value).__module__.startswith(_CONNECT_MODULE)


def application_id(spark: SparkSession) -> str:
    """The Spark application the session runs in (on Connect: the server's)."""
    if is_connect(spark):
        return str(spark.conf.get("spark.app.id"))
    return str(spark.sparkContext.applicationId)


def master(spark: SparkSession) -> str:
    """The master URL of the session's Spark application (on Connect: the server's)."""
    if is_connect(spark):
        return str(spark.conf.get("spark.master", "") or "")
    return str(spark.sparkContext.master or "")


def number_of_partitions(df: DataFrame) -> int:
    """How many partitions ``df`` has.

    A classic session asks the RDD; a Connect session runs a job that returns one
    row per partition (it executes the plan: use it where that costs nothing,
    as in the test kit).
    """
    if not is_connect(df):
        return int(df.rdd.getNumPartitions())
    return df.mapInArrow(_one_row_per_partition, "partition int").count()


def _one_row_per_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"partition": pa.array([0], pa.int32())})


def with_parallelism(table: pa.Table) -> tuple[pa.Table, int]:
    """The writer stage's rows with ``number_of_subtasks`` filled in, and that number.

    Writers that did not know the parallelism wrote 0; every partition returned
    exactly one subtask row, so their count is the parallelism.
    """
    table = table.cast(WRITER_OUTPUT_SCHEMA)
    kinds = table.column("kind").to_pylist()
    number_of_subtasks = sum(1 for kind in kinds if kind == KIND_SUBTASK)
    column = table.schema.get_field_index("number_of_subtasks")
    filled = table.set_column(
        column,
        WRITER_OUTPUT_SCHEMA.field(column),
        pa.array([number_of_subtasks] * table.num_rows, pa.int32()),
    )
    return filled, number_of_subtasks
