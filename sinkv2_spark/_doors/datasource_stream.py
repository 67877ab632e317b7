"""``df.writeStream.format("sinkv2")``: any Sink V2 sink as a Spark streaming sink, exactly once.

The streaming door runs the same `sinkv2.runtime.CheckpointRunner` epoch rules as
``apply(streaming_df, ...)`` - micro-batch ``b`` is checkpoint ``b + 1``, recorded
Pending with its writer states, committed, recorded Committed; a replay of a
recorded checkpoint writes nothing - but Spark's Python data source API splits each
micro-batch over three processes, and holds none of ours across micro-batches::

    planner worker  streamWriter()     options and topology checks; acquire the sink id,
                                       bind it to Spark's query, record the job, commit
                                       what a dead run left Pending, clean up dead jobs;
                                       note which checkpoints are recorded and the newest
                                       one's writer states; release the sink id
    executors       StreamWriter.write one writer per partition (= subtask) on Arrow
                                       batches; the task reads its micro-batch id from
                                       Spark, writes nothing for a recorded checkpoint, else
                                       restores the writer and ends the checkpoint with
                                       flush(False) -> prepare_commit() -> snapshot_state()
    commit worker   commit(msgs, b)    acquire the sink id again, refused if anyone took it
                                       since planning (the fencing token moved by more than
                                       this acquire); CheckpointRunner.run(b + 1) over the
                                       winning attempts' outputs: clean up the losers,
                                       record Pending (+ states), commit, record Committed
                    abort(msgs, b)     a writer failed: remove what the job staged

The planner and the commit worker get the micro-batch's options, not each other's
objects: Spark builds the data source from its options in the planner, and unpickles
one in the commit worker (``SinkV2DataSource.streamWriter`` tells them apart). The
planner's decisions reach the commit worker inside the tasks' messages (job id,
fencing token, the checkpoint and what its writers restored), which it checks.

Writer states are restored by subtask id, since Spark does not tell tasks how many
partitions a micro-batch has: subtask ``i`` restores what subtask ``i`` snapshotted.
A checkpoint with fewer partitions than the one before carries the states no writer
restored into its own record, under subtask ``i mod n``, so the next checkpoint's
writers restore them (one micro-batch late; none is lost or restored twice). This is
the rule by subtask id of ``sinkv2.runtime._rescale`` (``WriterStates.restore_by_subtask_id``
and ``WriterStates.with_carried``); ``apply()`` uses Flink's rule from the same module.

Over 450 lines because a micro-batch's three processes (planner, tasks, commit) share
the plan and the message types pickled between them; each part is short and reads in
the order Spark calls it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    CheckpointRunner,
    CommitCoordinator,
    CommitStateStore,
    Recovery,
    Restore,
    WriterStageOutput,
    WriterStates,
)
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA
from sinkv2_spark._doors.datasource_shared import (
    check_pre_write,
    merged_recovery,
    run_writer_task,
    writer_stage_output,
)
from sinkv2_spark._doors.datasource_stream_options import StreamOptions, parse_stream_options
from sinkv2_spark._doors.datasource_topologies import (
    LocalStreams,
    dataframe_needed,
    planned_arrow_schema,
)
from sinkv2_spark._doors.results import commit_error, record_error, record_result
from sinkv2_spark._engine.writer_task import WriterTask
from sinkv2_spark._rules.preflight import check_shippable

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["StreamPlan", "StreamTaskOutput", "StreamWriter", "stream_writer"]

logger = logging.getLogger("sinkv2.spark")

BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
"""The Spark local property that tells a micro-batch's tasks its id."""

CONTINUOUS_PROPERTY: Final = "__continuous_start_epoch"
"""The local property Spark's continuous execution sets on its tasks (which never end).

Such a task rarely gets here: Spark hands a Python writer its rows in Arrow batches,
and a continuous task's first batch fills slowly. Its epochs' commits fail in
`_outputs` instead, which Spark logs without failing the query (documented)."""

_BUG: Final = "this is a bug in sinkv2, please report it"


def stream_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool, *, planning: bool
) -> StreamWriter:
    """The writer for one micro-batch: planned (planner worker), or for its commit.

    Args:
        options: The ``writeStream`` options.
        schema: The stream's schema.
        overwrite: Spark's truncate flag (``outputMode("complete")``).
        planning: Plan the micro-batch (the planner worker); else the writer only
            commits or aborts it, from the tasks' messages (the commit worker).

    Raises:
        SinkConfigurationError: ``outputMode("complete")``, a bad option, a
            checkpoint location or sink id that belongs to another stream, a topology
            that needs a Spark DataFrame, a sink that does not pickle, recorded
            writer states of another sink.
        SinkDefinitionError: The factory's result is not a sink.
        ConcurrentCommitError: Another driver holds the sink id right now.
        CommitError: A checkpoint a dead run left pending failed to commit.
        SerializationError: The recorded writer states do not read.
    """
    if overwrite:
        raise SinkConfigurationError(
            "the sinkv2 data source appends: outputMode('complete') would replace the sink's "
            "contents each micro-batch, and a Sink V2 sink has no truncate; use "
            "outputMode('append')"
        )
    if not planning:
        return StreamWriter(dict(options), schema, None)
    return StreamWriter(dict(options), schema, plan_micro_batch(options, schema))


@final
@attrs.frozen(kw_only=True)
class StreamPlan:
    """What the planner decided for one micro-batch; pickled into every task.

    Attributes:
        sink: The sink.
        capabilities: What ``inspect_sink`` found.
        sink_id: The sink id.
        job_id: The micro-batch's job id (attempt tokens start with it).
        fencing_token: The sink id's fencing token when the planner held it.
        recorded: Checkpoints recorded when planned (all Committed: the planner
            committed any Pending one); a task of one of them writes nothing.
        latest: The newest recorded checkpoint, 0 if none.
        restore: What a checkpoint after ``latest`` restores (its states checked).
        input_schema: The Arrow schema of the rows as planned.
        recovery: What the planner's ``open()`` finished of a dead run (a checkpoint
            it recommitted, jobs it cleaned up); the commit's result reports it.
        store: The commit state store (a failing writer task records its error there).
    """

    sink: Any
    capabilities: SinkCapabilities
    sink_id: str
    job_id: str
    fencing_token: int
    recorded: frozenset[int]
    latest: int
    restore: Restore | None
    input_schema: pa.Schema
    recovery: Recovery = attrs.field(factory=Recovery)
    store: CommitStateStore | None = None

    def output(
        self,
        checkpoint_id: int,
        restored_checkpoint_id: int | None,
        rows: pa.RecordBatch | None,
        input_schema: pa.Schema | None,
    ) -> StreamTaskOutput:
        """A task's message under this plan."""
        return StreamTaskOutput(
            job_id=self.job_id,
            fencing_token=self.fencing_token,
            checkpoint_id=checkpoint_id,
            restored_checkpoint_id=restored_checkpoint_id,
            rows=rows,
            input_schema=input_schema,
            recovery=self.recovery,
        )

    def restored_states(self, subtask_id: int) -> tuple[tuple[bytes, ...], ...] | None:
        """Per subtask up to ``subtask_id``, the framed states it restores, by subtask id.

        Spark does not tell the task how many partitions there are: the rule by
        subtask id (`WriterStates.restore_by_subtask_id`), not Flink's.
        """
        restore = self.restore
        if restore is None or not self.capabilities.writer_state:
            return None
        states = restore.states
        return tuple(
            states.restore_by_subtask_id(subtask) if states is not None else ()
            for subtask in range(subtask_id + 1)
        )


def plan_micro_batch(options: Mapping[str, str], schema: StructType) -> StreamPlan:
    """Check everything, recover the sink id, record the job (see module doc).

    Raises:
        See `stream_writer`.
    """
    parsed = parse_stream_options(options)
    sink, capabilities = parsed.sink, parsed.capabilities
    input_schema = planned_arrow_schema(schema)
    if capabilities.pre_write_topology:
        check_pre_write(sink, capabilities, schema)
    check_shippable(sink, capabilities)
    coordinator = _coordinator(parsed, input_schema)
    if capabilities.pre_commit_topology:
        with dataframe_needed(capabilities.sink_type):  # on no rows, before data moves
            coordinator.pre_commit(COMMITTABLE_SCHEMA.empty_table())
    origin = parsed.origin(claim=True)
    # Commits what a dead run left Pending; the micro-batch's result reports it.
    recovery = coordinator.open(origin=origin, keep_restorable=True)
    try:
        recorded = coordinator.recorded_epochs()
        latest = max(recorded, default=0)
        restore = CheckpointRunner(coordinator).restore_point(latest + 1)
        token = coordinator.lease.fencing_token
    except BaseException:
        coordinator.finish()  # nothing was staged: forget the job
        raise
    coordinator.close()  # the job stays recorded until commit() finishes it
    return StreamPlan(
        sink=sink,
        capabilities=capabilities,
        sink_id=parsed.sink_id,
        job_id=coordinator.job_id,
        fencing_token=token,
        recorded=recorded,
        latest=latest,
        restore=restore,
        input_schema=input_schema,
        recovery=recovery,
        store=parsed.state_store,
    )


# One coordinator per process of a micro-batch, not one per query run: Spark builds
# the planner's data source from the options in one Python worker and unpickles the
# commit's in another (neither survives to the next micro-batch), so the sink id's
# lease cannot be held from planning to commit. The planner hands its fencing token
# to the commit instead (`planned_fencing_token`), which refuses to commit if anyone
# acquired the sink id in between.
def _coordinator(
    parsed: StreamOptions,
    input_schema: pa.Schema,
    *,
    job_id: str | None = None,
    fencing_token: int | None = None,
) -> CommitCoordinator:
    return CommitCoordinator(
        parsed.sink,
        sink_id=parsed.sink_id,
        store=parsed.state_store,
        streams=LocalStreams(),
        job_id=job_id,
        on_stage=parsed.stage_listener(),
        capabilities=parsed.capabilities,
        input_schema=input_schema,
        planned_fencing_token=fencing_token,
    )


@final
@attrs.frozen(kw_only=True)
class StreamTaskOutput(WriterCommitMessage):
    """One writer task's message to ``commit``: the plan it ran, and its metadata rows.

    Attributes:
        job_id: The planned job.
        fencing_token: The planned fencing token.
        checkpoint_id: The task's micro-batch id plus one.
        restored_checkpoint_id: The checkpoint its writer restored, or ``None``.
        rows: The `WRITER_OUTPUT_SCHEMA` rows (committables, states, the subtask
            row); ``None``: the checkpoint was recorded, nothing was written.
        input_schema: The Arrow schema of the batches the writer got, if any.
        recovery: What the planner recovered (`StreamPlan.recovery`).
    """

    job_id: str
    fencing_token: int
    checkpoint_id: int
    restored_checkpoint_id: int | None
    rows: pa.RecordBatch | None
    input_schema: pa.Schema | None = None
    recovery: Recovery = attrs.field(factory=Recovery)

    @property
    def stamp(self) -> tuple[str, int, int, int | None, bool]:
        """What every task of one micro-batch agrees on."""
        return (
            self.job_id,
            self.fencing_token,
            self.checkpoint_id,
            self.restored_checkpoint_id,
            self.rows is None,
        )


@final
class StreamWriter(DataSourceStreamArrowWriter):
    """The writer Spark pickles into a micro-batch's tasks, and builds again for its commit.

    Args:
        options: The ``writeStream`` options (``commit``/``abort`` rebuild the sink
            from them).
        schema: The stream's schema.
        plan: The planner's decisions; ``None`` in the commit worker.
    """

    def __init__(
        self, options: Mapping[str, str], schema: StructType, plan: StreamPlan | None
    ) -> None:
        self.options = dict(options)
        self.schema = schema
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamTaskOutput:
        """Run one subtask's writer over its partition of the micro-batch."""
        from pyspark import TaskContext  # noqa: PLC0415  # only exists inside a task

        plan = self.plan
        if plan is None:
            raise RuntimeError(
                "Spark started a sinkv2 streaming task with a writer the planner did not "
                f"plan (its data source was unpickled there); {_BUG}"
            )
        task = TaskContext.get()
        if task is None:
            raise RuntimeError("StreamWriter.write must run inside a Spark task")
        batch_id = task.getLocalProperty(BATCH_ID_PROPERTY)
        if batch_id is None or task.getLocalProperty(CONTINUOUS_PROPERTY) is not None:
            raise SinkConfigurationError(
                "the sinkv2 data source writes micro-batches, and this task belongs to none "
                "(the continuous trigger?): it has no checkpoints to commit exactly once. Use "
                "trigger(processingTime=...) or trigger(availableNow=True)"
            )
        checkpoint_id = int(batch_id) + 1
        restore = plan.restore
        if checkpoint_id in plan.recorded:
            return plan.output(checkpoint_id, None, None, None)
        if checkpoint_id <= plan.latest:
            raise SinkConfigurationError(
                f"sink {plan.sink_id!r}: Spark runs micro-batch {batch_id} (checkpoint "
                f"{checkpoint_id}), older than the newest checkpoint the commit state store "
                f"recorded ({plan.latest}) and not recorded itself: the checkpoint location is "
                "behind the store (restored from a backup?). Nothing was written; restore the "
                "store that belongs to the checkpoint location, or start over with new ones"
            )
        first = next(iterator, None)
        batches = iterator if first is None else itertools.chain((first,), iterator)
        schema = first.schema if first is not None else plan.input_schema
        writer_task = WriterTask(
            sink=plan.sink,
            capabilities=plan.capabilities,
            job_id=plan.job_id,
            checkpoint_id=checkpoint_id,
            number_of_subtasks=None,  # Spark's data source API does not tell tasks
            emits_write_results=plan.capabilities.pre_commit_topology,
            input_schema=schema,
            checkpoint=True,
            restored_checkpoint_id=restore.checkpoint_id if restore is not None else None,
            restored_states=plan.restored_states(task.partitionId()),
        )
        rows = run_writer_task(
            writer_task, batches, plan.store, plan.sink_id, plan.job_id, batch_id=int(batch_id)
        )
        return plan.output(
            checkpoint_id,
            restore.checkpoint_id if restore is not None else None,
            rows,
            schema if first is not None else None,
        )

    def commit(
        self, messages: list[WriterCommitMessage | None], batchId: int
    ) -> None:  # Spark's name: batchId
        """Commit checkpoint ``batchId + 1`` from the winning attempts' outputs, exactly once.

        Raises:
            ConcurrentCommitError: Another run took the sink id since the planner;
                nothing of this micro-batch is committed.
            SinkConfigurationError: A post-commit topology needs a Spark DataFrame.
            CommitError: The commit failed; the checkpoint stays pending, and the
                next run commits it.
        """
        outputs = _outputs(messages, batchId)
        first = outputs[0]
        parsed = parse_stream_options(self.options)
        schemas = [o.input_schema for o in outputs if o.input_schema is not None]
        input_schema = schemas[0] if schemas else planned_arrow_schema(self.schema)
        coordinator = _coordinator(
            parsed, input_schema, job_id=first.job_id, fencing_token=first.fencing_token
        )

        def written(job_id: str, checkpoint_id: int, restore: Restore | None) -> WriterStageOutput:
            restored = restore.checkpoint_id if restore is not None else None
            if first.rows is None or restored != first.restored_checkpoint_id:
                raise RuntimeError(
                    f"sink {parsed.sink_id!r} checkpoint {checkpoint_id}: its writers "
                    f"{'wrote nothing' if first.rows is None else f'restored {restored!r}'} as "
                    "planned, but at commit it is to be written (restoring "
                    f"{first.restored_checkpoint_id!r}), while no other run held the sink id; "
                    f"{_BUG}"
                )
            return _carry_unrestored(writer_stage_output(outputs, with_states=True), restore)

        # The result reports what the planner recovered too: the checkpoint Spark
        # replays after a restart is RECOMMITTED, not "already committed".
        def failed(error: Exception) -> None:
            what = commit_error(error, f"checkpoint {first.checkpoint_id}")
            record_error(parsed.state_store, parsed.sink_id, first.job_id, what, batch_id=batchId)

        try:
            recovery = coordinator.open(origin=parsed.origin(claim=False), keep_restorable=True)
        except Exception as error:
            failed(error)
            raise
        runner = CheckpointRunner(coordinator, recovery=merged_recovery(first.recovery, recovery))
        try:
            with dataframe_needed(parsed.capabilities.sink_type):
                result = runner.run(written, first.checkpoint_id)
        except BaseException as error:
            coordinator.close()  # a pending checkpoint is committed by the next run
            if isinstance(error, Exception):
                failed(error)
            raise
        restored = runner.last_restore
        if restored is not None and restored.states is not None:
            _tidy(coordinator, restored.states)
        # The newest checkpoint's writer states may name this job's staged output.
        prefix = f"{coordinator.job_id}-"
        coordinator.finish(
            keep_attempt_tokens=[t for t in runner.referenced_attempts() if t.startswith(prefix)]
        )
        if result is not None:
            record_result(parsed.state_store, first.job_id, result, batch_id=batchId)
        logger.info("sink %r: micro-batch %d: %s", parsed.sink_id, batchId, result)

    def abort(
        self, messages: list[WriterCommitMessage | None], batchId: int
    ) -> None:  # Spark's name: batchId
        """A writer failed: remove what the micro-batch's job staged (it stays recorded).

        Spark also calls ``abort`` when ``commit`` failed (every message present):
        then nothing is removed, since a pending checkpoint's staged output must
        survive for the next run to commit it. If no task finished, the job is not
        known here; the next run of the sink id removes what it staged.
        """
        outputs = [m for m in messages if isinstance(m, StreamTaskOutput)]
        if not outputs or all(m is not None for m in messages):
            return
        try:
            parsed = parse_stream_options(self.options)
            if parsed.capabilities.attempt_cleanup:
                parsed.sink.clean_up_attempts(outputs[0].job_id, ())
        except Exception as error:  # noqa: BLE001  # the next run of the sink id tries again
            logger.warning(
                "micro-batch %d: could not remove what job %s staged (%s: %s); the next run of "
                "the sink id tries again",
                batchId,
                outputs[0].job_id,
                type(error).__name__,
                error,
            )


def _tidy(coordinator: CommitCoordinator, restored: WriterStates) -> None:
    """Remove the staged output the restored states named, once it is no longer needed.

    The checkpoint before kept its job recorded for what its writer states name;
    now that this checkpoint is committed, that job is a dead one whose output
    only the newest states may still name (as ``apply()`` does at the end of a
    stream). A failure only leaves it for the next micro-batch's planner.
    """
    if not restored.referenced_attempts():
        return
    try:
        coordinator.clean_up_dead_jobs()
    except Exception as error:  # noqa: BLE001  # the checkpoint is committed; the next run cleans
        logger.warning(
            "sink %r: could not remove staged output of earlier checkpoints (%s: %s); the "
            "next micro-batch does",
            coordinator.sink_id,
            type(error).__name__,
            error,
        )


def _outputs(
    messages: Sequence[WriterCommitMessage | None], batch_id: int
) -> list[StreamTaskOutput]:
    """The tasks' messages, checked to be of one planned micro-batch, ``batch_id``.

    Raises:
        SinkConfigurationError: A task sent no message (the continuous trigger).
        RuntimeError: The messages disagree (a bug).
    """
    if any(m is None for m in messages) or not messages:
        raise SinkConfigurationError(
            f"Spark commits micro-batch {batch_id} without every writer task's message (the "
            "continuous trigger?); the sinkv2 data source commits finished micro-batches only. "
            "Use trigger(processingTime=...) or trigger(availableNow=True)"
        )
    outputs = [m for m in messages if isinstance(m, StreamTaskOutput)]
    stamps = {o.stamp for o in outputs}
    if len(outputs) != len(messages) or len(stamps) != 1:
        raise RuntimeError(
            f"micro-batch {batch_id}: the writer tasks' messages are not all of one planned "
            f"micro-batch ({sorted(map(str, stamps))}); {_BUG}"
        )
    if outputs[0].checkpoint_id != batch_id + 1:
        raise RuntimeError(
            f"Spark commits micro-batch {batch_id}, but its tasks ran checkpoint "
            f"{outputs[0].checkpoint_id}; {_BUG}"
        )
    return outputs


def _carry_unrestored(output: WriterStageOutput, restore: Restore | None) -> WriterStageOutput:
    """Add the restored states no writer took (subtasks the micro-batch lacks) to its own.

    The second half of the rule by subtask id (`WriterStates.with_carried`): subtask
    ``i`` of an older checkpoint is recorded again under ``i mod n``, and restored by
    that subtask at the next checkpoint.
    """
    states = output.states
    if states is None or restore is None or restore.states is None:
        return output
    merged = states.with_carried(restore.states)
    if merged is states:
        return output
    logger.info(
        "%d writer state(s) of subtasks the micro-batch does not have (%d partitions) are "
        "carried to the next checkpoint",
        merged.count - states.count,
        states.number_of_subtasks,
    )
    return attrs.evolve(output, states=merged)
