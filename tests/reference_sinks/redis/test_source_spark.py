"""RedisStreamSource streamed on local Spark: into FileSink, and Flink's SourceTestSuiteBase cases.

Two tests, each checking several things (Spark time is scarce). The first: the short name
``redis_stream`` through ``spark.readStream.format("sinkv2")``, a pattern's keys
discovered while the query runs, entries appended between micro-batches, a
``maxRecordsPerTrigger`` cap (cuts counted on the driver), a ``stop()`` and a
restart from the checkpoint location with entries appended meanwhile, and
``trim``: what committed micro-batches read is deleted, nothing else.

The second runs Flink's ``SourceTestSuiteBase`` cases as ``tests/spark/test_source_stream.py``
does them for the log source and ``tests/reference_sinks/iceberg/test_source_spark_stream.py``
for IcebergSource: three listed keys (one split each) read with
``from_source(..., streaming=True)`` into a ``foreachBatch`` `Collector` (each batch
kept once by batch id: the exactly-once view), checked as Flink's
``CollectIteratorAssert`` checks: each key's entries once, in id order, none extra.
Three runs of one query:

- run 1, two subtasks; the third ``poll_next`` of a reader fails once (a fault
  injected around the real reader): Spark retries the task, which reads its slice
  again (testTaskManagerFailure, as a task failure);
- entries appended while stopped; run 2 restarts from the checkpoint location with
  four subtasks over three keys (testSavepoint, testScaleUp, testIdleReader: one
  subtask has no split); then ticks with nothing new, then more entries;
- entries appended while stopped; run 3 with two subtasks (testScaleDown);
- each run's ``numInputRows`` add up to the entries it had to read (testSourceMetrics).
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

import pytest

from reference_sinks.redis import RedisStreamSource
from sinkv2_spark import from_source, register
from tests.reference_sinks.files.test_contract import read_visible
from tests.reference_sinks.redis.stream_data import FIELDS as SUITE_FIELDS
from tests.reference_sinks.redis.stream_data import append, rows_of
from tests.spark import stream_reading as reading

pytestmark = pytest.mark.spark

TIMEOUT_S = 180
FIELDS = "user string, amount double, n bigint not null"


def start(spark: Any, url: str, tmp_path: Path) -> Any:
    state = str(tmp_path / "state.sqlite")
    return (
        spark.readStream.format("sinkv2")
        .option("source", "redis_stream")
        .option("url", url)
        .option("pattern", "orders:*")
        .option("fields", FIELDS)
        .option("trim", "true")
        .option("discovery_interval_ms", "50")
        .option("source_id", "redis-orders")
        .option("state_store", state)
        .option("maxRecordsPerTrigger", "50")
        .load()
        .writeStream.format("sinkv2")
        .option("sink", "files")
        .option("path", str(tmp_path / "out"))
        .option("sink_id", "orders-out")
        .option("state_store", state)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def wait_for(query: Any, out: Path, rows: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        got = read_visible(out, "parquet") if out.exists() else []
        if len(got) >= rows:
            return got
        if query.exception() is not None or not query.isActive:
            raise AssertionError(f"the query ended early: {query.exception()}")
        assert time.monotonic() < deadline, f"only {len(got)} of {rows} rows in {TIMEOUT_S} s"
        time.sleep(0.1)


def test_streams_into_a_file_sink_exactly_once_across_a_restart_and_trims_after_commit(
    spark, redis_server, redis_client, tmp_path
):
    register(spark)
    out = tmp_path / "out"
    ids = {key: append(redis_client, key, 40) for key in ("orders:a", "orders:b")}
    redis_client.set("orders:not-a-stream", "x")  # the pattern only matches streams
    query = start(spark, redis_server.url, tmp_path)
    try:
        wait_for(query, out, 30)  # a capped micro-batches in
        ids["orders:c"] = append(redis_client, "orders:c", 15)  # a key found while running
        ids["orders:a"] += append(redis_client, "orders:a", 10)
        wait_for(query, out, 105)
    finally:
        query.stop()
    ids["orders:b"] += append(redis_client, "orders:b", 20)  # while no query runs
    query = start(spark, redis_server.url, tmp_path)
    try:
        got = wait_for(query, out, 125)
        time.sleep(0.5)  # more micro-batches: nothing more may arrive
        got = read_visible(out, "parquet")
    finally:
        query.stop()
    left_now = (  # a bounded batch read of what the trims left
        spark.read.format("sinkv2")
        .option("source", "redis_stream")
        .option("url", redis_server.url)
        .option("keys", ",".join(ids))
        .option("fields", FIELDS)
        .option("bounded", "true")
        .load()
        .collect()
    )
    written = sorted((key, entry_id) for key, key_ids in ids.items() for entry_id in key_ids)
    assert sorted((row["stream"], row["id"]) for row in got) == written  # each once
    assert all(isinstance(row["n"], int) and row["amount"] == row["n"] / 4 for row in got)
    left = {key: redis_client.xlen(key) for key in ids}
    assert sum(left.values()) < len(written)  # committed micro-batches' entries are trimmed
    for key, key_ids in ids.items():  # what is left is the newest entries, never a gap
        assert [e.decode() for e, _ in redis_client.xrange(key)] == key_ids[
            len(key_ids) - left[key] :
        ]
    assert sorted((row.stream, row.id) for row in left_now) == sorted(
        (key, e.decode()) for key in ids for e, _ in redis_client.xrange(key)
    )


SUITE_KEYS = ("suite:a", "suite:b", "suite:c")


class _FailsOnce:
    """A `RedisStreamSource` whose readers' third ``poll_next`` fails once in all.

    The first reader to get there leaves ``marker`` and raises (a task failure);
    every other call, and every retry, reads the real source unchanged.
    """

    def __init__(self, source: RedisStreamSource, marker: Path) -> None:
        self._source = source
        self._marker = str(marker)

    def get_boundedness(self) -> Any:
        return self._source.get_boundedness()

    def create_enumerator(self, enum_context: Any) -> Any:
        return self._source.create_enumerator(enum_context)

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> Any:
        return self._source.restore_enumerator(enum_context, checkpoint)

    def create_reader(self, reader_context: Any) -> Any:
        return _FailingReader(self._source.create_reader(reader_context), self._marker)

    def get_split_serializer(self) -> Any:
        return self._source.get_split_serializer()

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return self._source.get_enumerator_checkpoint_serializer()

    def get_produced_type(self) -> Any:
        return self._source.get_produced_type()

    def end_positions(self, splits: Any) -> Any:
        return self._source.end_positions(splits)

    def cut_split(self, split: Any, end: object, max_records: int | None) -> Any:
        return self._source.cut_split(split, end, max_records)


class _FailingReader:
    def __init__(self, reader: Any, marker: str) -> None:
        self._reader = reader
        self._marker = marker
        self._polls = 0

    def poll_next(self, output: Any) -> Any:
        self._polls += 1
        if self._polls == 3:
            try:
                with open(self._marker, "x", encoding="utf-8") as file:
                    file.write(f"failed in process {os.getpid()}\n")
            except FileExistsError:
                pass
            else:
                raise RuntimeError(f"poll_next fails on purpose, once (marker {self._marker})")
        return self._reader.poll_next(output)

    def start(self) -> None:
        self._reader.start()

    def is_available(self) -> Any:
        return self._reader.is_available()

    def add_splits(self, splits: list[Any]) -> None:
        self._reader.add_splits(splits)

    def notify_no_more_splits(self) -> None:
        self._reader.notify_no_more_splits()

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return list(self._reader.snapshot_state(checkpoint_id))

    def handle_source_events(self, source_event: Any) -> None:
        self._reader.handle_source_events(source_event)

    def close(self) -> None:
        self._reader.close()


def suite_stream(
    spark: Any, url: str, state: Path, parallelism: int, marker: Path | None = None
) -> Any:
    source: Any = RedisStreamSource(
        url, SUITE_FIELDS, keys=SUITE_KEYS, batch_entries=10, poll_interval_ms=20
    )
    if marker is not None:
        source = _FailsOnce(source, marker)
    return from_source(
        spark,
        source,
        source_id="suite",
        streaming=True,
        state_store=str(state),
        parallelism=parallelism,
    )


def start_run(df: Any, checkpoint: Path, collector: Any) -> Any:
    """Start ``df`` into ``collector``, a micro-batch at most every 100 ms (not a busy loop)."""
    return reading.start(df, checkpoint, collector, processingTime="100 milliseconds")


def progress_up_to(query: Any, rows: int) -> None:
    """Wait until ``query``'s progress reports ``rows`` input rows (it comes after the batch)."""
    deadline = time.monotonic() + TIMEOUT_S
    while sum(reading.input_rows(query)) < rows:
        assert time.monotonic() < deadline, f"progress: {reading.input_rows(query)}, not {rows}"
        time.sleep(0.05)


def new_batches(collector: Any, runs: list[tuple[Any, int, int, set[int]]]) -> set[int]:
    """The batch ids ``collector`` holds that no earlier run ran."""
    return set(collector.partitions) - set().union(*(run[3] for run in runs))


def test_restarts_rescaled_idle_readers_a_failed_task_and_input_rows_each_entry_once(
    spark, redis_server, redis_client, tmp_path
):
    state, checkpoint, marker = tmp_path / "state.sqlite", tmp_path / "checkpoint", tmp_path / "x"
    collector = reading.Collector()
    appended = sum(len(append(redis_client, key, 30)) for key in SUITE_KEYS)

    query = start_run(
        suite_stream(spark, redis_server.url, state, 2, marker), checkpoint, collector
    )
    try:  # run 1: two subtasks, one task fails once
        reading.wait_for(query, collector, appended)
        progress_up_to(query, appended)
    finally:
        query.stop()
    assert marker.exists()  # it did fail, and the retry read the same slice
    runs = [(query, appended, 2, set(collector.partitions))]

    meanwhile = sum(len(append(redis_client, key, 12)) for key in SUITE_KEYS)
    appended += meanwhile
    query = start_run(suite_stream(spark, redis_server.url, state, 4), checkpoint, collector)
    try:  # run 2: four subtasks over three keys, then idle ticks, then more
        reading.wait_for(query, collector, appended)
        progress_up_to(query, meanwhile)
        seen = collector.count()
        time.sleep(0.3)  # fifteen poll intervals with nothing new
        assert collector.count() == seen
        assert query.isActive
        assert query.exception() is None
        later = len(append(redis_client, SUITE_KEYS[1], 7))
        appended += later
        meanwhile += later
        reading.wait_for(query, collector, appended)
        progress_up_to(query, meanwhile)
    finally:
        query.stop()
    runs.append((query, meanwhile, 4, new_batches(collector, runs)))

    meanwhile = sum(len(append(redis_client, key, 9)) for key in SUITE_KEYS)
    appended += meanwhile
    query = start_run(suite_stream(spark, redis_server.url, state, 2), checkpoint, collector)
    try:  # run 3: two subtasks again
        reading.wait_for(query, collector, appended)
        progress_up_to(query, meanwhile)
        time.sleep(0.2)  # more ticks: nothing more may arrive
    finally:
        query.stop()
    runs.append((query, meanwhile, 2, new_batches(collector, runs)))

    per_key: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row in collector.rows():
        per_key[row["stream"]].append(row)
    want = {key: rows_of(redis_client, key) for key in SUITE_KEYS}
    assert dict(per_key) == want  # each entry once, each key's in id order
    assert collector.count() == appended
    for run, (ran, rows, parallelism, batches) in enumerate(runs, 1):
        assert sum(reading.input_rows(ran)) == rows, f"run {run}: {reading.input_rows(ran)}"
        assert batches, f"run {run} ran no micro-batch"
        widths = [collector.partitions[batch] for batch in batches]
        assert max(widths) <= min(parallelism, len(SUITE_KEYS)), f"run {run}: {widths}"
    assert max(collector.partitions[batch] for batch in runs[1][3]) > 2  # scaled up: read wider
