"""Streaming reads of FLIP-27 sources on Spark: Flink's ``SourceTestSuiteBase`` cases.

Restated for Spark as research section 4.1 says (``shared/research/flip27-sources.md``):
the source is the append-only log source (``tests/spark/log_source.py``: each file one
unbounded split, read through `SupportsEndPositions`), read with
``spark.readStream.format("sinkv2")`` or ``from_source(..., streaming=True)``; rows
arrive in a ``foreachBatch`` `Collector` that keeps each batch once by batch id (the
exactly-once view); every check is Flink's ``CollectIteratorAssert``: each split's
records in order, none missing, none extra.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sinkv2.source.lib import NumberSequenceSource
from sinkv2_spark import from_source, register
from tests.spark.log_source import LogSource, append
from tests.spark.stream_reading import (
    Collector,
    by_file,
    expected_by_file,
    input_rows,
    log_stream,
    run_available_now,
    run_until,
    wait_for,
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
    """Append ``lines`` JSON lines to each of ``files`` log files; the lines written."""
    for index in range(files):
        append(
            logs,
            f"part-{index}.log",
            (f'{{"file": {index}, "n": {n}}}' for n in range(first, first + lines)),
        )
    return files * lines


def test_single_split_is_read_whole_and_in_order(door, logs, tmp_path):
    """testSourceSingleSplit: one split, availableNow; the rows equal the file, in order."""
    write(logs, 1, 250)
    collector = Collector()
    query = run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", parallelism=1, maxRecordsPerTrigger=100),
        tmp_path / "checkpoint",
        collector,
    )
    assert collector.rows() == expected_by_file(logs)["part-0.log"]
    assert [n for n in input_rows(query) if n] == [100, 100, 50]


def test_multiple_splits_each_in_order(door, logs, tmp_path):
    """testMultipleSplits: four splits, four subtasks; every split's records once, in order."""
    write(logs, 4, 120)
    collector = Collector()
    df = from_source(
        door,
        LogSource(logs, discovery_interval_ms=50, batch_lines=17),
        source_id="four",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=4,
    )
    assert df.isStreaming
    run_available_now(df, tmp_path / "checkpoint", collector)
    assert by_file(collector.rows()) == expected_by_file(logs)


def test_a_restart_reads_what_was_appended_meanwhile_exactly_once(door, logs, tmp_path):
    """testSavepoint: read A, stop(), append B (and a new file), restart: exactly B, in order."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    written = write(logs, 3, 40)
    collector = Collector()
    run_until(log_stream(door, logs, state), checkpoint, collector, written)
    written += write(logs, 3, 25, first=40)
    append(logs, "part-9.log", range(30))
    written += 30
    run_until(log_stream(door, logs, state), checkpoint, collector, written)
    assert collector.count() == written
    assert by_file(collector.rows()) == expected_by_file(logs)


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)], ids=["scale-up", "scale-down"])
def test_a_restart_with_another_parallelism_loses_and_repeats_nothing(
    door, logs, tmp_path, before, after
):
    """testScaleUp / testScaleDown: positions are per split, not per subtask."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    written = write(logs, 4, 30)
    collector = Collector()
    run_until(log_stream(door, logs, state, parallelism=before), checkpoint, collector, written)
    first_run = set(collector.partitions)
    written += write(logs, 4, 30, first=30)
    run_until(log_stream(door, logs, state, parallelism=after), checkpoint, collector, written)
    assert by_file(collector.rows()) == expected_by_file(logs)
    assert max(collector.partitions[b] for b in first_run) <= before
    second = [n for b, n in collector.partitions.items() if b not in first_run]
    assert max(second) <= after
    if after > before:  # four files with new lines: the new subtasks read some of them
        assert max(second) > before


def test_the_input_rows_of_all_batches_add_up_to_the_records_written(door, logs, tmp_path):
    """testSourceMetrics: the sum of numInputRows equals the records written."""
    written = write(logs, 4, 75)
    collector = Collector()
    query = run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", maxRecordsPerTrigger=64),
        tmp_path / "checkpoint",
        collector,
    )
    assert sum(input_rows(query)) == written == collector.count()


def test_more_subtasks_than_splits_ends(door, logs, tmp_path):
    """testIdleReader: five subtasks over four splits; availableNow reads all and ends."""
    write(logs, 4, 20)
    collector = Collector()
    run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", parallelism=5),
        tmp_path / "checkpoint",
        collector,
    )
    assert by_file(collector.rows()) == expected_by_file(logs)
    assert max(collector.partitions.values()) <= 4


def test_no_splits_at_all_ends_with_no_rows(door, logs, tmp_path):
    """testIdleReader's edge: an empty log directory; availableNow ends, nothing read."""
    collector = Collector()
    query = run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", parallelism=3),
        tmp_path / "checkpoint",
        collector,
    )
    assert collector.count() == 0
    assert sum(input_rows(query)) == 0


def test_a_bounded_source_streams_every_split_once(door, tmp_path):
    """A BOUNDED source needs no extension: each split is read whole in one micro-batch."""
    collector = Collector()
    df = from_source(
        door,
        NumberSequenceSource(0, 999, num_splits=10),
        source_id="numbers",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=3,
    )
    run_available_now(df, tmp_path / "checkpoint", collector)
    assert sorted(row["value"] for row in collector.rows()) == list(range(1000))


def test_logs_into_a_file_sink_through_both_doors_exactly_once(door, logs, tmp_path):
    """End to end: readStream.format("sinkv2") -> writeStream.format("sinkv2") (FileSink), twice."""
    state, out = tmp_path / "state.sqlite", tmp_path / "out"
    written = 0
    for round_ in range(2):
        written += write(logs, 3, 50, first=50 * round_)
        query = (
            log_stream(door, logs, state, maxRecordsPerTrigger=60)
            .writeStream.format("sinkv2")
            .option("sink", "files")
            .option("path", str(out))
            .option("sink_id", "logs-out")
            .option("state_store", str(state))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180)
        finally:
            if query.isActive:
                query.stop()
    got = door.read.parquet(str(out)).collect()
    assert len(got) == written
    assert sorted((r.file, r.line, r.value) for r in got) == sorted(
        (r["file"], r["line"], r["value"]) for rows in expected_by_file(logs).values() for r in rows
    )


def test_a_failed_task_is_retried_and_reads_its_slice_again(door, logs, tmp_path):
    """testTaskManagerFailure (a): a read fails once; Spark retries the same partition."""
    marker = tmp_path / "failed-once"
    written = write(logs, 3, 40)
    collector = Collector()
    run_available_now(
        log_stream(door, logs, tmp_path / "state.sqlite", fail_once=marker, parallelism=3),
        tmp_path / "checkpoint",
        collector,
    )
    assert marker.exists()  # it did fail
    assert collector.count() == written
    assert by_file(collector.rows()) == expected_by_file(logs)


def test_files_and_lines_that_come_while_the_query_runs_are_read_and_kept(door, logs, tmp_path):
    """Discovery over time: a new file while every subtask reads one; then a restart."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    written = write(logs, 2, 20)
    collector = Collector()
    query = run_until(log_stream(door, logs, state), checkpoint, collector, written, stop=False)
    try:
        append(logs, "new.log", range(15))
        written += 15 + write(logs, 2, 10, first=20)
        wait_for(query, collector, written)
    finally:
        query.stop()
    append(logs, "new.log", range(15, 20))
    written += 5
    run_until(log_stream(door, logs, state), checkpoint, collector, written)
    assert collector.count() == written
    assert by_file(collector.rows()) == expected_by_file(logs)
