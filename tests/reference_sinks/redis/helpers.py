"""Driving a RedisSink writer by hand (no engine), and a fault-injecting client wrapper."""

from __future__ import annotations

import threading

import redis.exceptions

from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext


def write_all(sink, elements, *, context=None, states=(), end=True):
    """Write ``elements`` with one writer; flush(True) and close unless ``end`` is False."""
    context = context or BasicWriterInitContext()
    writer = sink.restore_writer(context, states) if states else sink.create_writer(context)
    element_context = BasicSinkWriterContext()
    try:
        for element in elements:
            writer.write(element, element_context)
        if end:
            writer.flush(True)
    finally:
        if end:
            writer.close()
    return writer, context


class FlakyRoundTrips:
    """Makes a real writer's round trips (one packed pipeline each) fail with ConnectionError.

    ``fail_before`` lists the 0-based round trips that raise before sending,
    ``fail_after`` those that raise after the commands ran on the server (the
    answer is lost, as when a connection drops mid-reply).
    """

    def __init__(self, fail_before=(), fail_after=()) -> None:
        self.fail_before = set(fail_before)
        self.fail_after = set(fail_after)
        self.calls = 0
        self.lock = threading.Lock()

    def install(self, writer) -> None:
        real_round_trip = writer._round_trip

        async def round_trip(packed, count):
            with self.lock:
                call = self.calls
                self.calls += 1
            if call in self.fail_before:
                raise redis.exceptions.ConnectionError(f"injected before call {call}")
            replies = await real_round_trip(packed, count)
            if call in self.fail_after:
                raise redis.exceptions.ConnectionError(f"injected after call {call}")
            return replies

        writer._round_trip = round_trip
