"""Flink's ``AsyncSinkWriterYieldTest``, one test per Java test.

Flink counts mailbox yields in ``flush``; sinkv2's writer has no mailbox to yield
to (it waits only for its own requests), so "does not yield" becomes "sends
nothing and does not wait": no request is sent, and the call returns.
"""

from sinkv2.asyncsink import AIMDScalingStrategy, CongestionControlRateLimitingStrategy
from tests.unit.flink_async_writers import (
    FlinkAsyncSinkWriterImpl,
    FlinkTestContext,
    flink_configuration,
)


def make_writer(max_batch_size=10, max_buffered_requests=100, max_batch_size_in_bytes=1000):
    """Flink's ``TestAsyncSinkWriter``."""
    return FlinkAsyncSinkWriterImpl(
        FlinkTestContext(),
        flink_configuration(
            max_batch_size=max_batch_size,
            max_batch_size_in_bytes=max_batch_size_in_bytes,
            max_in_flight_requests=1,
            max_buffered_requests=max_buffered_requests,
            max_time_in_buffer_ms=1000,
            max_record_size_in_bytes=100,
            rate_limiting_strategy=CongestionControlRateLimitingStrategy(
                initial_max_in_flight_messages=max_batch_size,
                max_in_flight_requests=1,
                scaling_strategy=AIMDScalingStrategy(rate_threshold=max_batch_size),
            ),
        ),
    )


def test_flush_with_empty_buffer_does_not_yield():
    """testFlushWithEmptyBufferDoesNotYield"""
    sink = make_writer()
    sent_before = sink.requests.sent
    sink.flush(False)
    assert sink.requests.sent == sent_before == 0


def test_flush_with_buffered_elements_but_no_in_flight_requests_does_not_yield():
    """testFlushWithBufferedElementsButNoInFlightRequestsDoesNotYield"""
    sink = make_writer()
    sink.write_as_non_mailbox_thread("1")
    sink.write_as_non_mailbox_thread("2")
    sent_before = sink.requests.sent
    sink.flush(False)
    assert sink.requests.sent == sent_before == 0
    assert [w.request_entry for w in sink.writer_state().buffered_request_entries] == [1, 2]


def test_flush_with_true_flushes_all_elements_without_yielding():
    """testFlushWithTrueFlushesAllElementsWithoutYielding"""
    sink = make_writer()
    for value in "123":
        sink.write_as_non_mailbox_thread(value)
    sink.flush(True)
    assert sink.res == [1, 2, 3]
    assert sink.requests.sent == 1
    sink.close()
