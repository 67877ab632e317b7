"""The reader of sequence splits: emits each split's numbers as Arrow batches, in order.

Flink's ``IteratorSourceReader``: it asks for a split at start and whenever it
runs out, reads one split at a time, and snapshots the current split at its
position plus the splits it has not started. Numbers go out as Arrow batches of at
most ``batch_size`` rows, made by a function of the numbers (the sequence itself,
or a user's generator), at most at ``rate`` numbers per second if one is set (for
the splits that end, only when ``pace_ended_splits``: a micro-batch engine paces the
ended slices it cuts from endless splits itself).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

from sinkv2.source._boundedness import InputStatus
from sinkv2.source._context import SourceReaderContext
from sinkv2.source._event import SourceEvent
from sinkv2.source._output import ReaderOutput, SourceOutput
from sinkv2.source.lib._sequence_splits import NumberSequenceSplit

if TYPE_CHECKING:
    import pyarrow

__all__ = ["SequenceReader"]

BatchOf = Callable[[range], "pyarrow.RecordBatch"]


@final
class SequenceReader:
    """Reads number sequence splits one after another; see the module docstring."""

    def __init__(
        self,
        context: SourceReaderContext,
        batch_of: BatchOf,
        *,
        batch_size: int,
        rate: float | None = None,
        pace_ended_splits: bool = True,
    ) -> None:
        self._context = context
        self._batch_of = batch_of
        self._batch_size = batch_size
        self._rate = rate
        self._pace_ended_splits = pace_ended_splits
        self._remaining: collections.deque[NumberSequenceSplit] = collections.deque()
        self._current: NumberSequenceSplit | None = None
        self._output: SourceOutput[Any] | None = None
        self._no_more_splits = False
        self._requested = False
        self._emitted = 0
        self._started_at = 0.0
        self._waiting: concurrent.futures.Future[None] | None = None
        self._throttled: concurrent.futures.Future[None] | None = None
        self._timer: threading.Timer | None = None
        self._records_in = context.metric_group().counter("numRecordsIn")

    def start(self) -> None:
        """Ask for a first split unless some were restored."""
        self._started_at = time.monotonic()
        if not self._remaining:
            self._request()

    def _request(self) -> None:
        if not self._requested:
            self._requested = True
            self._context.send_split_request()

    def poll_next(self, output: ReaderOutput[Any]) -> InputStatus:
        """Emit up to one batch of the current split."""
        if self._current is None or self._current.is_finished():
            if self._current is not None:
                output.release_output_for_split(self._current.id)
                self._current = None
            if not self._remaining:
                if self._no_more_splits:
                    return InputStatus.END_OF_INPUT
                self._request()
                return InputStatus.NOTHING_AVAILABLE
            self._current = self._remaining.popleft()
            self._output = output.create_output_for_split(self._current.id)
        split = self._current
        paced = split.to is None or self._pace_ended_splits
        count = self._allowed() if paced else self._batch_size
        if count == 0:
            return InputStatus.NOTHING_AVAILABLE
        if split.to is not None:
            count = min(count, (split.to - split.current) // split.step + 1)
        numbers = range(split.current, split.current + count * split.step, split.step)
        assert self._output is not None  # set with the current split
        self._output.collect_batch(self._batch_of(numbers))
        self._current = split.advanced(count)
        self._emitted += count
        self._records_in.inc(count)
        return InputStatus.MORE_AVAILABLE

    def _allowed(self) -> int:
        """How many numbers the rate allows now; when none, a timer completes `is_available`."""
        if self._rate is None:
            return self._batch_size
        elapsed = time.monotonic() - self._started_at
        due = int(elapsed * self._rate) + 1 - self._emitted
        if due > 0:
            return min(due, self._batch_size)
        self._throttled = concurrent.futures.Future()
        wait = (self._emitted - elapsed * self._rate) / self._rate
        self._timer = threading.Timer(max(wait, 0.0), _complete, (self._throttled,))
        self._timer.daemon = True
        self._timer.start()
        return 0

    def is_available(self) -> concurrent.futures.Future[None]:
        """Done while there is something to read; else when a split, the end or a permit comes."""
        if self._throttled is not None and not self._throttled.done():
            return self._throttled
        current = self._current is not None and not self._current.is_finished()
        if current or self._remaining or self._no_more_splits:
            return _done()
        if self._waiting is None or self._waiting.done():
            self._waiting = concurrent.futures.Future()
        return self._waiting

    def add_splits(self, splits: list[NumberSequenceSplit]) -> None:
        """Queue ``splits`` behind the current one."""
        self._remaining.extend(splits)
        self._requested = False
        self._wake()

    def notify_no_more_splits(self) -> None:
        """End once the queued splits are read."""
        self._no_more_splits = True
        self._wake()

    def _wake(self) -> None:
        if self._waiting is not None and not self._waiting.done():
            _complete(self._waiting)

    def snapshot_state(self, checkpoint_id: int) -> list[NumberSequenceSplit]:
        """The current split at its position, then the splits not started."""
        current = [] if self._current is None or self._current.is_finished() else [self._current]
        return current + list(self._remaining)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing to acknowledge."""

    def handle_source_events(self, source_event: SourceEvent) -> None:
        """No events are expected."""

    def close(self) -> None:
        """Stop a pending rate timer."""
        if self._timer is not None:
            self._timer.cancel()


def _done() -> concurrent.futures.Future[None]:
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    future.set_result(None)
    return future


def _complete(future: concurrent.futures.Future[None]) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # done by another thread
        future.set_result(None)
