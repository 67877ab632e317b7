"""The streaming flavour of the epoch protocol, engine-free: `CheckpointRunner`.

A small stateful committing sink (`HoldingSink`) commits transactions into a JSON
ledger, idempotently by transaction id. Its writers only emit whole batches: the
rest they hold across checkpoints, staged in a file of their attempt, and the
writer state of each held element points into that file - so a clean-up that
removed a restorable attempt, or a state restored twice or never, shows. A local
engine (`Engine`) runs a checkpoint's writers in process as Spark's writer stage
does: restored from the previous checkpoint's states (redistributed), then
``flush(False)`` -> ``prepare_commit()`` -> ``snapshot_state(N)``.

A "crash" is an exception thrown from the stage listener at a chosen (event,
epoch), or from the writer stage; the driver's runner and coordinator are then
closed without ``finish`` (the lease dies with a process), and the engine replays
the checkpoint whose ``foreachBatch`` did not return, as Spark does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkv2 import (
    END_OF_INPUT,
    AttrsMsgpackSerializer,
    Committer,
    SimpleVersionedSerialization,
    SupportsAttemptCleanup,
    SupportsCommitter,
    SupportsWriterState,
    WithCompatibleState,
    inspect_sink,
)
from sinkv2.errors import (
    CommitFailedError,
    CorruptDataError,
    SinkConfigurationError,
    UnsupportedVersionError,
)
from sinkv2.runtime import (
    STAGE_EVENTS,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CheckpointRunner,
    CommitCoordinator,
    CommitRetryPolicy,
    CommitStatus,
    EpochStatus,
    Recovery,
    Restore,
    SinkResult,
    SqliteCommitStateStore,
    StreamWriterStage,
    SubtaskStates,
    WriterStageOutput,
    WriterStates,
    state_name,
)
from sinkv2.runtime.committables import (
    COMMITTABLE_SCHEMA,
    LocalCommittableStream,
    encode_committables,
)

NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, jitter=0.0)
COMMITTED, PENDING = EpochStatus.COMMITTED, EpochStatus.PENDING


class Crash(BaseException):
    """A driver dying at a stage event, or in its writer stage."""


# --- a stateful committing sink ------------------------------------------------------------------


@attrs.frozen
class Txn:
    txn_id: str
    elements: list[int]


@attrs.frozen
class Held:
    """One element a writer holds: the file its attempt staged it in, and where."""

    staged: str
    index: int


@attrs.frozen
class Restored:
    subtask: int
    parallelism: int
    checkpoint_id: int | None
    elements: list[int]


class Ledger:
    """The destination: committed transactions by id, in a JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, list[int]]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def add(self, txn: Txn) -> bool:
        committed = self.read()
        if txn.txn_id in committed:
            return False
        committed[txn.txn_id] = list(txn.elements)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(committed))
        os.replace(scratch, self.path)
        return True

    def elements(self) -> list[int]:
        return sorted(e for elements in self.read().values() for e in elements)


class HoldingWriter:
    def __init__(self, sink: HoldingSink, context: Any, held: list[int]) -> None:
        self.sink = sink
        self.token = context.get_attempt_token()
        self.held = held

    def write(self, element: int, context: Any) -> None:
        self.held.append(element)

    def flush(self, end_of_input: bool) -> None:
        pass

    def prepare_commit(self) -> list[Txn]:
        whole = len(self.held) // self.sink.batch * self.sink.batch
        emitted, self.held = self.held[:whole], self.held[whole:]
        return [Txn(self.token, emitted)] if emitted else []

    def snapshot_state(self, checkpoint_id: int) -> list[Held]:
        if not self.held:
            return []
        staged = self.sink.staging / f"{self.token}.json"
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(self.held))
        return [Held(str(staged), index) for index in range(len(self.held))]

    def write_watermark(self, watermark: Any) -> None:
        pass

    def close(self) -> None:
        pass


class LedgerCommitter(Committer[Txn]):
    def __init__(self, sink: HoldingSink) -> None:
        self.sink = sink

    def commit(self, requests: Collection[Committer.CommitRequest[Txn]]) -> None:
        gate = self.sink.gate
        if gate is not None and threading.current_thread() is not threading.main_thread():
            assert gate.wait(timeout=60), "the test never opened the gate (in 60 s)"
        for request in requests:
            if self.sink.fail_commits:
                request.signal_failed_with_unknown_reason(OSError("ledger down"))
            elif not self.sink.ledger.add(request.get_committable()):
                request.signal_already_committed()

    def close(self) -> None:
        pass


def resolve(states: Collection[Held]) -> list[int]:
    """The elements ``states`` point to, read from their attempts' staged files."""
    return [json.loads(Path(s.staged).read_text())[s.index] for s in states]


class HoldingSink(SupportsCommitter[Txn], SupportsWriterState[int, Held], SupportsAttemptCleanup):
    """Commits whole batches of ``batch`` elements; holds the rest in writer state."""

    def __init__(self, base: Path, *, batch: int = 3, state_version: int = 1) -> None:
        self.ledger = Ledger(base / "ledger.json")
        self.staging = base / "_staging"
        self.batch = batch
        self.state_version = state_version
        self.fail_commits = False
        self.gate: threading.Event | None = None  # holds commits on the commit thread
        self.restored: list[Restored] = []

    def create_writer(self, context: Any) -> HoldingWriter:
        return HoldingWriter(self, context, [])

    def restore_writer(self, context: Any, recovered_state: Collection[Held]) -> HoldingWriter:
        held = resolve(recovered_state)
        self.restored.append(
            Restored(
                context.get_subtask_id(),
                context.get_number_of_parallel_subtasks(),
                context.get_restored_checkpoint_id(),
                list(held),
            )
        )
        return HoldingWriter(self, context, held)

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[Held]:
        return AttrsMsgpackSerializer(Held, version=self.state_version)

    def create_committer(self, context: Any) -> LedgerCommitter:
        return LedgerCommitter(self)

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Txn]:
        return AttrsMsgpackSerializer(Txn)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        for path in self.staging.glob(f"{job_id}-*.json"):
            if path.stem not in kept_attempt_tokens:
                path.unlink()

    def staged(self) -> set[str]:
        return {p.stem for p in self.staging.glob("*.json")} if self.staging.exists() else set()


class RenamedSink(HoldingSink):
    """The same writers under another class: another state name."""


class CompatibleSink(HoldingSink, WithCompatibleState):
    """Another class that declares it reads `HoldingSink`'s states."""

    def get_compatible_writer_state_names(self) -> list[str]:
        return [f"{HoldingSink.__module__}.{HoldingSink.__qualname__}"]


class StatelessSink(SupportsCommitter[Txn]):
    """The same committer, with writers that keep no state."""

    def __init__(self, base: Path) -> None:
        self.holding = HoldingSink(base, batch=1)
        self.ledger = self.holding.ledger

    def create_writer(self, context: Any) -> HoldingWriter:
        return self.holding.create_writer(context)

    def create_committer(self, context: Any) -> LedgerCommitter:
        return LedgerCommitter(self.holding)

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Txn]:
        return AttrsMsgpackSerializer(Txn)


# --- a stateful sink without a committer (the shape of an async sink) ----------------------------


@attrs.frozen
class Buffered:
    element: int


class BufferWriter:
    def __init__(self, sink: BufferSink, held: list[int]) -> None:
        self.sink = sink
        self.buffer = held

    def write(self, element: int, context: Any) -> None:
        self.buffer.append(element)

    def flush(self, end_of_input: bool) -> None:
        if end_of_input or len(self.buffer) >= self.sink.batch:
            self.sink.sent.extend(e for e in self.buffer if e not in self.sink.refused)
            self.buffer = [e for e in self.buffer if e in self.sink.refused]

    def snapshot_state(self, checkpoint_id: int) -> list[Buffered]:
        return [Buffered(e) for e in self.buffer]

    def write_watermark(self, watermark: Any) -> None:
        pass

    def close(self) -> None:
        pass


class BufferSink(SupportsWriterState[int, Buffered]):
    """Sends its buffer once ``batch`` elements are buffered, or at end of input."""

    def __init__(self, *, batch: int = 10) -> None:
        self.batch = batch
        self.sent: list[int] = []
        self.refused: set[int] = set()

    def create_writer(self, context: Any) -> BufferWriter:
        return BufferWriter(self, [])

    def restore_writer(self, context: Any, recovered_state: Collection[Buffered]) -> BufferWriter:
        return BufferWriter(self, [s.element for s in recovered_state])

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[Buffered]:
        return AttrsMsgpackSerializer(Buffered)


# --- the engine ----------------------------------------------------------------------------------


def frame(serializer: Any, value: Any) -> bytes:
    return SimpleVersionedSerialization.write_version_and_serialize(serializer, value)


def unframe(serializer: Any, framed: bytes) -> Any:
    return SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)


class LocalStreams:
    def to_stream(self, table: pa.Table) -> LocalCommittableStream:
        return LocalCommittableStream(table)

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        assert isinstance(stream, LocalCommittableStream), produced_by
        return stream.committable_table()


class Engine:
    """Runs one checkpoint's writers in process, one per partition, as Spark's stage does."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.capabilities = inspect_sink(sink)
        self.ran: list[int] = []
        self.attempts = itertools.count()
        self.store_lost = False

    def stage(self, partitions: list[list[int]], *, crash_at: int | None = None):
        sink, capabilities = self.sink, self.capabilities

        def run(job_id: str, checkpoint_id: int, restore: Restore | None) -> WriterStageOutput:
            self.ran.append(checkpoint_id)
            parallelism = len(partitions)
            if restore is not None:  # Spark replays micro-batches in order: N restores N - 1
                assert restore.checkpoint_id == checkpoint_id - 1, (restore, checkpoint_id)
            else:  # the first checkpoint, a batch run, or a store that was lost
                assert (
                    checkpoint_id in (1, END_OF_INPUT)
                    or not capabilities.writer_state
                    or self.store_lost
                )
            runs: list[list[bytes]] = [[] for _ in partitions]
            if restore is not None and restore.states is not None:
                runs = restore.states.redistribute(parallelism)
            committables, subtasks = [], []
            for subtask, elements in enumerate(partitions):
                if subtask == crash_at:
                    raise Crash(f"writer stage of checkpoint {checkpoint_id}, subtask {subtask}")
                token = f"{job_id}-{subtask:05d}-{next(self.attempts)}"
                context = BasicWriterInitContext(
                    subtask_id=subtask,
                    number_of_parallel_subtasks=parallelism,
                    job_id=job_id,
                    attempt_token=token,
                    restored_checkpoint_id=restore.checkpoint_id if restore else None,
                )
                if restore is not None and capabilities.writer_state:
                    serializer = sink.get_writer_state_serializer()
                    recovered = [unframe(serializer, s) for s in runs[subtask]]
                    writer = sink.restore_writer(context, recovered)
                else:
                    writer = sink.create_writer(context)
                for element in elements:
                    writer.write(element, BasicSinkWriterContext())
                writer.flush(False)
                if capabilities.committer:
                    committables.extend(
                        (checkpoint_id, subtask, parallelism, f"{subtask}:{i}", c)
                        for i, c in enumerate(writer.prepare_commit())
                    )
                states: tuple[bytes, ...] = ()
                if capabilities.writer_state:
                    serializer = sink.get_writer_state_serializer()
                    snapshot = writer.snapshot_state(checkpoint_id)
                    states = tuple(frame(serializer, s) for s in snapshot)
                writer.close()
                subtasks.append(
                    SubtaskStates(subtask_id=subtask, attempt_token=token, states=states)
                )
            table = (
                encode_committables(committables, sink.get_committable_serializer())
                if capabilities.committer
                else pa.Table.from_pylist([], schema=COMMITTABLE_SCHEMA)
            )
            return WriterStageOutput(
                table=table,
                attempt_tokens=frozenset(s.attempt_token for s in subtasks),
                records=sum(map(len, partitions)),
                subtasks=parallelism,
                states=WriterStates(  # the runner names them after the sink
                    state_name="", number_of_subtasks=parallelism, subtasks=tuple(subtasks)
                ),
            )

        return run


def drain_writers(sink: Any) -> Callable[[str, Restore], WriterStates | None]:
    """Restore a writer per recorded subtask, end its input, keep what it still holds."""

    def drain(job_id: str, restore: Restore) -> WriterStates | None:
        assert restore.states is not None
        serializer = sink.get_writer_state_serializer()
        left = []
        for subtask in restore.states.subtasks:
            if not subtask.states:
                continue
            token = f"{job_id}-drain-{subtask.subtask_id:05d}"
            context = BasicWriterInitContext(
                subtask_id=subtask.subtask_id,
                number_of_parallel_subtasks=restore.states.number_of_subtasks,
                job_id=job_id,
                attempt_token=token,
                restored_checkpoint_id=restore.checkpoint_id,
            )
            writer = sink.restore_writer(context, [unframe(serializer, s) for s in subtask.states])
            writer.flush(True)
            remaining = writer.snapshot_state(END_OF_INPUT)
            writer.close()
            if remaining:
                framed = tuple(frame(serializer, s) for s in remaining)
                left.append(
                    SubtaskStates(subtask_id=subtask.subtask_id, attempt_token=token, states=framed)
                )
        if not left:
            return None
        return attrs.evolve(restore.states, subtasks=tuple(left))

    return drain


# --- a stream's driver ---------------------------------------------------------------------------


@attrs.define
class Stream:
    """One driver of a stream: its coordinator (opened with the origin) and runner."""

    coordinator: CommitCoordinator
    runner: CheckpointRunner
    recovery: Recovery
    events: list[tuple[str, int]]
    results: list[SinkResult]

    def run(self, stage: StreamWriterStage, checkpoint_id: int) -> SinkResult | None:
        return self.runner.run(stage, checkpoint_id)

    def statuses(self) -> dict[int, EpochStatus]:
        return {r.epoch: r.status for r in self.coordinator.lease.epochs()}

    def states(self, epoch: int) -> WriterStates | None:
        record = self.coordinator.lease.get(epoch)
        assert record is not None
        return WriterStates.decode(record.writer_states, what=f"epoch {epoch}")

    def died(self) -> None:
        """The driver died: nothing is finished; the lease dies with the process."""
        self.runner.close()
        self.coordinator.close()

    def stop(self) -> None:
        """A clean stop: commits waited for, the restorable attempts kept."""
        self.runner.wait()
        self.runner.close()
        try:
            self.runner.raise_commit_failure()
        except BaseException:
            self.coordinator.close()
            raise
        self.coordinator.finish(keep_attempt_tokens=self.runner.referenced_attempts())


def open_stream(
    sink: Any,
    store: SqliteCommitStateStore,
    *,
    origin: str = "checkpoint /tmp/stream-a",
    crash_at: Collection[tuple[str, int]] = (),
    on_stage: Callable[[str, int], None] | None = None,
    sink_id: str = "orders",
    report_recovery: bool = False,
    **runner: Any,
) -> Stream:
    events: list[tuple[str, int]] = []
    armed = set(crash_at)

    def listener(event: str, epoch: int) -> None:
        events.append((event, epoch))
        if on_stage is not None:
            on_stage(event, epoch)
        if (event, epoch) in armed:
            armed.discard((event, epoch))  # one crash per arming
            raise Crash(f"{event} of epoch {epoch}")

    coordinator = CommitCoordinator(
        sink,
        sink_id=sink_id,
        store=store,
        streams=LocalStreams(),
        retry_policy=NO_WAIT,
        on_stage=listener,
        sleep=lambda seconds: None,
    )
    recovery = coordinator.open(origin=origin, keep_restorable=True)
    results: list[SinkResult] = []
    if report_recovery:  # as apply() on a stream does
        runner["recovery"] = recovery
    checkpoints = CheckpointRunner(coordinator, on_result=results.append, **runner)
    return Stream(coordinator, checkpoints, recovery, events, results)


def inspect(store: SqliteCommitStateStore, sink_id: str = "orders") -> dict[int, EpochStatus]:
    with store.acquire(sink_id, job_id="inspect") as lease:
        return {r.epoch: r.status for r in lease.epochs()}


def held_in(stream: Stream, sink: HoldingSink, epoch: int) -> list[int]:
    """The elements the writer states recorded with ``epoch`` hold."""
    states = stream.states(epoch)
    if states is None:
        return []
    serializer = sink.get_writer_state_serializer()
    return resolve(
        [
            unframe(serializer, s)
            for sub in sorted(states.subtasks, key=lambda s: s.subtask_id)
            for s in sub.states
        ]
    )


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh directory, memory-backed if there is /dev/shm: the store syncs every write."""
    shm = "/dev/shm"
    root = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="sinkv2-checkpoints-", dir=root) as path:
        yield Path(path)


@pytest.fixture
def scratch():
    with scratch_dir() as path:
        yield path


@pytest.fixture
def store(scratch):
    return SqliteCommitStateStore(scratch / "state" / "commit_state.sqlite")


@pytest.fixture
def sink(scratch):
    return HoldingSink(scratch / "out")


@pytest.fixture
def engine(sink):
    return Engine(sink)


HOLDING = f"{HoldingSink.__module__}.{HoldingSink.__qualname__}"


# --- writer states from checkpoint to checkpoint -------------------------------------------------


def test_the_states_of_checkpoint_n_restore_the_writers_of_n_plus_1(sink, store, engine):
    stream = open_stream(sink, store)
    first = stream.run(engine.stage([[1, 2, 3, 4, 5], [6, 7]]), 1)
    assert first is not None
    assert first.status is CommitStatus.COMMITTED
    assert (first.epoch, first.checkpoint_id) == (1, 1)
    assert (first.committed, first.records_written) == (1, 7)
    assert sink.restored == []  # the first checkpoint's writers are created, not restored
    assert sink.ledger.elements() == [1, 2, 3]
    assert held_in(stream, sink, 1) == [4, 5, 6, 7]
    assert stream.states(1).state_name == HOLDING

    second = stream.run(engine.stage([[8], [9]]), 2)
    assert second is not None
    assert second.status is CommitStatus.COMMITTED
    assert sink.restored == [Restored(0, 2, 1, [4, 5]), Restored(1, 2, 1, [6, 7])]
    assert stream.runner.last_restore == Restore(checkpoint_id=1, states=stream.states(1))
    assert sink.ledger.elements() == list(range(1, 10))
    assert held_in(stream, sink, 2) == []
    assert stream.results == [first, second]
    stream.stop()


def test_states_held_over_many_checkpoints_are_committed_once_when_a_batch_fills(
    sink, store, engine
):
    stream = open_stream(sink, store)
    for checkpoint_id in range(1, 8):
        stream.run(engine.stage([[checkpoint_id]]), checkpoint_id)
    assert sink.restored == [
        Restored(0, 1, 1, [1]),
        Restored(0, 1, 2, [1, 2]),
        Restored(0, 1, 3, []),
        Restored(0, 1, 4, [4]),
        Restored(0, 1, 5, [4, 5]),
        Restored(0, 1, 6, []),
    ]
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6]
    assert held_in(stream, sink, 7) == [7]
    stream.stop()


def test_the_stage_cleans_up_its_job_s_attempts_but_keeps_those_the_states_refer_to(
    sink, store, engine
):
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1], [2]]), 1)
    first = stream.states(1).referenced_attempts()
    stream.run(engine.stage([[3], [4, 5, 6, 7]]), 2)
    second = stream.states(2).referenced_attempts()
    assert sink.staged() == first | second  # 2's clean-up kept what 2 restored from
    stream.run(engine.stage([[]]), 3)
    third = stream.states(3).referenced_attempts()
    assert sink.staged() == second | third
    stream.stop()


def test_a_clean_stop_keeps_what_the_last_states_refer_to_for_the_next_run(sink, store, engine):
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2], [3]]), 1)
    referenced = stream.runner.referenced_attempts()
    assert referenced == stream.states(1).referenced_attempts()
    assert len(referenced) == 2
    stream.stop()
    assert referenced <= sink.staged()
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.unfinished_jobs() == [stream.coordinator.job_id]  # kept: not forgotten
    again = open_stream(sink, store)
    assert referenced <= sink.staged()  # the next run keeps them too: it restores them
    again.run(engine.stage([[4, 5, 6]]), 2)
    assert sink.restored == [Restored(0, 1, 1, [1, 2, 3])]
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6]
    again.stop()


def test_a_failed_writer_stage_records_nothing_and_its_replay_restores_the_same_states(
    sink, store, engine
):
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2], [3, 4]]), 1)
    with pytest.raises(Crash):
        stream.run(engine.stage([[5, 6], [7, 8]], crash_at=1), 2)
    assert stream.statuses() == {1: COMMITTED}
    assert sink.staged() == stream.states(1).referenced_attempts()  # the failed attempt's: gone
    result = stream.run(engine.stage([[5, 6], [7, 8]]), 2)
    assert result is not None
    assert result.status is CommitStatus.COMMITTED
    assert sink.restored[-2:] == [Restored(0, 2, 1, [1, 2]), Restored(1, 2, 1, [3, 4])]
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 7]
    assert held_in(stream, sink, 2) == [6, 8]
    stream.stop()


# --- replays: committed, pending, pending below --------------------------------------------------


def test_a_replay_of_a_committed_checkpoint_writes_nothing(sink, store, engine):
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2, 3]]), 1)
    again = stream.run(engine.stage([[99]]), 1)
    assert again is not None
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert (again.records_written, again.committed) == (0, 0)
    assert engine.ran == [1]
    stream.died()
    later = open_stream(sink, store)
    assert later.run(engine.stage([[99]]), 1).status is CommitStatus.ALREADY_COMMITTED
    assert engine.ran == [1]
    assert sink.ledger.elements() == [1, 2, 3]
    later.stop()


@pytest.mark.parametrize("crash_at", ["pending-recorded", "committer-finished"])
def test_a_pending_checkpoint_is_recommitted_without_writing(sink, store, engine, crash_at):
    stream = open_stream(sink, store, crash_at={(crash_at, 1)})
    with pytest.raises(Crash):
        stream.run(engine.stage([[1, 2, 3, 4]]), 1)
    assert stream.statuses() == {1: PENDING}
    replay = stream.run(engine.stage([[1, 2, 3, 4]]), 1)
    assert replay is not None
    assert replay.status is CommitStatus.RECOMMITTED
    assert replay.records_written == 0
    assert (replay.committed, replay.already_committed) == (
        (1, 0) if crash_at == "pending-recorded" else (0, 1)
    )
    assert engine.ran == [1]
    assert sink.ledger.elements() == [1, 2, 3]
    stream.run(engine.stage([[5, 6]]), 2)
    assert sink.restored == [Restored(0, 1, 1, [4])]
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6]
    stream.stop()


@pytest.mark.parametrize(
    "crash_at", ["pending-recorded", "committer-finished", "committed-recorded"]
)
def test_a_new_driver_finishes_the_crashed_checkpoint_and_its_replay_is_skipped(
    sink, store, engine, crash_at
):
    stream = open_stream(sink, store, crash_at={(crash_at, 1)})
    with pytest.raises(Crash):
        stream.run(engine.stage([[1, 2, 3, 4]]), 1)
    stream.died()
    again = open_stream(sink, store)
    assert list(again.recovery.recommitted) == ([] if crash_at == "committed-recorded" else [1])
    replay = again.run(engine.stage([[1, 2, 3, 4]]), 1)
    assert replay.status is CommitStatus.ALREADY_COMMITTED
    assert engine.ran == [1]
    again.run(engine.stage([[5, 6]]), 2)
    assert sink.restored == [Restored(0, 1, 1, [4])]  # the dead job's staged state was kept
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6]
    again.stop()


def test_a_restarted_stream_s_first_result_says_what_the_restart_recommitted(sink, store, engine):
    stream = open_stream(sink, store, crash_at={("committer-finished", 3)})
    stream.run(engine.stage([[1]]), 1)
    stream.run(engine.stage([[2]]), 2)
    with pytest.raises(Crash):
        stream.run(engine.stage([[3, 4]]), 3)
    stream.died()
    again = open_stream(sink, store, report_recovery=True)
    assert list(again.recovery.recommitted) == [3]
    # Spark replays the micro-batch the dead driver was committing: open() finished it.
    replay = again.run(engine.stage([[3, 4]]), 3)
    assert replay.status is CommitStatus.RECOMMITTED
    assert replay.committed + replay.already_committed == 1
    assert replay.recommitted_epochs == ()  # its own epoch is the status, not a stale one
    assert again.results == [replay]
    following = again.run(engine.stage([[5]]), 4)
    assert following.status is CommitStatus.COMMITTED
    assert following.recommitted_epochs == ()  # only the first result reports the restart
    committed = sink.ledger.elements()
    assert len(committed) == len(set(committed))  # nothing twice (the sink holds some back)
    again.stop()


def test_a_restart_that_finished_an_earlier_checkpoint_reports_it_on_the_next_one(
    sink, store, engine
):
    stream = open_stream(sink, store, crash_at={("committer-finished", 1)})
    with pytest.raises(Crash):
        stream.run(engine.stage([[1]]), 1)
    stream.died()
    again = open_stream(sink, store, report_recovery=True)
    # Spark's commit log had checkpoint 1 (micro-batch 0) done: it goes on with 2.
    first = again.run(engine.stage([[2]]), 2)
    assert first.status is CommitStatus.COMMITTED
    assert first.recommitted_epochs == (1,)
    again.stop()


def test_a_pending_checkpoint_below_is_committed_before_the_next_one_writes(sink, store, engine):
    stream = open_stream(sink, store, crash_at={("pending-recorded", 1)})
    with pytest.raises(Crash):
        stream.run(engine.stage([[1, 2, 3, 4]]), 1)
    result = stream.run(engine.stage([[5, 6]]), 2)
    assert result is not None
    assert result.recommitted_epochs == (1,)
    assert result.status is CommitStatus.COMMITTED
    events = stream.events
    assert events.index(("committed-recorded", 1)) < events.index(("writers-finished", 2))
    assert sink.restored == [Restored(0, 1, 1, [4])]
    assert stream.statuses() == {1: COMMITTED, 2: COMMITTED}
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6]
    stream.stop()


def test_several_pending_checkpoints_below_are_committed_first_in_order(sink, store, engine):
    sink.gate = threading.Event()
    stream = open_stream(sink, store, decoupled=True)
    stream.run(engine.stage([[1, 2, 3]]), 1)
    stream.run(engine.stage([[4, 5, 6]]), 2)
    sink.fail_commits = True
    sink.gate.set()
    stream.runner.wait()
    stream.runner.close()  # the coordinator stays open; a new runner takes over
    assert stream.statuses() == {1: PENDING, 2: PENDING}
    sink.fail_commits = False
    results: list[SinkResult] = []
    runner = CheckpointRunner(stream.coordinator, on_result=results.append)
    result = runner.run(engine.stage([[7, 8, 9]]), 3)
    assert result is not None
    assert result.recommitted_epochs == (1, 2)
    committed = [epoch for event, epoch in stream.events if event == "committed-recorded"]
    assert committed == [1, 2, 3]
    assert sink.ledger.elements() == list(range(1, 10))
    stream.coordinator.finish()


# --- rescaling -----------------------------------------------------------------------------------


def test_a_rescale_2_4_3_3_restores_every_state_exactly_once_in_flink_s_order(scratch, store):
    sink = HoldingSink(scratch / "out", batch=100)  # nothing fills a batch: all is held
    engine = Engine(sink)
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2, 3], [4, 5, 6, 7]]), 1)
    stream.run(engine.stage([[10], [], [11], []]), 2)
    assert sink.restored == [
        Restored(0, 4, 1, [1, 2]),
        Restored(1, 4, 1, [3, 4]),
        Restored(2, 4, 1, [5, 6]),
        Restored(3, 4, 1, [7]),
    ]
    sink.restored.clear()
    stream.run(engine.stage([[12], [], []]), 3)  # 1 2 10 | 3 4 | 5 6 11 | 7, cut in 3 + 3 + 3
    assert sink.restored == [
        Restored(0, 3, 2, [1, 2, 10]),
        Restored(1, 3, 2, [3, 4, 5]),
        Restored(2, 3, 2, [6, 11, 7]),
    ]
    sink.restored.clear()
    stream.run(engine.stage([[], [], [13]]), 4)  # the same parallelism: each its own, uneven
    assert sink.restored == [
        Restored(0, 3, 3, [1, 2, 10, 12]),
        Restored(1, 3, 3, [3, 4, 5]),
        Restored(2, 3, 3, [6, 11, 7]),
    ]
    assert held_in(stream, sink, 4) == [1, 2, 10, 12, 3, 4, 5, 6, 11, 7, 13]
    assert sink.ledger.elements() == []
    stream.stop()


@settings(max_examples=25, deadline=None)
@given(
    parallelisms=st.lists(st.integers(1, 5), min_size=2, max_size=5),
    sizes=st.lists(st.integers(0, 4), min_size=25, max_size=25),
)
def test_any_rescale_schedule_keeps_every_element_exactly_once(parallelisms, sizes):
    with scratch_dir() as base:
        rescale(base, parallelisms, sizes)


def rescale(base: Path, parallelisms: list[int], sizes: list[int]) -> None:
    sink = HoldingSink(base / "out", batch=4)
    engine = Engine(sink)
    store = SqliteCommitStateStore(base / "state.sqlite")
    stream = open_stream(sink, store)
    counter = itertools.count(1)
    written: list[int] = []
    for checkpoint_id, parallelism in enumerate(parallelisms, start=1):
        partitions = [[next(counter) for _ in range(sizes.pop())] for _ in range(parallelism)]
        written.extend(e for p in partitions for e in p)
        before = held_in(stream, sink, checkpoint_id - 1) if checkpoint_id > 1 else []
        sink.restored.clear()
        stream.run(engine.stage(partitions), checkpoint_id)
        if checkpoint_id > 1:  # every held state went to exactly one new writer, in order
            assert [e for r in sink.restored for e in r.elements] == before
        held = held_in(stream, sink, checkpoint_id)
        assert Counter(sink.ledger.elements()) + Counter(held) == Counter(written)
    stream.stop()


# --- decoupled commits ---------------------------------------------------------------------------


def test_decoupled_commits_run_while_the_next_checkpoint_writes_and_finish_in_order(
    sink, store, engine
):
    sink.gate = threading.Event()
    stream = open_stream(sink, store, decoupled=True)
    assert stream.runner.decoupled
    assert stream.run(engine.stage([[1, 2, 3, 4]]), 1) is None
    assert stream.run(engine.stage([[5, 6]]), 2) is None  # written while 1 waits to commit
    assert sink.restored == [Restored(0, 1, 1, [4])]  # from the pending checkpoint's states
    assert sink.ledger.elements() == []
    sink.gate.set()
    for checkpoint_id in (3, 4, 5):
        assert stream.run(engine.stage([[checkpoint_id + 4]]), checkpoint_id) is None
    stream.runner.wait()
    assert [r.epoch for r in stream.results] == [1, 2, 3, 4, 5]
    assert {r.status for r in stream.results} == {CommitStatus.COMMITTED}
    committed = [epoch for event, epoch in stream.events if event == "committed-recorded"]
    assert committed == [1, 2, 3, 4, 5]
    assert stream.statuses() == dict.fromkeys(range(1, 6), COMMITTED)
    assert sink.ledger.elements() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    stream.stop()


def test_a_decoupled_commit_failure_fails_the_next_checkpoint_and_keeps_later_ones_pending(
    sink, store, engine, caplog
):
    sink.gate = threading.Event()
    stream = open_stream(sink, store, decoupled=True)
    stream.run(engine.stage([[1, 2, 3]]), 1)
    stream.run(engine.stage([[4, 5, 6]]), 2)
    sink.fail_commits = True
    sink.gate.set()
    stream.runner.wait()
    assert "the commit of checkpoint 1 failed on the commit thread" in caplog.text
    for _ in range(2):  # every later checkpoint fails at its boundary, before writing
        with pytest.raises(CommitFailedError, match="ledger down") as error:
            stream.run(engine.stage([[7, 8, 9]]), 3)
    assert "epoch 1" in str(error.value)
    assert engine.ran == [1, 2]
    assert stream.statuses() == {1: PENDING, 2: PENDING}  # 2 was not committed before 1
    assert stream.results == []
    assert sink.ledger.read() == {}
    stream.died()

    sink.fail_commits = False
    again = open_stream(sink, store, decoupled=True)
    assert list(again.recovery.recommitted) == [1, 2]
    assert again.run(engine.stage([[7, 8, 9]]), 3) is None
    again.stop()
    assert inspect(store) == {1: COMMITTED, 2: COMMITTED, 3: COMMITTED}
    assert sink.ledger.elements() == list(range(1, 10))


def test_a_replayed_pending_checkpoint_commits_after_the_one_on_the_commit_thread(
    sink, store, engine
):
    sink.gate = threading.Event()
    stream = open_stream(sink, store, decoupled=True, crash_at={("pending-recorded", 2)})
    stream.run(engine.stage([[1, 2, 3]]), 1)  # its commit waits on the commit thread
    with pytest.raises(Crash):
        stream.run(engine.stage([[4, 5, 6]]), 2)  # 2 is pending, not handed to the thread
    opens = threading.Timer(0.2, sink.gate.set)
    opens.start()
    try:
        replay = stream.run(engine.stage([[4, 5, 6]]), 2)
    finally:
        opens.join()
    assert replay is not None
    assert replay.status is CommitStatus.RECOMMITTED
    stream.runner.wait()
    committed = [epoch for event, epoch in stream.events if event == "committed-recorded"]
    assert committed == [1, 2]
    stream.stop()


def test_a_pending_checkpoint_below_commits_after_the_one_on_the_commit_thread(sink, store, engine):
    sink.gate = threading.Event()
    stream = open_stream(sink, store, decoupled=True, crash_at={("pending-recorded", 2)})
    stream.run(engine.stage([[1, 2, 3]]), 1)
    with pytest.raises(Crash):
        stream.run(engine.stage([[4, 5, 6]]), 2)
    opens = threading.Timer(0.2, sink.gate.set)
    opens.start()
    try:
        assert stream.run(engine.stage([[7, 8, 9]]), 3) is None  # the engine went on
    finally:
        opens.join()
    stream.runner.wait()
    committed = [epoch for event, epoch in stream.events if event == "committed-recorded"]
    assert committed == [1, 2, 3]
    assert sink.ledger.elements() == list(range(1, 10))
    stream.stop()


def test_an_inline_commit_failure_fails_its_own_checkpoint_which_stays_pending(sink, store, engine):
    stream = open_stream(sink, store)
    sink.fail_commits = True
    with pytest.raises(CommitFailedError, match="epoch 1"):
        stream.run(engine.stage([[1, 2, 3]]), 1)
    assert stream.statuses() == {1: PENDING}
    sink.fail_commits = False
    replay = stream.run(engine.stage([[1, 2, 3]]), 1)
    assert replay.status is CommitStatus.RECOMMITTED
    assert engine.ran == [1]
    assert sink.ledger.elements() == [1, 2, 3]
    stream.stop()


# --- pruning -------------------------------------------------------------------------------------


def test_pruning_keeps_at_most_retain_committed_epochs_plus_the_pruning_interval(
    sink, store, engine
):
    stream = open_stream(sink, store, retain=3)
    sizes = []
    for checkpoint_id in range(1, 26):
        stream.run(engine.stage([[checkpoint_id]]), checkpoint_id)
        sizes.append(len(stream.statuses()))
    assert max(sizes) <= 3 + 9  # pruned every 10th checkpoint, down to the newest 3
    assert sizes[9] == 3
    assert sorted(stream.statuses()) == list(range(18, 26))
    for checkpoint_id in (23, 24, 25):  # the checkpoints an engine may replay are still known
        replay = stream.run(engine.stage([[0]]), checkpoint_id)
        assert replay.status is CommitStatus.ALREADY_COMMITTED
    stream.run(engine.stage([[26]]), 26)  # and the newest states still restore
    assert sink.restored[-1] == Restored(0, 1, 25, [25])
    assert sink.ledger.elements() == list(range(1, 25))
    stream.stop()


def test_decoupled_commits_prune_too(sink, store, engine):
    stream = open_stream(sink, store, retain=2, decoupled=True)
    for checkpoint_id in range(1, 21):
        stream.run(engine.stage([[checkpoint_id]]), checkpoint_id)
    stream.runner.wait()
    assert sorted(stream.statuses()) == [19, 20]
    stream.stop()


@pytest.mark.parametrize("retain", [0, -1, True, 2.0, "3"])
def test_retain_must_be_a_positive_int(sink, store, retain):
    stream = open_stream(sink, store)
    with pytest.raises(SinkConfigurationError, match=r"retain must be a positive int"):
        CheckpointRunner(stream.coordinator, retain=retain)
    stream.stop()


# --- whose states: names, versions, corruption ---------------------------------------------------


def held_checkpoint(sink, store, engine):
    """Checkpoint 1 written and committed, its states holding elements; the driver stopped."""
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2, 3, 4], [5]]), 1)
    stream.stop()


def test_states_of_another_sink_are_refused_before_anything_is_written(scratch, store):
    sink = HoldingSink(scratch / "out")
    held_checkpoint(sink, store, Engine(sink))
    renamed = RenamedSink(scratch / "out")
    engine = Engine(renamed)
    stream = open_stream(renamed, store)
    with pytest.raises(SinkConfigurationError) as error:
        stream.run(engine.stage([[6]]), 2)
    message = str(error.value)
    assert f"sink 'orders' epoch 1 recorded writer states of {HOLDING}" in message
    assert "get_compatible_writer_state_names()" in message
    assert engine.ran == []
    assert stream.statuses() == {1: COMMITTED}
    stream.died()


def test_a_sink_that_declares_the_states_compatible_restores_them(scratch, store):
    sink = HoldingSink(scratch / "out")
    held_checkpoint(sink, store, Engine(sink))
    compatible = CompatibleSink(scratch / "out")
    stream = open_stream(compatible, store)
    stream.run(Engine(compatible).stage([[6]]), 2)
    assert compatible.restored == [Restored(0, 1, 1, [4, 5])]
    assert stream.states(2).state_name == state_name(compatible)  # recorded under its own name
    assert compatible.ledger.elements() == [1, 2, 3, 4, 5, 6]
    stream.stop()


def test_another_sink_restores_when_no_state_was_held(scratch, store):
    sink = HoldingSink(scratch / "out")
    stream = open_stream(sink, store)
    stream.run(Engine(sink).stage([[1, 2, 3]]), 1)  # a whole batch: nothing held
    stream.stop()
    renamed = RenamedSink(scratch / "out")
    stream = open_stream(renamed, store)
    stream.run(Engine(renamed).stage([[4]]), 2)
    assert renamed.restored == [Restored(0, 1, 1, [])]
    stream.stop()


def test_a_sink_without_writer_state_refuses_to_drop_recorded_states(scratch, store):
    sink = HoldingSink(scratch / "out")
    held_checkpoint(sink, store, Engine(sink))
    stateless = StatelessSink(scratch / "out")
    stream = open_stream(stateless, store)
    with pytest.raises(SinkConfigurationError, match="does not implement SupportsWriterState"):
        stream.run(Engine(stateless).stage([[6]]), 2)
    stream.died()


def test_a_stateless_sink_restores_nothing(scratch, store):
    sink = StatelessSink(scratch / "out")
    engine = Engine(sink)
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1], [2]]), 1)
    assert stream.runner.restore_point(2) == Restore(checkpoint_id=1, states=None)
    stream.run(engine.stage([[3]]), 2)
    assert sink.ledger.elements() == [1, 2, 3]
    stream.stop()


def test_states_of_a_newer_serializer_version_name_the_sink_id_epoch_and_subtask(scratch, store):
    newer = HoldingSink(scratch / "out", state_version=2)
    held_checkpoint(newer, store, Engine(newer))
    older = HoldingSink(scratch / "out", state_version=1)
    engine = Engine(older)
    stream = open_stream(older, store)
    with pytest.raises(UnsupportedVersionError) as error:
        stream.run(engine.stage([[6]]), 2)
    assert "writer state 0 of subtask 0 recorded for sink 'orders' epoch 1" in str(error.value)
    assert error.value.version == 2
    assert engine.ran == []
    assert older.ledger.elements() == [1, 2, 3]
    stream.died()


def test_a_corrupt_state_names_the_sink_id_epoch_and_subtask(sink, store, engine):
    held_checkpoint(sink, store, engine)
    with store.acquire("orders", job_id="inspect") as lease:
        record = lease.get(1)
        states = WriterStates.decode(record.writer_states, what="epoch 1")
        bad = SubtaskStates(subtask_id=1, attempt_token="t", states=(b"\x00\x00\x00\x01garbage",))
        lease.replace_writer_states(
            1, attrs.evolve(states, subtasks=(states.subtasks[0], bad)).encode()
        )
    stream = open_stream(sink, store)
    with pytest.raises(CorruptDataError) as error:
        stream.run(engine.stage([[6]]), 2)
    assert "writer state 0 of subtask 1 recorded for sink 'orders' epoch 1" in str(error.value)
    assert engine.ran == [1]
    stream.died()


def test_corrupt_recorded_states_name_the_sink_id_and_epoch(sink, store, engine):
    held_checkpoint(sink, store, engine)
    with store.acquire("orders", job_id="inspect") as lease:
        lease.replace_writer_states(1, b"\xc1 not msgpack")
    stream = open_stream(sink, store)  # opening still works: the restore reports it
    with pytest.raises(CorruptDataError, match=r"recorded for sink 'orders' epoch 1 do not read"):
        stream.run(engine.stage([[6]]), 2)
    with pytest.raises(CorruptDataError):
        stream.runner.restore_point(2)
    assert engine.ran == [1]
    stream.died()


# --- the stream's origin -------------------------------------------------------------------------


def test_a_sink_id_bound_to_one_stream_refuses_another(sink, store, engine):
    first = open_stream(sink, store, origin="checkpoint a", crash_at={("pending-recorded", 1)})
    with pytest.raises(Crash):
        first.run(engine.stage([[1, 2, 3]]), 1)
    first.died()
    with pytest.raises(
        SinkConfigurationError,
        match=r"belongs to another stream \(checkpoint a\), not to this one \(checkpoint b\)",
    ):
        open_stream(sink, store, origin="checkpoint b")
    assert inspect(store) == {1: PENDING}  # refused before anything was recovered
    assert sink.ledger.read() == {}
    again = open_stream(sink, store, origin="checkpoint a")  # the refusal released the sink id
    assert list(again.recovery.recommitted) == [1]
    again.stop()
    other = open_stream(sink, store, origin="checkpoint b", sink_id="orders-b")
    other.stop()


def test_a_stream_is_refused_a_sink_id_with_batch_epochs(sink, store, engine):
    batch = CommitCoordinator(
        sink, sink_id="orders", store=store, streams=LocalStreams(), retry_policy=NO_WAIT
    )
    recovery = batch.open()
    stage = engine.stage([[1, 2, 3]])
    batch.run_epoch(
        lambda job_id, checkpoint_id: stage(job_id, checkpoint_id, None),
        checkpoint_id=None,
        recovery=recovery,
    )
    batch.finish()
    with pytest.raises(SinkConfigurationError, match=r"already has epochs of batch runs"):
        open_stream(sink, store)
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.origin() is None


def test_the_origin_is_bound_by_the_first_stream_and_kept(sink, store):
    open_stream(sink, store, origin="checkpoint a").stop()
    with store.acquire("orders", job_id="inspect") as lease:
        assert lease.origin() == "checkpoint a"
    open_stream(sink, store, origin="checkpoint a").stop()


# --- draining ------------------------------------------------------------------------------------


def test_a_drain_sends_the_buffered_states_and_replaces_them(store):
    sink = BufferSink()
    engine = Engine(sink)
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2], [3]]), 1)
    assert sink.sent == []
    assert stream.runner.drain(drain_writers(sink)) == 3
    assert sorted(sink.sent) == [1, 2, 3]
    assert stream.coordinator.lease.get(1).writer_states == b""
    assert stream.runner.restore_point(2) == Restore(checkpoint_id=1, states=None)
    stream.stop()
    again = open_stream(sink, store)
    again.run(engine.stage([[4]]), 2)
    assert again.runner.drain(drain_writers(sink)) == 1
    assert sorted(sink.sent) == [1, 2, 3, 4]  # nothing sent twice
    again.stop()


def test_a_drain_keeps_what_could_not_be_sent_for_the_next_run(store):
    sink = BufferSink()
    sink.refused = {2}
    engine = Engine(sink)
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2], [3]]), 1)
    assert stream.runner.drain(drain_writers(sink)) == 2
    left = stream.runner.restore_point(2).states
    assert left is not None
    assert left.count == 1
    assert left.state_name == state_name(sink)
    assert left.referenced_attempts() == {f"{stream.coordinator.job_id}-drain-00000"}
    stream.stop()
    sink.refused = set()
    again = open_stream(sink, store)
    again.run(engine.stage([[4], [5]]), 2)  # subtask 0 restores what was left: 2
    assert again.runner.drain(drain_writers(sink)) == 3
    assert sorted(sink.sent) == [1, 2, 3, 4, 5]
    again.stop()


def test_a_drain_commits_the_pending_checkpoint_first(store):
    sink = BufferSink()
    engine = Engine(sink)
    stream = open_stream(sink, store, crash_at={("pending-recorded", 1)})
    with pytest.raises(Crash):
        stream.run(engine.stage([[1]]), 1)
    assert stream.runner.drain(drain_writers(sink)) == 1
    assert stream.statuses() == {1: COMMITTED}
    assert sink.sent == [1]
    stream.stop()


def test_a_drain_without_checkpoints_or_states_drains_nothing(sink, store, engine):
    stream = open_stream(sink, store)
    assert stream.runner.drain(drain_writers(sink)) == 0
    assert stream.runner.latest() is None
    assert stream.runner.restore_point(1) is None
    stream.run(engine.stage([[1, 2, 3]]), 1)  # nothing held
    assert stream.runner.drain(drain_writers(sink)) == 0  # a committer is fine then
    stream.stop()


def test_a_drain_is_refused_for_a_sink_with_a_committer(sink, store, engine):
    stream = open_stream(sink, store)
    stream.run(engine.stage([[1, 2, 3, 4]]), 1)
    before = stream.coordinator.lease.get(1).writer_states
    with pytest.raises(SinkConfigurationError, match="HoldingSink has one"):
        stream.runner.drain(drain_writers(sink))
    assert stream.coordinator.lease.get(1).writer_states == before
    stream.stop()


# --- any crash, anywhere -------------------------------------------------------------------------


CRASH_POINTS = [*STAGE_EVENTS, "writer"]
CHECKPOINTS = st.lists(
    st.tuples(
        st.integers(0, 7),  # elements
        st.integers(1, 3),  # writers
        st.lists(st.sampled_from(CRASH_POINTS), max_size=2),  # crash of each attempt
        st.integers(1, 3),  # writers of the replays
        st.booleans(),  # replayed once more after it returned (Spark's commit log not written)
    ),
    min_size=1,
    max_size=5,
)


def split(elements: list[int], parallelism: int) -> list[list[int]]:
    return [elements[i::parallelism] for i in range(parallelism)]


@settings(max_examples=50, deadline=None)
@given(checkpoints=CHECKPOINTS, decoupled=st.booleans())
def test_any_schedule_of_crashes_and_replays_commits_every_element_exactly_once(
    checkpoints, decoupled
):
    with scratch_dir() as base:
        crash_and_replay(base, checkpoints, decoupled)


def crash_and_replay(base: Path, checkpoints: list[Any], decoupled: bool) -> None:
    sink = HoldingSink(base / "out", batch=2)
    engine = Engine(sink)
    store = SqliteCommitStateStore(base / "state.sqlite")
    armed: set[tuple[str, int]] = set()

    def on_stage(event: str, epoch: int) -> None:
        if (event, epoch) in armed:
            armed.discard((event, epoch))
            raise Crash(f"{event} of epoch {epoch}")

    counter = itertools.count(1)
    written: list[int] = []
    stream: Stream | None = None
    for checkpoint_id, checkpoint in enumerate(checkpoints, 1):
        size, writers, crashes, replay_writers, replayed = checkpoint
        elements = [next(counter) for _ in range(size)]
        written.extend(elements)
        attempts = iter(crashes)
        for attempt in itertools.count():
            assert attempt < 10, "the checkpoint never succeeded"
            crash = next(attempts, None)
            crash_at = None
            if crash == "writer":
                crash_at = (writers if attempt == 0 else replay_writers) // 2
            elif crash == "job-recorded":  # the driver dies, and again while opening
                if stream is not None:
                    stream.died()
                    stream = None
                armed.add((crash, 0))
            elif crash is not None:
                armed.add((crash, checkpoint_id))
            partitions = split(elements, writers if attempt == 0 else replay_writers)
            try:
                if stream is None:
                    stream = open_stream(sink, store, on_stage=on_stage, decoupled=decoupled)
                stream.run(engine.stage(partitions, crash_at=crash_at), checkpoint_id)
            except Crash:  # the engine replays the checkpoint on a new driver
                if stream is not None:
                    stream.died()
                    stream = None
                continue
            if replayed:  # it returned, and the driver died before the engine noted it
                replayed = False
                stream.died()
                stream = None
                continue
            break
    armed.clear()
    if stream is not None:
        stream.died()  # whatever the commit thread did, it did
    final = open_stream(sink, store)
    last = len(checkpoints)
    assert final.statuses() == dict.fromkeys(range(1, last + 1), COMMITTED)
    held = held_in(final, sink, last)
    committed = sink.ledger.elements()
    assert len(set(committed)) == len(committed)  # nothing committed twice
    assert sorted(committed + held) == written  # nothing lost
    final.stop()


# --- a destination whose idempotency key another history used ------------------------------------


class EverythingCommitted(Committer[Txn]):
    """A destination that says every committable is committed: its key saw them before."""

    def commit(self, requests: Collection[Committer.CommitRequest[Txn]]) -> None:
        for request in requests:
            request.signal_already_committed()

    def close(self) -> None:
        pass


class CollidingSink(HoldingSink):
    def create_committer(self, context: Any) -> EverythingCommitted:
        return EverythingCommitted()


def test_a_fresh_checkpoint_the_destination_calls_committed_is_aborted_not_dropped(scratch, store):
    sink = CollidingSink(scratch / "out")
    stream = open_stream(sink, store)
    with pytest.raises(SinkConfigurationError, match="just wrote as already committed"):
        stream.run(Engine(sink).stage([[1, 2, 3]]), 1)
    assert stream.statuses() == {1: EpochStatus.ABORTED}  # never recorded as committed
    assert sink.ledger.elements() == []
    stream.died()


def test_a_replay_after_the_store_was_lost_may_find_its_checkpoint_committed(scratch, store):
    sink = CollidingSink(scratch / "out")
    stream = open_stream(sink, store)  # the store knows nothing of checkpoints 1..4
    engine = Engine(sink)
    engine.store_lost = True
    result = stream.run(engine.stage([[1, 2, 3]]), 5)
    assert result is not None
    assert (result.status, result.already_committed) == (CommitStatus.COMMITTED, 1)
    assert stream.statuses() == {5: EpochStatus.COMMITTED}
    stream.stop()
