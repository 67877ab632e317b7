"""Sink writers: what runs once per subtask and turns elements into output.

Call order for one subtask, as Flink's ``SinkWriterOperator`` makes it::

    create_writer(ctx) | restore_writer(ctx, states)
    ( write(element, ctx) | write_watermark(wm) )*
    at each checkpoint N:   flush(False) -> prepare_commit() -> snapshot_state(N)
    at end of input:        flush(True)  -> prepare_commit() -> snapshot_state(END_OF_INPUT)
    close()                 always, also after a failure

On Spark a batch task is a bounded input, so every task ends with the end-of-input
sequence. A writer may be abandoned at any point (the task fails, another attempt
wins); whatever it staged must then stay invisible until a committer makes it so.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, TypeVar

from sinkv2._watermark import Watermark

__all__ = [
    "CommittingSinkWriter",
    "SinkWriter",
    "SinkWriterContext",
    "StatefulSinkWriter",
]

InputT_contra = TypeVar("InputT_contra", contravariant=True)
CommT_co = TypeVar("CommT_co", covariant=True)
WriterStateT = TypeVar("WriterStateT")


class SinkWriter(Protocol[InputT_contra]):
    """Writes the elements of one subtask.

    Required: `write`, `flush`, `close`. Optional: `write_watermark` (default: ignore).

    A writer is used from one thread at a time and is never shared between subtasks.
    Implement it by subclassing (``class MyWriter(SinkWriter[dict]): ...``), which
    also brings the optional methods' defaults.
    """

    class Context(Protocol):
        """Per-element facts handed to `SinkWriter.write` (Flink's ``SinkWriter.Context``)."""

        def current_watermark(self) -> int:
            """The current event-time watermark in ms, ``-2**63`` before the first one."""
            ...

        def timestamp(self) -> int | None:
            """The element's event time in ms, or ``None`` if it has none."""
            ...

    def write(self, element: InputT_contra, context: SinkWriter.Context) -> None:
        """Add one element. It may be buffered until `flush`.

        Raises:
            Exception: Any error fails this attempt of the subtask; nothing the writer
                staged may become visible because of it.
        """

    def flush(self, end_of_input: bool) -> None:
        """Push buffered elements out before a checkpoint or at the end of input.

        Args:
            end_of_input: ``True`` once, after the last element: everything must be
                written. ``False`` at a checkpoint: a stateless writer must write
                everything; a stateful writer may keep buffered elements in its
                state instead (the async sink does).
        """

    def write_watermark(self, watermark: Watermark) -> None:
        """Observe an event-time watermark. Optional; ignored by default."""
        return

    def close(self) -> None:
        """Release resources.

        Called exactly once, also after failures; must not raise because an earlier
        call failed.
        """


class CommittingSinkWriter(SinkWriter[InputT_contra], Protocol[InputT_contra, CommT_co]):
    """A writer whose output becomes visible only when a committer commits it.

    Required by sinks that implement `SupportsCommitter`.
    """

    def prepare_commit(self) -> Collection[CommT_co]:
        """Hand over everything written since the last call, as committables.

        Called after `flush` and before `snapshot_state`, once per checkpoint and once
        at the end of input. Committables must describe staged output completely: the
        committer may run in another process, after this writer is gone, and may run
        more than once for the same committable.
        """
        ...


class StatefulSinkWriter(SinkWriter[InputT_contra], Protocol[InputT_contra, WriterStateT]):
    """A writer that keeps state across checkpoints (buffered elements, open files).

    Required by sinks that implement `SupportsWriterState`.
    """

    def snapshot_state(self, checkpoint_id: int) -> list[WriterStateT]:
        """The state to restore from if the job restarts from checkpoint ``checkpoint_id``.

        Called after `prepare_commit` (for committing writers). The list is stored with
        the sink's writer-state serializer and handed to ``restore_writer`` later,
        possibly redistributed to a different number of subtasks.
        """
        ...


SinkWriterContext = SinkWriter.Context
"""The same as `SinkWriter.Context`."""
