"""The writer stage on the driver: ``mapInArrow(WriterTask).toArrow()``, one task per subtask.

`SparkWriterStage` is the `sinkv2.runtime.WriterStage` the commit coordinator runs
for an epoch: one task per partition (= subtask), running
`sinkv2_spark._engine.writer_task.WriterTask`. The plan is executed once; Spark keeps
the first successful attempt's output per partition. Only committables, states and
per-subtask counters reach the driver; rows never do. (On Spark Connect, without
py4j: see ``sinkv2_spark._engine.connect``.) `split_by_subtask` reads the tasks' rows
back into committables and writer states.

The Arrow schema writers get is ``sinkv2_spark._engine.schema``; the committable
streams of the pre- and post-commit topologies are
``sinkv2_spark._engine.committable_streams``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Final, final

import msgpack
import pyarrow as pa

from sinkv2 import SinkCapabilities
from sinkv2.runtime import Restore, SubtaskStates, WriterStageOutput, WriterStates
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA
from sinkv2_spark._engine.connect import CONNECT_PARALLELISM, is_connect, with_parallelism
from sinkv2_spark._engine.ddl import ddl_of
from sinkv2_spark._engine.failure import decode_failure
from sinkv2_spark._engine.writer_task import (
    KIND_COMMITTABLE,
    KIND_STATE,
    KIND_SUBTASK,
    WRITER_OUTPUT_SCHEMA,
    WriterTask,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkWriterStage", "describe_jobs", "split_by_subtask"]

logger = logging.getLogger("sinkv2.spark")

_MANY_TASKS: Final = 64
_FEW_ROWS_PER_TASK: Final = 10_000

_WRITER_DDL: Final = ddl_of(WRITER_OUTPUT_SCHEMA)
"""`WRITER_OUTPUT_SCHEMA` as the DDL ``mapInArrow`` takes: one spelling, the other derived."""


def describe_jobs(spark: SparkSession, description: str) -> None:
    """Name the Spark jobs that follow in the UI (cosmetic: never fails)."""
    try:
        spark.sparkContext.setJobDescription(description)
    except Exception:  # noqa: BLE001  # Spark Connect has no SparkContext; descriptions are cosmetic
        return


def _needs_positional_names(names: list[str]) -> bool:
    """Whether ``mapInArrow`` would fail to resolve a column of ``names`` by its name.

    PySpark's ``mapInArrow`` passes ``df[name]`` for each column, which parses dots
    and backticks: a column named ``a.b`` is looked up as field ``b`` of ``a``.
    """
    return any(not name or "." in name or "`" in name for name in names)


@final
class SparkWriterStage:
    """The writer stage of one batch epoch over ``source``: a `sinkv2.runtime.WriterStage`.

    Args:
        source: The input after the sink's pre-write topology
            (``committable_streams.pre_write``).
        sink: The sink.
        capabilities: What ``inspect_sink`` found.
        sink_id: Names the Spark jobs.
        input_schema: ``source``'s Arrow schema, handed to writers.
    """

    def __init__(
        self,
        source: DataFrame,
        sink: Any,
        capabilities: SinkCapabilities,
        sink_id: str,
        input_schema: pa.Schema | None = None,
    ) -> None:
        self._source = source
        self._sink = sink
        self._capabilities = capabilities
        self._sink_id = sink_id
        self._input_schema = input_schema

    def __call__(self, job_id: str, checkpoint_id: int) -> WriterStageOutput:
        """Run every writer of a batch run (a bounded input); their committables, framed.

        Raises:
            SinkWriterError: A writer failed (its subtask, position and message).
        """
        return self._run(job_id, checkpoint_id, None, checkpoint=False)

    def checkpoint(
        self, job_id: str, checkpoint_id: int, restore: Restore | None
    ) -> WriterStageOutput:
        """Run every writer of a stream's checkpoint: a `sinkv2.runtime.StreamWriterStage`.

        Writers resume from ``restore`` (its states redistributed over this
        micro-batch's partitions) and end with ``snapshot_state(checkpoint_id)``.

        Raises:
            SinkWriterError: A writer failed (its subtask, position and message).
        """
        return self._run(job_id, checkpoint_id, restore, checkpoint=True)

    def _run(
        self, job_id: str, checkpoint_id: int, restore: Restore | None, *, checkpoint: bool
    ) -> WriterStageOutput:
        describe_jobs(self._source.sparkSession, f"sinkv2 {self._sink_id}: writers")
        if is_connect(self._source):
            if checkpoint:  # the apply door refuses streaming DataFrames of Connect sessions
                raise RuntimeError(
                    "a stream's writer stage ran on Spark Connect; this is a bug in sinkv2, "
                    "please report it"
                )
            return self._run_on_connect(job_id, checkpoint_id)
        source, number_of_subtasks = _executed_once(self._source)
        if checkpoint and number_of_subtasks == 0:
            source, number_of_subtasks = _executed_once(_one_empty_partition(self._source))
        restored_states = None
        if restore is not None and self._capabilities.writer_state:
            states = restore.states
            restored_states = tuple(
                tuple(run)
                for run in (
                    states.redistribute(number_of_subtasks)
                    if states is not None
                    else [[] for _ in range(number_of_subtasks)]
                )
            )
        source, column_names = _positional(source)
        task = WriterTask(
            sink=self._sink,
            capabilities=self._capabilities,
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            number_of_subtasks=number_of_subtasks,
            emits_write_results=self._capabilities.pre_commit_topology,
            input_schema=self._input_schema,
            checkpoint=checkpoint,
            restored_checkpoint_id=restore.checkpoint_id if restore is not None else None,
            restored_states=restored_states,
            column_names=column_names,
        )
        logger.info(
            "sink %r job %s: writer stage of %d subtask(s)",
            self._sink_id,
            job_id,
            number_of_subtasks,
        )
        started = time.perf_counter()
        try:
            table = source.mapInArrow(task, _WRITER_DDL).toArrow()
        except Exception as error:
            raise _writer_error(error) from error
        output = split_by_subtask(table, number_of_subtasks, with_states=checkpoint)
        _warn_if_tiny(self._sink_id, output, time.perf_counter() - started)
        return output

    def _run_on_connect(self, job_id: str, checkpoint_id: int) -> WriterStageOutput:
        """A batch run's writers on Spark Connect: one execution, parallelism learnt after.

        See ``sinkv2_spark._engine.connect``: the plan runs once, in the ``toArrow()``
        request; writers cannot know the parallelism, and the driver counts it
        from their subtask rows.
        """
        source, column_names = _positional(self._source)
        task = WriterTask(
            sink=self._sink,
            capabilities=self._capabilities,
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            number_of_subtasks=None,
            emits_write_results=self._capabilities.pre_commit_topology,
            input_schema=self._input_schema,
            column_names=column_names,
            unknown_parallelism=CONNECT_PARALLELISM,
        )
        logger.info("sink %r job %s: writer stage on Spark Connect", self._sink_id, job_id)
        started = time.perf_counter()
        try:
            table = source.mapInArrow(task, _WRITER_DDL).toArrow()
        except Exception as error:
            raise _writer_error(error) from error
        table, number_of_subtasks = with_parallelism(table)
        output = split_by_subtask(table, number_of_subtasks, with_states=False)
        _warn_if_tiny(self._sink_id, output, time.perf_counter() - started)
        return output


def _positional(source: DataFrame) -> tuple[DataFrame, tuple[str, ...] | None]:
    """``source`` with columns renamed by position if ``mapInArrow`` cannot resolve them.

    Returns the DataFrame and the original names for the tasks to restore (or
    ``None`` when nothing was renamed).
    """
    names = list(source.columns)
    if not _needs_positional_names(names):
        return source, None
    # Renamed by position (no name resolution); the task restores the names.
    return source.toDF(*(f"_c{i}" for i in range(len(names)))), tuple(names)


def _warn_if_tiny(sink_id: str, output: WriterStageOutput, seconds: float) -> None:
    """Warn when many tasks wrote few rows each: PySpark's per-task cost dominates.

    Each Python task costs tens of milliseconds before its first row (worker,
    serialization, scheduling); measured here, 1,000 partitions of 5 rows took
    66-96 s against 24 s for ``df.write.parquet``.
    """
    tasks, rows = output.subtasks, output.records
    if tasks < _MANY_TASKS or rows / tasks >= _FEW_ROWS_PER_TASK:
        return
    logger.warning(
        "sink %r: the writer stage ran %d tasks for %d rows (%.0f rows per task) in %.1f s, "
        "about %.0f ms per task, mostly PySpark's fixed cost per Python task. Fewer, larger "
        "partitions write faster: df.coalesce(%d) before apply(), or a lower "
        "spark.sql.shuffle.partitions",
        sink_id,
        tasks,
        rows,
        rows / tasks,
        seconds,
        seconds / tasks * 1000,
        max(1, rows // _FEW_ROWS_PER_TASK),
    )


def split_by_subtask(
    table: pa.Table, number_of_subtasks: int, *, with_states: bool
) -> WriterStageOutput:
    """The writer stage's rows, split into committables, states and per-subtask counters."""
    table = table.cast(WRITER_OUTPUT_SCHEMA)
    kinds = table.column("kind").to_pylist()
    subtask_rows = [i for i, kind in enumerate(kinds) if kind == KIND_SUBTASK]
    committable_rows = [i for i, kind in enumerate(kinds) if kind == KIND_COMMITTABLE]
    # Typed indices: pa.array([]) would infer the null type, which take() refuses.
    subtasks = table.take(pa.array(subtask_rows, type=pa.int64())).to_pydict()
    if sorted(subtasks["subtask_id"]) != list(range(number_of_subtasks)):
        raise RuntimeError(
            f"writer stage returned subtasks {sorted(subtasks['subtask_id'])} for "
            f"{number_of_subtasks} partitions; this is a bug in sinkv2, please report it"
        )
    metrics: dict[str, float] = {}
    for packed in subtasks["metrics"]:
        shipped = msgpack.unpackb(packed)
        for name, count in shipped["counters"].items():
            metrics[name] = metrics.get(name, 0) + count  # counters add up
        for name, value in shipped["gauges"].items():
            metrics[name] = max(metrics.get(name, value), value)  # gauges: the worst subtask
    rows = table.take(pa.array(committable_rows, type=pa.int64()))
    lineage = pa.array(
        [
            [f"{s}:{i}"]
            for s, i in zip(
                rows.column("subtask_id").to_pylist(),
                rows.column("index").to_pylist(),
                strict=True,
            )
        ],
        type=pa.list_(pa.string()),
    )
    committables = pa.Table.from_arrays(
        [
            rows.column("checkpoint_id"),
            rows.column("subtask_id"),
            rows.column("number_of_subtasks"),
            rows.column("serializer_version"),
            rows.column("payload"),
            lineage,
        ],
        schema=COMMITTABLE_SCHEMA,
    )
    return WriterStageOutput(
        table=committables,
        attempt_tokens=frozenset(subtasks["attempt_token"]),
        records=sum(subtasks["records"]),
        subtasks=len(subtask_rows),
        metrics=metrics,
        states=_states(table, kinds, subtasks, number_of_subtasks) if with_states else None,
    )


def _states(
    table: pa.Table, kinds: list[str], subtasks: dict[str, list[Any]], number_of_subtasks: int
) -> WriterStates:
    """Every subtask's snapshot, in subtask order (an empty one for a subtask without)."""
    rows = table.take(pa.array([i for i, k in enumerate(kinds) if k == KIND_STATE], pa.int64()))
    framed: dict[int, list[tuple[int, bytes]]] = {}
    for subtask, index, payload in zip(
        rows.column("subtask_id").to_pylist(),
        rows.column("index").to_pylist(),
        rows.column("payload").to_pylist(),
        strict=True,
    ):
        framed.setdefault(subtask, []).append((index, payload))
    tokens = dict(zip(subtasks["subtask_id"], subtasks["attempt_token"], strict=True))
    return WriterStates(
        state_name="",  # the coordinator's runner names them after the sink
        number_of_subtasks=number_of_subtasks,
        subtasks=tuple(
            SubtaskStates(
                subtask_id=subtask,
                attempt_token=tokens[subtask],
                states=tuple(data for _, data in sorted(framed.get(subtask, []))),
            )
            for subtask in range(number_of_subtasks)
        ),
    )


def _executed_once(df: DataFrame) -> tuple[DataFrame, int]:
    """``df`` planned once, and its number of partitions, without running it twice.

    Writers need the parallelism before they start, but with adaptive query
    execution it is only known once the stages before the last shuffle ran. Asking
    ``df.rdd.getNumPartitions()`` runs them, and the writer job would run them
    again. Spark's own V2 writers avoid that by executing the plan to one RDD and
    reading its partitions; this does the same, then wraps that very RDD back into
    a DataFrame for the writer stage, so the finished stages are reused.
    """
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    jdf = df._jdf  # classic DataFrames only; the translator refused the others
    rows = jdf.queryExecution().toRdd()
    jvm_session = df.sparkSession._jsparkSession  # the classic session's JVM handle
    executed = jvm_session.internalCreateDataFrame(rows, jdf.schema(), False)
    return DataFrame(executed, df.sparkSession), int(rows.getNumPartitions())


def _one_empty_partition(df: DataFrame) -> DataFrame:
    """An empty DataFrame of ``df``'s schema in one partition.

    A micro-batch can have no partitions at all (Spark's file source over an
    empty file). Its checkpoint still needs a writer: only a writer restores the
    previous checkpoint's states and snapshots them again (an async sink's
    buffered requests), so without one they would be lost, or, restored onto no
    subtask, fail every replay of the micro-batch. One writer over no rows keeps
    them and may send what is due.
    """
    spark = df.sparkSession
    return spark.createDataFrame(spark.sparkContext.parallelize([], 1), df.schema)


def _writer_error(error: Exception) -> Exception:
    return decode_failure(str(error)) or error
