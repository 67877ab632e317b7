"""The source reader: reads the splits it is given (Flink's ``SourceReader``).

Call order, as Flink's ``SourceOperator`` makes it::

    create_reader(ctx)
    add_splits(restored splits)          only when restoring, and before start()
    start()
    ( poll_next(output) | is_available() | add_splits(splits) | notify_no_more_splits()
      | snapshot_state(cp) | notify_checkpoint_complete(cp) | handle_source_events(e) )*
    close()                              always, also after a failure

All of these run in one thread (the task's); only the future `is_available`
returns may be completed from another thread.
"""

from __future__ import annotations

import concurrent.futures
from typing import Protocol, TypeVar

from sinkv2.source._boundedness import InputStatus
from sinkv2.source._event import SourceEvent
from sinkv2.source._output import ReaderOutput

__all__ = ["SourceReader"]

T_co = TypeVar("T_co", covariant=True)
SplitT = TypeVar("SplitT")


class SourceReader(Protocol[T_co, SplitT]):
    """Reads records from the splits assigned to one subtask.

    Required: `start`, `poll_next`, `is_available`, `add_splits`,
    `notify_no_more_splits`, `snapshot_state`, `close`. Optional:
    `notify_checkpoint_complete`, `handle_source_events` (defaults: nothing).

    Most readers extend `sinkv2.source.reader.SingleThreadMultiplexSourceReaderBase`
    and implement a `SplitReader` instead of these methods.
    """

    def start(self) -> None:
        """Begin reading; e.g. send the first split request if no split was restored."""
        ...

    def poll_next(self, output: ReaderOutput[T_co]) -> InputStatus:
        """Emit what is ready into ``output`` without blocking, and say what comes next.

        ``END_OF_INPUT`` only after `notify_no_more_splits` and once every split is
        finished; never emit after returning it.
        """
        ...

    def is_available(self) -> concurrent.futures.Future[None]:
        """A future that completes when `poll_next` has something again.

        A completed future when data is ready now.
        """
        ...

    def add_splits(self, splits: list[SplitT]) -> None:
        """Take new splits (from the enumerator, or restored from a checkpoint)."""
        ...

    def notify_no_more_splits(self) -> None:
        """No more splits will come: end the input once the current ones are done."""
        ...

    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """Every unfinished split this reader owns, each with the position it reached.

        Contract: exactly the splits given to this reader (by `add_splits`) that are
        not finished, each once, each with the position after the last record emitted
        by `poll_next` so far. Finished splits are left out; nothing else goes in.
        """
        ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable everywhere (default: nothing)."""
        return

    def handle_source_events(self, source_event: SourceEvent) -> None:
        """The enumerator sent ``source_event`` (default: ignore it)."""
        return

    def close(self) -> None:
        """Release resources (stop fetcher threads); called once, also after a failure."""
        ...
