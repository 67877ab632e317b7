"""Driving a RedisSink writer by hand (no engine), and a fault-injecting client wrapper."""

from __future__ import annotations

import threading

import redis.exceptions

from sinkv2 import BasicSinkWriterContext, BasicWriterInitContext


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


class FlakyPipelines:
    """Makes ``pipeline().execute()`` of a real client fail with ConnectionError.

    ``fail_before`` lists the 0-based execute calls that raise before sending,
    ``fail_after`` those that raise after the commands ran on the server (the
    answer is lost, as when a connection drops mid-reply).
    """

    def __init__(self, fail_before=(), fail_after=()) -> None:
        self.fail_before = set(fail_before)
        self.fail_after = set(fail_after)
        self.calls = 0
        self.lock = threading.Lock()

    def install(self, writer) -> None:
        original_open = writer.open_client

        async def open_client():
            await original_open()
            client = writer._client
            make_pipeline = client.pipeline

            def pipeline(*args, **kwargs):
                inner = make_pipeline(*args, **kwargs)
                real_execute = inner.execute

                async def execute(*a, **k):
                    with self.lock:
                        call = self.calls
                        self.calls += 1
                    if call in self.fail_before:
                        raise redis.exceptions.ConnectionError(f"injected before call {call}")
                    result = await real_execute(*a, **k)
                    if call in self.fail_after:
                        raise redis.exceptions.ConnectionError(f"injected after call {call}")
                    return result

                inner.execute = execute
                return inner

            client.pipeline = pipeline

        writer.open_client = open_client
