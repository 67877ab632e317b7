"""Flink's ``AsyncSinkWriterTimeoutTest``, one test per Java test.

Flink's request timeout is a processing-time timer and leaves the request
running: a late answer is discarded. sinkv2's runs on the writer's event loop
(``request_timeout_ms`` of real time) and cancels the request - "timeouts cancel
the request" in the docs' differences. So these tests hold the request on a gate
for longer than the timeout instead of moving a test clock, and a late
delivery never happens.
"""

import asyncio
import threading
import time

import pytest

from sinkv2.asyncsink import AsyncSinkWriter, AsyncSinkWriterConfiguration
from sinkv2.errors import FatalDestinationError, RequestTimeoutError
from tests.unit.flink_async_writers import (
    ELEMENT_CONTEXT,
    FLINK_RETRIES_FOREVER,
    WAIT_S,
    FlinkTestContext,
)


class TimeoutWriter(AsyncSinkWriter[str, int]):
    """Flink's ``TimeoutWriter``: each request waits for ``deliver_message``."""

    def __init__(self, max_batch_size, max_time_in_buffer_ms, request_timeout_ms, fail_on_timeout):
        self.destination = []
        self.attempts = 0
        self.completion = threading.Event()
        self.fatal_error = None
        self.should_fail_request = False
        self.flink_context = FlinkTestContext()
        big = 2**31 - 1
        super().__init__(
            lambda element, context: int(element),
            self.flink_context.init_context,
            AsyncSinkWriterConfiguration(
                max_batch_size=max_batch_size,
                max_batch_size_in_bytes=big,
                max_in_flight_requests=big,
                max_buffered_requests=big,
                max_time_in_buffer_ms=max_time_in_buffer_ms,
                max_record_size_in_bytes=big,
                request_timeout_ms=request_timeout_ms,
                fail_on_timeout=fail_on_timeout,
                **FLINK_RETRIES_FOREVER,
            ),
        )

    async def submit_request_entries(self, request_entries):
        self.attempts += 1
        while not self.completion.is_set():
            await asyncio.sleep(0.001)
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.should_fail_request:
            self.should_fail_request = False
            return list(request_entries)
        self.destination.extend(request_entries)
        return []

    def get_size_in_bytes(self, request_entry):
        return 8

    def deliver_message(self):
        self.completion.set()

    def deliver_once_attempted(self, attempts):
        """Deliver, from another thread, once ``attempts`` attempts were made.

        Flink moves a test clock; here the attempts before it timed out for real,
        however long a loaded machine took for them.
        """

        def deliver():
            deadline = time.monotonic() + WAIT_S
            while self.attempts < attempts and time.monotonic() < deadline:
                time.sleep(0.005)
            self.deliver_message()

        thread = threading.Thread(target=deliver)
        thread.start()
        return thread


def test_writer_should_not_retry_if_request_is_processed_before_timeout():
    """writerShouldNotRetryIfRequestIsProcessedBeforeTimeout

    The request is answered well within its (real-time) timeout.
    """
    writer = TimeoutWriter(1, 10, 10_000, False)
    writer.write("1", ELEMENT_CONTEXT)
    writer.deliver_message()
    writer.flush(False)
    assert writer.destination == [1]
    assert writer.attempts == 1
    writer.close()


def test_writer_should_retry_on_timeout_if_fail_on_error_is_false():
    """writerShouldRetryOnTimeoutIfFailOnErrorIsFalse

    Differs (timeouts cancel the request): Flink's destination ends with
    ``[1, 1]`` (the late first attempt lands, then the retry); sinkv2 cancels each
    timed-out attempt, so only the attempt running when the message is delivered
    (three timeouts later) lands: ``[1]``.
    """
    writer = TimeoutWriter(1, 10, 100, False)
    writer.write("1", ELEMENT_CONTEXT)
    deliver = writer.deliver_once_attempted(3)
    writer.flush(False)  # attempts time out and are resubmitted until one is answered
    deliver.join()
    assert writer.destination == [1]
    assert writer.attempts >= 3
    writer.close()


def test_writer_should_fail_on_timeout_if_fail_on_error_is_true():
    """writerShouldFailOnTimeoutIfFailOnErrorIsTrue

    Flink: ``FlinkRuntimeException`` caused by a ``TimeoutException`` "Request timed
    out after 100ms with failOnTimeout set to true."; sinkv2: `RequestTimeoutError`
    (a `TimeoutError`) naming the limit and the flag, caused by the loop's timeout.
    """
    writer = TimeoutWriter(1, 10, 100, True)
    writer.write("1", ELEMENT_CONTEXT)
    with pytest.raises(RequestTimeoutError) as raised:
        writer.flush(False)
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value.__cause__, asyncio.TimeoutError)
    assert "request_timeout_ms=100" in str(raised.value)
    assert "fail_on_timeout is set" in str(raised.value)
    writer.deliver_message()
    writer.close()


def test_writer_should_discard_retried_entries_on_timeout():
    """writerShouldDiscardRetriedEntriesOnTimeout

    Flink: the first attempt answers "retry" after it timed out, and that answer
    is discarded. sinkv2 cancels timed-out attempts, so the answering attempt is
    the one running at delivery; its "retry" is honoured and the next attempt
    lands. Either way the entry lands exactly once.
    """
    writer = TimeoutWriter(1, 10, 100, False)
    writer.should_fail_request = True
    writer.write("1", ELEMENT_CONTEXT)
    deliver = writer.deliver_once_attempted(2)  # the first attempt timed out
    writer.flush(True)
    deliver.join()
    assert writer.destination == [1]
    writer.close()


def test_writer_should_fail_on_fatal_error():
    """writerShouldFailOnFatalError

    Differs (fatal error wrapping): Flink rethrows the sink's exception itself;
    sinkv2 raises `FatalDestinationError` with it as the cause.
    """
    writer = TimeoutWriter(1, 10, 10_000, True)
    writer.fatal_error = RuntimeError("Fatal error")
    writer.write("1", ELEMENT_CONTEXT)
    writer.deliver_message()
    with pytest.raises(FatalDestinationError) as raised:
        writer.flush(False)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "Fatal error"
    writer.close()
