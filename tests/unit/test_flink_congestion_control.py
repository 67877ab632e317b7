"""Flink's ``CongestionControlRateLimitingStrategyTest``, one test per Java test."""

import pytest

from sinkv2.asyncsink import (
    AIMDScalingStrategy,
    BasicRequestInfo,
    BasicResultInfo,
    CongestionControlRateLimitingStrategy,
)
from sinkv2.errors import SinkConfigurationError


def strategy(max_in_flight_requests, initial_max_in_flight_messages, scaling_strategy):
    return CongestionControlRateLimitingStrategy(
        max_in_flight_requests=max_in_flight_requests,
        initial_max_in_flight_messages=initial_max_in_flight_messages,
        scaling_strategy=scaling_strategy,
    )


def test_max_in_flight_requests_respected():
    """testMaxInFlightRequestsRespected"""
    max_in_flight_requests = 2
    limiter = strategy(max_in_flight_requests, 10, AIMDScalingStrategy(rate_threshold=10))
    empty_request = BasicRequestInfo(0)
    empty_result = BasicResultInfo(0, 0)
    for _ in range(max_in_flight_requests):
        assert not limiter.should_block(empty_request)
        limiter.register_in_flight_request(empty_request)
    assert limiter.should_block(empty_request)
    limiter.register_completed_request(empty_result)
    assert not limiter.should_block(empty_request)


def test_max_in_flight_requests_does_not_go_below_zero():
    """testMaxInFlightRequestsDoesNotGoBelowZero"""
    max_in_flight_requests = 1
    limiter = strategy(max_in_flight_requests, 10, AIMDScalingStrategy(rate_threshold=10))
    empty_request = BasicRequestInfo(0)
    empty_result = BasicResultInfo(0, 0)
    # a completed request before any was started
    limiter.register_completed_request(empty_result)
    for _ in range(max_in_flight_requests):
        assert not limiter.should_block(empty_request)
        limiter.register_in_flight_request(empty_request)
    assert limiter.should_block(empty_request)
    limiter.register_completed_request(empty_result)
    assert not limiter.should_block(empty_request)


def test_initial_max_in_flight_messages_respected():
    """testInitialMaxInFlightMessagesRespected"""
    request_with_two_messages = BasicRequestInfo(2)
    result_with_two_messages = BasicResultInfo(0, 2)
    limiter = strategy(100, 4, AIMDScalingStrategy(rate_threshold=4, increase_rate=1))
    limiter.register_in_flight_request(request_with_two_messages)
    assert not limiter.should_block(request_with_two_messages)
    limiter.register_in_flight_request(request_with_two_messages)
    assert limiter.should_block(request_with_two_messages)
    limiter.register_completed_request(result_with_two_messages)
    assert not limiter.should_block(request_with_two_messages)


def test_aimd_scaling_strategy_scale_up_on_success():
    """testAimdScalingStrategyScaleUpOnSuccess"""
    empty_request = BasicRequestInfo(0)
    empty_successful_result = BasicResultInfo(0, 0)
    request_with_two_messages = BasicRequestInfo(2)
    aimd = AIMDScalingStrategy(rate_threshold=100, increase_rate=10, decrease_factor=0.5)
    limiter = strategy(100, 1, aimd)
    assert not limiter.should_block(empty_request)
    assert limiter.should_block(request_with_two_messages)
    limiter.register_in_flight_request(empty_request)
    limiter.register_completed_request(empty_successful_result)
    assert not limiter.should_block(request_with_two_messages)


def test_aimd_scaling_strategy_scale_down_on_failure():
    """testAimdScalingStrategyScaleDownOnFailure"""
    request_with_one_message = BasicRequestInfo(1)
    result_with_one_failed_message = BasicResultInfo(1, 1)
    request_with_two_messages = BasicRequestInfo(2)
    aimd = AIMDScalingStrategy(rate_threshold=100, decrease_factor=0.5)
    limiter = strategy(100, 2, aimd)
    assert not limiter.should_block(request_with_one_message)
    assert not limiter.should_block(request_with_two_messages)
    limiter.register_in_flight_request(request_with_one_message)
    limiter.register_completed_request(result_with_one_failed_message)
    assert limiter.should_block(request_with_two_messages)


def test_invalid_max_in_flight_requests():
    """testInvalidMaxInFlightRequests"""
    with pytest.raises(SinkConfigurationError, match="'max_in_flight_requests' must be positive"):
        strategy(0, 10, AIMDScalingStrategy(rate_threshold=10))


def test_invalid_max_in_flight_messages():
    """testInvalidMaxInFlightMessages"""
    with pytest.raises(
        SinkConfigurationError, match="'initial_max_in_flight_messages' must be positive"
    ):
        strategy(10, 0, AIMDScalingStrategy(rate_threshold=10))


def test_invalid_aimd_strategy():
    """testInvalidAimdStrategy

    Flink: ``NullPointerException`` "scalingStrategy must be provided."; sinkv2
    refuses a missing (``None``) scaling strategy at construction the same way,
    instead of failing after the first request.
    """
    with pytest.raises(
        SinkConfigurationError, match="'scaling_strategy' must be a ScalingStrategy"
    ):
        strategy(10, 10, None)
