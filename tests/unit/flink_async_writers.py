"""Flink's ``AsyncSinkWriterImpl`` (``AsyncSinkWriterTest``) restated against sinkv2's public API.

Flink's test writer persists synchronously inside ``submitRequestEntries`` and
hands its completion to the mailbox; its ``write(String)`` first yields the
mailbox (applying every completion, which may send more), then writes. sinkv2's
requests run on the writer's event loop, so the port spells those two steps out:

- ``write(value)`` yields the mailbox with ``flush(False)`` (wait for the requests
  in flight, apply their answers, send what became sendable - what Flink's
  ``yieldMailbox`` does when every submit completes at once), writes, then waits
  until every request it sent has *returned* from ``submit_request_entries``. As in
  Flink, the destination (``res``) then holds what those requests persisted, and
  their answers are applied at the next ``write`` or ``flush``.
- ``set_current_time(t)`` is ``TestProcessingTimeService.setCurrentTime``: the
  clock moves and due timers fire on the caller's thread.

The entries and their sizes are Flink's: ``Integer.parseInt`` of the element; 100
bytes above 200 when failures are simulated, else 4 bytes.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sinkv2.asyncsink import (
    AIMDScalingStrategy,
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    CongestionControlRateLimitingStrategy,
    ExponentialBackoff,
    RateLimitingStrategy,
    RequestEntryWrapper,
)
from sinkv2.runtime import (
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CooperativeProcessingTimeService,
)
from tests.unit.async_writers import ManualClock

ELEMENT_CONTEXT = BasicSinkWriterContext()
FLINK_RETRIES = {"retry_backoff": ExponentialBackoff(initial_ms=0, max_ms=0)}
"""Flink retries failed entries at once and forever."""
FLINK_RETRIES_FOREVER = {**FLINK_RETRIES, "max_retries_per_entry": None}
WAIT_S = 60.0
"""How long a test waits for what must happen (a loaded machine is slow, not broken)."""


class SentRequests:
    """Requests sent and returned, counted on both sides of the writer."""

    def __init__(self) -> None:
        self.sent = 0
        self.returned = 0
        self.limits: list[int] = []
        """The strategy's ``get_max_batch_size()`` after each completed request."""
        self.changed = threading.Condition()

    def wait(self, timeout_s: float = WAIT_S) -> None:
        """Until every request sent so far has returned from ``submit_request_entries``."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while self.returned < self.sent:
                remaining = deadline - time.monotonic()
                assert remaining > 0, "a request did not return within the test's patience"
                self.changed.wait(remaining)


class CountingStrategy:
    """Wraps the configured rate limiter to count requests as the writer sends them.

    ``register_in_flight_request`` runs on the writer thread when a request is sent;
    the writer works on a deep copy of the strategy, which shares the counter.
    """

    def __init__(self, inner: RateLimitingStrategy, requests: SentRequests) -> None:
        self.inner = inner
        self.requests = requests

    def __deepcopy__(self, memo: dict[int, Any]) -> CountingStrategy:
        return CountingStrategy(copy.deepcopy(self.inner, memo), self.requests)

    def register_in_flight_request(self, request_info: Any) -> None:
        with self.requests.changed:
            self.requests.sent += 1
        self.inner.register_in_flight_request(request_info)

    def register_completed_request(self, result_info: Any) -> None:
        self.inner.register_completed_request(result_info)
        self.requests.limits.append(self.inner.get_max_batch_size())

    def should_block(self, request_info: Any) -> bool:
        return self.inner.should_block(request_info)

    def get_max_batch_size(self) -> int:
        return self.inner.get_max_batch_size()


class FlinkTestContext:
    """Flink's ``TestSinkInitContext``: a manual processing-time clock and a metric group."""

    def __init__(self) -> None:
        self.clock = ManualClock(0)
        self.timers = CooperativeProcessingTimeService(self.clock)
        self.init_context = BasicWriterInitContext(processing_time_service=self.timers)

    def set_current_time(self, now: int, *writers: FlinkAsyncSinkWriterImpl) -> None:
        """``TestProcessingTimeService.setCurrentTime``: move the clock, fire due timers."""
        self.clock.now = now
        self.timers.fire_due_timers()
        for writer in writers:
            writer.wait_for_sent_requests()

    def metric(self, name: str) -> Any:
        return self.init_context.metric_group().snapshot()[name]


def flink_configuration(
    *,
    max_batch_size: int = 10,
    max_in_flight_requests: int = 1,
    max_buffered_requests: int = 100,
    max_batch_size_in_bytes: int = 110,
    max_time_in_buffer_ms: int = 1_000,
    max_record_size_in_bytes: int = 110,
    rate_limiting_strategy: RateLimitingStrategy | None = None,
    **extra: Any,
) -> AsyncSinkWriterConfiguration:
    """``AsyncSinkWriterImplBuilder``'s defaults and rate limiter (congestion control with
    ``maxBatchSize * maxInFlightRequests`` messages from the start)."""
    if rate_limiting_strategy is None:
        rate_limiting_strategy = CongestionControlRateLimitingStrategy(
            max_in_flight_requests=max_in_flight_requests,
            initial_max_in_flight_messages=max_batch_size * max_in_flight_requests,
            scaling_strategy=AIMDScalingStrategy(
                rate_threshold=max_batch_size * max_in_flight_requests
            ),
        )
    return AsyncSinkWriterConfiguration(
        max_batch_size=max_batch_size,
        max_in_flight_requests=max_in_flight_requests,
        max_buffered_requests=max_buffered_requests,
        max_batch_size_in_bytes=max_batch_size_in_bytes,
        max_time_in_buffer_ms=max_time_in_buffer_ms,
        max_record_size_in_bytes=max_record_size_in_bytes,
        rate_limiting_strategy=rate_limiting_strategy,
        **{**FLINK_RETRIES_FOREVER, **extra},
    )


def parse_int(element: str, context: object) -> int:
    """Flink's ``(elem, ctx) -> Integer.parseInt(elem)``."""
    return int(element)


class FlinkAsyncSinkWriterImpl(AsyncSinkWriter[str, int]):
    """Flink's ``AsyncSinkWriterImpl``: persists to ``res``; fails as Flink's does.

    ``submit_request_entries`` raises ``RuntimeError`` for any batch with a value in
    101..200; with ``simulate_failures`` a value above 200 fails its first attempt
    (it is returned for retry) and lands on the next. ``delay_ms`` sleeps in every
    request; ``gate``, while set and closed, holds every request of
    ``block_batches_of`` entries (Flink's ``AsyncSinkReleaseAndBlockWriterImpl``).
    """

    def __init__(
        self,
        context: FlinkTestContext,
        configuration: AsyncSinkWriterConfiguration | None = None,
        *,
        res: list[int] | None = None,
        simulate_failures: bool = False,
        delay_ms: int = 0,
        states: Sequence[BufferedRequestState[int]] = (),
        element_converter: Any = parse_int,
    ) -> None:
        self.flink_context = context
        self.res: list[int] = res if res is not None else []
        self.simulate_failures = simulate_failures
        self.delay_ms = delay_ms
        self.failed_first_attempts: set[int] = set()
        self.gate: threading.Event | None = None
        self.block_batches_of: int | None = None
        self.batches: list[list[int]] = []
        self.requests = SentRequests()
        self.request_started = threading.Event()
        configuration = configuration or flink_configuration()
        strategy = configuration.rate_limiting_strategy or (
            CongestionControlRateLimitingStrategy.flink_default(
                max_batch_size=configuration.max_batch_size,
                max_in_flight_requests=configuration.max_in_flight_requests,
            )
        )
        configuration = attrs.evolve(
            configuration, rate_limiting_strategy=CountingStrategy(strategy, self.requests)
        )
        super().__init__(element_converter, context.init_context, configuration, states)

    async def submit_request_entries(self, request_entries: list[int]) -> Sequence[int]:
        try:
            return await self._persist(list(request_entries))
        finally:
            with self.requests.changed:
                self.requests.returned += 1
                self.requests.changed.notify_all()

    async def _persist(self, request_entries: list[int]) -> list[int]:
        self.batches.append(list(request_entries))
        self.request_started.set()
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        if self.gate is not None and len(request_entries) == self.block_batches_of:
            while not self.gate.is_set():
                await asyncio.sleep(0.001)
        if any(100 < value <= 200 for value in request_entries):
            raise RuntimeError("Deliberate runtime exception occurred in SinkWriterImplementation.")
        if not self.simulate_failures:
            self.res.extend(request_entries)
            return []
        successful_retries = [v for v in self.failed_first_attempts if v in request_entries]
        self.failed_first_attempts -= set(successful_retries)
        first_time_failed = [v for v in request_entries if v not in successful_retries and v > 200]
        self.failed_first_attempts |= set(first_time_failed)
        failed = set(first_time_failed)
        self.res.extend(v for v in request_entries if v not in failed)
        return first_time_failed

    def get_size_in_bytes(self, request_entry: int) -> int:
        return 100 if request_entry > 200 and self.simulate_failures else 4

    # -- the test harness ------------------------------------------------------------

    def write_value(self, value: str) -> None:
        """Flink's test ``write(String)``: yield the mailbox, write, let sent requests return."""
        self.flush(False)
        self.write(value, ELEMENT_CONTEXT)
        self.wait_for_sent_requests()

    def write_as_non_mailbox_thread(self, value: str) -> None:
        """Flink's ``writeAsNonMailboxThread``: a plain ``write``, no yield."""
        self.write(value, ELEMENT_CONTEXT)

    def wait_for_sent_requests(self, timeout_s: float = WAIT_S) -> None:
        """Until every request sent so far has returned from ``submit_request_entries``."""
        self.requests.wait(timeout_s)

    def wrap_requests(self, *requests: int) -> BufferedRequestState[int]:
        return BufferedRequestState(
            [RequestEntryWrapper(value, self.get_size_in_bytes(value)) for value in requests]
        )

    def writer_state(self) -> BufferedRequestState[int]:
        """Flink's ``getWriterState``: the one state a snapshot returns."""
        states = self.snapshot_state(1)
        assert len(states) == 1
        return states[0]


def assert_buffer_states_are_equal(
    actual: BufferedRequestState[Any], expected: BufferedRequestState[Any]
) -> None:
    """Flink's ``assertThatBufferStatesAreEqual``: same size, same entries and sizes in order."""
    assert actual.get_state_size() == expected.get_state_size()
    assert len(actual.get_buffered_request_entries()) == len(
        expected.get_buffered_request_entries()
    )
    assert [
        (w.get_request_entry(), w.get_size()) for w in actual.get_buffered_request_entries()
    ] == [(w.get_request_entry(), w.get_size()) for w in expected.get_buffered_request_entries()]


class RecordingDestination(AsyncSinkWriter[Any, Any]):
    """A writer for entries given with their sizes; records every batch; ``gate`` holds requests."""

    def __init__(
        self,
        configuration: AsyncSinkWriterConfiguration,
        *,
        sizes: dict[Any, int] | None = None,
        states: Sequence[BufferedRequestState[Any]] = (),
        context: FlinkTestContext | None = None,
        answer: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self.flink_context = context or FlinkTestContext()
        self.sizes = sizes or {}
        self.batches: list[list[Any]] = []
        self.results: list[Any] = []
        self.gate: threading.Event | None = None
        self.answer = answer or (lambda batch: [])
        self.batch_arrived = threading.Condition()
        super().__init__(
            lambda element, context: element,
            self.flink_context.init_context,
            configuration,
            states,
        )

    async def submit_request_entries(self, request_entries: list[Any]) -> Sequence[Any]:
        with self.batch_arrived:
            self.batches.append(list(request_entries))
            self.batch_arrived.notify_all()
        while self.gate is not None and not self.gate.is_set():
            await asyncio.sleep(0.001)
        retry = self.answer(list(request_entries))
        self.results.extend(e for e in request_entries if e not in retry)
        return retry

    def get_size_in_bytes(self, request_entry: Any) -> int:
        return self.sizes.get(request_entry, 4)

    def wait_for_batches(self, count: int, timeout_s: float = WAIT_S) -> None:
        """Until ``submit_request_entries`` has been handed ``count`` batches."""
        with self.batch_arrived:
            assert self.batch_arrived.wait_for(lambda: len(self.batches) >= count, timeout_s)

    def buffered(self) -> list[Any]:
        return [w.request_entry for s in self.snapshot_state(1) for w in s.buffered_request_entries]
