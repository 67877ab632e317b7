"""Flink's ``AsyncSinkWriterConfigurationBuilderTest``, one test per Java test."""

from sinkv2.asyncsink import DEFAULT_REQUEST_TIMEOUT_MS, AsyncSinkWriterConfiguration

MINIMAL = {
    "max_batch_size": 1,
    "max_batch_size_in_bytes": 10,
    "max_in_flight_requests": 1,
    "max_buffered_requests": 2,
    "max_time_in_buffer_ms": 10,
    "max_record_size_in_bytes": 2,
}


def test_builder_sets_value_for_timeout_and_fail_on_timeout():
    """testBuilderSetsValueForTimeoutAndFailOnTimeout"""
    configuration = AsyncSinkWriterConfiguration(
        **MINIMAL, request_timeout_ms=100, fail_on_timeout=True
    )
    assert configuration.request_timeout_ms == 100
    assert configuration.fail_on_timeout is True


def test_builder_sets_default_values_for_timeout_and_fail_on_timeout():
    """testBuilderSetsDefaultValuesForTimeoutAndFailOnTimeout

    Flink's ``DEFAULT_FAIL_ON_TIMEOUT`` is ``false``; sinkv2 has no constant for it.
    """
    configuration = AsyncSinkWriterConfiguration(**MINIMAL)
    assert configuration.request_timeout_ms == DEFAULT_REQUEST_TIMEOUT_MS == 600_000
    assert configuration.fail_on_timeout is False
