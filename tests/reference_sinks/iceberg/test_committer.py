"""The Iceberg committer's guard, on real SqlCatalog tables (SQLite + local files, no Spark)."""

import multiprocessing
import threading
import time
from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException

from reference_sinks.iceberg import (
    CHECKPOINT_ID_PROPERTY,
    COMMIT_ID_PROPERTY,
    SINK_ID_PROPERTY,
    IcebergSink,
    committed_state,
)
from reference_sinks.iceberg._committer import append_committable
from sinkv2 import SimpleVersionedSerialization
from sinkv2.runtime import CommitRetryPolicy, commit_with_retries
from tests.reference_sinks.iceberg.tables import make_sink, read_back, rows, snapshots_of, stage

NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)


def commit(sink: IcebergSink, *committables: object) -> object:
    return commit_with_retries(sink.create_committer(None), list(committables), policy=NO_WAIT)  # type: ignore[arg-type]


def test_one_snapshot_per_checkpoint_with_the_guard_properties(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, partitioned=True, sink_id="orders")
    first = stage(sink, [rows(0, 50), rows(50, 50)], checkpoint_id=1)
    second = stage(sink, [rows(100, 30)], job_id="job2", checkpoint_id=2)
    outcome = commit(sink, second, first)  # out of order: committed in checkpoint order
    assert len(outcome.committed) == 2  # type: ignore[attr-defined]
    summaries = snapshots_of(sink)
    assert [s[CHECKPOINT_ID_PROPERTY] for s in summaries] == ["1", "2"]
    assert [s[SINK_ID_PROPERTY] for s in summaries] == ["orders", "orders"]
    assert summaries[0][COMMIT_ID_PROPERTY] == first.commit_id
    assert summaries[0]["added-records"] == "100"
    assert [row["id"] for row in read_back(sink)] == list(range(130))


def test_a_committable_at_or_below_the_last_checkpoint_is_already_committed(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    five = stage(sink, [rows(0, 5)], checkpoint_id=5)
    three = stage(sink, [rows(5, 5)], job_id="late", checkpoint_id=3)
    replay = stage(
        sink, [rows(0, 5)], job_id="replay", checkpoint_id=5
    )  # new files, same checkpoint
    commit(sink, five)
    outcome = commit(sink, three, replay)
    assert outcome.already_committed == (three, replay)  # type: ignore[attr-defined]
    assert len(snapshots_of(sink)) == 1
    assert [row["id"] for row in read_back(sink)] == list(range(5))


def test_a_batch_committable_without_checkpoint_is_recognised_by_its_files(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    first = stage(sink, [rows(0, 5)])
    second = stage(sink, [rows(5, 5)], job_id="job2")
    assert commit(sink, first).committed == (first,)  # type: ignore[attr-defined]
    assert commit(sink, first).already_committed == (first,)  # type: ignore[attr-defined]
    assert commit(sink, second).committed == (second,)  # type: ignore[attr-defined]
    assert [row["id"] for row in read_back(sink)] == list(range(10))
    assert CHECKPOINT_ID_PROPERTY not in snapshots_of(sink)[0]


def test_sink_ids_have_separate_histories(tmp_path: Path) -> None:
    orders = make_sink(tmp_path, sink_id="orders")
    refunds = make_sink(tmp_path, sink_id="refunds")
    commit(orders, stage(orders, [rows(0, 3)], checkpoint_id=9))
    assert commit(refunds, stage(refunds, [rows(3, 3)], checkpoint_id=1)).committed  # type: ignore[attr-defined]
    table = orders.load_table()
    assert committed_state(table, "orders").max_checkpoint_id == 9
    assert committed_state(table, "refunds").max_checkpoint_id == 1
    assert committed_state(table, "nobody").snapshots == 0
    assert len(read_back(orders)) == 6


def test_a_stale_table_conflicts_instead_of_appending_twice(tmp_path: Path) -> None:
    """pyiceberg 0.12 re-applies an append on conflict; the committer's single attempt must not."""
    sink = make_sink(tmp_path)
    committable = stage(sink, [rows(0, 10)], checkpoint_id=1)
    stale = sink.load_table()
    commit(sink, committable)
    with pytest.raises(CommitFailedException):
        append_committable(stale, committable)
    assert len(snapshots_of(sink)) == 1
    assert len(read_back(sink)) == 10
    assert "commit.retry.num-retries" not in sink.load_table().properties  # table untouched


def test_two_committers_racing_commit_each_checkpoint_once(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    checkpoints = [
        stage(sink, [rows(i * 10, 10)], job_id=f"j{i}", checkpoint_id=i) for i in range(1, 9)
    ]
    barrier = threading.Barrier(2)
    outcomes: list[object] = []
    errors: list[BaseException] = []

    def race() -> None:
        committer = sink.create_committer(None)  # its own catalog connection
        try:
            for committable in checkpoints:
                barrier.wait(timeout=30)
                outcomes.append(commit_with_retries(committer, [committable], policy=NO_WAIT))
        except BaseException as error:  # noqa: BLE001  # reported below
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    summaries = snapshots_of(sink)
    assert [s[CHECKPOINT_ID_PROPERTY] for s in summaries] == [str(i) for i in range(1, 9)]
    committed = sum(len(o.committed) for o in outcomes)  # type: ignore[attr-defined]
    already = sum(len(o.already_committed) for o in outcomes)  # type: ignore[attr-defined]
    assert (committed, already) == (8, 8)
    assert [row["id"] for row in read_back(sink)] == list(range(10, 90))


def test_conflicts_with_another_writer_are_retried_until_committed(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, sink_id="mine")
    other = make_sink(tmp_path, sink_id="theirs")
    mine = [stage(sink, [rows(i * 10, 10)], job_id=f"m{i}", checkpoint_id=i) for i in range(1, 6)]
    theirs = [
        stage(other, [rows(100 + i * 10, 10)], job_id=f"t{i}", checkpoint_id=i) for i in range(1, 6)
    ]
    threads = [
        threading.Thread(target=lambda s=s, cs=cs: [commit(s, c) for c in cs])
        for s, cs in ((sink, mine), (other, theirs))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    summaries = snapshots_of(sink)
    assert sorted(
        s[CHECKPOINT_ID_PROPERTY] for s in summaries if s[SINK_ID_PROPERTY] == "mine"
    ) == list("12345")
    assert len(summaries) == 10
    assert len(read_back(sink)) == 100


def _commit_all_in_a_process(warehouse: str, payloads: list[bytes], start: float) -> None:
    """Child process: commit every committable (framed bytes) with its own catalog."""
    import time as clock  # runs in a spawned interpreter

    from reference_sinks.iceberg import IcebergSink as Sink  # spawned interpreter
    from reference_sinks.iceberg import local_catalog as catalog  # spawned interpreter

    sink = Sink(catalog(warehouse), "ns.events")
    serializer = sink.get_committable_serializer()
    committer = sink.create_committer(None)  # type: ignore[arg-type]
    clock.sleep(max(0.0, start - clock.time()))  # both processes start together
    for payload in payloads:
        committable = SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload)
        commit_with_retries(committer, [committable], policy=NO_WAIT)


def test_two_committer_processes_racing_commit_each_checkpoint_once(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    serializer = sink.get_committable_serializer()
    payloads = [
        SimpleVersionedSerialization.write_version_and_serialize(
            serializer, stage(sink, [rows(i * 10, 10)], job_id=f"p{i}", checkpoint_id=i)
        )
        for i in range(1, 13)
    ]
    context = multiprocessing.get_context("spawn")
    start = time.time() + 3
    processes = [
        context.Process(target=_commit_all_in_a_process, args=(str(tmp_path), payloads, start))
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0, 0]
    summaries = snapshots_of(sink)
    assert [s[CHECKPOINT_ID_PROPERTY] for s in summaries] == [str(i) for i in range(1, 13)]
    assert [row["id"] for row in read_back(sink)] == list(range(10, 130))
