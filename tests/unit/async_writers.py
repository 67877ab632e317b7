"""A scriptable async sink writer and a manual clock for the async-sink unit tests.

`ScriptedWriter` plays the destination in process, like Flink's
``AsyncSinkWriterImpl`` in ``AsyncSinkWriterTest``: it records every batch it is
handed and answers as the test scripts it (retry these entries, raise this error,
wait for that gate, take this long). The reference sinks run against real Redis
and HTTP servers; these tests pin the base's own behaviour.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence

from sinkv2.asyncsink import (
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    BufferedRequestState,
    ExponentialBackoff,
)
from sinkv2.runtime import (
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CooperativeProcessingTimeService,
)

ELEMENT_CONTEXT = BasicSinkWriterContext()
NO_BACKOFF = ExponentialBackoff(initial_ms=0, max_ms=0)


def wall_clock() -> int:
    """Real processing time in ms, for tests that wait for backoffs."""
    return time.time_ns() // 1_000_000


class ManualClock:
    """Processing time that moves only when the test says so."""

    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class FixedLimits:
    """A rate limiter that never scales: batch sizes stay put when requests fail.

    Flink's default (AIMD) halves the batch after every failure, which tests of
    retry order or batching would otherwise have to predict; AIMD has its own tests.
    """

    def __init__(self, max_in_flight_requests: int, max_batch_size: int) -> None:
        self.max_in_flight_requests = max_in_flight_requests
        self.max_batch_size = max_batch_size
        self.in_flight = 0

    def register_in_flight_request(self, request_info) -> None:
        self.in_flight += 1

    def register_completed_request(self, result_info) -> None:
        self.in_flight -= 1

    def should_block(self, request_info) -> bool:
        return self.in_flight >= self.max_in_flight_requests

    def get_max_batch_size(self) -> int:
        return self.max_batch_size


def config(**hints) -> AsyncSinkWriterConfiguration:
    """Small hints for tests: batches of 5, 50 buffered, 1 byte per entry, fixed limits.

    Pass ``rate_limiting_strategy=None`` for Flink's AIMD congestion control.
    """
    if "max_batch_size_in_bytes" in hints:
        hints.setdefault("max_record_size_in_bytes", hints["max_batch_size_in_bytes"])
    hints.setdefault(
        "rate_limiting_strategy",
        FixedLimits(hints.get("max_in_flight_requests", 1), hints.get("max_batch_size", 5)),
    )
    defaults = {
        "max_batch_size": 5,
        "max_in_flight_requests": 1,
        "max_buffered_requests": 50,
        "max_batch_size_in_bytes": 10_000,
        "max_time_in_buffer_ms": 1_000,
        "max_record_size_in_bytes": 1_000,
        "retry_backoff": NO_BACKOFF,
    }
    return AsyncSinkWriterConfiguration(**{**defaults, **hints})


class ScriptedWriter(AsyncSinkWriter[int, int]):
    """Entries are the elements themselves; the test scripts the destination's answers.

    Attributes:
        batches: Every batch handed to ``submit_request_entries``, retries included.
        landed: Entries the destination accepted, in acceptance order.
        retry: Decides, per batch, which entries to hand back for retry.
        errors: Raised, one per call, before anything else happens.
        gate: While set and closed, requests wait (they stay in flight).
        latency_s: How long each request takes.
        sizes: Entry -> size in bytes (default 1).
    """

    def __init__(
        self,
        configuration: AsyncSinkWriterConfiguration | None = None,
        *,
        clock: Callable[[], int] | None = None,
        states: Sequence[BufferedRequestState[int]] = (),
        converter: Callable[[int, object], int] | object = lambda element, context: element,
        context: BasicWriterInitContext | None = None,
    ) -> None:
        self.clock = clock or ManualClock()
        self.timers = CooperativeProcessingTimeService(self.clock)
        self.init_context = context or BasicWriterInitContext(processing_time_service=self.timers)
        self.batches: list[list[int]] = []
        self.landed: list[int] = []
        self.retry: Callable[[list[int]], list[int]] = lambda batch: []
        self.errors: list[BaseException] = []
        self.gate: threading.Event | None = None
        self.latency_s = 0.0
        self.sizes: dict[int, int] = {}
        self.concurrent = 0
        self.max_concurrent = 0
        self.client_events: list[str] = []
        self.started = threading.Event()
        super().__init__(converter, self.init_context, configuration or config(), states)

    async def open_client(self) -> None:
        self.client_events.append("open")

    async def close_client(self) -> None:
        self.client_events.append("close")

    async def submit_request_entries(self, request_entries: list[int]) -> Sequence[int]:
        self.batches.append(list(request_entries))
        self.started.set()
        if self.errors:
            raise self.errors.pop(0)
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            while self.gate is not None and not self.gate.is_set():
                await asyncio.sleep(0.001)
        finally:
            self.concurrent -= 1
        retry = self.retry(list(request_entries))
        retried = set(map(id, retry))
        self.landed.extend(entry for entry in request_entries if id(entry) not in retried)
        return retry

    def get_size_in_bytes(self, request_entry: int) -> int:
        return self.sizes.get(request_entry, 1)

    def write_all(self, elements) -> None:
        for element in elements:
            self.write(element, ELEMENT_CONTEXT)

    def buffered(self) -> list[int]:
        return [w.request_entry for s in self.snapshot_state(1) for w in s.buffered_request_entries]

    def metrics(self) -> dict[str, object]:
        return dict(self.init_context.metric_group().snapshot())
