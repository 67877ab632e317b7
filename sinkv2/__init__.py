"""Flink's Sink V2 API in Python: write a sink once, run it on Spark.

Everything a sink author needs is importable from here. This package knows no
engine: ``import sinkv2`` never imports pyspark. The engine-neutral runtime (the
commit coordinator and its state stores) is ``sinkv2.runtime``; the Spark runtime
lives in ``sinkv2_spark``.
"""

from sinkv2._attrs_serializer import AttrsMsgpackSerializer
from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._committer import CommitRequest, Committer
from sinkv2._context import (
    INITIAL_CHECKPOINT_ID,
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CommitterInitContext,
    InitContext,
    WriterInitContext,
)
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._extensions import (
    ArrowSinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommittedCheckpoints,
)
from sinkv2._messages import (
    END_OF_INPUT,
    CommittableMessage,
    CommittableSummary,
    CommittableWithLineage,
)
from sinkv2._metrics import (
    Counter,
    Gauge,
    InMemorySinkCommitterMetricGroup,
    InMemorySinkWriterMetricGroup,
    MetricGroup,
    SimpleCounter,
    SinkCommitterMetricGroup,
    SinkWriterMetricGroup,
)
from sinkv2._native import (
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    SupportsNativeFileWrite,
    native_attempt_token,
)
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2._sink import (
    Sink,
    SupportsCommitter,
    SupportsPostCommitTopology,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    SupportsWriterState,
    WithCompatibleState,
)
from sinkv2._time import (
    CooperativeProcessingTimeService,
    ProcessingTimeCallback,
    ProcessingTimeService,
    ScheduledTimer,
)
from sinkv2._watermark import NO_WATERMARK, Watermark
from sinkv2._writer import CommittingSinkWriter, SinkWriter, SinkWriterContext, StatefulSinkWriter
from sinkv2.asyncsink import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    AIMDScalingStrategy,
    AsyncSinkBase,
    AsyncSinkWriter,
    AsyncSinkWriterConfiguration,
    AsyncSinkWriterStateSerializer,
    BasicRequestInfo,
    BasicResultInfo,
    BufferedRequestState,
    CongestionControlRateLimitingStrategy,
    DeadLetter,
    ElementConverter,
    ErrorVerdict,
    ExponentialBackoff,
    MsgpackRequestStateSerializer,
    RateLimitingStrategy,
    RequestEntryWrapper,
    RequestInfo,
    ResultInfo,
    ScalingStrategy,
    default_error_verdict,
)
from sinkv2.errors import (
    CommitError,
    CommitFailedError,
    CommitRetriesExhaustedError,
    CommitStateError,
    ConcurrentCommitError,
    CorruptDataError,
    DestinationError,
    FatalDestinationError,
    IllegalLifecycleError,
    RequestTimeoutError,
    RetryableError,
    SerializationError,
    SinkConfigurationError,
    SinkDefinitionError,
    SinkV2Error,
    SinkWriterError,
    StaleFencingTokenError,
    ThrottledError,
    UndeliverableEntriesError,
    UnsupportedVersionError,
)

__version__ = "0.1.0.dev0"

_MOVED_TO_RUNTIME = frozenset(
    {
        "CommitOutcome",
        "CommitRetryPolicy",
        "CommitStateStore",
        "EpochRecord",
        "EpochStatus",
        "SinkLease",
        "SqliteCommitStateStore",
        "commit_with_retries",
    }
)


def __getattr__(name: str) -> object:
    """Point code written for 0.1's facade at the runtime names' new home."""
    if name in _MOVED_TO_RUNTIME:
        raise AttributeError(
            f"sinkv2.{name} moved to the engine runtime: import it with "
            f"'from sinkv2.runtime import {name}'"
        )
    raise AttributeError(f"module 'sinkv2' has no attribute {name!r}")


__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "END_OF_INPUT",
    "INITIAL_CHECKPOINT_ID",
    "NO_WATERMARK",
    "AIMDScalingStrategy",
    "ArrowSinkWriter",
    "AsyncSinkBase",
    "AsyncSinkWriter",
    "AsyncSinkWriterConfiguration",
    "AsyncSinkWriterStateSerializer",
    "AttrsMsgpackSerializer",
    "BasicCommitterInitContext",
    "BasicRequestInfo",
    "BasicResultInfo",
    "BasicSinkWriterContext",
    "BasicWriterInitContext",
    "BufferedRequestState",
    "CommitError",
    "CommitFailedError",
    "CommitRequest",
    "CommitRetriesExhaustedError",
    "CommitStateError",
    "CommittableMessage",
    "CommittableSummary",
    "CommittableWithLineage",
    "Committer",
    "CommitterInitContext",
    "CommittingSinkWriter",
    "ConcurrentCommitError",
    "CongestionControlRateLimitingStrategy",
    "CooperativeProcessingTimeService",
    "CorruptDataError",
    "Counter",
    "DeadLetter",
    "DeliveryGuarantee",
    "DestinationError",
    "ElementConverter",
    "ErrorVerdict",
    "ExponentialBackoff",
    "FatalDestinationError",
    "Gauge",
    "IllegalLifecycleError",
    "InMemorySinkCommitterMetricGroup",
    "InMemorySinkWriterMetricGroup",
    "InitContext",
    "MetricGroup",
    "MsgpackRequestStateSerializer",
    "NativeFileWrite",
    "NativeFilesWritten",
    "NativeWriteUnavailable",
    "ProcessingTimeCallback",
    "ProcessingTimeService",
    "RateLimitingStrategy",
    "RequestEntryWrapper",
    "RequestInfo",
    "RequestTimeoutError",
    "ResultInfo",
    "RetryableError",
    "ScalingStrategy",
    "ScheduledTimer",
    "SerializationError",
    "SimpleCounter",
    "SimpleVersionedSerialization",
    "SimpleVersionedSerializer",
    "Sink",
    "SinkCapabilities",
    "SinkCommitterMetricGroup",
    "SinkConfigurationError",
    "SinkDefinitionError",
    "SinkV2Error",
    "SinkWriter",
    "SinkWriterContext",
    "SinkWriterError",
    "SinkWriterMetricGroup",
    "StaleFencingTokenError",
    "StatefulSinkWriter",
    "SupportsAbort",
    "SupportsAttemptCleanup",
    "SupportsCommittedCheckpoints",
    "SupportsCommitter",
    "SupportsNativeFileWrite",
    "SupportsPostCommitTopology",
    "SupportsPreCommitTopology",
    "SupportsPreWriteTopology",
    "SupportsWriterState",
    "ThrottledError",
    "UndeliverableEntriesError",
    "UnsupportedVersionError",
    "Watermark",
    "WithCompatibleState",
    "WriterInitContext",
    "default_error_verdict",
    "inspect_sink",
    "native_attempt_token",
]
