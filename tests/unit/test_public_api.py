"""The public surface is exactly what the docs list; nothing leaks, nothing is missing."""

import subprocess
import sys

import pytest

import sinkv2
import sinkv2.asyncsink
import sinkv2.errors
import sinkv2.metrics

FLINK_NAMES = {
    "END_OF_INPUT",
    "INITIAL_CHECKPOINT_ID",
    "CommitRequest",
    "CommittableMessage",
    "CommittableSummary",
    "CommittableWithLineage",
    "Committer",
    "CommitterInitContext",
    "CommittingSinkWriter",
    "DeliveryGuarantee",
    "InitContext",
    "ProcessingTimeCallback",
    "ProcessingTimeService",
    "ScheduledTimer",
    "SimpleVersionedSerialization",
    "SimpleVersionedSerializer",
    "Sink",
    "SinkWriter",
    "SinkWriterContext",
    "StatefulSinkWriter",
    "SupportsCommitter",
    "SupportsPostCommitTopology",
    "SupportsPreCommitTopology",
    "SupportsPreWriteTopology",
    "SupportsWriterState",
    "Watermark",
    "WithCompatibleState",
    "WriterInitContext",
}
ASYNC_SINK_FLINK_NAMES = {
    "AIMDScalingStrategy",
    "AsyncSinkBase",
    "AsyncSinkWriter",
    "AsyncSinkWriterConfiguration",
    "AsyncSinkWriterStateSerializer",
    "BasicRequestInfo",
    "BasicResultInfo",
    "BufferedRequestState",
    "CongestionControlRateLimitingStrategy",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "ElementConverter",
    "RateLimitingStrategy",
    "RequestEntryWrapper",
    "RequestInfo",
    "ResultInfo",
    "ScalingStrategy",
}
ASYNC_SINK_EXTENSIONS = {
    "DeadLetter",
    "ErrorVerdict",
    "ExponentialBackoff",
    "MsgpackRequestStateSerializer",
    "default_error_verdict",
}
METRICS = {
    "Counter",
    "Gauge",
    "MetricGroup",
    "SimpleCounter",
    "SinkCommitterMetricGroup",
    "SinkWriterMetricGroup",
}
EXTENSIONS = {
    "NO_WATERMARK",
    "ArrowSinkWriter",
    "AttrsMsgpackSerializer",
    "SupportsAbort",
    "SupportsAttemptCleanup",
    "SupportsCommittedCheckpoints",
    "NativeFileWrite",
    "NativeFilesWritten",
    "NativeWriteUnavailable",
    "SinkCapabilities",
    "SupportsNativeFileWrite",
    "inspect_sink",
}
RUNTIME = {
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_FILE_NAME",
    "DEFAULT_PLANNING_TIMEOUT_S",
    "ArrowBatchOutput",
    "BoundedPlan",
    "TaskReaderContext",
    "plan_bounded_read",
    "read_subtask",
    "MAX_SPLITS_PER_EPOCH",
    "JobError",
    "JobOutcome",
    "EpochSlice",
    "ReadLimit",
    "SourceEpochCoordinator",
    "SourceOffset",
    "check_streamable",
    "read_epoch_slice",
    "DEFAULT_RETAIN",
    "SCHEMA_VERSION",
    "STAGE_EVENTS",
    "STATE_DIR_ENV",
    "BasicCommitterInitContext",
    "BasicSinkWriterContext",
    "BasicWriterInitContext",
    "CheckpointRunner",
    "CommitCoordinator",
    "CommitOutcome",
    "CommitRequestImpl",
    "CommitRequestState",
    "CommitRetryPolicy",
    "CommitStateStore",
    "CommitStatus",
    "CommittableStreams",
    "CooperativeProcessingTimeService",
    "CoordinatorState",
    "EpochCommit",
    "EpochNeed",
    "EpochPlan",
    "EpochRecord",
    "EpochStatus",
    "InMemoryMetricGroup",
    "InMemorySinkCommitterMetricGroup",
    "InMemorySinkWriterMetricGroup",
    "PendingEpoch",
    "PostgresCommitStateStore",
    "Recovery",
    "Restore",
    "SinkHolder",
    "SinkLease",
    "SinkResult",
    "SourceEpochRecord",
    "SourceLease",
    "SourceStateStore",
    "SqliteCommitStateStore",
    "StageListener",
    "StreamWriterStage",
    "SubtaskSnapshot",
    "SubtaskStates",
    "WriterStage",
    "WriterStageOutput",
    "WriterStates",
    "WriterSubtask",
    "commit_with_retries",
    "default_state_store_path",
    "native_attempt_token",
    "drain_writer_states",
    "redistribute",
    "state_name",
}
ERRORS = {
    "CommitError",
    "CommitFailedError",
    "CommitRetriesExhaustedError",
    "CommitStateError",
    "ConcurrentCommitError",
    "CorruptDataError",
    "DestinationError",
    "FatalDestinationError",
    "IllegalLifecycleError",
    "RequestTimeoutError",
    "RetryableError",
    "SerializationError",
    "SinkConfigurationError",
    "SinkDefinitionError",
    "SinkV2Error",
    "SinkWriterError",
    "StaleFencingTokenError",
    "ThrottledError",
    "UndeliverableEntriesError",
    "UnsupportedVersionError",
}


def test_all_is_exactly_the_documented_names():
    assert set(sinkv2.__all__) == FLINK_NAMES | EXTENSIONS
    assert len(sinkv2.__all__) == len(set(sinkv2.__all__))


def test_every_exported_name_resolves():
    for name in sinkv2.__all__:
        assert getattr(sinkv2, name) is not None, name


def test_all_is_sorted_the_way_ruff_sorts_it():
    assert sinkv2.__all__ == sorted(sinkv2.__all__, key=lambda n: (not n.isupper(), n))


def test_errors_module_exports_every_error_and_all_derive_from_the_root():
    assert set(sinkv2.errors.__all__) == ERRORS
    for name in ERRORS:
        assert issubclass(getattr(sinkv2.errors, name), sinkv2.errors.SinkV2Error)


def test_errors_mix_in_the_builtin_they_mean():
    assert issubclass(sinkv2.errors.SinkDefinitionError, TypeError)
    assert issubclass(sinkv2.errors.SinkConfigurationError, ValueError)
    assert issubclass(sinkv2.errors.SerializationError, ValueError)
    assert issubclass(sinkv2.errors.IllegalLifecycleError, RuntimeError)


def test_flink_nested_names_are_reachable_the_flink_way():
    assert sinkv2.SinkWriter.Context is sinkv2.SinkWriterContext
    assert sinkv2.SupportsWriterState.WithCompatibleState is sinkv2.WithCompatibleState


def test_asyncsink_exports_the_async_names_and_the_facade_none_of_them():
    assert set(sinkv2.asyncsink.__all__) == ASYNC_SINK_FLINK_NAMES | ASYNC_SINK_EXTENSIONS
    assert sinkv2.asyncsink.__all__ == sorted(
        sinkv2.asyncsink.__all__, key=lambda n: (not n.isupper(), n)
    )
    assert not set(sinkv2.asyncsink.__all__) & set(sinkv2.__all__)


def test_errors_and_metric_protocols_have_their_own_modules_not_the_facade():
    assert not ERRORS & set(sinkv2.__all__)
    assert set(sinkv2.metrics.__all__) >= METRICS
    assert not set(sinkv2.metrics.__all__) & set(sinkv2.__all__)


def test_runtime_exports_exactly_the_runtime_names_and_the_facade_none_of_them():
    import sinkv2.runtime

    assert set(sinkv2.runtime.__all__) == RUNTIME
    assert sinkv2.runtime.__all__ == sorted(
        sinkv2.runtime.__all__, key=lambda n: (not n.isupper(), n)
    )
    for name in sinkv2.runtime.__all__:
        assert getattr(sinkv2.runtime, name) is not None, name
    assert not RUNTIME & set(sinkv2.__all__)


def test_a_name_the_facade_does_not_have_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'SinkConfigurationError'"):
        sinkv2.SinkConfigurationError  # noqa: B018  # the attribute access is the test


def test_importing_the_runtime_loads_neither_pyspark_nor_pyarrow_nor_psycopg():
    code = (
        "import sys, sinkv2.runtime; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('pyspark', 'pyarrow', 'psycopg', 'psycopg_binary')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_metrics_module_resolves_everything_it_exports():
    for name in sinkv2.metrics.__all__:
        assert getattr(sinkv2.metrics, name) is not None


def test_end_of_input_is_flinks_long_max_value():
    assert sinkv2.END_OF_INPUT == 2**63 - 1 == 9223372036854775807


def test_importing_sinkv2_never_imports_pyspark():
    code = (
        "import sys; sys.modules['pyspark'] = None; import sinkv2, sinkv2.metrics, "
        "sinkv2.errors; assert not any(m.startswith(('pyspark', 'pyarrow')) for m in sys.modules "
        "if sys.modules[m] is not None), sorted(m for m in sys.modules if 'py' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
