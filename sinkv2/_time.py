"""Processing time and timers for writers (Flink's ``ProcessingTimeService``).

Flink fires timers on the task's mailbox thread, so a writer never sees a timer
callback run concurrently with ``write``. `CooperativeProcessingTimeService` keeps
that promise in Python: timers fire only when the runtime calls
`CooperativeProcessingTimeService.fire_due_timers` between elements, on the writer's
own thread.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

import attrs

__all__ = [
    "CooperativeProcessingTimeService",
    "ProcessingTimeCallback",
    "ProcessingTimeService",
    "ScheduledTimer",
]

ProcessingTimeCallback = Callable[[int], None]
"""Called with the timer's scheduled time in ms (Flink's ``onProcessingTime(long)``)."""


class ScheduledTimer(Protocol):
    """A handle on a registered timer."""

    def cancel(self) -> bool:
        """Stop the timer from firing; ``False`` if it already fired or was cancelled."""
        ...


class ProcessingTimeService(Protocol):
    """Wall-clock time and timers, as a writer sees them."""

    def get_current_processing_time(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def register_timer(self, timestamp: int, callback: ProcessingTimeCallback) -> ScheduledTimer:
        """Call ``callback(timestamp)`` once processing time reaches ``timestamp`` (ms).

        The callback runs on the writer's thread, never concurrently with
        ``write``, ``flush`` or ``snapshot_state``.
        """
        ...


@attrs.define(eq=False)
class _Timer:
    timestamp: int
    callback: ProcessingTimeCallback
    cancelled: bool = False
    fired: bool = False

    def cancel(self) -> bool:
        if self.cancelled or self.fired:
            return False
        self.cancelled = True
        return True


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CooperativeProcessingTimeService:
    """A `ProcessingTimeService` whose timers fire when the owner asks.

    Args:
        clock: Returns the current time in ms. Defaults to the wall clock; tests pass
            a controllable clock to make time-based behaviour deterministic.
    """

    def __init__(self, clock: Callable[[], int] = _wall_clock_ms) -> None:
        self._clock = clock
        self._queue: list[tuple[int, int, _Timer]] = []
        self._sequence = itertools.count()

    def get_current_processing_time(self) -> int:
        """Milliseconds since the epoch, by this service's clock."""
        return self._clock()

    def register_timer(self, timestamp: int, callback: ProcessingTimeCallback) -> ScheduledTimer:
        """Schedule ``callback(timestamp)``; it fires in the first `fire_due_timers` at or after."""
        timer = _Timer(timestamp, callback)
        heapq.heappush(self._queue, (timestamp, next(self._sequence), timer))
        return timer

    def next_timer_timestamp(self) -> int | None:
        """When the earliest live timer is due, or ``None`` if none is registered."""
        while self._queue and self._queue[0][2].cancelled:
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    def fire_due_timers(self) -> int:
        """Fire, in time order, every timer due by now; returns how many fired.

        Timers registered by a callback for a time already reached fire in the same
        call, as they would on Flink's mailbox.
        """
        fired = 0
        now = self._clock()
        while self._queue and self._queue[0][0] <= now:
            _, _, timer = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            timer.fired = True
            timer.callback(timer.timestamp)
            fired += 1
        return fired
