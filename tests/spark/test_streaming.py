"""Structured Streaming through SinkTopologyTranslator.apply(streaming_df, ...) on real Spark.

Input is JSON (or Parquet) files written into ``tmp_path``, read with
``maxFilesPerTrigger=1`` so that each file is one micro-batch, under an
``availableNow`` trigger so that every query ends by itself once the files are
read; one test stops a ``rate`` stream while it runs. Micro-batch b is checkpoint
b + 1. A driver that dies is simulated by an ``on_stage`` listener that raises at
one stage of one checkpoint: the micro-batch fails, and so does the query.

`StatefulSink` (``stateful_sink.py``) carries every writer state it ever made, so
`check_state_chain` can tell whether each state reached exactly one writer of the
next checkpoint, also across restarts, rescales and task retries.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sqlite3
import time
from pathlib import Path

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2.errors import CommitError, SerializationError, SinkConfigurationError
from sinkv2.runtime import CommitRetryPolicy, CommitStatus, EpochStatus, SqliteCommitStateStore
from sinkv2_spark import SinkTopologyTranslator
from tests.spark.recording_sink import RecordingSink
from tests.spark.stateful_sink import (
    CompatibleStatefulSink,
    GatedSink,
    RenamedStatefulSink,
    RescalingSink,
    StatefulSink,
)

pytestmark = pytest.mark.spark

SCHEMA = "id long, key string"
ROWS = 10
AVAILABLE_NOW = {"availableNow": True}
_MTIME = 1_600_000_000


def rows_of(index: int) -> list[dict]:
    """File ``index``'s rows: ids ``index * 100`` .. ``index * 100 + ROWS - 1``."""
    return [{"id": index * 100 + j, "key": f"k{j % 3}"} for j in range(ROWS)]


def expected(files) -> list[dict]:
    return sorted((row for index in files for row in rows_of(index)), key=lambda r: r["id"])


def write_files(directory: Path, *indices: int, empty: bool = False) -> None:
    """Write input files (atomically, each newer than the one before it)."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in indices:
        path = directory / f"part-{index:04d}.json"
        temporary = directory / f".part-{index:04d}.tmp"
        rows = [] if empty else rows_of(index)
        temporary.write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.replace(temporary, path)
        os.utime(path, (_MTIME + 10 * index, _MTIME + 10 * index))


def json_stream(spark, directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(directory))


def committed(sink) -> list[dict]:
    return sorted(sink.committed_records(), key=lambda r: r["id"])


def outcomes(query) -> list[tuple[int, CommitStatus, int]]:
    return [(r.epoch, r.status, r.records_written) for r in query.recent_results]


@pytest.fixture
def streams(tmp_path, monkeypatch):
    """A translator without a store of its own: each stream's lives in its checkpoint."""
    monkeypatch.setenv("SINKV2_STATE_DIR", str(tmp_path / "default-store"))
    return SinkTopologyTranslator(
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)
    )


def run(streams, df, sink, checkpoint: Path, *, sink_id: str = "stream", **options):
    """Start the query, wait until it ends by itself, return its handle.

    Raises what ``awaitTermination`` raises when the query fails.
    """
    query = streams.apply(
        df,
        sink,
        sink_id=sink_id,
        checkpoint_location=str(checkpoint),
        trigger=AVAILABLE_NOW,
        **options,
    )
    try:
        ended = query.awaitTermination(120)
    except BaseException:
        query.stop()
        raise
    if not ended:
        query.stop()
        raise AssertionError("the availableNow query did not end in 120 s")
    return query


# --- results ------------------------------------------------------------------------------


def test_one_result_per_micro_batch_and_a_restart_continues_the_numbering(spark, streams, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(source, 0, 1, 2)
    sink = RecordingSink(tmp_path / "out")
    heard = []
    query = streams.apply(
        json_stream(spark, source),
        sink,
        sink_id="numbered",
        checkpoint_location=str(checkpoint),
        trigger=AVAILABLE_NOW,
    )
    query.add_result_listener(heard.append)
    assert query.awaitTermination(120)

    assert outcomes(query) == [(n, CommitStatus.COMMITTED, ROWS) for n in (1, 2, 3)]
    batch_ids = [p["batchId"] for p in query.recentProgress]
    assert [r.checkpoint_id for r in query.recent_results] == [b + 1 for b in batch_ids]
    assert query.last_result is query.recent_results[-1]
    assert query.last_result.sink_id == "numbered"
    assert heard == query.recent_results
    assert committed(sink) == expected(range(3))
    assert (checkpoint / "sinkv2" / "commit_state.sqlite").is_file()
    assert json.loads((checkpoint / "sinkv2" / "sink.json").read_text()) == {"sink_id": "numbered"}
    writers = len(sink.events_by_token())

    # A restart with nothing new: no micro-batch, nothing written.
    again = run(streams, json_stream(spark, source), sink, checkpoint, sink_id="numbered")
    assert again.recent_results == []
    assert len(sink.events_by_token()) == writers
    assert again.id == query.id  # the same query, by Spark's checkpoint

    # New input: the numbering continues where it stopped.
    write_files(source, 3, 4)
    more = run(streams, json_stream(spark, source), sink, checkpoint, sink_id="numbered")
    assert outcomes(more) == [(4, CommitStatus.COMMITTED, ROWS), (5, CommitStatus.COMMITTED, ROWS)]
    assert committed(sink) == expected(range(5))


def test_stopping_a_running_rate_stream_and_restarting_it_loses_and_repeats_nothing(
    spark, streams, tmp_path
):
    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id")
    )
    sink = StatefulSink(tmp_path / "out")
    for _ in range(2):
        query = streams.apply(
            rate,
            sink,
            sink_id="rate",
            checkpoint_location=str(tmp_path / "checkpoint"),
            trigger={"processingTime": "100 milliseconds"},
        )
        deadline = time.monotonic() + 180  # Spark on a loaded machine is slow, not broken
        while len(query.recent_results) < 2 and query.exception() is None:
            assert time.monotonic() < deadline, "2 micro-batches took over 180 s"
            time.sleep(0.05)
        query.stop()  # cuts the running micro-batch short: the next run replays it
        assert query.exception() is None
        assert not query.isActive
    ids = sorted(row["id"] for row in sink.committed_records())
    assert len(ids) > 0
    assert ids == list(range(len(ids)))  # the rate source counts from 0: no gap, no repeat
    check_state_chain(sink)


# --- writer states ------------------------------------------------------------------------


def contiguous_runs(states: list, parallelism: int) -> list[list]:
    """Flink's rescale of list state: contiguous runs, the first ``len % p`` one longer."""
    size, extra = divmod(len(states), parallelism)
    runs, start = [], 0
    for subtask in range(parallelism):
        end = start + size + (subtask < extra)
        runs.append(states[start:end])
        start = end
    return runs


def _by_origin(mark: dict) -> tuple[int, int]:
    return mark["checkpoint"], mark["subtask"]


def check_state_chain(sink: StatefulSink) -> dict:
    """Every checkpoint's writers restored exactly what the one before snapshotted.

    Same number of writers: each subtask its own states; otherwise contiguous runs.
    In the end, the newest checkpoint's states are every mark ever made, once.
    Returns checkpoint -> subtask -> its committed writer (see `committed_checkpoints`).
    """
    chain = sink.committed_checkpoints()
    assert sorted(chain) == list(range(1, len(chain) + 1))
    made = []
    previous: dict = {}
    for checkpoint in sorted(chain):
        writers = chain[checkpoint]
        parallelism = writers[0]["parallelism"]
        assert sorted(writers) == list(range(parallelism)), checkpoint
        received = [writers[s]["restored"] for s in range(parallelism)]
        if checkpoint == 1:
            assert received == [None] * parallelism  # created, not restored
            assert {w["restored_checkpoint"] for w in writers.values()} == {None}
        else:
            assert {w["restored_checkpoint"] for w in writers.values()} == {checkpoint - 1}
            snapshots = [previous[s]["snapshot"] for s in sorted(previous)]
            if len(snapshots) == parallelism:
                assert received == snapshots, checkpoint  # each its own states back
            else:
                flat = [mark for states in snapshots for mark in states]
                assert received == contiguous_runs(flat, parallelism), checkpoint
        for subtask, writer in writers.items():
            mark = writer["snapshot"][-1]
            assert writer["snapshot"][:-1] == (writer["restored"] or [])
            assert (mark["checkpoint"], mark["subtask"]) == (checkpoint, subtask)
            made.append(mark)
        previous = writers
    carried = [mark for s in sorted(previous) for mark in previous[s]["snapshot"]]
    assert sorted(carried, key=_by_origin) == sorted(made, key=_by_origin)  # none lost or twice
    return chain


def test_writer_states_of_one_micro_batch_restore_the_next_and_survive_a_restart(
    spark, streams, tmp_path
):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(source, 0, 1)
    sink = StatefulSink(tmp_path / "out")
    run(streams, json_stream(spark, source).repartition(2), sink, checkpoint)
    write_files(source, 2)
    restarted = run(streams, json_stream(spark, source).repartition(2), sink, checkpoint)
    assert outcomes(restarted) == [(3, CommitStatus.COMMITTED, ROWS)]

    chain = check_state_chain(sink)
    assert sorted(chain) == [1, 2, 3]
    for checkpoint_id in (2, 3):  # the restart too: restored from checkpoint 2
        for subtask, writer in chain[checkpoint_id].items():
            assert writer["restored"] == chain[checkpoint_id - 1][subtask]["snapshot"]
    lasts = {w["snapshot"][-1]["last"] for w in chain[3].values()}
    assert lasts <= {row["id"] for row in rows_of(2)}  # the last element each wrote
    assert committed(sink) == expected(range(3))


def test_an_empty_micro_batch_still_carries_the_writer_states(spark, streams, tmp_path):
    source = tmp_path / "in"
    write_files(source, 0)
    write_files(source, 1, empty=True)  # a micro-batch without a partition
    write_files(source, 2)
    sink = StatefulSink(tmp_path / "out")
    query = run(streams, json_stream(spark, source), sink, tmp_path / "checkpoint")
    assert outcomes(query) == [
        (1, CommitStatus.COMMITTED, ROWS),
        (2, CommitStatus.COMMITTED, 0),
        (3, CommitStatus.COMMITTED, ROWS),
    ]
    chain = check_state_chain(sink)
    assert [len(chain[n]) for n in (1, 2, 3)] == [1, 1, 1]  # one writer over no rows
    assert committed(sink) == expected([0, 2])


def test_rescaling_between_micro_batches_restores_every_state_exactly_once(
    spark, streams, tmp_path
):
    source = tmp_path / "in"
    write_files(source, 0, 1, 2, 3)
    sink = RescalingSink(tmp_path / "out", partitions=[3, 1, 4, 2])
    query = streams.apply(  # Spark's default trigger: runs until stopped
        json_stream(spark, source),
        sink,
        sink_id="rescaled",
        checkpoint_location=str(tmp_path / "checkpoint"),
    )
    try:
        query.processAllAvailable()
        assert query.isActive
    finally:
        query.stop()
    assert query.exception() is None
    assert [r.subtasks for r in query.recent_results] == [3, 1, 4, 2]
    check_state_chain(sink)
    assert committed(sink) == expected(range(4))


def test_rescaling_across_restarts_restores_every_state_exactly_once(spark, streams, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    sink = StatefulSink(tmp_path / "out")
    for index, partitions in enumerate((2, 4, 3)):  # the query restarted with another plan
        pq.write_table(pa.Table.from_pylist(rows_of(index)), source / f"part-{index}.parquet")
        df = spark.readStream.schema(SCHEMA).parquet(str(source)).repartition(partitions)
        query = run(streams, df, sink, checkpoint)
        assert [(r.epoch, r.subtasks) for r in query.recent_results] == [(index + 1, partitions)]
    check_state_chain(sink)
    assert committed(sink) == expected(range(3))


# --- a driver that died mid micro-batch ---------------------------------------------------


class DriverDied(Exception):
    """Stands in for a driver that dies at one stage of one checkpoint."""


def die_at(stage: str, checkpoint: int):
    def listener(event: str, epoch: int) -> None:
        if (event, epoch) == (stage, checkpoint):
            raise DriverDied(f"{event} of checkpoint {epoch}")

    return listener


def pending_epochs(checkpoint: Path, sink_id: str = "stream") -> list[int]:
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with store.acquire(sink_id, job_id="inspect") as lease:
        return [record.epoch for record in lease.epochs(EpochStatus.PENDING)]


@pytest.mark.parametrize("stage", ["pending-recorded", "committer-finished", "committed-recorded"])
def test_a_micro_batch_the_driver_died_in_after_recording_it_is_never_rewritten(
    spark, streams, tmp_path, stage
):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(source, 0, 1)
    sink = StatefulSink(tmp_path / "out")
    with pytest.raises(DriverDied):
        run(streams, json_stream(spark, source), sink, checkpoint, on_stage=die_at(stage, 2))
    visible = range(1) if stage == "pending-recorded" else range(2)
    assert committed(sink) == expected(visible)
    assert pending_epochs(checkpoint) == ([] if stage == "committed-recorded" else [2])
    writers = len(sink.events_by_token())

    write_files(source, 2)
    stages = []
    query = run(
        streams,
        json_stream(spark, source),
        sink,
        checkpoint,
        on_stage=lambda event, epoch: stages.append((event, epoch)),
    )
    # The restart commits checkpoint 2 from the store (unless it was) before Spark
    # replays its micro-batch, which then finds it committed.
    assert (("committed-recorded", 2) in stages) is (stage != "committed-recorded")
    assert ("writers-finished", 2) not in stages
    assert outcomes(query)[0] in {
        (2, CommitStatus.ALREADY_COMMITTED, 0),
        (2, CommitStatus.RECOMMITTED, 0),
    }
    assert outcomes(query)[1:] == [(3, CommitStatus.COMMITTED, ROWS)]
    assert len(sink.events_by_token()) == writers + 1  # only checkpoint 3 was written
    assert committed(sink) == expected(range(3))
    check_state_chain(sink)
    assert pending_epochs(checkpoint) == []


def test_a_micro_batch_whose_driver_died_after_its_writers_is_rewritten_once(
    spark, streams, tmp_path
):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(source, 0, 1)
    sink = StatefulSink(tmp_path / "out")
    with pytest.raises(DriverDied):
        run(
            streams,
            json_stream(spark, source),
            sink,
            checkpoint,
            on_stage=die_at("writers-finished", 2),
        )
    dead = {p.stem for p in sink.staging.glob("*.jsonl")} - set(sink.committed_tokens())
    assert dead  # checkpoint 2 was staged, never recorded
    assert committed(sink) == expected(range(1))
    assert pending_epochs(checkpoint) == []

    query = run(streams, json_stream(spark, source), sink, checkpoint)
    assert outcomes(query) == [(2, CommitStatus.COMMITTED, ROWS)]
    assert committed(sink) == expected(range(2))
    chain = check_state_chain(sink)
    assert not dead & {p.stem for p in sink.staging.glob("*.jsonl")}

    # One more start (nothing new to read) cleans up after the dead run entirely:
    # only what the newest checkpoint's writer states refer to stays staged.
    assert run(streams, json_stream(spark, source), sink, checkpoint).recent_results == []
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[2].values()
    }


# --- bad input ----------------------------------------------------------------------------


def test_a_remote_checkpoint_location_needs_an_explicit_state_store(spark, streams, tmp_path):
    with pytest.raises(SinkConfigurationError, match="pass state_store= explicitly"):
        streams.apply(
            json_stream(spark, tmp_path / "in"),
            RecordingSink(tmp_path / "out"),
            sink_id="remote",
            checkpoint_location="s3a://bucket/x",
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"trigger": {"continuous": "1 second"}}, "the continuous trigger has no micro-batches"),
        ({"trigger": {"often": True}}, "unknown trigger 'often'"),
        ({"trigger": {"once": True, "availableNow": True}}, "takes one keyword"),
        ({"trigger": "availableNow"}, "takes one keyword"),
        ({"checkpoint_id": 3}, "checkpoint_id is for batch runs"),
        ({"decoupled_commit": "yes"}, "decoupled_commit must be a bool"),
    ],
)
def test_bad_streaming_arguments_are_refused_before_anything_is_written(
    spark, streams, tmp_path, options, message
):
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(SinkConfigurationError, match=message):
        streams.apply(
            json_stream(spark, tmp_path / "in"),
            RecordingSink(tmp_path / "out"),
            sink_id="bad",
            checkpoint_location=str(checkpoint),
            **options,
        )
    assert not checkpoint.exists()


def test_a_checkpoint_location_and_a_sink_id_belong_to_each_other(spark, streams, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    shared = SqliteCommitStateStore(tmp_path / "shared" / "commit_state.sqlite")
    sink = RecordingSink(tmp_path / "out")
    write_files(source, 0)
    run(streams, json_stream(spark, source), sink, checkpoint, sink_id="a", state_store=shared)

    with pytest.raises(SinkConfigurationError, match="belongs to the stream of sink id 'a'"):
        streams.apply(
            json_stream(spark, source),
            sink,
            sink_id="b",
            checkpoint_location=str(checkpoint),
            trigger=AVAILABLE_NOW,
        )
    other = tmp_path / "other-checkpoint"
    with pytest.raises(SinkConfigurationError, match="sink id 'a' belongs to another stream"):
        streams.apply(
            json_stream(spark, source),
            sink,
            sink_id="a",
            checkpoint_location=str(other),
            trigger=AVAILABLE_NOW,
            state_store=shared,
        )
    assert not (other / "offsets").exists()  # no query started
    assert committed(sink) == expected(range(1))


def test_only_a_socket_source_is_reported_as_not_replayable(spark, streams, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sinkv2.spark")
    # Files in a folder named "socket", with a column named so: replayable, no warning.
    files = tmp_path / "socket-dump"
    files.mkdir()
    df = spark.readStream.schema("socket_id long").json(str(files)).select("socket_id")
    run(streams, df, RecordingSink(tmp_path / "out"), tmp_path / "c1", sink_id="files")
    assert not [r for r in caplog.records if "cannot replay" in r.getMessage()]

    with contextlib.closing(socket.create_server(("127.0.0.1", 0))) as server:
        port = server.getsockname()[1]  # Spark's connection waits in the backlog
        df = spark.readStream.format("socket").option("host", "127.0.0.1").option("port", port)
        query = streams.apply(
            df.load(),
            RecordingSink(tmp_path / "out"),
            sink_id="socket",
            checkpoint_location=str(tmp_path / "c2"),
        )
        query.stop()
    warnings = [r for r in caplog.records if "cannot replay" in r.getMessage()]
    assert [(r.name, r.levelno) for r in warnings] == [("sinkv2.spark", logging.WARNING)]
    assert "'socket'" in warnings[0].getMessage()


def test_a_corrupt_writer_state_fails_the_query_naming_sink_epoch_and_subtask(
    spark, streams, tmp_path
):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(source, 0)
    sink = StatefulSink(tmp_path / "out")
    run(streams, json_stream(spark, source).repartition(2), sink, checkpoint, sink_id="tampered")
    database = checkpoint / "sinkv2" / "commit_state.sqlite"
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        where = "WHERE sink_id = 'tampered' AND epoch = 1"
        (blob,) = db.execute(f"SELECT writer_states FROM pending_sink_state {where}").fetchone()
        layout, name, number, subtasks = msgpack.unpackb(blob)
        subtasks[1][2][0] = subtasks[1][2][0][:5]  # cut inside its version+length header
        tampered = msgpack.packb([layout, name, number, subtasks])
        db.execute(f"UPDATE pending_sink_state SET writer_states = ? {where}", (tampered,))
    tokens = sink.committed_tokens()

    write_files(source, 1)
    with pytest.raises(SerializationError) as caught:
        run(streams, json_stream(spark, source), sink, checkpoint, sink_id="tampered")
    message = str(caught.value)
    assert "sink 'tampered' epoch 1" in message
    assert "subtask 1" in message
    assert sink.committed_tokens() == tokens  # nothing written or committed
    assert committed(sink) == expected(range(1))
    store = SqliteCommitStateStore(database)
    with store.acquire("tampered", job_id="inspect") as lease:
        assert lease.get(2) is None


def test_states_of_another_sink_class_restore_only_if_declared_compatible(spark, streams, tmp_path):
    source, checkpoint, out = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "out"
    write_files(source, 0)
    run(streams, json_stream(spark, source), StatefulSink(out), checkpoint)

    write_files(source, 1)
    with pytest.raises(SinkConfigurationError, match="WithCompatibleState") as caught:
        run(streams, json_stream(spark, source), RenamedStatefulSink(out), checkpoint)
    assert "tests.spark.stateful_sink.StatefulSink" in str(caught.value)
    assert committed(StatefulSink(out)) == expected(range(1))

    compatible = CompatibleStatefulSink(out)
    query = run(streams, json_stream(spark, source), compatible, checkpoint)
    assert outcomes(query) == [(2, CommitStatus.COMMITTED, ROWS)]
    check_state_chain(compatible)  # checkpoint 1's states reached checkpoint 2's writers
    assert committed(compatible) == expected(range(2))


# --- decoupled commits --------------------------------------------------------------------


def test_decoupled_commits_deliver_every_micro_batch_once_and_in_order(spark, streams, tmp_path):
    source = tmp_path / "in"
    write_files(source, 0, 1, 2, 3)
    sink = StatefulSink(tmp_path / "out")
    stages = []
    query = run(
        streams,
        json_stream(spark, source),
        sink,
        tmp_path / "checkpoint",
        decoupled_commit=True,
        on_stage=lambda event, epoch: stages.append((event, epoch)),
    )
    assert outcomes(query) == [(n, CommitStatus.COMMITTED, ROWS) for n in (1, 2, 3, 4)]
    assert [n for event, n in stages if event == "committed-recorded"] == [1, 2, 3, 4]
    assert committed(sink) == expected(range(4))
    chain = check_state_chain(sink)
    checkpoint_of = {w["token"]: n for n, writers in chain.items() for w in writers.values()}
    order = [checkpoint_of[token] for token in sink.committed_tokens()]
    assert order == sorted(order)  # the destination saw the commits in checkpoint order


def test_a_failed_decoupled_commit_fails_the_next_micro_batch_and_a_restart_commits_it(
    spark, streams, tmp_path
):
    source, checkpoint, out = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "out"
    write_files(source, 0, 1, 2)
    refused = [row["id"] for row in rows_of(1)]
    sink = GatedSink(out, gate=3, refuse_ids=refused)  # micro-batch 3 starts once 2 failed
    query = streams.apply(
        json_stream(spark, source),
        sink,
        sink_id="decoupled",
        checkpoint_location=str(checkpoint),
        trigger=AVAILABLE_NOW,
        decoupled_commit=True,
    )
    with pytest.raises(CommitError, match="sink 'decoupled' epoch 2"):
        query.awaitTermination(120)
    assert isinstance(query.exception(), CommitError)
    assert outcomes(query) == [(1, CommitStatus.COMMITTED, ROWS)]
    assert committed(sink) == expected(range(1))
    assert pending_epochs(checkpoint, "decoupled") == [2]  # checkpoint 3 was never written

    healed = GatedSink(out, gate=0)
    restarted = run(
        streams,
        json_stream(spark, source),
        healed,
        checkpoint,
        sink_id="decoupled",
        decoupled_commit=True,
    )
    assert outcomes(restarted) == [(3, CommitStatus.COMMITTED, ROWS)]
    assert committed(healed) == expected(range(3))
    check_state_chain(healed)
    assert pending_epochs(checkpoint, "decoupled") == []


def test_a_failed_decoupled_commit_of_the_last_micro_batch_fails_the_query(
    spark, streams, tmp_path
):
    source, checkpoint, out = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "out"
    write_files(source, 0, 1)
    sink = StatefulSink(out, refuse_ids=[row["id"] for row in rows_of(1)])
    query = streams.apply(
        json_stream(spark, source),
        sink,
        sink_id="decoupled",
        checkpoint_location=str(checkpoint),
        trigger=AVAILABLE_NOW,
        decoupled_commit=True,
    )
    with pytest.raises(CommitError, match="sink 'decoupled' epoch 2"):
        query.awaitTermination(120)
    assert isinstance(query.exception(), CommitError)
    assert pending_epochs(checkpoint, "decoupled") == [2]
    healed = StatefulSink(out)  # nothing new to read: starting commits checkpoint 2
    restarted = run(streams, json_stream(spark, source), healed, checkpoint, sink_id="decoupled")
    assert restarted.recent_results == []
    assert committed(healed) == expected(range(2))
    assert pending_epochs(checkpoint, "decoupled") == []


# --- task failures ------------------------------------------------------------------------


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failures=st.dictionaries(
        st.tuples(st.integers(0, 1), st.integers(0, 2)),  # (subtask, attempt): 4 attempts
        st.integers(0, 4),  # the element it fails at (each subtask gets 5 of 10 rows)
        max_size=4,
    ),
    decoupled=st.booleans(),
)
def test_random_task_failures_never_lose_duplicate_or_misroute_anything(
    spark, streams, tmp_path_factory, failures, decoupled
):
    base = tmp_path_factory.mktemp("faults")
    write_files(base / "in", 0, 1)
    sink = StatefulSink(base / "out", failures=failures)
    df = json_stream(spark, base / "in").repartition(2)
    query = run(streams, df, sink, base / "checkpoint", decoupled_commit=decoupled)
    assert outcomes(query) == [(n, CommitStatus.COMMITTED, ROWS) for n in (1, 2)]
    assert committed(sink) == expected(range(2))
    chain = check_state_chain(sink)
    # Attempt a of a subtask runs only if attempts 0 .. a - 1 failed; each subtask
    # writes 5 rows, so every scheduled failure (at element 0 .. 4) happens.
    failing = sum(next(a for a in range(4) if (subtask, a) not in failures) for subtask in range(2))
    logs = [
        [json.loads(line) for line in log.read_text().splitlines()]
        for log in sink.state_logs.glob("*.jsonl")
    ]
    assert len([log for log in logs if log[-1]["event"] != "snapshot"]) == 2 * failing
    # Every attempt of a subtask, failed or not, restored what its winner restored.
    for start, *_ in logs:
        checkpoint = (start["restored_checkpoint"] or 0) + 1
        assert start["states"] == (chain[checkpoint][start["subtask"]]["restored"] or [])
    # Losers' staging is gone; the newest checkpoint's stays for its states.
    assert {p.stem for p in sink.staging.glob("*.jsonl")} == {
        writer["token"] for writer in chain[2].values()
    }
