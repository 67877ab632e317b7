"""Flink's sink metric names, and the metric protocols writers and committers receive.

The in-memory groups an engine hands in (`InMemorySinkWriterMetricGroup`, ...) are
implementations, in ``sinkv2.runtime``.
"""

from sinkv2._metrics import (
    ALREADY_COMMITTED_COMMITTABLES,
    CURRENT_SEND_TIME,
    FAILED_COMMITTABLES,
    NUM_BYTES_SEND,
    NUM_RECORDS_SEND,
    NUM_RECORDS_SEND_ERRORS,
    PENDING_COMMITTABLES,
    RETRIED_COMMITTABLES,
    SUCCESSFUL_COMMITTABLES,
    TOTAL_COMMITTABLES,
    Counter,
    Gauge,
    MetricGroup,
    SimpleCounter,
    SinkCommitterMetricGroup,
    SinkWriterMetricGroup,
)
from sinkv2._public import publish as _publish

__all__ = [
    "ALREADY_COMMITTED_COMMITTABLES",
    "CURRENT_SEND_TIME",
    "FAILED_COMMITTABLES",
    "NUM_BYTES_SEND",
    "NUM_RECORDS_SEND",
    "NUM_RECORDS_SEND_ERRORS",
    "PENDING_COMMITTABLES",
    "RETRIED_COMMITTABLES",
    "SUCCESSFUL_COMMITTABLES",
    "TOTAL_COMMITTABLES",
    "Counter",
    "Gauge",
    "MetricGroup",
    "SimpleCounter",
    "SinkCommitterMetricGroup",
    "SinkWriterMetricGroup",
]

_publish(__name__)
