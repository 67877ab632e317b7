"""Flink's congestion control and AIMD scaling, to the letter."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2.asyncsink import (
    AIMDScalingStrategy,
    BasicRequestInfo,
    BasicResultInfo,
    CongestionControlRateLimitingStrategy,
    RateLimitingStrategy,
)
from sinkv2.errors import SinkConfigurationError


def test_aimd_adds_on_success_up_to_the_threshold_and_halves_on_failure():
    aimd = AIMDScalingStrategy(rate_threshold=100)
    assert aimd.scale_up(50) == 60
    assert aimd.scale_up(95) == 100
    assert aimd.scale_down(50) == 25
    assert aimd.scale_down(1) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_threshold": 0}, "must be positive"),
        ({"rate_threshold": 10, "increase_rate": -1}, "must be positive"),
        ({"rate_threshold": 10, "decrease_factor": 1.0}, "between 0 and 1"),
    ],
)
def test_aimd_refuses_bad_parameters(options, message):
    with pytest.raises(SinkConfigurationError, match=message):
        AIMDScalingStrategy(**options)


def test_flinks_default_starts_at_one_batch_and_grows_to_all_slots():
    strategy = CongestionControlRateLimitingStrategy.flink_default(
        max_batch_size=10, max_in_flight_requests=3
    )
    assert isinstance(strategy, RateLimitingStrategy)
    assert strategy.get_max_batch_size() == 10
    for _ in range(10):
        strategy.register_in_flight_request(BasicRequestInfo(10))
        strategy.register_completed_request(BasicResultInfo(0, 10))
    assert strategy.get_max_batch_size() == 30


def test_it_blocks_on_request_slots_and_on_the_message_limit():
    strategy = CongestionControlRateLimitingStrategy(
        max_in_flight_requests=2,
        initial_max_in_flight_messages=10,
        scaling_strategy=AIMDScalingStrategy(rate_threshold=100),
    )
    strategy.register_in_flight_request(BasicRequestInfo(6))
    assert strategy.should_block(BasicRequestInfo(5))
    assert not strategy.should_block(BasicRequestInfo(4))
    strategy.register_in_flight_request(BasicRequestInfo(4))
    assert strategy.should_block(BasicRequestInfo(1))
    strategy.register_completed_request(BasicResultInfo(4, 4))
    assert strategy.get_max_batch_size() == 5
    assert "1/2 requests" in repr(strategy)


@given(st.lists(st.tuples(st.integers(1, 50), st.booleans()), max_size=200))
def test_the_limit_stays_between_one_and_the_threshold(requests):
    strategy = CongestionControlRateLimitingStrategy.flink_default(
        max_batch_size=20, max_in_flight_requests=4
    )
    for size, failed in requests:
        strategy.register_in_flight_request(BasicRequestInfo(size))
        strategy.register_completed_request(BasicResultInfo(size if failed else 0, size))
        assert 1 <= strategy.get_max_batch_size() <= 80
    assert strategy.current_in_flight_requests == 0
    assert strategy.current_in_flight_messages == 0


@pytest.mark.parametrize(
    ("current", "halved"), [(5, 3), (9, 5), (21, 11), (11, 6), (3, 2), (2, 1), (1, 1), (314, 157)]
)
def test_aimd_halves_rounding_half_up_as_java_does(current, halved):
    # Flink's Math.round; Python's round (half to even) would give 2, 4, 10, 6, 2, 1, 1, 157.
    assert AIMDScalingStrategy(rate_threshold=1000).scale_down(current) == halved
