"""Spark as an engine of the commit coordinator: its writer stage and committable streams.

The coordinator (`sinkv2.runtime.CommitCoordinator`) owns the epoch protocol; this
module supplies what only Spark knows:

- `pre_write` and `arrow_schema`: the sink's pre-write topology (a lazy plan) and
  the Arrow schema writers get (``get_input_schema()``);
- `SparkWriterStage`: ``mapInArrow(WriterTask).toArrow()`` with one task per
  partition (= subtask). The plan is executed once; Spark keeps
  the first successful attempt's output per partition. Only committables, states
  and per-subtask counters reach the driver; rows never do. (On Spark Connect,
  without py4j: see ``sinkv2_spark._connect``.)
- `SparkCommittableStreams`: a committable table as a ``pyspark.sql.DataFrame`` for
  pre- and post-commit topologies, and back.

Over 450 lines because these three are one seam (the `WriterStage` and
`CommittableStreams` an engine hands the coordinator); issue 21 item 5 moves the
engine's parts (writer stage, native write, drain) into a folder of their own.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Final, final

import msgpack
import pyarrow as pa

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import Restore, SubtaskStates, WriterStageOutput, WriterStates
from sinkv2.runtime.committables import COMMITTABLE_COLUMNS, COMMITTABLE_SCHEMA
from sinkv2_spark._connect import CONNECT_PARALLELISM, is_connect, with_parallelism
from sinkv2_spark._ddl import ddl_of
from sinkv2_spark._failure import decode_failure
from sinkv2_spark._writer_stage import (
    KIND_COMMITTABLE,
    KIND_STATE,
    KIND_SUBTASK,
    WRITER_OUTPUT_SCHEMA,
    WriterTask,
)
from sinkv2_spark.committables import committable_stream_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "SparkCommittableStreams",
    "SparkWriterStage",
    "arrow_schema",
    "describe_jobs",
    "pre_write",
    "schema_to_arrow",
]

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


@final
class SparkCommittableStreams:
    """Committable tables as DataFrames in `COMMITTABLE_SCHEMA`, and back."""

    def __init__(self, spark: SparkSession, sink_id: str) -> None:
        self._spark = spark
        self._sink_id = sink_id

    def to_stream(self, table: pa.Table) -> DataFrame:
        """``table`` as a DataFrame (an empty one with the schema if it has no rows)."""
        describe_jobs(self._spark, f"sinkv2 {self._sink_id}: committable topology")
        if table.num_rows:
            return self._spark.createDataFrame(table)
        return self._spark.createDataFrame([], committable_stream_ddl())

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        """The committable columns of ``stream``, collected to the driver.

        Raises:
            SinkConfigurationError: ``stream`` is not a DataFrame or lacks columns.
        """
        from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

        if not isinstance(stream, DataFrame):
            raise SinkConfigurationError(
                f"{produced_by} must return the committable DataFrame (got "
                f"{type(stream).__name__}); return the stream it received, transformed"
            )
        missing = [c for c in COMMITTABLE_COLUMNS if c not in stream.columns]
        if missing:
            raise SinkConfigurationError(
                f"{produced_by} returned a DataFrame without the committable columns "
                f"{missing}; keep every column of the committable schema "
                "(sinkv2_spark.committables.COMMITTABLE_SCHEMA), e.g. by using its helpers"
            )
        return stream.select(*COMMITTABLE_COLUMNS).toArrow().cast(COMMITTABLE_SCHEMA)


def pre_write(df: DataFrame, sink: Any, capabilities: SinkCapabilities) -> DataFrame:
    """``df`` through the sink's pre-write topology (a lazy plan; no Spark job runs).

    Raises:
        SinkConfigurationError: The topology returned something other than a DataFrame.
    """
    if not capabilities.pre_write_topology:
        return df
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    result = sink.add_pre_write_topology(df)
    if not isinstance(result, DataFrame):
        raise SinkConfigurationError(
            f"{capabilities.sink_type}.add_pre_write_topology() must return a "
            f"pyspark.sql.DataFrame (got {type(result).__name__}); return the "
            "transformed input, e.g. input.repartition(8, 'key')"
        )
    return result


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of the batches ``mapInArrow`` hands writers for ``df``.

    Raises:
        SinkConfigurationError: Two columns share a name (or, unless
            ``spark.sql.caseSensitive`` is on, differ only in case: Spark's own
            writers refuse both), or a column has a type Arrow cannot carry; the
            message names the column.
    """
    spark = df.sparkSession
    return schema_to_arrow(
        df.schema,
        timezone=spark.conf.get("spark.sql.session.timeZone"),
        case_sensitive=spark.conf.get("spark.sql.caseSensitive") == "true",
    )


def schema_to_arrow(schema: StructType, *, timezone: str | None, case_sensitive: bool) -> pa.Schema:
    """``schema``'s rows as Arrow, the one check every door runs on a Spark schema.

    Raises:
        SinkConfigurationError: Two columns share a name (``case_sensitive``
            decides whether case alone makes them differ), or a column has a type
            Arrow cannot carry; the message names the column.
    """
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # pyspark on use

    check_unique_names(list(schema.names), case_sensitive)
    try:
        return to_arrow_schema(schema, timezone=timezone)
    except Exception as error:  # pyspark raises its own error classes here
        column = ""
        for field in schema.fields:
            try:
                to_arrow_schema(type(schema)([field]), timezone=timezone)
            except Exception:  # noqa: BLE001  # the first field that fails is the one to name
                column = f"column {field.name!r} of type {field.dataType.simpleString()}: "
                break
        raise SinkConfigurationError(
            f"the DataFrame's schema cannot be written through Arrow: {column}{error}. Cast "
            "or drop that column (sinkv2 moves rows to Python writers as Arrow)"
        ) from error


def check_unique_names(names: list[str], case_sensitive: bool) -> None:
    seen: dict[str, str] = {}
    for name in names:
        key = name if case_sensitive else name.lower()
        if key in seen:
            same = "twice" if seen[key] == name else f"as {seen[key]!r} and {name!r}"
            hint = (
                ""
                if case_sensitive or seen[key] == name
                else " (spark.sql.caseSensitive is off, so names that differ only in case "
                "are one name; turn it on to keep both)"
            )
            raise SinkConfigurationError(
                f"the DataFrame has a column named {name!r} {same}{hint}; writers get rows "
                "keyed by column name, and Spark's own writers refuse this too. Rename one "
                "of them, e.g. with df.toDF(*names) or df.withColumnsRenamed({...})"
            )
        seen[key] = name


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
        source: The input after the sink's pre-write topology (see `pre_write`).
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
            if checkpoint:  # _translator refuses streaming DataFrames of Connect sessions
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

        See ``sinkv2_spark._connect``: the plan runs once, in the ``toArrow()``
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
