"""Flink's Sink V2 API in Python: write a sink once, run it on Spark.

What a sink author implements and uses is importable from here: the sink and
writer interfaces, the committer and its commit requests, the contexts a sink is
handed, messages, versioned serializers and the capability checks. Each other name
has one home of its own:

- ``sinkv2.errors``: every error sinkv2 raises, under one root;
- ``sinkv2.asyncsink``: the async sink base (Flink's FLIP-171);
- ``sinkv2.metrics``: Flink's metric names and the metric group protocols;
- ``sinkv2.source``: Flink's FLIP-27 source API;
- ``sinkv2.runtime``: what an engine builds on (the commit coordinator, its stores,
  the contexts and metric groups it hands to a sink);
- ``sinkv2.testing``: the contract-test kit.

This package knows no engine: ``import sinkv2`` never imports pyspark. The Spark
runtime lives in ``sinkv2_spark``.
"""

from sinkv2._attrs_serializer import AttrsMsgpackSerializer
from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._committer import CommitRequest, Committer
from sinkv2._context import (
    INITIAL_CHECKPOINT_ID,
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
from sinkv2._native import (
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    SupportsNativeFileWrite,
)
from sinkv2._public import publish as _publish
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
from sinkv2._time import ProcessingTimeCallback, ProcessingTimeService, ScheduledTimer
from sinkv2._watermark import NO_WATERMARK, Watermark
from sinkv2._writer import CommittingSinkWriter, SinkWriter, SinkWriterContext, StatefulSinkWriter

__version__ = "0.1.0.dev0"

__all__ = [
    "END_OF_INPUT",
    "INITIAL_CHECKPOINT_ID",
    "NO_WATERMARK",
    "ArrowSinkWriter",
    "AttrsMsgpackSerializer",
    "CommitRequest",
    "CommittableMessage",
    "CommittableSummary",
    "CommittableWithLineage",
    "Committer",
    "CommitterInitContext",
    "CommittingSinkWriter",
    "DeliveryGuarantee",
    "InitContext",
    "NativeFileWrite",
    "NativeFilesWritten",
    "NativeWriteUnavailable",
    "ProcessingTimeCallback",
    "ProcessingTimeService",
    "ScheduledTimer",
    "SimpleVersionedSerialization",
    "SimpleVersionedSerializer",
    "Sink",
    "SinkCapabilities",
    "SinkWriter",
    "SinkWriterContext",
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
    "Watermark",
    "WithCompatibleState",
    "WriterInitContext",
    "inspect_sink",
]

_publish(__name__)
