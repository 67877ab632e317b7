"""A draining stop: send what a stopped stream's writer states still hold, on the driver.

An async sink's writer state is its buffered requests. When a query stops, the last
checkpoint's states hold the requests no micro-batch sent; the next run of the query
sends them. A draining stop sends them now instead: one writer per recorded subtask
is restored on the driver and ends its input (``flush(True)``), as Flink's writer
does at the end of a bounded stream.
"""

from __future__ import annotations

from typing import Any

from sinkv2 import END_OF_INPUT, SimpleVersionedSerialization, SinkCapabilities
from sinkv2.runtime import (
    BasicWriterInitContext,
    CooperativeProcessingTimeService,
    Restore,
    SubtaskStates,
    WriterStates,
)

__all__ = ["drain_on_driver"]


def drain_on_driver(
    sink: Any, capabilities: SinkCapabilities, job_id: str, restore: Restore
) -> WriterStates | None:
    """Restore each subtask's writer from ``restore``, end its input, keep what is left.

    Returns:
        The states the writers still hold after ``flush(True)`` (what could not be
        sent), or ``None`` if none do.
    """
    states = restore.states
    if states is None:
        return None
    serializer = sink.get_writer_state_serializer()
    left: list[SubtaskStates] = []
    for subtask in states.subtasks:
        if not subtask.states:
            continue
        token = f"{job_id}-drain-{subtask.subtask_id:05d}"
        context = BasicWriterInitContext(
            subtask_id=subtask.subtask_id,
            number_of_parallel_subtasks=states.number_of_subtasks,
            job_id=job_id,
            attempt_token=token,
            processing_time_service=CooperativeProcessingTimeService(),
            restored_checkpoint_id=restore.checkpoint_id,
        )
        recovered = [
            SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
            for framed in subtask.states
        ]
        writer = sink.restore_writer(context, recovered)
        capabilities.check_writer(writer)
        try:
            writer.flush(True)
            remaining = list(writer.snapshot_state(END_OF_INPUT))
        finally:
            writer.close()
        if remaining:
            left.append(
                SubtaskStates(
                    subtask_id=subtask.subtask_id,
                    attempt_token=token,
                    states=tuple(
                        SimpleVersionedSerialization.write_version_and_serialize(serializer, s)
                        for s in remaining
                    ),
                )
            )
    if not left:
        return None
    return WriterStates(
        state_name=states.state_name,
        number_of_subtasks=states.number_of_subtasks,
        subtasks=tuple(left),
    )
