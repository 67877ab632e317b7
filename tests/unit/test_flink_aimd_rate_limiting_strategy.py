"""Flink's ``AIMDRateLimitingStrategyTest``, one test per Java test that maps.

Flink's ``AIMDRateLimitingStrategy(increaseRate, decreaseFactor, threshold,
initialRate)`` was replaced by congestion control with AIMD scaling; its cases
are restated on sinkv2's ``CongestionControlRateLimitingStrategy`` with an
``AIMDScalingStrategy``: ``getRateLimit`` is ``get_max_batch_size``, ``scaleUp`` a
request without failures, ``scaleDown`` one with failures. Not ported:
``testFailureOnInitialBiggerThanThreshold`` - current Flink's congestion control
does not check it either (the first scale-up caps the limit).
"""

import math

import pytest

from sinkv2.asyncsink import (
    AIMDScalingStrategy,
    BasicResultInfo,
    CongestionControlRateLimitingStrategy,
)
from sinkv2.errors import SinkConfigurationError

INITIAL_RATE = 32
INCREASE_RATE = 10
THRESHOLD = 100
DECREASE_RATE = 0.5


def aimd_rate_limiting_strategy(increase_rate, decrease_factor, threshold, initial_rate):
    return CongestionControlRateLimitingStrategy(
        max_in_flight_requests=1,
        initial_max_in_flight_messages=initial_rate,
        scaling_strategy=AIMDScalingStrategy(
            rate_threshold=threshold, increase_rate=increase_rate, decrease_factor=decrease_factor
        ),
    )


def scale_up(strategy):
    strategy.register_completed_request(BasicResultInfo(0, 0))


def scale_down(strategy):
    strategy.register_completed_request(BasicResultInfo(1, 1))


def decrease_rate_with_factor(rate, factor):
    """Flink's ``Math.max((int) Math.round(rate * factor), 1)``: Java rounds half up."""
    return max(math.floor(rate * factor + 0.5), 1)


def test_initial_rate_is_set_by_constructor():
    """testInitialRateIsSetByConstructor"""
    strategy = aimd_rate_limiting_strategy(INCREASE_RATE, DECREASE_RATE, THRESHOLD, INITIAL_RATE)
    assert strategy.get_max_batch_size() == INITIAL_RATE


def test_acknowledged_requests_increase_linearly():
    """testAcknowledgedRequestsIncreaseLinearly"""
    strategy = aimd_rate_limiting_strategy(INCREASE_RATE, DECREASE_RATE, THRESHOLD, INITIAL_RATE)
    number_of_acks = 5
    for _ in range(number_of_acks):
        scale_up(strategy)
    assert strategy.get_max_batch_size() == INITIAL_RATE + number_of_acks * INCREASE_RATE


def test_failed_requests_decrease_exponentially():
    """testFailedRequestsDecreaseExponentially

    Also from 21, where Java's half-up rounding and Python's half-to-even part
    ways: 21 -> 11 -> 6 -> 3 -> 2 -> 1.
    """
    for initial in (INITIAL_RATE, 21):
        strategy = aimd_rate_limiting_strategy(INCREASE_RATE, DECREASE_RATE, THRESHOLD, initial)
        rate = strategy.get_max_batch_size()
        seen = [rate]
        for _ in range(1, 6):
            scale_down(strategy)
            assert strategy.get_max_batch_size() == decrease_rate_with_factor(rate, DECREASE_RATE)
            rate = decrease_rate_with_factor(rate, DECREASE_RATE)
            seen.append(rate)
        if initial == 21:
            assert seen == [21, 11, 6, 3, 2, 1]


def test_increase_rate_never_exceeds_threshold():
    """testIncreaseRateNeverExceedsThreshold"""
    strategy = aimd_rate_limiting_strategy(INCREASE_RATE, DECREASE_RATE, THRESHOLD, INITIAL_RATE)
    for _ in range(THRESHOLD // INCREASE_RATE + 1):
        scale_up(strategy)
    assert strategy.get_max_batch_size() == THRESHOLD


def test_failure_on_invalid_decrease_factor():
    """testFailureOnInvalidDecreaseFactor"""
    with pytest.raises(SinkConfigurationError, match="strictly between 0 and 1"):
        aimd_rate_limiting_strategy(10, 1.5, 100, 11)


def test_failure_on_invalid_increase_rate():
    """testFailureOnInvalidIncreaseRate"""
    with pytest.raises(SinkConfigurationError, match="'increase_rate' must be positive"):
        aimd_rate_limiting_strategy(-15, 0.5, 100, 11)
