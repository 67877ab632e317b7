"""Flink's ``AsyncSinkWriterRateLimiterTest``, one test per Java test.

Flink's ``AIMDRateLimitingStrategy`` (since replaced by congestion control with
AIMD scaling, as sinkv2 has it) and its test ``FixedRateLimitingStrategy`` are
restated with sinkv2's strategies.
"""

import threading

from sinkv2.asyncsink import AIMDScalingStrategy, CongestionControlRateLimitingStrategy
from tests.unit.flink_async_writers import (
    WAIT_S,
    FlinkAsyncSinkWriterImpl,
    FlinkTestContext,
    flink_configuration,
)


class FixedRateLimitingStrategy:
    """Flink's test ``FixedRateLimitingStrategy``: at most ``max_in_flight_messages``."""

    def __init__(self, max_in_flight_messages):
        self.max_in_flight_messages = max_in_flight_messages
        self.current_in_flight_messages = 0

    def register_in_flight_request(self, request_info):
        self.current_in_flight_messages += request_info.get_batch_size()

    def register_completed_request(self, result_info):
        self.current_in_flight_messages -= result_info.get_batch_size()

    def should_block(self, request_info):
        return (
            self.current_in_flight_messages + request_info.get_batch_size()
            > self.max_in_flight_messages
        )

    def get_max_batch_size(self):
        return self.max_in_flight_messages


def test_that_writer_throttles_on_rate_limiting_strategy():
    """testThatWriterThrottlesOnRateLimitingStrategy

    Four requests may be in flight, but the strategy admits two entries: while
    ``[1, 2]`` is blocked, ``3`` and ``4`` stay in the buffer.
    """
    context = FlinkTestContext()
    sink = FlinkAsyncSinkWriterImpl(
        context,
        flink_configuration(
            max_batch_size=2,
            max_in_flight_requests=4,
            rate_limiting_strategy=FixedRateLimitingStrategy(2),
        ),
    )
    sink.gate = threading.Event()
    sink.block_batches_of = 2
    sink.write_as_non_mailbox_thread("1")
    sink.write_as_non_mailbox_thread("2")
    assert sink.request_started.wait(WAIT_S)
    assert len(sink.writer_state()) == 0
    sink.write_as_non_mailbox_thread("3")
    sink.write_as_non_mailbox_thread("4")
    assert len(sink.writer_state()) == 2  # throttled by the strategy, not the request count
    assert sink.batches == [[1, 2]]
    sink.gate.set()
    sink.flush(True)
    assert sink.res == [1, 2, 3, 4]
    sink.close()


def test_that_writer_updates_rate_limiting_strategy():
    """testThatWriterUpdatesRateLimitingStrategy

    Flink's ``AIMDRateLimitingStrategy(1, 0.5, 4, 4)`` is congestion control with
    four messages at first and AIMD (increase 1, decrease 0.5, threshold 4). The
    writer works on its own copy of the strategy (Flink's works on the one it was
    given), so the limit is read from the copy's log.
    """
    context = FlinkTestContext()
    strategy = CongestionControlRateLimitingStrategy(
        max_in_flight_requests=1,
        initial_max_in_flight_messages=4,
        scaling_strategy=AIMDScalingStrategy(
            rate_threshold=4, increase_rate=1, decrease_factor=0.5
        ),
    )
    assert strategy.get_max_batch_size() == 4
    sink = FlinkAsyncSinkWriterImpl(
        context,
        flink_configuration(
            max_batch_size_in_bytes=10_000,
            max_time_in_buffer_ms=100,
            max_record_size_in_bytes=10_000,
            rate_limiting_strategy=strategy,
        ),
        simulate_failures=True,
    )
    # sending the first batch
    context.set_current_time(0, sink)
    sink.write_value("1")
    sink.write_value("2")
    sink.write_value("225")
    context.set_current_time(100, sink)
    # expect 225 to fail
    sink.write_value("3")
    sink.write_value("4")
    context.set_current_time(199, sink)
    # the failed request updates the strategy 4 -> 2, the next one passes: 2 -> 3
    context.set_current_time(200, sink)
    assert sink.requests.limits[:2] == [2, 3]
    assert sink.requests.limits[-1] == 3
    assert strategy.get_max_batch_size() == 4  # the configured one is untouched
    sink.flush(True)
    sink.close()
