"""Flink's Sink V2 API in Python: write a sink once, run it on Spark.

Everything a sink author needs is importable from here. This package knows no
engine: ``import sinkv2`` never imports pyspark. The Spark runtime lives in
``sinkv2_spark``.
"""

from sinkv2._attrs_serializer import AttrsMsgpackSerializer
from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._commit import CommitOutcome, CommitRetryPolicy, commit_with_retries
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
from sinkv2._extensions import ArrowSinkWriter, SupportsAbort, SupportsAttemptCleanup
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
from sinkv2._state_store import (
    CommitStateStore,
    EpochRecord,
    EpochStatus,
    SinkLease,
    SqliteCommitStateStore,
)
from sinkv2._time import (
    CooperativeProcessingTimeService,
    ProcessingTimeCallback,
    ProcessingTimeService,
    ScheduledTimer,
)
from sinkv2._watermark import NO_WATERMARK, Watermark
from sinkv2._writer import CommittingSinkWriter, SinkWriter, SinkWriterContext, StatefulSinkWriter
from sinkv2.errors import (
    CommitError,
    CommitFailedError,
    CommitRetriesExhaustedError,
    CommitStateError,
    ConcurrentCommitError,
    CorruptDataError,
    IllegalLifecycleError,
    SerializationError,
    SinkConfigurationError,
    SinkDefinitionError,
    SinkV2Error,
    SinkWriterError,
    StaleFencingTokenError,
    UnsupportedVersionError,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "END_OF_INPUT",
    "INITIAL_CHECKPOINT_ID",
    "NO_WATERMARK",
    "ArrowSinkWriter",
    "AttrsMsgpackSerializer",
    "BasicCommitterInitContext",
    "BasicSinkWriterContext",
    "BasicWriterInitContext",
    "CommitError",
    "CommitFailedError",
    "CommitOutcome",
    "CommitRequest",
    "CommitRetriesExhaustedError",
    "CommitRetryPolicy",
    "CommitStateError",
    "CommitStateStore",
    "CommittableMessage",
    "CommittableSummary",
    "CommittableWithLineage",
    "Committer",
    "CommitterInitContext",
    "CommittingSinkWriter",
    "ConcurrentCommitError",
    "CooperativeProcessingTimeService",
    "CorruptDataError",
    "Counter",
    "DeliveryGuarantee",
    "EpochRecord",
    "EpochStatus",
    "Gauge",
    "IllegalLifecycleError",
    "InMemorySinkCommitterMetricGroup",
    "InMemorySinkWriterMetricGroup",
    "InitContext",
    "MetricGroup",
    "ProcessingTimeCallback",
    "ProcessingTimeService",
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
    "SinkLease",
    "SinkV2Error",
    "SinkWriter",
    "SinkWriterContext",
    "SinkWriterError",
    "SinkWriterMetricGroup",
    "SqliteCommitStateStore",
    "StaleFencingTokenError",
    "StatefulSinkWriter",
    "SupportsAbort",
    "SupportsAttemptCleanup",
    "SupportsCommitter",
    "SupportsPostCommitTopology",
    "SupportsPreCommitTopology",
    "SupportsPreWriteTopology",
    "SupportsWriterState",
    "UnsupportedVersionError",
    "Watermark",
    "WithCompatibleState",
    "WriterInitContext",
    "commit_with_retries",
    "inspect_sink",
]
