"""Driving an HttpSink writer engine-free, as the runtime would."""

import time

from sinkv2.asyncsink import AsyncSinkWriterConfiguration, ExponentialBackoff
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext

FAST = ExponentialBackoff(initial_ms=1, max_ms=5)


def config(**hints):
    """Small batches and millisecond backoffs, so failure paths run fast."""
    hints.setdefault("max_batch_size", 10)
    hints.setdefault("max_buffered_requests", max(100, hints["max_batch_size"] + 1))
    hints.setdefault("retry_backoff", FAST)
    hints.setdefault("request_timeout_ms", 10_000)
    return AsyncSinkWriterConfiguration(**hints)


def rows(n, keys=3):
    return [{"id": i, "key": f"k{i % keys}", "value": i / 2} for i in range(n)]


def write_all(sink, elements, *, context=None, end_of_input=True, close=True):
    """Create a writer, write the elements, flush; returns (writer, init context)."""
    context = context or BasicWriterInitContext()
    writer = sink.create_writer(context)
    element_context = BasicSinkWriterContext()
    try:
        for element in elements:
            writer.write(element, element_context)
        writer.flush(end_of_input)
    finally:
        if close:
            writer.close()
    return writer, context


def ids(records):
    return sorted(r["id"] for r in records)


def records_once_there_are(server, count, *, timeout_s=60.0):
    """The server's records once it holds ``count`` (a held request lands late)."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = server.records()
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.01)
