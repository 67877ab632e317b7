"""The commit coordinator, engine-free: one job's epochs, and what the next job recovers.

A small real sink stages one JSON-lines file per subtask and renames it into place
on commit; a local writer stage runs its writers in process. A "crash" is an
exception thrown from the stage listener at a chosen event, after which the
coordinator is closed without `finish` (the lease dies with a process; its job
stays unfinished), as a killed driver leaves it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkv2 import (
    AttrsMsgpackSerializer,
    Committer,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
)
from sinkv2.errors import (
    CommitFailedError,
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
)
from sinkv2.runtime import (
    STAGE_EVENTS,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CommitCoordinator,
    CommitRetryPolicy,
    CommitStatus,
    CoordinatorState,
    EpochNeed,
    EpochStatus,
    SqliteCommitStateStore,
    WriterStageOutput,
)
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA, LocalCommittableStream

NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, jitter=0.0)


@attrs.frozen
class Staged:
    staged: str
    final: str


class Crash(BaseException):
    """A driver dying at a stage event."""


class FileWriter:
    def __init__(self, sink: FileSink, context: BasicWriterInitContext) -> None:
        self.sink = sink
        self.token = context.get_attempt_token()
        self.lines: list[str] = []

    def write(self, element: Any, context: Any) -> None:
        self.lines.append(json.dumps(element))

    def flush(self, end_of_input: bool) -> None:
        pass

    def prepare_commit(self) -> list[Staged]:
        staged = self.sink.staging / f"{self.token}.jsonl"
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text("".join(f"{line}\n" for line in self.lines))
        return [Staged(str(staged), str(self.sink.base / f"part-{self.token}.jsonl"))]

    def write_watermark(self, watermark: Any) -> None:
        pass

    def close(self) -> None:
        pass


class RenameCommitter(Committer[Staged]):
    def __init__(self, sink: FileSink) -> None:
        self.sink = sink

    def commit(self, requests: Collection[Committer.CommitRequest[Staged]]) -> None:
        for request in requests:
            if self.sink.fail_commits:
                request.signal_failed_with_unknown_reason(OSError("destination down"))
                continue
            file = request.get_committable()
            if os.path.exists(file.staged):
                os.replace(file.staged, file.final)
            elif os.path.exists(file.final):
                request.signal_already_committed()
            else:
                request.signal_failed_with_unknown_reason(FileNotFoundError(file.staged))

    def close(self) -> None:
        pass


class FileSink(SupportsCommitter[Staged], SupportsAttemptCleanup, SupportsAbort[Staged]):
    def __init__(self, base: Path) -> None:
        self.base = base
        self.staging = base / "_staging"
        self.fail_commits = False
        self.cleanups: list[tuple[str, list[str]]] = []
        self.aborted: list[Staged] = []

    def create_writer(self, context: Any) -> FileWriter:
        return FileWriter(self, context)

    def create_committer(self, context: Any) -> RenameCommitter:
        return RenameCommitter(self)

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Staged]:
        return AttrsMsgpackSerializer(Staged)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        self.cleanups.append((job_id, sorted(kept_attempt_tokens)))
        for path in self.staging.glob(f"{job_id}-*.jsonl"):
            if path.stem not in kept_attempt_tokens:
                path.unlink()

    def abort(self, committables: Collection[Staged]) -> None:
        self.aborted.extend(committables)
        for file in committables:
            Path(file.staged).unlink(missing_ok=True)

    def visible(self) -> list[Any]:
        return sorted(
            json.loads(line)
            for path in self.base.glob("part-*.jsonl")
            for line in path.read_text().splitlines()
        )

    def staged(self) -> list[Path]:
        return sorted(self.staging.glob("*")) if self.staging.exists() else []


class LocalStreams:
    def to_stream(self, table: pa.Table) -> LocalCommittableStream:
        return LocalCommittableStream(table)

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        assert isinstance(stream, LocalCommittableStream), produced_by
        return stream.committable_table()


def writer_stage(sink: FileSink, partitions: list[list[Any]]):
    """Runs one writer per partition in process, as Spark's writer stage would."""

    def run(job_id: str, checkpoint_id: int) -> WriterStageOutput:
        serializer = sink.get_committable_serializer()
        rows, tokens = [], set()
        for subtask, elements in enumerate(partitions):
            token = f"{job_id}-{subtask:05d}-0"
            context = BasicWriterInitContext(
                subtask_id=subtask,
                number_of_parallel_subtasks=len(partitions),
                job_id=job_id,
                attempt_token=token,
            )
            writer = sink.create_writer(context)
            for element in elements:
                writer.write(element, BasicSinkWriterContext())
            writer.flush(True)
            for index, committable in enumerate(writer.prepare_commit()):
                rows.append(
                    {
                        "checkpoint_id": checkpoint_id,
                        "subtask_id": subtask,
                        "number_of_subtasks": len(partitions),
                        "serializer_version": serializer.get_version(),
                        "payload": serializer_frame(serializer, committable),
                        "lineage": [f"{subtask}:{index}"],
                    }
                )
            writer.close()
            tokens.add(token)
        table = pa.Table.from_pylist(rows, schema=COMMITTABLE_SCHEMA)
        return WriterStageOutput(
            table=table,
            attempt_tokens=frozenset(tokens),
            records=sum(map(len, partitions)),
            subtasks=len(partitions),
        )

    return run


def serializer_frame(serializer: Any, value: Any) -> bytes:
    from sinkv2 import SimpleVersionedSerialization

    return SimpleVersionedSerialization.write_version_and_serialize(serializer, value)


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")


@pytest.fixture
def sink(tmp_path):
    return FileSink(tmp_path / "out")


def coordinator(sink, store, events=None, crash_at=None, **kwargs):
    def on_stage(event, epoch):
        if events is not None:
            events.append(event)
        if event == crash_at:
            raise Crash(event)

    return CommitCoordinator(
        sink,
        sink_id="orders",
        store=store,
        streams=LocalStreams(),
        retry_policy=NO_WAIT,
        on_stage=on_stage,
        sleep=lambda seconds: None,
        **kwargs,
    )


def run(sink, store, data, *, checkpoint_id=None, crash_at=None, events=None):
    """One job, as the Spark translator runs it; a crash leaves the job unfinished."""
    job = coordinator(sink, store, events, crash_at)
    try:
        recovery = job.open()
        result = job.run_epoch(
            writer_stage(sink, data), checkpoint_id=checkpoint_id, recovery=recovery
        )
    except BaseException:
        job.close()
        raise
    job.finish()
    return result


DATA = [[1, 2, 3], [4, 5], []]
ALL = [1, 2, 3, 4, 5]


def test_a_job_records_itself_writes_commits_and_leaves_nothing_staged(sink, store):
    events = []
    result = run(sink, store, DATA, checkpoint_id=7, events=events)
    assert result.status is CommitStatus.COMMITTED
    assert (result.epoch, result.checkpoint_id, result.committed) == (7, 7, 3)
    assert events == [e for e in STAGE_EVENTS if e != "post-commit-finished"]
    assert sink.visible() == ALL
    assert sink.staged() == []
    job = result.job_id
    assert sink.cleanups == [(job, sorted(f"{job}-{i:05d}-0" for i in range(3))), (job, [])]
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.get(7).status is EpochStatus.COMMITTED
        assert lease.unfinished_jobs() == []


def test_a_committed_epoch_is_not_written_again(sink, store):
    run(sink, store, DATA, checkpoint_id=7)
    again = run(sink, store, [[99]], checkpoint_id=7)
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert again.records_written == 0
    assert sink.visible() == ALL


@pytest.mark.parametrize("crash_at", ["job-recorded", "writers-finished"])
@pytest.mark.parametrize("checkpoint_id", [7, None])
def test_a_job_that_died_before_pending_is_cleaned_up_by_the_next(
    sink, store, crash_at, checkpoint_id
):
    with pytest.raises(Crash):
        run(sink, store, DATA, checkpoint_id=checkpoint_id, crash_at=crash_at)
    died_with_staged = len(sink.staged())
    result = run(sink, store, DATA, checkpoint_id=checkpoint_id)
    assert len(result.cleaned_jobs) == 1
    assert result.status is CommitStatus.COMMITTED
    assert sink.visible() == ALL
    assert sink.staged() == []
    assert died_with_staged == (3 if crash_at == "writers-finished" else 0)


@pytest.mark.parametrize(
    "crash_at", ["pending-recorded", "committer-finished", "committed-recorded"]
)
def test_a_job_with_a_checkpoint_id_that_died_after_pending_is_finished_by_the_next(
    sink, store, crash_at
):
    with pytest.raises(Crash):
        run(sink, store, DATA, checkpoint_id=7, crash_at=crash_at)
    result = run(sink, store, [[99]], checkpoint_id=7)
    expected = (
        CommitStatus.ALREADY_COMMITTED
        if crash_at == "committed-recorded"
        else CommitStatus.RECOMMITTED
    )
    assert result.status is expected
    assert result.records_written == 0  # never written twice
    if crash_at == "committer-finished":
        assert result.already_committed == 3
    assert sink.visible() == ALL
    assert sink.staged() == []
    assert len(result.cleaned_jobs) == 1


def test_a_pending_epoch_is_committed_by_a_run_of_another_checkpoint(sink, store):
    with pytest.raises(Crash):
        run(sink, store, DATA, checkpoint_id=7, crash_at="pending-recorded")
    result = run(sink, store, [[6]], checkpoint_id=8)
    assert result.status is CommitStatus.COMMITTED
    assert result.recommitted_epochs == (7,)
    assert sink.visible() == [*ALL, 6]
    assert sink.staged() == []


def test_a_pending_epoch_without_a_checkpoint_id_is_aborted(sink, store):
    with pytest.raises(Crash):
        run(sink, store, DATA, crash_at="pending-recorded")
    result = run(sink, store, DATA)
    assert result.aborted_epochs == (1,)
    assert result.epoch == 2
    assert len(sink.aborted) == 3
    assert sink.visible() == ALL
    assert sink.staged() == []


def test_a_recovery_commit_that_fails_keeps_the_epoch_pending_and_the_staged_data(sink, store):
    with pytest.raises(Crash):
        run(sink, store, DATA, checkpoint_id=7, crash_at="pending-recorded")
    sink.fail_commits = True
    with pytest.raises(CommitFailedError, match="epoch 7"):
        run(sink, store, [[99]], checkpoint_id=8)
    assert len(sink.staged()) == 3  # still needed: epoch 7 commits them later
    sink.fail_commits = False
    result = run(sink, store, [[6]], checkpoint_id=8)
    assert result.recommitted_epochs == (7,)
    assert len(result.cleaned_jobs) == 2
    assert sink.visible() == [*ALL, 6]
    assert sink.staged() == []


def test_a_second_live_coordinator_of_the_sink_id_is_refused(sink, store):
    first = coordinator(sink, store)
    first.open()
    second = coordinator(sink, store)
    with pytest.raises(ConcurrentCommitError):
        second.open()
    first.finish()
    second = coordinator(sink, store)
    assert second.open().cleaned_jobs == ()  # the first finished: nothing to clean
    second.close()


def test_the_lifecycle_is_enforced_with_one_message_per_illegal_step(sink, store):
    job = coordinator(sink, store)
    assert job.state is CoordinatorState.NEW
    with pytest.raises(IllegalLifecycleError, match="not open yet"):
        _ = job.lease
    job.open()
    assert job.state is CoordinatorState.OPEN
    with pytest.raises(IllegalLifecycleError, match="opened before"):
        job.open()
    job.close()
    job.close()  # idempotent
    assert job.state is CoordinatorState.CLOSED
    with pytest.raises(IllegalLifecycleError, match="it is closed"):
        job.finish()


def test_a_restored_state_keeps_the_attempts_it_refers_to(sink, store):
    with pytest.raises(Crash):
        run(sink, store, DATA, checkpoint_id=7, crash_at="writers-finished")
    kept = {path.stem for path in sink.staged()}
    job = coordinator(sink, store)
    recovery = job.open(keep_attempt_tokens=kept)
    job.close()
    assert {path.stem for path in sink.staged()} == kept
    assert sink.cleanups[-1] == (recovery.cleaned_jobs[0], sorted(kept))


RUNS = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from([None, *STAGE_EVENTS])), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(runs=RUNS)
def test_any_schedule_of_crashes_ends_exactly_once_with_nothing_staged(tmp_path_factory, runs):
    base = tmp_path_factory.mktemp("schedule")
    sink = FileSink(base / "out")
    store = SqliteCommitStateStore(base / "state.sqlite")
    data = {c: [[c * 10 + 1, c * 10 + 2], [c * 10 + 3]] for c in (1, 2, 3)}
    for checkpoint_id, crash_at in runs:
        with contextlib.suppress(Crash):
            run(sink, store, data[checkpoint_id], checkpoint_id=checkpoint_id, crash_at=crash_at)
    for checkpoint_id in sorted({c for c, _ in runs}):
        result = run(sink, store, data[checkpoint_id], checkpoint_id=checkpoint_id)
        assert result.status is not None
    expected = sorted(x for c in {c for c, _ in runs} for part in data[c] for x in part)
    assert sink.visible() == expected  # every checkpoint's data, exactly once
    assert sink.staged() == []
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.unfinished_jobs() == []
        assert {r.status for r in lease.epochs()} == {EpochStatus.COMMITTED}


def test_a_clean_up_that_fails_after_the_commit_warns_and_the_next_run_retries_it(
    sink, store, caplog
):
    failing = {"on": True}
    clean = sink.clean_up_attempts

    def clean_up_attempts(job_id, kept):
        if failing["on"] and not kept:
            raise OSError("permission denied")
        clean(job_id, kept)

    sink.clean_up_attempts = clean_up_attempts
    result = run(sink, store, DATA, checkpoint_id=7)
    assert result.status is CommitStatus.COMMITTED  # the commit stands
    assert f"could not remove what job {result.job_id!r} staged" in caplog.text
    assert len(sink.staged()) == 0  # the committer moved the files; cleanup found nothing
    failing["on"] = False
    again = run(sink, store, [[6]], checkpoint_id=8)
    assert again.cleaned_jobs == (result.job_id,)


def test_a_store_that_cannot_forget_the_job_after_the_commit_only_warns(sink, store, caplog):
    job = coordinator(sink, store)
    recovery = job.open()
    result = job.run_epoch(writer_stage(sink, DATA), checkpoint_id=7, recovery=recovery)

    def refuse(job_id):
        raise CommitStateError("disk full")

    job.lease.finish_job = refuse
    job.finish()  # the commit stands; no error
    assert job.state is CoordinatorState.CLOSED
    assert result.status is CommitStatus.COMMITTED
    assert "could not be marked finished" in caplog.text
    again = run(sink, store, [[6]], checkpoint_id=8)
    assert again.cleaned_jobs == (result.job_id,)


# -- a store that has not seen the sink id ------------------------------------------------


def test_a_checkpoint_id_into_a_store_without_history_warns_with_the_store(
    sink, tmp_path, caplog, monkeypatch
):
    # The misplaced-store case: the first run's store under one working directory, a
    # re-run of the same checkpoint from another directory with the default store.
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    monkeypatch.delenv("SINKV2_STATE_DIR", raising=False)
    monkeypatch.chdir(first_dir)
    first_store = SqliteCommitStateStore()
    caplog.set_level("WARNING", logger="sinkv2.coordinator")
    first = run(sink, first_store, DATA, checkpoint_id=1)
    assert first.store_warning is not None  # a sink id's first run: expected, and said
    assert str(first_store.path) in first.store_warning
    assert "no earlier epoch of sink id" in first.store_warning
    [record] = [r for r in caplog.records if r.name == "sinkv2.coordinator"]
    assert record.levelname == "WARNING"
    assert str(first_store.path) in record.getMessage()
    assert "WARNING" in str(first)  # the result's table shows it
    caplog.clear()
    # Known to the store now: no warning, for this checkpoint or the next.
    assert run(sink, first_store, DATA, checkpoint_id=1).store_warning is None
    assert run(sink, first_store, [[6]], checkpoint_id=2).store_warning is None
    assert not [r for r in caplog.records if r.levelno >= 30]
    # Another working directory: another default store, which must not stay silent.
    monkeypatch.chdir(second_dir)
    second_store = SqliteCommitStateStore()
    assert second_store.path != first_store.path
    again = run(sink, second_store, DATA, checkpoint_id=1)
    assert again.store_warning is not None
    assert str(second_store.path) in again.store_warning
    assert "checkpoints it committed can be written twice" in again.store_warning
    assert "$SINKV2_STATE_DIR" in again.store_warning


def test_a_run_without_a_checkpoint_id_does_not_warn_about_the_store(sink, store, caplog):
    caplog.set_level("WARNING", logger="sinkv2.coordinator")
    assert run(sink, store, DATA).store_warning is None
    assert not caplog.records


# --- the epoch procedure, asked ------------------------------------------------------------------


def test_the_success_path_is_a_with_block_that_finishes_the_job(sink, store):
    with coordinator(sink, store) as job:
        assert job.recovery.cleaned_jobs == ()
        result = job.run_epoch(writer_stage(sink, DATA), checkpoint_id=3, recovery=job.recovery)
    assert result.status is CommitStatus.COMMITTED
    assert job.state is CoordinatorState.CLOSED
    assert sink.visible() == ALL
    assert sink.staged() == []
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.unfinished_jobs() == []  # finished, not only closed


def test_a_with_block_that_raises_only_closes_and_the_next_run_cleans_up(sink, store):
    with pytest.raises(Crash), coordinator(sink, store, crash_at="writers-finished") as job:
        job.run_epoch(writer_stage(sink, DATA), checkpoint_id=3, recovery=job.recovery)
    assert job.state is CoordinatorState.CLOSED
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.unfinished_jobs() == [job.job_id]
    assert run(sink, store, [[9]], checkpoint_id=4).cleaned_jobs == (job.job_id,)


def test_recovery_is_only_known_once_opened(sink, store):
    with pytest.raises(IllegalLifecycleError, match="not open yet"):
        _ = coordinator(sink, store).recovery


def test_plan_epoch_says_what_an_epoch_needs_and_settle_finishes_it(sink, store):
    run(sink, store, DATA, checkpoint_id=7)
    with coordinator(sink, store) as job:
        assert job.plan_epoch(None, recovery=job.recovery).need is EpochNeed.WRITE
        assert job.plan_epoch(8, recovery=job.recovery).need is EpochNeed.WRITE
        committed = job.plan_epoch(7, recovery=job.recovery)
        assert committed.need is EpochNeed.NOTHING
        assert job.settle(committed).status is CommitStatus.ALREADY_COMMITTED
        with pytest.raises(IllegalLifecycleError, match="writing it again"):
            job.write_epoch(committed, lambda: pytest.fail("no writer may run"))
        with pytest.raises(IllegalLifecycleError, match="cannot be settled"):
            job.settle(job.plan_epoch(8, recovery=job.recovery))
    assert sink.visible() == ALL


def test_a_pending_checkpoint_needs_a_recommit_which_writes_nothing(sink, store):
    with coordinator(sink, store) as job:
        written = job.write_epoch(
            job.plan_checkpoint(6), lambda: writer_stage(sink, [[6]])(job.job_id, 6)
        )
        assert written.plan.need is EpochNeed.WRITE
        plan = job.plan_checkpoint(6)  # recorded Pending, not committed yet
        assert plan.need is EpochNeed.RECOMMIT
        result = job.settle(plan)
    assert result.status is CommitStatus.RECOMMITTED
    assert result.records_written == 0
    assert sink.visible() == [6]


def test_a_job_planned_under_a_fencing_token_is_refused_once_anyone_took_the_sink_id(sink, store):
    planner = coordinator(sink, store)
    planner.open()
    token = planner.lease.fencing_token
    planner.close()
    committer = coordinator(sink, store, planned_fencing_token=token)
    committer.open()  # nobody in between
    committer.close()
    store.acquire("orders", job_id="interloper").release()
    late = coordinator(sink, store, planned_fencing_token=token + 1)
    with pytest.raises(ConcurrentCommitError, match="another run took the sink id"):
        late.open()
    assert late.state is CoordinatorState.NEW
