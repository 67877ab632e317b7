"""Red-team tests of the runtime: faults and inputs the rest of the suite does not try.

Each test pins a bug that was found by trying it: a stream's checkpoint id going back
below its pruned history, a recorded epoch whose committables no longer read, and a
zombie driver (one that lost the sink id to a newer driver) committing anyway, a
damaged source epoch record, a source asked again for an epoch the engine
committed, and ids with NUL (one store took them, the other failed).
The sink is `test_coordinator`'s small file sink: staged JSON-lines files renamed
into place on commit.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import sqlite3

import pytest

from sinkv2._cli import main
from sinkv2.errors import (
    CommitStateError,
    CorruptDataError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime import (
    CheckpointRunner,
    CommitCoordinator,
    CommitStatus,
    EpochNeed,
    EpochStatus,
    PostgresCommitStateStore,
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
)
from sinkv2.source.lib import NumberSequenceSource
from tests.unit.runtime.log_fixtures import LOGS, NOTIFIED, LogSource
from tests.unit.runtime.test_coordinator import (
    NO_WAIT,
    Crash,
    FileSink,
    LocalStreams,
    run,
    writer_stage,
)


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")


@pytest.fixture
def sink(tmp_path):
    return FileSink(tmp_path / "out")


def coordinator(sink, store, **kwargs):
    return CommitCoordinator(
        sink,
        sink_id="orders",
        store=store,
        streams=LocalStreams(),
        retry_policy=NO_WAIT,
        sleep=lambda seconds: None,
        **kwargs,
    )


def stream_stage(sink, data):
    stage = writer_stage(sink, data)
    return lambda job_id, checkpoint_id, restore: stage(job_id, checkpoint_id)


def test_a_stream_checkpoint_below_its_pruned_history_is_refused_not_written_twice(sink, store):
    job = coordinator(sink, store)
    runner = CheckpointRunner(job, recovery=job.open(origin="q", keep_restorable=True))
    for checkpoint in range(1, 4):
        runner.run(stream_stage(sink, [[checkpoint]]), checkpoint)
    runner.close()
    job.prune(3)  # as the runner does every few checkpoints, keeping the newest
    job.finish()
    visible = sink.visible()

    again = coordinator(sink, store)
    runner = CheckpointRunner(again, recovery=again.open(origin="q", keep_restorable=True))
    with pytest.raises(CommitStateError) as refused:
        runner.run(stream_stage(sink, [[1]]), 1)  # the checkpoint ids went back
    message = str(refused.value)
    assert "checkpoint 1 of sink 'orders'" in message
    assert "checkpoint 3 is committed" in message
    assert str(store.path) in message
    runner.close()
    again.close()
    assert sink.visible() == visible  # nothing of checkpoint 1 was written again
    assert sink.staged() == []
    with store.acquire("orders", job_id="inspect") as lease:
        assert [r.epoch for r in lease.epochs()] == [3]


def test_committables_that_no_longer_read_name_the_sink_epoch_and_store_and_a_way_out(sink, store):
    with contextlib.suppress(Crash):
        run(sink, store, [[1, 2], [3]], checkpoint_id=7, crash_at="pending-recorded")
    with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
        connection.execute("UPDATE pending_sink_state SET payload = substr(payload, 1, 9)")
    with pytest.raises(CorruptDataError) as unreadable:
        run(sink, store, [[1, 2], [3]], checkpoint_id=7)
    message = str(unreadable.value)
    assert "sink 'orders' epoch 7 (pending)" in message
    assert str(store.path) in message
    assert sink.visible() == []  # nothing committed from bytes that do not read
    # the command the message gives runs as written; the epoch is then written afresh
    command = re.search(r"`sinkv2 (state abort [^`]+)`", message)
    assert command is not None, message
    assert main(shlex.split(command.group(1))) == 0
    result = run(sink, store, [[1, 2], [3]], checkpoint_id=7)
    assert result.status is CommitStatus.COMMITTED
    assert sink.visible() == [1, 2, 3]


def test_a_zombie_driver_that_lost_the_sink_id_stops_before_its_committer_runs(sink, store):
    committers = []
    create_committer = sink.create_committer

    def counted(context):
        committers.append(context.get_job_id())
        return create_committer(context)

    sink.create_committer = counted
    zombie = coordinator(sink, store, job_id="zombie")
    plan = zombie.plan_epoch(None, recovery=zombie.open())
    assert plan.need is EpochNeed.WRITE
    pending = zombie.write_epoch(plan, lambda: writer_stage(sink, [[1, 2]])("zombie", 1))
    # The zombie stalls; its lock is lost (here: the lock files deleted, as a clean-up
    # job might), and a newer driver takes the sink id, aborts the zombie's epoch and
    # writes the data again.
    shutil.rmtree(store.path.with_name(store.path.name + ".locks"))
    newer = coordinator(sink, store, job_id="newer")
    recovery = newer.open()
    assert recovery.aborted == (plan.epoch,)
    newer.run_epoch(writer_stage(sink, [[1, 2]]), checkpoint_id=None, recovery=recovery)
    newer.finish()
    assert committers == ["newer"]

    with pytest.raises(StaleFencingTokenError):
        zombie.commit_epoch(pending)  # resumes
    zombie.close()
    assert committers == ["newer"]  # the zombie's committer never ran
    assert sink.visible() == [1, 2]
    with store.acquire("orders", job_id="inspect") as lease:
        assert [(r.epoch, r.status) for r in lease.epochs()] == [
            (plan.epoch, EpochStatus.ABORTED),
            (plan.epoch + 1, EpochStatus.COMMITTED),
        ]


@pytest.mark.parametrize(
    ("column", "damage", "call"),
    [
        ("assignment", b"\x93not msgpack of slices", lambda c: c.slices(1)),
        ("enumerator_checkpoint", b"\x00\x00", lambda c: c.next_epoch(1, ReadLimit())),
        ("end_positions", b"\xc1", lambda c: c.next_epoch(1, ReadLimit())),
    ],
)
def test_a_damaged_source_epoch_record_is_corrupt_data_naming_the_record_and_a_way_out(
    tmp_path, column, damage, call
):
    source = NumberSequenceSource(1, 20)
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    first = SourceEpochCoordinator(source, store, "src", parallelism=2)
    assert first.next_epoch(first.initial_epoch(), ReadLimit()) == 1
    first.close()
    with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
        connection.execute(f"UPDATE source_epoch_state SET {column} = ? WHERE epoch = 1", (damage,))
    again = SourceEpochCoordinator(source, store, "src", parallelism=2)
    with pytest.raises(CorruptDataError) as damaged:
        call(again)
    again.close()
    message = str(damaged.value)
    assert f"epoch 1 of source id 'src' in {store!r} does not read ({column}:" in message
    assert f"sinkv2 state forget-source {store.path} src" in message


@pytest.mark.parametrize(("sink_id", "job_id"), [("a\x00b", "j"), ("orders", "j\x00")])
def test_an_id_with_nul_is_refused_by_every_store_before_anything_is_written(
    store, sink_id, job_id
):
    # PostgreSQL cannot keep NUL (a job id with one even failed as "cannot connect"),
    # so one id must not work in one store and fail in the other
    with pytest.raises(SinkConfigurationError, match="must be a str without NUL characters"):
        store.acquire(sink_id, job_id=job_id)
    with pytest.raises(SinkConfigurationError, match="'source_id' must be a str without NUL"):
        store.acquire_source(sink_id + "\x00", job_id="j")
    assert not store.path.exists()  # nothing was created


def test_a_zombie_whose_postgres_session_was_terminated_stops_before_its_committer_runs(
    sink, postgres_url
):
    store = PostgresCommitStateStore(postgres_url)
    committers = []
    create_committer = sink.create_committer

    def counted(context):
        committers.append(context.get_job_id())
        return create_committer(context)

    sink.create_committer = counted
    zombie = coordinator(sink, store, job_id="zombie")
    plan = zombie.plan_epoch(None, recovery=zombie.open())
    pending = zombie.write_epoch(plan, lambda: writer_stage(sink, [[1, 2]])("zombie", 1))
    assert store.terminate_holder("orders") is not None  # an operator frees the sink id
    newer = coordinator(sink, store, job_id="newer")
    recovery = newer.open()
    assert recovery.aborted == (plan.epoch,)
    newer.run_epoch(writer_stage(sink, [[1, 2]]), checkpoint_id=None, recovery=recovery)
    newer.finish()

    with pytest.raises(CommitStateError, match="lost"):
        zombie.commit_epoch(pending)  # resumes
    zombie.close()
    assert committers == ["newer"]  # the zombie's committer never ran
    assert sink.visible() == [1, 2]


def test_a_source_asked_again_for_an_epoch_the_engine_committed_refuses_to_read_it_twice(
    tmp_path,
):
    LOGS["redteam"] = [[], []]
    try:
        source = LogSource("redteam")
        store = SqliteCommitStateStore(tmp_path / "state.sqlite")
        first = SourceEpochCoordinator(source, store, "src", parallelism=2)
        start = first.initial_epoch()
        for partition in (0, 1):
            LOGS["redteam"][partition].extend(range(partition * 100, partition * 100 + 3))
            end = first.next_epoch(start, ReadLimit())
            first.slices(end, start=start)  # the engine logged and planned the micro-batch
            first.acknowledge(end)  # and committed it
            start = end
        assert start == 2
        first.close()
        again = SourceEpochCoordinator(source, store, "src", parallelism=2)
        with pytest.raises(CommitStateError, match=r"committed epoch 2 .* after 1 again"):
            again.next_epoch(1, ReadLimit())  # the engine's checkpoint went back
        assert again.next_epoch(2, ReadLimit()) == 2  # from where it was: nothing new
        again.close()
    finally:
        LOGS.pop("redteam", None)
        NOTIFIED.pop("redteam", None)
