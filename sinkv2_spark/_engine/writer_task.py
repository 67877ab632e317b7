"""The writer stage: what runs inside each Spark task, one task per subtask.

The driver ships a `WriterTask` to ``DataFrame.mapInArrow``. Each task creates the
sink's writer (or, in a stream, restores it from the previous checkpoint's states),
feeds it its partition, and ends it as Flink's operator does:

- a batch run is a bounded input: ``flush(True)`` -> ``prepare_commit()`` ->
  ``snapshot_state(END_OF_INPUT)``;
- a micro-batch is a checkpoint: ``flush(False)`` -> ``prepare_commit()`` ->
  ``snapshot_state(checkpoint_id)``, and the states restore the next one's writers.

Then it closes the writer and returns metadata only: serialized committables,
serialized states, and one row describing the subtask. Rows never leave the task.

Spark keeps the output of the first successful attempt of each task; every other
attempt's side effects stay behind in staging named by its attempt token.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
import msgpack
import pyarrow as pa

from sinkv2 import (
    END_OF_INPUT,
    SinkCapabilities,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    BasicWriterInitContext,
    CooperativeProcessingTimeService,
    SubtaskSnapshot,
    WriterSubtask,
)
from sinkv2_spark._engine.failure import WriterFailure, encode_failure

__all__ = [
    "KIND_COMMITTABLE",
    "KIND_STATE",
    "KIND_SUBTASK",
    "WRITER_OUTPUT_SCHEMA",
    "UnknownParallelismContext",
    "WriterTask",
    "attempt_token",
]

KIND_COMMITTABLE: Final = "committable"
KIND_STATE: Final = "state"
KIND_SUBTASK: Final = "subtask"

WRITER_OUTPUT_SCHEMA: Final = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("subtask_id", pa.int32(), nullable=False),
        pa.field("number_of_subtasks", pa.int32(), nullable=False),
        pa.field("attempt_token", pa.string(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),
        pa.field("serializer_version", pa.int32()),
        pa.field("payload", pa.binary()),
        pa.field("records", pa.int64()),
        pa.field("metrics", pa.binary()),
    ]
)
"""What each writer task returns: committable, state and subtask rows."""


def attempt_token(job_id: str, subtask_id: int, task_attempt_id: int) -> str:
    """The staging name of one task attempt: unique per job, subtask and Spark attempt."""
    return f"{job_id}-{subtask_id:05d}-{task_attempt_id}"


def _numeric(values: Mapping[str, object]) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


_DATA_SOURCE_PARALLELISM: Final = (
    "get_number_of_parallel_subtasks() is not known to writers started by Spark's "
    "data source API (df.write.format('sinkv2')): Spark does not tell a Python data "
    "source's writer tasks how many partitions there are. Run this sink with "
    "SinkTopologyTranslator().apply(df, sink, ...), which knows it, or do not depend "
    "on it in the writer"
)


@attrs.frozen(kw_only=True)
class UnknownParallelismContext(BasicWriterInitContext):
    """A writer's context when Spark does not say how many writers there are.

    Spark's Python data source API starts each writer task without the number of
    partitions (``TaskContext`` has no such field), so the ``sinkv2`` data source
    cannot know it before its commit; nor can ``apply()`` on Spark Connect. Asking
    for it fails clearly instead of returning a wrong number.

    Attributes:
        unknown_because: The error's message: why, and what to do.
    """

    unknown_because: str = _DATA_SOURCE_PARALLELISM

    def get_number_of_parallel_subtasks(self) -> int:
        """Not known here.

        Raises:
            SinkConfigurationError: Always; the message points to ``apply()``.
        """
        raise SinkConfigurationError(self.unknown_because)


@attrs.frozen
class WriterTask:
    """The function ``mapInArrow`` runs in each task (shipped with cloudpickle).

    Attributes:
        sink: The sink; its writer is created inside the task.
        capabilities: What ``inspect_sink`` found on the driver.
        job_id: This run's id; part of every attempt token.
        checkpoint_id: The checkpoint the committables belong to.
        number_of_subtasks: Partitions of the writer stage; ``None`` when Spark does
            not tell writers (its Python data source API, or Spark Connect): their
            context's ``get_number_of_parallel_subtasks()`` then raises, and the rows
            carry 0 for the driver to fill in.
        emits_write_results: The sink has a pre-commit topology, so writers emit
            write results (serialized with the write-result serializer).
        input_schema: The Arrow schema of the rows, for ``get_input_schema()``.
        checkpoint: ``True`` for a stream's checkpoint (``flush(False)``,
            ``snapshot_state(checkpoint_id)``), ``False`` for a bounded batch.
        restored_checkpoint_id: The checkpoint the writers resume from, if any.
        restored_states: Per subtask, the framed writer states it restores (already
            redistributed); ``None`` to create writers with ``create_writer``.
        column_names: The input's column names when the stage renamed its columns
            by position for ``mapInArrow`` (names with dots or backticks); each
            batch gets them back before a writer sees it. ``None``: as they come.
        unknown_parallelism: Without ``number_of_subtasks``, the message writers
            get when they ask for it; ``None``: the data source API's.
    """

    sink: Any
    capabilities: SinkCapabilities
    job_id: str
    checkpoint_id: int
    number_of_subtasks: int | None
    emits_write_results: bool
    input_schema: pa.Schema | None = None
    checkpoint: bool = False
    restored_checkpoint_id: int | None = None
    restored_states: tuple[tuple[bytes, ...], ...] | None = None
    column_names: tuple[str, ...] | None = None
    unknown_parallelism: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run one subtask's writer over its partition and yield its metadata rows."""
        from pyspark import TaskContext  # noqa: PLC0415  # only exists inside a task

        task = TaskContext.get()
        if task is None:
            raise RuntimeError("WriterTask must run inside a Spark task")
        subtask_id = task.partitionId()
        token = attempt_token(self.job_id, subtask_id, task.taskAttemptId())
        timers = CooperativeProcessingTimeService()
        arguments: dict[str, Any] = {
            "subtask_id": subtask_id,
            "number_of_parallel_subtasks": self.number_of_subtasks or subtask_id + 1,
            "attempt_number": task.attemptNumber(),
            "job_id": self.job_id,
            "attempt_token": token,
            "processing_time_service": timers,
            "input_schema": self.input_schema,
            "restored_checkpoint_id": self.restored_checkpoint_id,
        }
        context: BasicWriterInitContext
        if self.number_of_subtasks is not None:
            context = BasicWriterInitContext(**arguments)
        elif self.unknown_parallelism is not None:
            context = UnknownParallelismContext(
                **arguments, unknown_because=self.unknown_parallelism
            )
        else:
            context = UnknownParallelismContext(**arguments)
        run = _WriterRun(self, context)
        subtask = WriterSubtask(
            self.sink,
            self.capabilities,
            context,
            emits_write_results=self.emits_write_results,
            timers=timers,
            describe=run.fail,
        )
        restored = None
        if self.restored_states is not None and self.capabilities.writer_state:
            restored = self.restored_states[subtask_id]
        names = self.column_names
        if names is not None:
            batches = (batch.rename_columns(names) for batch in batches)
        snapshot_id = END_OF_INPUT if not self.checkpoint else self.checkpoint_id
        snapshot = subtask.run(restored, lambda s: run.feed(s, batches), snapshot_id)
        yield self._output(context, token, snapshot, subtask.records)

    def _output(
        self,
        context: BasicWriterInitContext,
        token: str,
        snapshot: SubtaskSnapshot,
        records: int,
    ) -> pa.RecordBatch:
        subtask_id = context.get_subtask_id()
        rows: list[dict[str, Any]] = [
            self._row(KIND_COMMITTABLE, subtask_id, token, i, snapshot.output_version, payload)
            for i, payload in enumerate(snapshot.outputs)
        ]
        rows += [
            self._row(KIND_STATE, subtask_id, token, i, snapshot.state_version, payload)
            for i, payload in enumerate(snapshot.states)
        ]
        summary = self._row(KIND_SUBTASK, subtask_id, token, len(snapshot.outputs), None, None)
        summary["records"] = records
        metrics = context.metric_group()
        summary["metrics"] = msgpack.packb(
            # Only measured counters: one no writer changed is "not measured", not 0.
            {"counters": dict(metrics.touched_counts()), "gauges": _numeric(metrics.gauge_values())}
        )
        rows.append(summary)
        return pa.RecordBatch.from_pylist(rows, schema=WRITER_OUTPUT_SCHEMA)

    def _row(  # noqa: PLR0917  # one positional per column, read in order
        self,
        kind: str,
        subtask_id: int,
        token: str,
        index: int,
        version: int | None,
        payload: bytes | None,
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "checkpoint_id": self.checkpoint_id,
            "subtask_id": subtask_id,
            "number_of_subtasks": self.number_of_subtasks or 0,
            "attempt_token": token,
            "index": index,
            "serializer_version": version,
            "payload": payload,
            "records": None,
            "metrics": None,
        }


@attrs.define
class _WriterRun:
    """What is Spark's in one writer's life inside one task attempt.

    The steps themselves are `sinkv2.runtime.WriterSubtask`'s; here are Spark's
    partition (Arrow batches, turned into Python rows for a row writer) and its
    failure report (`WriterFailure`, decoded on the driver).
    """

    task: WriterTask
    context: BasicWriterInitContext

    def fail(self, what: str, error: BaseException, position: int | None = None) -> WriterFailure:
        """The failure report of step ``what`` (at element ``position``, if known)."""
        where = f" at element {position}" if position is not None else ""
        subtask = self.context.get_subtask_id()
        return encode_failure(
            subtask_id=subtask,
            position=position,
            message=(
                f"writer of {self.task.capabilities.sink_type} failed in {what}{where} of "
                f"subtask {subtask} (attempt {self.context.get_attempt_number()}): "
                f"{type(error).__name__}: {error}"
            ),
            cause=error,
        )

    def _unconvertible(
        self, batch: pa.RecordBatch, error: Exception, records: int
    ) -> WriterFailure:
        """A value that has no Python form for ``write`` (a date past 9999, say), named.

        Spark's dates and timestamps reach beyond Python's years 1..9999 (in UTC, a
        timestamp of year 1 east of UTC is 1 BC); ``write`` gets Python values.
        """
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            for index in range(len(column)):
                try:
                    column[index].as_py()
                except (OverflowError, ValueError) as found:
                    position = records + index
                    problem = ValueError(
                        f"column {name!r} ({column.type}) of element {position} has no Python "
                        f"value ({found}): dates and timestamps must lie in years 1..9999 (in "
                        "UTC for zoned ones) to reach write(). Implement write_arrow_batch to "
                        "take Arrow batches instead, or cast the column (to string or long)"
                    )
                    return self.fail("converting the input to Python values", problem, position)
        return self.fail("converting the input to Python values", error)

    def feed(self, subtask: WriterSubtask, batches: Iterable[pa.RecordBatch]) -> None:
        """The partition: whole batches to an Arrow writer, else its rows as dicts."""
        if subtask.takes_arrow:
            for batch in batches:
                subtask.write_arrow_batch(batch)
            return
        for batch in batches:
            # Elements are dicts of column name -> Python value (Arrow's to_pylist):
            # built in C, and what a Flink user expects of a row-typed record.
            try:
                elements = batch.to_pylist()
            except (OverflowError, ValueError) as error:
                raise self._unconvertible(batch, error, subtask.records) from error
            subtask.write(elements)
