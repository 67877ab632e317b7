"""Streaming reads of FLIP-27 sources on Spark: the Spark-specific checks S1-S9.

Research section 4.3 (``shared/research/flip27-sources.md``) lists what pyspark 4.3's
streaming lifecycle makes hard: ``initialOffset()`` called again on a replay, batches
re-planned from logged offsets after a crash, ``commit(end)`` never called for the
last batch, admission limits, offsets written whole every batch. Each test here
checks one of them against the append-only log source (``tests/spark/log_source.py``)
or a number sequence; a crash is simulated by a ``foreachBatch`` that fails a chosen
batch (``offsets/N`` written, ``commits/N`` missing), or by deleting ``commits/N``.
"""

from __future__ import annotations

import json
import pickle
import shutil
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from sinkv2.runtime import SqliteCommitStateStore
from sinkv2.source.lib import NumberSequenceSource
from sinkv2_spark import from_source, register
from tests.spark.log_source import LogEnumerator, LogSource, append
from tests.spark.stream_reading import (
    TIMEOUT_S,
    Collector,
    by_file,
    expected_by_file,
    input_rows,
    log_stream,
    offset_epoch,
    run_available_now,
    run_until,
    source_offsets,
    start,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def door(spark):
    register(spark)
    return spark


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    directory = tmp_path / "logs"
    directory.mkdir()
    return directory


def write(logs: Path, files: int, lines: int, *, first: int = 0) -> int:
    for index in range(files):
        append(logs, f"part-{index}.log", range(first, first + lines))
    return files * lines


def fail_at(df, checkpoint: Path, collector: Collector) -> None:
    """Run ``df`` under availableNow until ``collector`` fails its batch on purpose."""
    query = start(df, checkpoint, collector, availableNow=True)
    try:
        with pytest.raises(Exception, match="fails on purpose"):
            query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()


def test_s1_the_initial_offset_is_the_same_in_every_run(door, logs, tmp_path):
    """S1: batch 0 dies before its commit; new lines come; the replayed batch 0 is identical."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    written = write(logs, 2, 30)
    first = Collector(fail_batch=0)
    fail_at(log_stream(door, logs, state, maxRecordsPerTrigger=25), checkpoint, first)
    assert not (checkpoint / "commits" / "0").exists()
    written += write(logs, 2, 10, first=30)  # a "start from now" source would differ now
    second = Collector()
    query = run_available_now(
        log_stream(door, logs, state, maxRecordsPerTrigger=25), checkpoint, second
    )
    assert second.calls[0] == first.calls[0]  # batch 0 again, the same rows
    for progress in query.recentProgress:  # Spark may report batch 0's start as null
        start_offset = json.loads(progress["sources"][0]["startOffset"] or "null")
        if progress["batchId"] == 0 and start_offset is not None:
            assert start_offset == {"v": 1, "source_id": "logs", "epoch": 0}
    assert second.count() == written
    assert by_file(second.rows()) == expected_by_file(logs)


def test_s2_a_batch_replayed_after_its_commit_was_lost_has_the_same_rows(door, logs, tmp_path):
    """S2: delete commits/N of the last batch and restart: batch N again, the same rows."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    write(logs, 3, 40)
    collector = Collector()
    run_available_now(log_stream(door, logs, state, maxRecordsPerTrigger=50), checkpoint, collector)
    last = max(collector.batches)
    assert last >= 2
    first_run = dict(collector.calls)
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum
    write(logs, 3, 5, first=40)
    replay = Collector()
    run_available_now(log_stream(door, logs, state, maxRecordsPerTrigger=50), checkpoint, replay)
    assert replay.calls[0] == (last, first_run[last])
    collector.batches.update(replay.batches)
    assert by_file(collector.rows()) == expected_by_file(logs)


def test_s3_every_epoch_is_acknowledged_once_even_the_last_one(door, logs, tmp_path):
    """S3: under availableNow, notify_checkpoint_complete reaches the last epoch too."""
    acks = tmp_path / "acks.txt"
    checkpoint = tmp_path / "checkpoint"
    write(logs, 2, 60)
    run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", maxRecordsPerTrigger=40, ack_path=acks),
        checkpoint,
        Collector(),
    )
    acked = [int(line) for line in acks.read_text().split()]
    last = offset_epoch(source_offsets(checkpoint)[max(source_offsets(checkpoint))])
    assert acked == sorted(set(acked))  # each once, in order
    assert acked[-1] == last  # commit(last) never came; latestOffset(start=last) did


def test_s4_each_batch_admits_at_most_max_records(door, logs, tmp_path):
    """S4: maxRecordsPerTrigger bounds every batch; all rows still arrive, in order."""
    written = write(logs, 3, 70)
    collector = Collector()
    query = run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", maxRecordsPerTrigger=30),
        tmp_path / "checkpoint",
        collector,
    )
    sizes = [len(rows) for _, rows in sorted(collector.batches.items())]
    assert max(sizes) <= 30
    assert max(input_rows(query)) <= 30
    assert sum(sizes) == written
    assert by_file(collector.rows()) == expected_by_file(logs)


def test_s4_trigger_once_reads_everything_in_one_batch(door, logs, tmp_path):
    """S4: Trigger.Once forces ReadAllAvailable: one batch with every line."""
    written = write(logs, 3, 70)
    collector = Collector()
    query = start(
        log_stream(door, logs, tmp_path / "state.sqlite", maxRecordsPerTrigger=30),
        tmp_path / "checkpoint",
        collector,
        once=True,
    )
    assert query.awaitTermination(TIMEOUT_S)
    assert [len(rows) for rows in collector.batches.values()] == [written]


def test_s4_available_now_reads_what_existed_at_its_start(door, logs, tmp_path):
    """S4: lines and files that come while an availableNow query runs wait for the next query.

    Three subtasks over two files: one is idle and asks for splits while the run goes on.
    """
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    written = write(logs, 2, 40)

    def grow(batch_id: int) -> None:
        if batch_id == 0:
            write(logs, 2, 40, first=40)
            append(logs, "late.log", range(10))

    collector = Collector(before_batch=grow)
    run_available_now(
        log_stream(door, logs, state, maxRecordsPerTrigger=20, parallelism=3),
        checkpoint,
        collector,
    )
    assert collector.count() == written
    assert all(row["line"] < 40 and row["file"] != "late.log" for row in collector.rows())
    run_available_now(  # the next run reads what came meanwhile
        log_stream(door, logs, state, maxRecordsPerTrigger=20, parallelism=3),
        checkpoint,
        collector,
    )
    assert by_file(collector.rows()) == expected_by_file(logs)


def test_s4_max_splits_per_trigger_bounds_the_splits_of_a_batch(door, tmp_path):
    """S4: maxSplitsPerTrigger on a bounded source: at most that many splits per batch."""
    collector = Collector()
    df = from_source(
        door,
        NumberSequenceSource(0, 99, num_splits=10),
        source_id="numbers",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        max_splits_per_trigger=2,
    )
    run_available_now(df, tmp_path / "checkpoint", collector)
    splits_per_batch = [
        len({r["value"] // 10 for r in rows}) for rows in collector.batches.values()
    ]
    assert max(splits_per_batch) <= 2
    assert len(splits_per_batch) >= 5
    assert sorted(r["value"] for r in collector.rows()) == list(range(100))


def test_s5_the_offset_stays_small_after_many_splits(door, tmp_path):
    """S5: 10,000 splits read: every offsets/N line is a pointer, not the history."""
    checkpoint = tmp_path / "checkpoint"
    collector = Collector()
    df = from_source(
        door,
        NumberSequenceSource(0, 9_999, num_splits=10_000),
        source_id="many",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=2,
        max_splits_per_trigger=2_000,
    )
    run_available_now(df, checkpoint, collector)
    assert collector.count() == 10_000
    lines = source_offsets(checkpoint)
    assert len(lines) >= 5
    assert max(map(len, lines.values())) < 200, lines
    assert sorted(json.loads(lines[max(lines)])) == ["epoch", "source_id", "v"]


def test_s5_the_offset_stays_small_with_many_log_files(door, logs, tmp_path):
    """S5 for unbounded splits: 300 files read over several batches; offsets stay pointers."""
    for index in range(300):
        append(logs, f"f{index:03d}.log", range(3))
    checkpoint = tmp_path / "checkpoint"
    collector = Collector()
    run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", maxRecordsPerTrigger=200),
        checkpoint,
        collector,
    )
    assert collector.count() == 900
    assert max(map(len, source_offsets(checkpoint).values())) < 200


def test_s7_the_declared_nullability_is_spark_s_schema(door, logs, tmp_path):
    """S7: the reader emits batches with nullable fields; Spark gets the declared schema."""
    append(logs, "a.log", ["x", "", "y"])
    df = log_stream(door, logs, tmp_path / "state.sqlite")
    assert [(f.name, f.nullable) for f in df.schema.fields] == [
        ("file", False),
        ("line", False),
        ("value", True),
    ]
    collector = Collector()
    run_available_now(df, tmp_path / "checkpoint", collector)
    assert [r["value"] for r in collector.rows()] == ["x", None, "y"]


def test_s7_a_null_in_a_column_declared_not_null_fails_naming_the_column(door, logs, tmp_path):
    """S7: an empty line (null value) against ``value`` declared not null: the error names it."""
    append(logs, "a.log", ["x", "", "y"])
    query = start(
        log_stream(door, logs, tmp_path / "state.sqlite", value_nullable="false"),
        tmp_path / "checkpoint",
        Collector(),
        availableNow=True,
    )
    try:
        with pytest.raises(Exception, match=r"'value'.*not nullable|not nullable.*'value'"):
            query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()


def test_s8_a_second_query_on_the_same_source_id_is_refused(door, logs, tmp_path):
    """S8: while one query reads ``shared``, another on ``shared`` is refused; the first goes on."""
    state = tmp_path / "state.sqlite"
    written = write(logs, 2, 20)
    first = Collector()
    running = run_until(
        log_stream(door, logs, state, source_id="shared"),
        tmp_path / "checkpoint-1",
        first,
        written,
        stop=False,
    )
    try:
        second = start(
            log_stream(door, logs, state, source_id="shared"),
            tmp_path / "checkpoint-2",
            Collector(),
            availableNow=True,
        )
        try:
            with pytest.raises(Exception, match="shared"):
                second.awaitTermination(TIMEOUT_S)
        finally:
            if second.isActive:
                second.stop()
        written += write(logs, 2, 5, first=20)
        deadline = time.monotonic() + TIMEOUT_S
        while first.count() < written and running.exception() is None:
            assert time.monotonic() < deadline, f"{first.count()} of {written} rows arrived"
            time.sleep(0.05)
        assert running.exception() is None
        assert first.count() == written
    finally:
        running.stop()


class DriverState:
    """What an enumerator may pile up on the driver: a lock (unpicklable) and a large blob."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.blobs: list[bytes] = []


class LeakyEnumerator(LogEnumerator):
    """A log enumerator that hangs driver-side state on its source each time it plans.

    Every snapshot (one per epoch it plans) grows the source's `DriverState` by 2 MB and
    appends the epoch to a class attribute: state a task must never see or need.
    """

    def __init__(self, context: Any, source: LeakySource, *args: Any) -> None:
        super().__init__(context, source, *args)
        self._leaky = source

    def snapshot_state(self, checkpoint_id: int) -> Any:
        state = super().snapshot_state(checkpoint_id)
        if self._leaky.driver_state is None:
            self._leaky.driver_state = DriverState()
        self._leaky.driver_state.blobs.append(bytes(2 << 20))
        LeakySource.planned.append(checkpoint_id)
        return state


class LeakySource(LogSource):
    """The log source; its reader refuses to run on a source that carries driver state."""

    planned: ClassVar[list[int]] = []

    def __init__(self, directory: Any, **options: Any) -> None:
        super().__init__(directory, **options)
        self.driver_state: DriverState | None = None

    def create_enumerator(self, enum_context: Any) -> LogEnumerator:
        return LeakyEnumerator(enum_context, self)

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> LogEnumerator:
        return LeakyEnumerator(enum_context, self, checkpoint.assigned, checkpoint.pending)

    def create_reader(self, reader_context: Any) -> Any:
        if self.driver_state is not None or LeakySource.planned:
            raise RuntimeError(
                f"driver-side state reached read(): {self.driver_state!r}, planned "
                f"{LeakySource.planned}"
            )
        return super().create_reader(reader_context)


def test_s6_a_task_reads_what_its_partition_carries_and_no_driver_state(door, logs, tmp_path):
    """S6: the enumerator piles unpicklable, growing state on its source while it plans.

    In this process (the coordinator as Spark's runner drives it): the partitions of an
    epoch pickle to a few hundred bytes however much the driver holds, and a reader
    pickled before planning (as Spark ships one) reads from them exactly the recorded
    slices. On Spark: the tasks never see the state, and every line arrives once.
    """
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sinkv2_spark._doors.source_stream import SourceStreamReader

    written = write(logs, 2, 30)
    source = LeakySource(logs, batch_lines=7)
    shipped = pickle.dumps(source)  # before planning, as from_source ships it
    reader = SourceStreamReader(
        source,
        source.get_produced_type(),
        source_id="leaky",
        store=SqliteCommitStateStore(tmp_path / "local.sqlite"),
        parallelism=2,
        batch_rows=100,
        max_records=20,
    )
    task_reader = pickle.loads(pickle.dumps(reader))  # Spark pickles it once per query run
    shipped_partitions: list[bytes] = []
    try:
        offset = reader.initialOffset()
        while (end := reader.latestOffset(offset, ReadMaxRows(20))) != offset:
            partitions = reader.partitions(offset, end)
            shipped_partitions += [pickle.dumps(p) for p in partitions]
            offset = end
    finally:
        reader.stop()
    LeakySource.planned.clear()  # the class is shared in this one process, unlike on Spark
    rows = [
        row
        for shipped_partition in shipped_partitions
        for batch in task_reader.read(pickle.loads(shipped_partition))
        for row in batch.to_pylist()
    ]
    sizes = [len(p) for p in shipped_partitions]
    held = source.driver_state
    assert held is not None
    assert len(held.blobs) >= 4  # the driver holds >= 8 MB now
    with pytest.raises(TypeError):
        pickle.dumps(source)  # so nothing pickles the planning source after planning
    assert max(sizes) < 1_000, sizes  # while the driver holds >= 8 MB
    assert by_file(rows) == expected_by_file(logs)

    collector = Collector()
    door_df = from_source(
        door,
        pickle.loads(shipped),
        source_id="leaky",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=2,
        max_records_per_trigger=30,
    )
    run_available_now(door_df, tmp_path / "checkpoint", collector)
    assert LeakySource.planned == []  # planning ran in Spark's runner, not here
    assert max(len(batch) for batch in collector.batches.values()) <= 30
    assert collector.count() == written
    assert by_file(collector.rows()) == expected_by_file(logs)


def refusal(make_df, checkpoint: Path) -> str:
    """The error that refuses ``make_df()``'s stream: raised at once, or by the query's start."""
    try:
        query = start(make_df(), checkpoint, Collector(), availableNow=True)
        try:
            query.awaitTermination(TIMEOUT_S)
        finally:
            if query.isActive:
                query.stop()
    except Exception as error:  # noqa: BLE001  # either door, either moment: any error class
        return str(error)
    raise AssertionError("the stream was not refused")


def test_s9_an_unbounded_source_without_end_positions_is_refused(door, tmp_path):
    """S9: an unbounded source that cannot say where its splits end cannot be replayed."""
    message = refusal(
        lambda: from_source(
            door,
            NumberSequenceSource(0, None),
            source_id="endless",
            streaming=True,
            state_store=str(tmp_path / "state.sqlite"),
        ),
        tmp_path / "checkpoint",
    )
    assert "SupportsEndPositions" in message
    assert "NumberSequenceSource" in message


def test_a_stream_needs_a_source_id(door, logs, tmp_path):
    """The offset points into the store by source id: without one, nothing can be replayed."""
    message = refusal(
        lambda: (
            door.readStream.format("sinkv2")
            .option("source", "tests.spark.log_source:make")
            .option("path", str(logs))
            .option("state_store", str(tmp_path / "state.sqlite"))
            .load()
        ),
        tmp_path / "checkpoint",
    )
    assert "source_id" in message


def test_a_store_that_lost_the_logged_epoch_is_an_error_naming_it(door, logs, tmp_path):
    """The checkpoint logged epoch E, the store no longer has it: refused, never re-read."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    write(logs, 2, 30)
    run_available_now(log_stream(door, logs, state, source_id="lost"), checkpoint, Collector())
    last = offset_epoch(source_offsets(checkpoint)[max(source_offsets(checkpoint))])
    for path in tmp_path.glob("state.sqlite*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    write(logs, 2, 5, first=30)
    message = refusal(lambda: log_stream(door, logs, state, source_id="lost"), checkpoint)
    assert f"epoch {last}" in message
    assert "'lost'" in message


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"maxRecordsPerTrigger": 10, "maxSplitsPerTrigger": 2}, "maxSplitsPerTrigger"),
        ({"maxRecordsPerTrigger": 0}, "maxRecordsPerTrigger"),
        ({"maxSplitsPerTrigger": "many"}, "maxSplitsPerTrigger"),
        ({"parallelism": "-1"}, "parallelism"),
        ({"batch_lines": "0"}, "batch_lines"),  # the factory's own refusal, passed on
    ],
    ids=["both-limits", "zero-records", "bad-splits", "bad-parallelism", "factory-refuses"],
)
def test_a_bad_stream_option_is_refused_naming_it(door, logs, tmp_path, options, named):
    message = refusal(
        lambda: log_stream(door, logs, tmp_path / "state.sqlite", **options), tmp_path / "cp"
    )
    assert named.lower() in message.lower(), message
