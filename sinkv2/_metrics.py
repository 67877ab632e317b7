"""Metric groups handed to writers and committers, with Flink's metric names.

Writers and committers receive a metric group through their init context. The
protocols mirror Flink's (`SinkWriterMetricGroup`, `SinkCommitterMetricGroup`);
the in-memory implementations are what the runtime hands out and reads back:
counters are summed over subtasks into a job's result, gauges reported at their
largest. A counter nobody called ``inc``/``dec`` on is *not measured*, which is not
the same as measured at 0: Flink's counters exist from the start, so `touched_counts`
tells the two apart and the runtime ships only measured counters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Final, Protocol, TypeVar

__all__ = [
    "ALREADY_COMMITTED_COMMITTABLES",
    "CURRENT_SEND_TIME",
    "FAILED_COMMITTABLES",
    "NUM_BYTES_SEND",
    "NUM_RECORDS_SEND",
    "NUM_RECORDS_SEND_ERRORS",
    "PENDING_COMMITTABLES",
    "RETRIED_COMMITTABLES",
    "SUCCESSFUL_COMMITTABLES",
    "TOTAL_COMMITTABLES",
    "Counter",
    "Gauge",
    "InMemoryMetricGroup",
    "InMemorySinkCommitterMetricGroup",
    "InMemorySinkWriterMetricGroup",
    "MetricGroup",
    "SimpleCounter",
    "SinkCommitterMetricGroup",
    "SinkWriterMetricGroup",
]

T_co = TypeVar("T_co", covariant=True)

# Flink's MetricNames, kept verbatim so dashboards read the same.
NUM_RECORDS_SEND: Final = "numRecordsSend"
NUM_BYTES_SEND: Final = "numBytesSend"
NUM_RECORDS_SEND_ERRORS: Final = "numRecordsSendErrors"
CURRENT_SEND_TIME: Final = "currentSendTime"
TOTAL_COMMITTABLES: Final = "totalCommittables"
SUCCESSFUL_COMMITTABLES: Final = "successfulCommittables"
ALREADY_COMMITTED_COMMITTABLES: Final = "alreadyCommittedCommittables"
FAILED_COMMITTABLES: Final = "failedCommittables"
RETRIED_COMMITTABLES: Final = "retriedCommittables"
PENDING_COMMITTABLES: Final = "pendingCommittables"


class Counter(Protocol):
    """A monotonic-by-convention count (Flink's ``Counter``)."""

    def inc(self, n: int = 1) -> None:
        """Add ``n``."""

    def dec(self, n: int = 1) -> None:
        """Subtract ``n``."""

    def get_count(self) -> int:
        """The current count."""
        ...


class Gauge(Protocol[T_co]):
    """A value read on demand (Flink's ``Gauge``)."""

    def get_value(self) -> T_co:
        """The current value."""
        ...


class MetricGroup(Protocol):
    """A named scope of metrics."""

    def counter(self, name: str) -> Counter:
        """The counter called ``name`` in this group, created on first use."""
        ...

    def gauge(self, name: str, gauge: Gauge[object]) -> Gauge[object]:
        """Register ``gauge`` under ``name``, replacing any earlier one; returns it."""
        ...


class SinkWriterMetricGroup(MetricGroup, Protocol):
    """The metrics a sink writer reports (Flink's ``SinkWriterMetricGroup``)."""

    def get_num_records_send_counter(self) -> Counter:
        """Records the writer sent to the destination (``numRecordsSend``)."""
        ...

    def get_num_bytes_send_counter(self) -> Counter:
        """Bytes the writer sent to the destination (``numBytesSend``)."""
        ...

    def get_num_records_send_errors_counter(self) -> Counter:
        """Records the destination rejected (``numRecordsSendErrors``)."""
        ...

    def set_current_send_time_gauge(self, gauge: Gauge[int]) -> None:
        """Register the time in ms the last send took (``currentSendTime``)."""


class SinkCommitterMetricGroup(MetricGroup, Protocol):
    """The metrics of a committer (Flink's ``SinkCommitterMetricGroup``)."""

    def get_num_committables_total_counter(self) -> Counter:
        """Committables received (``totalCommittables``)."""
        ...

    def get_num_committables_success_counter(self) -> Counter:
        """Committables committed by this run (``successfulCommittables``)."""
        ...

    def get_num_committables_already_committed_counter(self) -> Counter:
        """Committables found committed already (``alreadyCommittedCommittables``)."""
        ...

    def get_num_committables_failure_counter(self) -> Counter:
        """Committables that failed (``failedCommittables``)."""
        ...

    def get_num_committables_retry_counter(self) -> Counter:
        """Retries asked for (``retriedCommittables``)."""
        ...

    def set_current_pending_committables_gauge(self, gauge: Gauge[int]) -> None:
        """Register the number of committables not yet final (``pendingCommittables``)."""


class SimpleCounter:
    """A thread-safe in-memory `Counter` that knows whether it was ever changed."""

    __slots__ = ("_count", "_lock", "_touched")

    def __init__(self) -> None:
        self._count = 0
        self._touched = False
        self._lock = threading.Lock()

    def inc(self, n: int = 1) -> None:
        """Add ``n``."""
        with self._lock:
            self._count += n
            self._touched = True

    def dec(self, n: int = 1) -> None:
        """Subtract ``n``."""
        with self._lock:
            self._count -= n
            self._touched = True

    @property
    def touched(self) -> bool:
        """Whether `inc` or `dec` was called at least once (even with 0): a measurement."""
        return self._touched

    def get_count(self) -> int:
        """The current count."""
        return self._count

    def __repr__(self) -> str:
        return f"SimpleCounter({self._count})"


class _CallableGauge:
    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], object]) -> None:
        self._read = read

    def get_value(self) -> object:
        return self._read()


class InMemoryMetricGroup:
    """A `MetricGroup` that keeps its counters and gauges in memory.

    `snapshot` reads every metric at once, which is how the runtime ships a
    subtask's metrics back to the driver.
    """

    def __init__(self) -> None:
        self._counters: dict[str, SimpleCounter] = {}
        self._gauges: dict[str, Gauge[object]] = {}

    def counter(self, name: str) -> SimpleCounter:
        """The counter called ``name``, created on first use."""
        found = self._counters.get(name)
        if found is None:
            found = self._counters[name] = SimpleCounter()
        return found

    def gauge(self, name: str, gauge: Gauge[object]) -> Gauge[object]:
        """Register ``gauge`` under ``name``; returns it."""
        if not callable(getattr(gauge, "get_value", None)):
            raise TypeError(
                f"gauge {name!r} must have a get_value() method (got {gauge!r} of type "
                f"{type(gauge).__name__}); wrap a function with gauge_from(fn)"
            )
        self._gauges[name] = gauge
        return gauge

    @staticmethod
    def gauge_from(read: Callable[[], object]) -> Gauge[object]:
        """A gauge that calls ``read`` each time it is read."""
        return _CallableGauge(read)

    def counts(self) -> Mapping[str, int]:
        """Every counter's count, by metric name (counters add up across subtasks)."""
        return {name: counter.get_count() for name, counter in self._counters.items()}

    def touched_counts(self) -> Mapping[str, int]:
        """The count of every counter some code incremented or decremented, by metric name.

        Counters created but never changed (Flink's exist from the start) are left
        out: the sink did not measure them, which a 0 would hide.
        """
        return {name: c.get_count() for name, c in self._counters.items() if c.touched}

    def gauge_values(self) -> Mapping[str, object]:
        """Every gauge's current value, by metric name (gauges do not add up)."""
        return {name: gauge.get_value() for name, gauge in self._gauges.items()}

    def snapshot(self) -> Mapping[str, object]:
        """Every counter's count and every gauge's current value, by metric name."""
        return {**self.counts(), **self.gauge_values()}


class InMemorySinkWriterMetricGroup(InMemoryMetricGroup):
    """The runtime's `SinkWriterMetricGroup`; Flink's counters exist from the start at 0."""

    def __init__(self) -> None:
        super().__init__()
        for name in (NUM_RECORDS_SEND, NUM_BYTES_SEND, NUM_RECORDS_SEND_ERRORS):
            self.counter(name)

    def get_num_records_send_counter(self) -> SimpleCounter:
        """Records sent (``numRecordsSend``)."""
        return self.counter(NUM_RECORDS_SEND)

    def get_num_bytes_send_counter(self) -> SimpleCounter:
        """Bytes sent (``numBytesSend``)."""
        return self.counter(NUM_BYTES_SEND)

    def get_num_records_send_errors_counter(self) -> SimpleCounter:
        """Records rejected (``numRecordsSendErrors``)."""
        return self.counter(NUM_RECORDS_SEND_ERRORS)

    def set_current_send_time_gauge(self, gauge: Gauge[int]) -> None:
        """Register the ``currentSendTime`` gauge."""
        self.gauge(CURRENT_SEND_TIME, gauge)


class InMemorySinkCommitterMetricGroup(InMemoryMetricGroup):
    """The runtime's `SinkCommitterMetricGroup`; Flink's counters exist from the start at 0."""

    def __init__(self) -> None:
        super().__init__()
        for name in (
            TOTAL_COMMITTABLES,
            SUCCESSFUL_COMMITTABLES,
            ALREADY_COMMITTED_COMMITTABLES,
            FAILED_COMMITTABLES,
            RETRIED_COMMITTABLES,
        ):
            self.counter(name)

    def get_num_committables_total_counter(self) -> SimpleCounter:
        """``totalCommittables``."""
        return self.counter(TOTAL_COMMITTABLES)

    def get_num_committables_success_counter(self) -> SimpleCounter:
        """``successfulCommittables``."""
        return self.counter(SUCCESSFUL_COMMITTABLES)

    def get_num_committables_already_committed_counter(self) -> SimpleCounter:
        """``alreadyCommittedCommittables``."""
        return self.counter(ALREADY_COMMITTED_COMMITTABLES)

    def get_num_committables_failure_counter(self) -> SimpleCounter:
        """``failedCommittables``."""
        return self.counter(FAILED_COMMITTABLES)

    def get_num_committables_retry_counter(self) -> SimpleCounter:
        """``retriedCommittables``."""
        return self.counter(RETRIED_COMMITTABLES)

    def set_current_pending_committables_gauge(self, gauge: Gauge[int]) -> None:
        """Register the ``pendingCommittables`` gauge."""
        self.gauge(PENDING_COMMITTABLES, gauge)
