"""Flink's ``AIMDScalingStrategyTest``, one test per Java test.

Flink's older ``testIncreaseRateLargerThanRateThresholdRejected`` is gone from
current Flink (its check was dropped), so it is not ported.
"""

import pytest

from sinkv2.asyncsink import AIMDScalingStrategy
from sinkv2.errors import SinkConfigurationError


def test_scale_up_additively():
    """testScaleUpAdditively"""
    increase_rate = 10
    current_rate = 4
    scaling = AIMDScalingStrategy(
        rate_threshold=1000, increase_rate=increase_rate, decrease_factor=0.5
    )
    assert scaling.scale_up(current_rate) == increase_rate + current_rate


def test_scale_up_respects_rate_threshold():
    """testScaleUpRespectsRateThreshold"""
    increase_rate = 10
    current_rate = 14
    rate_threshold = 20
    scaling = AIMDScalingStrategy(
        rate_threshold=rate_threshold, increase_rate=increase_rate, decrease_factor=0.5
    )
    assert scaling.scale_up(increase_rate + current_rate) == rate_threshold


def test_scale_down_by_factor():
    """testScaleDownByFactor"""
    scaling = AIMDScalingStrategy(rate_threshold=1000, increase_rate=10, decrease_factor=0.4)
    # round(10 * 0.4 = 4) = 4
    assert scaling.scale_down(10) == 4
    # round(314 * 0.4 = 125.6) = 126
    assert scaling.scale_down(314) == 126


def test_scale_down_by_factor_stops_at_one():
    """testScaleDownByFactorStopsAtOne"""
    scaling = AIMDScalingStrategy(rate_threshold=1000, increase_rate=10, decrease_factor=0.1)
    # round(1 * 0.1 = 0.1) = 0, but the lowest is 1
    assert scaling.scale_down(1) == 1


def test_invalid_increase_rate():
    """testInvalidIncreaseRate"""
    with pytest.raises(SinkConfigurationError, match="'increase_rate' must be positive"):
        AIMDScalingStrategy(rate_threshold=100, increase_rate=0, decrease_factor=0.5)


def test_invalid_decrease_factor():
    """testInvalidDecreaseFactor"""
    with pytest.raises(SinkConfigurationError, match="strictly between 0 and 1"):
        AIMDScalingStrategy(rate_threshold=100, increase_rate=1, decrease_factor=0)
    with pytest.raises(SinkConfigurationError, match="strictly between 0 and 1"):
        AIMDScalingStrategy(rate_threshold=100, increase_rate=1, decrease_factor=1.0)


def test_invalid_rate_threshold():
    """testInvalidRateThreshold"""
    with pytest.raises(SinkConfigurationError, match="'rate_threshold' must be positive"):
        AIMDScalingStrategy(rate_threshold=0, increase_rate=1, decrease_factor=0.5)
