"""The async sink base (Flink's FLIP-171): a writer that batches, retries and rate-limits.

A destination with a request/response client (HTTP, Redis, a queue) needs only an
`AsyncSinkBase` subclass that makes an `AsyncSinkWriter` subclass with
``submit_request_entries`` and ``get_size_in_bytes``; the base does buffering,
batching, retries with backoff, dead letters, rate limiting and writer state.

The modules behind it:
``_config`` (buffering hints, backoff), ``_rate_limiting`` (AIMD congestion
control), ``_retry`` (error verdicts, dead letters), ``_state`` (the buffered
entries and their serializer), ``_loop`` (the writer's event loop thread),
``_writer`` (buffering and the request loop) and ``_sink`` (the sink half).
"""

from sinkv2._public import publish as _publish
from sinkv2.asyncsink._config import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    AsyncSinkWriterConfiguration,
    ExponentialBackoff,
)
from sinkv2.asyncsink._rate_limiting import (
    AIMDScalingStrategy,
    BasicRequestInfo,
    BasicResultInfo,
    CongestionControlRateLimitingStrategy,
    RateLimitingStrategy,
    RequestInfo,
    ResultInfo,
    ScalingStrategy,
)
from sinkv2.asyncsink._retry import DeadLetter, ErrorVerdict, default_error_verdict
from sinkv2.asyncsink._sink import AsyncSinkBase
from sinkv2.asyncsink._state import (
    AsyncSinkWriterStateSerializer,
    BufferedRequestState,
    MsgpackRequestStateSerializer,
    RequestEntryWrapper,
)
from sinkv2.asyncsink._writer import AsyncSinkWriter, ElementConverter

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "AIMDScalingStrategy",
    "AsyncSinkBase",
    "AsyncSinkWriter",
    "AsyncSinkWriterConfiguration",
    "AsyncSinkWriterStateSerializer",
    "BasicRequestInfo",
    "BasicResultInfo",
    "BufferedRequestState",
    "CongestionControlRateLimitingStrategy",
    "DeadLetter",
    "ElementConverter",
    "ErrorVerdict",
    "ExponentialBackoff",
    "MsgpackRequestStateSerializer",
    "RateLimitingStrategy",
    "RequestEntryWrapper",
    "RequestInfo",
    "ResultInfo",
    "ScalingStrategy",
    "default_error_verdict",
]

_publish(__name__)
