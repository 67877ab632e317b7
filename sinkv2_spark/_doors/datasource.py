"""The ``sinkv2`` Spark data source: ``df.write.format("sinkv2")`` runs any Sink V2 sink.

`register` adds it to a session; then::

    df.write.format("sinkv2").option("sink", "files").option("path", "/out")
        .option("sink_id", "orders").mode("append").save()

runs the sink with ``apply()``'s guarantees, driven by the same
`sinkv2.runtime.CommitCoordinator`. Spark's Python data source API splits one
write over three processes, and the coordinator's job is split with it:

    planner worker  DataSource.writer()   options, sink, pre-write and pre-commit topology
                                          checks; acquire the sink id, record the job,
                                          recover what dead jobs left, decide whether the
                                          epoch is committed already; release the sink id
    executors       BatchWriter.write()   one writer per partition (= subtask) on Arrow
                                          batches (WriterTask, as apply()'s writer stage)
    planner worker  BatchWriter.commit()  acquire the sink id again, refused if another
                                          run took it meanwhile; run_epoch over the winning
                                          attempts' outputs: clean up the losers, pre-commit,
                                          record Pending, commit, record Committed; finish
                    BatchWriter.abort()   a writer failed: remove what the job staged

Spark hands ``commit`` one message per partition, from the attempt its output
commit coordinator let commit; other attempts' side effects are removed by the
sink's ``clean_up_attempts`` with the winners' tokens, as in ``apply()``.

Streaming writes (``df.writeStream.format("sinkv2")``) are planned and committed
per micro-batch by `sinkv2_spark._doors.datasource_stream`, on the same coordinator.

Between planning and commit the sink id is not held: no process of ours lives
that long. The job is recorded, so a driver that dies leaves nothing the next
run does not clean up; and the commit checks that the sink id's fencing token
moved by exactly its own acquire (every acquire increments it), so a run whose
staged output another run may have removed as a dead job's never commits.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from sinkv2 import END_OF_INPUT, SinkCapabilities, inspect_sink
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    CommitCoordinator,
    CommitRetryPolicy,
    CommitStateStore,
    EpochNeed,
    Recovery,
    WriterStageOutput,
)
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA
from sinkv2_spark._doors.datasource_shared import (
    check_pre_write,
    merged_recovery,
    refusing_briefly,
    run_writer_task,
    writer_stage_output,
)
from sinkv2_spark._doors.datasource_topologies import (
    LocalStreams,
    dataframe_needed,
    planned_arrow_schema,
)
from sinkv2_spark._doors.results import commit_error, record_error, record_result
from sinkv2_spark._doors.source_read import (
    BoundedSourceReader,
    door_reader,
    door_source,
    door_stream_reader,
    source_schema,
)
from sinkv2_spark._doors.source_stream import SourceStreamReader
from sinkv2_spark._engine.writer_task import WriterTask
from sinkv2_spark._rules.options import parse_options
from sinkv2_spark._rules.preflight import check_shippable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


__all__ = ["NAME", "BatchWriter", "SinkV2DataSource", "TaskOutput", "WritePlan", "register"]

logger = logging.getLogger("sinkv2.spark")

NAME: Final = "sinkv2"
"""The data source's name: ``df.write.format("sinkv2")``."""


def register(spark: SparkSession) -> None:
    """Register the ``sinkv2`` data source with ``spark`` (once per session).

    Afterwards ``df.write.format("sinkv2")`` runs any Sink V2 sink; see
    `SinkV2DataSource` for the options. Registering again is harmless.

    Raises:
        SinkConfigurationError: ``spark`` is not a SparkSession.
    """
    register_with = getattr(getattr(spark, "dataSource", None), "register", None)
    if register_with is None:
        raise SinkConfigurationError(
            f"register() takes a pyspark.sql.SparkSession (got {type(spark).__name__}); "
            "pass the session you write with, e.g. register(spark)"
        )
    register_with(SinkV2DataSource)


class SinkV2DataSource(DataSource):
    """Spark's door to any Sink V2 sink: ``format("sinkv2")``, batch and streaming writes.

    Options (strings, as Spark passes them; names are case-insensitive):

    - ``sink`` (required): a reference sink's short name (``"files"``,
      ``"iceberg"``) or an importable factory ``"module:callable"``;
    - ``sink_id`` (required): the stable name of the sink's commit history;
    - ``checkpoint_id``: a positive integer; a committed one is never written again;
    - ``state_store``: a SQLite file or ``postgresql://`` URL; by default
      ``apply()``'s (``$SINKV2_STATE_DIR`` or ``./.sinkv2/commit_state.sqlite``,
      as Spark's driver-side Python workers see them);
    - anything else: passed to the factory as keyword arguments.

    Only ``mode("append")``: sinks append; ``"overwrite"`` is refused, and Spark
    itself refuses ``"errorifexists"`` (its default) and ``"ignore"``.

    ``df.writeStream.format("sinkv2")`` takes ``checkpointLocation`` instead of
    ``checkpoint_id``; see `sinkv2_spark._doors.datasource_stream`.
    """

    _shipped = False
    """Whether this instance was unpickled: Spark's streaming commit runner gets it so."""

    _read_source: Any = None
    """The source `schema` made for a read; pickled with the instance into `reader`."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Spark's planner builds the data source from its options; its streaming
        # commit runner unpickles one. streamWriter() tells the two apart by this.
        self.__dict__.update(state)
        self._shipped = True

    @classmethod
    def name(cls) -> str:
        """``"sinkv2"``."""
        return NAME

    @refusing_briefly
    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        """Plan one batch write (in Spark's planner worker, before any data moves).

        Raises:
            SinkConfigurationError: A bad option, ``mode("overwrite")``, a topology
                that needs a Spark DataFrame, a sink that does not pickle.
            SinkDefinitionError: The factory's result is not a sink.
            ConcurrentCommitError: Another driver runs the sink id right now.
            CommitError: A dead job's pending epoch failed to commit again.
        """
        if overwrite:
            raise SinkConfigurationError(
                "the sinkv2 data source appends: mode('overwrite') is not supported (a Sink V2 "
                "sink has no truncate); use .mode('append')"
            )
        return plan_batch_write(self.options, schema)

    @refusing_briefly
    def streamWriter(  # Spark's name
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamArrowWriter:
        """Plan one micro-batch (planner), or a writer for its ``commit``/``abort``.

        Raises:
            SinkConfigurationError, SinkDefinitionError, ConcurrentCommitError,
            CommitError: see `sinkv2_spark._doors.datasource_stream.stream_writer`.
        """
        from sinkv2_spark._doors.datasource_stream import stream_writer  # noqa: PLC0415  # imports this module

        return stream_writer(self.options, schema, overwrite, planning=not self._shipped)

    @refusing_briefly
    def schema(self) -> StructType:
        """A read's schema: the produced type of the source ``.option("source", ...)`` names.

        Raises:
            SinkConfigurationError: No ``source`` option (``format("sinkv2")`` reads
                a FLIP-27 source), or a bad one.
        """
        self._read_source = door_source(self.options)  # travels to reader(), made once
        return source_schema(self._read_source)

    @refusing_briefly
    def reader(self, schema: StructType) -> BoundedSourceReader:
        """Plan a batch read of a bounded FLIP-27 source (see `sinkv2_spark.from_source`).

        Raises:
            SinkConfigurationError: A bad option, a ``.schema(...)`` that is not the
                source's, or an unbounded source (read it with ``spark.readStream``).
        """
        return door_reader(self.options, schema, self._read_source)

    @refusing_briefly
    def streamReader(self, schema: StructType) -> SourceStreamReader:  # Spark's name
        """Plan a streaming read of a FLIP-27 source, positions recorded per epoch.

        Raises:
            SinkConfigurationError: No ``source_id``, or a bad option.
            SourceContractError: An unbounded source without ``SupportsEndPositions``.
        """
        return door_stream_reader(self.options, schema, self._read_source)


@final
@attrs.frozen(kw_only=True)
class WritePlan:
    """What the planner decided, pickled once into every task and into ``commit``.

    Attributes:
        sink: The sink.
        capabilities: What ``inspect_sink`` found.
        sink_id: The sink id.
        checkpoint_id: The user's checkpoint id, or ``None``.
        job_id: This run's job id, recorded in the store; attempt tokens start with it.
        store: The commit state store.
        fencing_token: The sink id's fencing token when the planner held it.
        skip: The epoch is committed already: writers write nothing.
        input_schema: The Arrow schema of the rows as planned (writers use the
            schema of the batches they get, which has the session's time zone).
        retry_policy: Commit retry budget and backoff.
        recovery: What the planner's ``open()`` finished of dead jobs; the commit's
            result reports it, as ``apply()``'s does.
    """

    sink: Any
    capabilities: SinkCapabilities
    sink_id: str
    checkpoint_id: int | None
    job_id: str
    store: CommitStateStore
    fencing_token: int
    skip: bool
    input_schema: pa.Schema
    retry_policy: CommitRetryPolicy = attrs.field(factory=CommitRetryPolicy)
    recovery: Recovery = attrs.field(factory=Recovery)

    @property
    def carried_checkpoint_id(self) -> int:
        """The checkpoint id committables carry: the user's, or ``END_OF_INPUT``."""
        return self.checkpoint_id if self.checkpoint_id is not None else END_OF_INPUT


def plan_batch_write(options: Any, schema: StructType) -> BatchWriter:
    """Check everything and record the job; the `BatchWriter` Spark ships to tasks.

    Raises:
        SinkConfigurationError, SinkDefinitionError, ConcurrentCommitError,
        CommitError: see `SinkV2DataSource.writer`.
    """
    parsed = parse_options(options)
    sink = parsed.sink
    capabilities = inspect_sink(sink)
    input_schema = planned_arrow_schema(schema)
    if capabilities.pre_write_topology:
        check_pre_write(sink, capabilities, schema)
    check_shippable(sink, capabilities)
    coordinator = CommitCoordinator(
        sink,
        sink_id=parsed.sink_id,
        store=parsed.state_store,
        streams=LocalStreams(),
        capabilities=capabilities,
        input_schema=input_schema,
    )
    if capabilities.pre_commit_topology:
        # A topology that needs a Spark DataFrame fails here, on no rows, before data moves.
        with dataframe_needed(capabilities.sink_type):
            coordinator.pre_commit(COMMITTABLE_SCHEMA.empty_table())
    recovery = coordinator.open()
    try:
        # apply()'s epoch rules decide: a committed (or just recommitted) checkpoint
        # id needs nothing of the writers; any other epoch needs them.
        plan = coordinator.plan_epoch(parsed.checkpoint_id, recovery=recovery)
        skip = plan.need is not EpochNeed.WRITE
        if skip:
            result = coordinator.settle(plan)
            logger.info(
                "sink %r: checkpoint %s is committed already; the writers write nothing (%s)",
                parsed.sink_id,
                parsed.checkpoint_id,
                result.status.value,
            )
    except BaseException:
        coordinator.finish()  # nothing was staged: forget the job
        raise
    token = coordinator.lease.fencing_token
    coordinator.close()  # the job stays recorded until commit() finishes it
    return BatchWriter(
        WritePlan(
            sink=sink,
            capabilities=capabilities,
            sink_id=parsed.sink_id,
            checkpoint_id=parsed.checkpoint_id,
            job_id=coordinator.job_id,
            store=parsed.state_store,
            fencing_token=token,
            skip=skip,
            input_schema=input_schema,
            recovery=recovery,
        )
    )


@final
@attrs.frozen
class TaskOutput(WriterCommitMessage):
    """One writer task's message to ``commit``: its metadata rows, never data rows.

    Attributes:
        rows: The `WRITER_OUTPUT_SCHEMA` rows (committables, the subtask row), or
            ``None`` when the writers were skipped.
        input_schema: The Arrow schema of the batches the writer got, if any.
    """

    rows: pa.RecordBatch | None
    input_schema: pa.Schema | None = None


@final
class BatchWriter(DataSourceArrowWriter):
    """The writer Spark pickles into every task and into ``commit``/``abort``.

    Args:
        plan: What the planner decided.
    """

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskOutput:
        """Run one subtask's writer over its partition's Arrow batches."""
        plan = self.plan
        if plan.skip:
            return TaskOutput(None)
        first = next(iterator, None)
        batches = iterator if first is None else itertools.chain((first,), iterator)
        schema = first.schema if first is not None else plan.input_schema
        task = WriterTask(
            sink=plan.sink,
            capabilities=plan.capabilities,
            job_id=plan.job_id,
            checkpoint_id=plan.carried_checkpoint_id,
            number_of_subtasks=None,  # Spark's data source API does not tell tasks
            emits_write_results=plan.capabilities.pre_commit_topology,
            input_schema=schema,
        )
        rows = run_writer_task(task, batches, plan.store, plan.sink_id, plan.job_id)
        return TaskOutput(rows, schema if first is not None else None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit the epoch from the winning attempts' outputs, exactly once.

        Raises:
            ConcurrentCommitError: Another run took the sink id while the writers
                wrote; nothing of this run is committed.
            SinkConfigurationError: A post-commit topology needs a Spark DataFrame.
            CommitError: The commit failed; the epoch stays pending.
        """
        plan = self.plan
        outputs = [_output(m) for m in messages]
        schemas = [o.input_schema for o in outputs if o.input_schema is not None]
        coordinator = CommitCoordinator(
            plan.sink,
            sink_id=plan.sink_id,
            store=plan.store,
            streams=LocalStreams(),
            job_id=plan.job_id,
            retry_policy=plan.retry_policy,
            capabilities=plan.capabilities,
            input_schema=schemas[0] if schemas else plan.input_schema,
            planned_fencing_token=plan.fencing_token,
        )

        def written(job_id: str, checkpoint_id: int) -> WriterStageOutput:
            if plan.skip:
                raise RuntimeError(
                    f"sink {plan.sink_id!r}: checkpoint {plan.checkpoint_id} was committed when "
                    "the write was planned but not at its commit, while no other run held the "
                    "sink id; this is a bug in sinkv2, please report it"
                )
            return writer_stage_output(outputs)

        # Ends normally: finish; raises: close only (the next run cleans up after the job).
        # The result reports what the planner recovered too (a checkpoint it recommitted
        # is RECOMMITTED), as apply()'s does: the planner's open() found the dead jobs.
        try:
            with coordinator as job, dataframe_needed(plan.capabilities.sink_type):
                recovery = merged_recovery(plan.recovery, job.recovery)
                result = job.run_epoch(written, checkpoint_id=plan.checkpoint_id, recovery=recovery)
        except Exception as error:
            what = "the run" if plan.checkpoint_id is None else f"checkpoint {plan.checkpoint_id}"
            record_error(plan.store, plan.sink_id, plan.job_id, commit_error(error, what))
            raise
        record_result(plan.store, plan.job_id, result)
        logger.info("sink %r: %s", plan.sink_id, result)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A writer failed: remove what this job staged (the job stays recorded).

        Spark also calls ``abort`` when ``commit`` failed (every message present):
        then nothing is removed here, since a pending epoch's staged output must
        survive for the next run to commit it. Zombie attempts may still be
        writing; the next run of the sink id cleans up after the job again.
        """
        plan = self.plan
        if all(m is not None for m in messages) or not plan.capabilities.attempt_cleanup:
            return
        try:
            plan.sink.clean_up_attempts(plan.job_id, ())
        except Exception as error:  # noqa: BLE001  # the next run of the sink id tries again
            logger.warning(
                "sink %r: could not remove what job %s staged (%s: %s); the next run of the "
                "sink id tries again",
                plan.sink_id,
                plan.job_id,
                type(error).__name__,
                error,
            )


def _output(message: WriterCommitMessage | None) -> TaskOutput:
    if not isinstance(message, TaskOutput):
        raise RuntimeError(
            f"the sinkv2 data source's commit got {type(message).__name__} instead of a "
            "writer task's output; this is a bug in sinkv2, please report it"
        )
    return message
