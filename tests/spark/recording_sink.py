"""A small exactly-once test sink, written only against sinkv2's public API.

Writers stage each attempt's elements in a hidden JSON-lines file named with the
attempt token and log their lifecycle calls; the committer records committed
elements into a SQLite file, idempotently (one row per committed staged file).
Everything is real files; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import attrs

from sinkv2 import (
    END_OF_INPUT,
    AttrsMsgpackSerializer,
    Committer,
    CommittingSinkWriter,
    Sink,
    StatefulSinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    SupportsPostCommitTopology,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    SupportsWriterState,
)


@attrs.frozen
class StagedBatch:
    """A committable: one attempt's staged file."""

    token: str
    path: str
    count: int
    subtask_id: int
    parallelism: int
    attempt: int


@attrs.frozen
class StagedBatches:
    """The pre-commit topology's committable: all staged files of one checkpoint."""

    batches: tuple[StagedBatch, ...]


@attrs.frozen
class WriterState:
    token: str
    count: int


class FaultInjected(RuntimeError):
    pass


class RecordingWriter(
    CommittingSinkWriter[dict, StagedBatch], StatefulSinkWriter[dict, WriterState]
):
    def __init__(self, sink: RecordingSink, context) -> None:
        self.sink = sink
        self.context = context
        self.token = context.get_attempt_token()
        self.path = sink.staging / f"{self.token}.jsonl"
        self.file = self.path.open("w")
        self.count = 0
        metrics = context.metric_group()
        metrics.set_current_send_time_gauge(
            metrics.gauge_from(lambda: 5 + context.get_subtask_id())
        )
        self.log(
            "create",
            subtask=context.get_subtask_id(),
            parallelism=context.get_number_of_parallel_subtasks(),
            attempt=context.get_attempt_number(),
            job=context.get_job_id(),
            restored=context.get_restored_checkpoint_id(),
        )

    def log(self, event: str, **details) -> None:
        with (self.sink.events / f"{self.token}.jsonl").open("a") as log:
            log.write(json.dumps({"event": event, **details}) + "\n")

    def write(self, element, context) -> None:
        fail_at = self.sink.failures.get(
            (self.context.get_subtask_id(), self.context.get_attempt_number())
        )
        if fail_at is not None and self.count == fail_at:
            raise FaultInjected(f"injected failure at element {self.count}")
        if self.sink.reject_value is not None and element.get("value") == self.sink.reject_value:
            raise ValueError(f"cannot write value {element['value']!r}")
        self.file.write(json.dumps(element, sort_keys=True) + "\n")
        self.count += 1
        self.context.metric_group().get_num_records_send_counter().inc()
        if self.count == 1:
            self.log("write")

    def flush(self, end_of_input: bool) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.log("flush", end_of_input=end_of_input)

    def prepare_commit(self):
        self.log("prepare_commit")
        return [
            StagedBatch(
                self.token,
                str(self.path),
                self.count,
                self.context.get_subtask_id(),
                self.context.get_number_of_parallel_subtasks(),
                self.context.get_attempt_number(),
            )
        ]

    def snapshot_state(self, checkpoint_id: int):
        self.log("snapshot_state", checkpoint_id=checkpoint_id)
        return [WriterState(self.token, self.count)]

    def close(self) -> None:
        self.file.close()
        self.log("close", count=self.count)


class RecordingCommitter(Committer[StagedBatch]):
    def __init__(self, sink: RecordingSink) -> None:
        self.db = sqlite3.connect(sink.database)
        self.db.execute("CREATE TABLE IF NOT EXISTS files (token TEXT PRIMARY KEY, count INT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS records (token TEXT, record TEXT)")
        self.script = list(sink.commit_script)

    def commit(self, requests) -> None:
        for request in requests:
            if self.script:
                action = self.script.pop(0)
                if action == "retry":
                    request.retry_later()
                    continue
                if action == "unknown":
                    request.signal_failed_with_unknown_reason(OSError("disk on fire"))
                    continue
                if action == "known":
                    request.signal_failed_with_known_reason(FileNotFoundError("gone"))
                    continue
            batch = request.get_committable()
            with self.db:
                if self.db.execute(
                    "SELECT 1 FROM files WHERE token = ?", (batch.token,)
                ).fetchone():
                    request.signal_already_committed()
                    continue
                lines = Path(batch.path).read_text().splitlines()
                self.db.execute("INSERT INTO files VALUES (?, ?)", (batch.token, len(lines)))
                self.db.executemany(
                    "INSERT INTO records VALUES (?, ?)", [(batch.token, line) for line in lines]
                )

    def close(self) -> None:
        self.db.close()


class RecordingSink(
    Sink[dict],
    SupportsCommitter[StagedBatch],
    SupportsWriterState[dict, WriterState],
    SupportsAttemptCleanup,
    SupportsAbort[StagedBatch],
):
    def __init__(self, base: Path, *, failures=None, reject_value=None, commit_script=()) -> None:
        self.base = Path(base)
        self.staging = self.base / "_staging"
        self.events = self.base / "_events"
        self.database = str(self.base / "committed.sqlite")
        self.failures = dict(failures or {})
        self.reject_value = reject_value
        self.commit_script = tuple(commit_script)
        self.cleanups: list = []
        for folder in (self.staging, self.events):
            folder.mkdir(parents=True, exist_ok=True)

    def create_writer(self, context):
        return RecordingWriter(self, context)

    def restore_writer(self, context, recovered_state):
        return RecordingWriter(self, context)

    def get_writer_state_serializer(self):
        return AttrsMsgpackSerializer(WriterState)

    def create_committer(self, context):
        return RecordingCommitter(self)

    def get_committable_serializer(self):
        return AttrsMsgpackSerializer(StagedBatch)

    def clean_up_attempts(self, job_id, kept_attempt_tokens) -> None:
        removed = []
        for staged in self.staging.glob(f"{job_id}-*.jsonl"):
            if staged.stem not in kept_attempt_tokens:
                staged.unlink()
                removed.append(staged.stem)
        with (self.base / "cleanups.jsonl").open("a") as log:
            log.write(
                json.dumps(
                    {"job": job_id, "kept": sorted(kept_attempt_tokens), "removed": sorted(removed)}
                )
                + "\n"
            )

    def abort(self, committables) -> None:
        with (self.base / "aborts.jsonl").open("a") as log:
            for batch in committables:
                log.write(json.dumps(batch.token) + "\n")
                Path(batch.path).unlink(missing_ok=True)

    # --- reading back what is visible ----------------------------------------------------

    def committed_records(self) -> list[dict]:
        if not Path(self.database).exists():
            return []
        with sqlite3.connect(self.database) as db:
            rows = db.execute("SELECT record FROM records").fetchall()
        db.close()
        return [json.loads(line) for (line,) in rows]

    def events_by_token(self) -> dict[str, list[dict]]:
        return {
            path.stem: [json.loads(line) for line in path.read_text().splitlines()]
            for path in self.events.glob("*.jsonl")
        }

    def cleanups_log(self) -> list[dict]:
        path = self.base / "cleanups.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class TopologySink(
    RecordingSink,
    SupportsPreWriteTopology[dict],
    SupportsPreCommitTopology[StagedBatch, StagedBatches],
    SupportsPostCommitTopology[StagedBatches],
):
    """Repartitions before writing, merges a checkpoint's files into one committable,
    and records what was committed after the commit."""

    def __init__(self, base: Path, *, partitions: int = 3, **kwargs) -> None:
        super().__init__(base, **kwargs)
        self.partitions = partitions

    def add_pre_write_topology(self, input):
        return input.repartition(self.partitions)

    def get_write_result_serializer(self):
        return AttrsMsgpackSerializer(StagedBatch)

    def get_committable_serializer(self):
        return AttrsMsgpackSerializer(StagedBatches)

    def add_pre_commit_topology(self, committables):
        from sinkv2_spark.committables import aggregate_committables

        return aggregate_committables(
            committables,
            lambda batches: StagedBatches(tuple(batches)),
            read=self.get_write_result_serializer(),
            write=self.get_committable_serializer(),
        )

    def create_committer(self, context):
        return _BatchesCommitter(self)

    def add_post_commit_topology(self, committables):
        from sinkv2.runtime.committables import decode_committables

        if (self.base / "fail-post-commit").exists():
            raise RuntimeError("post-commit topology failed")

        decoded = decode_committables(committables.toArrow(), self.get_committable_serializer())
        with (self.base / "post_commit.jsonl").open("a") as log:
            for item in decoded:
                log.write(json.dumps(sorted(b.token for b in item.committable.batches)) + "\n")


class _BatchesCommitter(Committer[StagedBatches]):
    """Commits all files of a checkpoint in one SQLite transaction."""

    def __init__(self, sink: TopologySink) -> None:
        self.inner = RecordingCommitter(sink)

    def commit(self, requests) -> None:
        db = self.inner.db
        for request in requests:
            batches = request.get_committable().batches
            with db:
                tokens = [b.token for b in batches]
                if (
                    tokens
                    and db.execute(
                        f"SELECT 1 FROM files WHERE token IN ({','.join('?' * len(tokens))})",
                        tokens,
                    ).fetchone()
                ):
                    request.signal_already_committed()
                    continue
                for batch in batches:
                    lines = Path(batch.path).read_text().splitlines()
                    db.execute("INSERT INTO files VALUES (?, ?)", (batch.token, len(lines)))
                    db.executemany(
                        "INSERT INTO records VALUES (?, ?)", [(batch.token, line) for line in lines]
                    )

    def close(self) -> None:
        self.inner.close()


__all__ = ["END_OF_INPUT", "FaultInjected", "RecordingSink", "StagedBatch", "TopologySink"]
