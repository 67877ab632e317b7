"""A fault-injecting wrapper around IcebergSink's writers, for Spark task-failure tests."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pyarrow as pa

from reference_sinks.iceberg import IcebergCommittable, IcebergSink, IcebergWriteResult
from reference_sinks.iceberg._writer import IcebergWriter
from sinkv2 import (
    CommitterInitContext,
    Sink,
    SinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    WriterInitContext,
)


class InjectedFault(RuntimeError):
    """The failure a `FaultyWriter` raises."""


class FaultyWriter:
    """Delegates to an IcebergWriter; fails where the schedule says."""

    def __init__(self, inner: IcebergWriter, fail_in: str | None) -> None:
        self.inner = inner
        self.fail_in = fail_in
        self.batches = 0

    def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
        self.inner.write(element, context)

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        self.inner.write_arrow_batch(batch, context)  # the staged file has rows now
        self.batches += 1
        if self.fail_in == "write":
            raise InjectedFault("injected failure after a batch")

    def flush(self, end_of_input: bool) -> None:
        self.inner.flush(end_of_input)

    def prepare_commit(self) -> list[IcebergWriteResult]:
        results = self.inner.prepare_commit()  # files closed and complete
        if self.fail_in == "prepare_commit":
            raise InjectedFault("injected failure after the files were closed")
        return results

    def close(self) -> None:
        self.inner.close()


class FaultyIcebergSink(
    Sink[dict[str, Any]],
    SupportsPreWriteTopology[dict[str, Any]],
    SupportsPreCommitTopology[IcebergWriteResult, IcebergCommittable],
    SupportsAttemptCleanup,
    SupportsAbort[IcebergCommittable],
):
    """IcebergSink whose attempt ``a`` of subtask ``s`` fails in ``failures[(s, a)]``."""

    def __init__(self, inner: IcebergSink, failures: dict[tuple[int, int], str]) -> None:
        self.inner = inner
        self.failures = failures
        self.removed: list[str] = []

    def create_writer(self, context: WriterInitContext) -> FaultyWriter:
        key = (context.get_subtask_id(), context.get_attempt_number())
        return FaultyWriter(self.inner.create_writer(context), self.failures.get(key))

    def add_pre_write_topology(self, input: Any) -> Any:
        return self.inner.add_pre_write_topology(input)

    def add_pre_commit_topology(self, committables: Any) -> Any:
        return self.inner.add_pre_commit_topology(committables)

    def get_write_result_serializer(self) -> Any:
        return self.inner.get_write_result_serializer()

    def get_committable_serializer(self) -> Any:
        return self.inner.get_committable_serializer()

    def create_committer(self, context: CommitterInitContext) -> Any:
        return self.inner.create_committer(context)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Delegates, and records which attempts' files were removed (runs on the driver)."""
        _, before = self.inner._staged_files()  # the test looks inside on purpose
        self.inner.clean_up_attempts(job_id, kept_attempt_tokens)
        _, after = self.inner._staged_files()  # the test looks inside on purpose
        left = {info.path for info in after}
        self.removed.extend(info.base_name for info in before if info.path not in left)

    def abort(self, committables: Collection[IcebergCommittable]) -> None:
        self.inner.abort(committables)
