"""What both data-source doors (batch and stream) share, used openly by each.

The batch door (``datasource``) and the streaming door (``datasource_stream``)
check a sink's pre-write topology the same way, turn their writer tasks' rows into
``apply()``'s writer-stage output the same way, fence their commit against a run
that took the sink id meanwhile the same way, report a writer task's failure the
same way (recorded for the driver, raised short), hand what the planner
recovered to the commit's result the same way, and refuse a bad option the same
way (`refusing_briefly`); the rules live here once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, ParamSpec, Protocol, TypeVar

import pyarrow as pa

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError
from sinkv2.runtime import CommitStateStore, Recovery, WriterStageOutput
from sinkv2_spark._doors.datasource_topologies import PlannedInput
from sinkv2_spark._doors.results import readable_error, record_error, writer_error
from sinkv2_spark._engine.failure import WriterFailure, decode_failure
from sinkv2_spark._engine.writer_stage import split_by_subtask
from sinkv2_spark._engine.writer_task import WRITER_OUTPUT_SCHEMA, WriterTask

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "REFUSALS",
    "HasRows",
    "check_pre_write",
    "merged_recovery",
    "refusing_briefly",
    "run_writer_task",
    "writer_stage_output",
]

P = ParamSpec("P")
R = TypeVar("R")

REFUSALS: Final = (SinkConfigurationError, SinkDefinitionError)
"""What a door raises for what the user asked (options, sink, schema): its message says it all."""


def refusing_briefly(method: Callable[P, R]) -> Callable[P, R]:
    """``method`` (a data source's), raising a refusal without the frames it came through.

    Spark puts a planner worker's exception into its ``AnalysisException`` (or
    ``StreamingQueryException``) as a formatted traceback. A refusal's message names
    the option, what came and what to do, so sinkv2's frames above it only push it
    down the screen: raised again here, Spark shows this one frame, then the message.
    Other errors (a sink's own failure, a server that does not answer) keep theirs.
    """

    @functools.wraps(method)
    def door(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except REFUSALS as refused:
            refusal = refused  # raised below, outside this handler: its own chain stays
        raise refusal.with_traceback(None)

    return door


class HasRows(Protocol):
    """A writer task's message: its metadata rows, or ``None`` if it wrote nothing."""

    @property
    def rows(self) -> pa.RecordBatch | None: ...


def check_pre_write(sink: Any, capabilities: SinkCapabilities, schema: StructType) -> None:
    """Run the pre-write topology on a stand-in; it must hand the input back unchanged.

    Raises:
        SinkConfigurationError: The topology uses the DataFrame beyond its schema
            (a repartition, a filter...), or returns something else.
    """
    planned = PlannedInput(schema, capabilities.sink_type)
    result = sink.add_pre_write_topology(planned)
    if result is not planned:
        raise SinkConfigurationError(
            f"{capabilities.sink_type}'s pre-write topology returned a new DataFrame "
            f"({type(result).__name__}); a Spark data source gets the rows as Spark "
            "partitioned them and cannot transform them first. Run this sink with "
            "SinkTopologyTranslator().apply(df, sink, sink_id=...)"
        )


def writer_stage_output(
    outputs: Sequence[HasRows], *, with_states: bool = False
) -> WriterStageOutput:
    """The writers' outputs as ``apply()``'s writer stage returns them."""
    number_of_subtasks = len(outputs)
    batches = [o.rows for o in outputs if o.rows is not None]
    table = pa.Table.from_batches(batches, schema=WRITER_OUTPUT_SCHEMA)
    column = table.schema.get_field_index("number_of_subtasks")
    table = table.set_column(
        column,
        WRITER_OUTPUT_SCHEMA.field(column),
        pa.array([number_of_subtasks] * table.num_rows, pa.int32()),
    )
    return split_by_subtask(table, number_of_subtasks, with_states=with_states)


def run_writer_task(
    task: WriterTask,
    batches: Iterable[pa.RecordBatch],
    store: CommitStateStore | None,
    sink_id: str,
    job_id: str,
    *,
    batch_id: int | None = None,
) -> pa.RecordBatch:
    """Run one writer task; a writer's failure is recorded, then raised short.

    ``apply()`` reads a failed task's JSON report out of Spark's exception text;
    a door's user gets Spark's exception itself. So the failure is recorded for
    the driver (``sinkv2_spark.last_result``, `SinkResultListener`) and raised as
    a `SinkWriterError` whose message starts with the user's exception type and
    message, without the report's JSON or sinkv2's frames (its traceback's last
    lines are in the message).

    Raises:
        SinkWriterError: The writer failed.
    """
    try:
        (rows,) = task(batches)
    except WriterFailure as failure:
        error = writer_error(failure, decode_failure(str(failure)))
        if store is not None:
            record_error(store, sink_id, job_id, error, batch_id=batch_id)
        raise readable_error(sink_id, job_id, error).with_traceback(None) from None
    return rows


def merged_recovery(planned: Recovery, committed: Recovery) -> Recovery:
    """What the planner's and the commit's ``open()`` finished, as one `Recovery`.

    The planner finds what dead jobs left (the commit, run moments later, rarely
    does); the commit's result reports both, as ``apply()``'s reports its one
    ``open()``.
    """
    return Recovery(
        recommitted={**planned.recommitted, **committed.recommitted},
        aborted=tuple(sorted({*planned.aborted, *committed.aborted})),
        cleaned_jobs=(
            *planned.cleaned_jobs,
            *(job for job in committed.cleaned_jobs if job not in planned.cleaned_jobs),
        ),
    )
