"""What both data-source doors (batch and stream) share, used openly by each.

The batch door (``datasource``) and the streaming door (``datasource_stream``)
check a sink's pre-write topology the same way, turn their writer tasks' rows into
``apply()``'s writer-stage output the same way, fence their commit against a run
that took the sink id meanwhile the same way, report a writer task's failure the
same way (recorded for the driver, raised short), and hand what the planner
recovered to the commit's result the same way; the rules live here once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStateStore, Recovery, WriterStageOutput
from sinkv2_spark._doors.datasource_topologies import PlannedInput
from sinkv2_spark._doors.results import readable_error, record_error, writer_error
from sinkv2_spark._engine.failure import WriterFailure, decode_failure
from sinkv2_spark._engine.writer_stage import split_by_subtask
from sinkv2_spark._engine.writer_task import WRITER_OUTPUT_SCHEMA, WriterTask

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "HasRows",
    "check_pre_write",
    "merged_recovery",
    "run_writer_task",
    "writer_stage_output",
]


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
