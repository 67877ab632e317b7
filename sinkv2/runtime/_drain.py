"""A draining stop: send what a stopped stream's writer states still hold.

An async sink's writer state is its buffered requests. When a stream stops, the
last checkpoint's states hold the requests no checkpoint sent; the next run of the
stream sends them. A draining stop sends them now instead: one writer per recorded
subtask is restored (`WriterSubtask`) and ends its input (``flush(True)`` ->
``snapshot_state(END_OF_INPUT)`` -> ``close()``), as Flink's writer does at the
end of a bounded stream. ``sinkv2_spark`` runs it on the driver; the kit's local
stream runs it in process. `sinkv2.runtime.CheckpointRunner.drain` records what is
left.
"""

from __future__ import annotations

from typing import Any

from sinkv2._capabilities import SinkCapabilities
from sinkv2._context import BasicWriterInitContext
from sinkv2._messages import END_OF_INPUT
from sinkv2.runtime._seam import Restore
from sinkv2.runtime._subtask import WriterSubtask
from sinkv2.runtime._writer_states import SubtaskStates, WriterStates

__all__ = ["drain_writer_states"]


def _no_feed(subtask: WriterSubtask) -> None:
    """A drained writer takes no new input."""


def drain_writer_states(
    sink: Any,
    capabilities: SinkCapabilities,
    job_id: str,
    restore: Restore,
) -> WriterStates | None:
    """Restore each subtask's writer from ``restore``, end its input, keep what is left.

    Args:
        sink: The sink whose writers are drained.
        capabilities: What ``inspect_sink`` found.
        job_id: The draining job; attempt tokens are ``{job_id}-drain-{subtask:05d}``.
        restore: The newest checkpoint's writer states.

    Returns:
        The states the writers still hold after ``flush(True)`` (what could not be
        sent), or ``None`` if none do.
    """
    states = restore.states
    if states is None or not capabilities.writer_state:
        return None
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
            restored_checkpoint_id=restore.checkpoint_id,
        )
        writer = WriterSubtask(sink, capabilities, context)
        remaining = writer.run(subtask.states, _no_feed, END_OF_INPUT).states
        if remaining:
            left.append(
                SubtaskStates(subtask_id=subtask.subtask_id, attempt_token=token, states=remaining)
            )
    if not left:
        return None
    return WriterStates(
        state_name=states.state_name,
        number_of_subtasks=states.number_of_subtasks,
        subtasks=tuple(left),
    )
