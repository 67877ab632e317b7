"""PostgresCdcSource streamed on local Spark: Flink's ``SourceTestSuiteBase`` cases, in one test.

As ``tests/spark/test_source_stream.py`` does them for the log source: the source
(a snapshot of four chunks, then the slot's changes: one unbounded split) is read with
``from_source(..., streaming=True)`` into a ``foreachBatch`` `Collector` (each batch
kept once by batch id: the exactly-once view) and checked as Flink's
``CollectIteratorAssert`` checks: every snapshot row once, then every change once, in
commit order, none extra. Three runs of one query, restarted from its checkpoint
location:

- run 1, four subtasks, ``availableNow``: the snapshot's four chunks and the stream
  split are read by up to four subtasks (testMultipleSplits);
- changes while stopped; run 2 restarts with two subtasks (testSavepoint,
  testScaleDown; testIdleReader: one split, so one subtask idles), then ticks with
  nothing new, then changes while it runs (testTaskManagerFailure's "records after");
- changes while stopped; run 3 with four subtasks, ``availableNow`` (testScaleUp);
- each run's ``numInputRows`` add up to the rows it had to read (testSourceMetrics).
"""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresCdcSource
from sinkv2_spark import from_source
from tests.reference_sinks.postgres.test_cdc_source import flushed
from tests.spark.stream_reading import TIMEOUT_S, Collector, input_rows, start, wait_for

pytestmark = pytest.mark.spark

SLOT = "suite_cdc"

Change = tuple[str, int, "str | None"]


def changes(db: Any, rng: random.Random, live: set[int], next_id: int, count: int) -> list[Change]:
    """``count`` transactions of one to three inserts, updates or deletes; (op, id, name) each."""
    made: list[Change] = []
    for _ in range(count):
        with db.transaction():
            for _ in range(rng.choice((1, 2, 3))):
                roll = rng.random()
                if roll < 0.5 or not live:
                    key, next_id = next_id, next_id + 1
                    db.execute("INSERT INTO src VALUES (%s, %s, 0)", (key, f"n{key}"))
                    made.append(("insert", key, f"n{key}"))
                    live.add(key)
                elif roll < 0.8:
                    key = rng.choice(sorted(live))
                    name = db.execute(
                        "UPDATE src SET name = name || '+', grp = grp + 1 WHERE id = %s "
                        "RETURNING name",
                        (key,),
                    ).fetchone()[0]
                    made.append(("update", key, name))
                else:
                    key = rng.choice(sorted(live))
                    db.execute("DELETE FROM src WHERE id = %s", (key,))
                    made.append(("delete", key, None))
                    live.discard(key)
    flushed(db)
    return made


def stream(spark: Any, source: PostgresCdcSource, tmp_path: Any, parallelism: int) -> Any:
    return from_source(
        spark,
        source,
        source_id="suite-cdc",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=parallelism,
    )


def run_available_now(df: Any, tmp_path: Any, collector: Collector) -> Any:
    query = start(df, tmp_path / "checkpoint", collector, availableNow=True)
    try:
        assert query.awaitTermination(TIMEOUT_S), "the availableNow run did not end"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None
    return query


def progress_up_to(query: Any, rows: int) -> None:
    """Wait until ``query``'s progress reports ``rows`` input rows (it comes after the batch)."""
    deadline = time.monotonic() + TIMEOUT_S
    while sum(input_rows(query)) < rows:
        assert time.monotonic() < deadline, f"progress: {input_rows(query)}, not {rows}"
        time.sleep(0.05)


def test_snapshot_then_changes_once_in_order_across_rescaled_restarts_and_idle_ticks(
    spark, postgres_url, tmp_path
):
    rng = random.Random(27)
    db = psycopg.connect(postgres_url, autocommit=True)
    queries: list[Any] = []
    try:
        db.execute("CREATE TABLE src (id int PRIMARY KEY, name text, grp int)")
        keys = list(range(1, 101))
        rng.shuffle(keys)
        for key in keys:
            db.execute("INSERT INTO src VALUES (%s, %s, %s)", (key, f"s{key}", key % 3))
        snapshot = set(db.execute("SELECT id, name FROM src").fetchall())
        live, next_id = set(keys), 101
        source = PostgresCdcSource(
            postgres_url,
            "src",
            publication="src_pub",
            create_publication=True,
            slot_name=SLOT,
            snapshot=True,
            snapshot_chunk_rows=25,
        )
        collector = Collector()
        run1 = run_available_now(stream(spark, source, tmp_path, 4), tmp_path, collector)
        first = set(collector.batches)
        queries.append((run1, len(snapshot), 4, first))
        assert {(row["id"], row["name"]) for row in collector.rows()} == snapshot
        assert {row["_op"] for row in collector.rows()} == {"read"}

        want = changes(db, rng, live, next_id, 12)
        next_id += 100
        run2 = start(  # a micro-batch at most every 100 ms, not a busy loop
            stream(spark, source, tmp_path, 2),
            tmp_path / "checkpoint",
            collector,
            processingTime="100 milliseconds",
        )
        try:
            wait_for(run2, collector, len(snapshot) + len(want))
            progress_up_to(run2, len(want))
            seen = collector.count()
            time.sleep(0.3)  # six poll intervals with nothing new
            assert collector.count() == seen
            assert run2.isActive
            assert run2.exception() is None
            during = changes(db, rng, live, next_id, 6)
            next_id += 100
            want += during
            wait_for(run2, collector, len(snapshot) + len(want))
            progress_up_to(run2, len(want))
        finally:
            run2.stop()
        second = set(collector.batches) - first
        queries.append((run2, len(want), 2, second))

        after = changes(db, rng, live, next_id, 10)
        want += after
        run3 = run_available_now(stream(spark, source, tmp_path, 4), tmp_path, collector)
        queries.append((run3, len(after), 4, set(collector.batches) - first - second))

        rows = collector.rows()
        read = [row for row in rows if row["_op"] == "read"]
        assert len(read) == len(snapshot)  # the snapshot once, before any change
        assert rows[: len(read)] == read
        got = rows[len(read) :]
        positions = [(row["_lsn"], row["_seq"]) for row in got]
        assert positions == sorted(set(positions))  # every change once, in commit order
        assert [
            (row["_op"], row["id"], None if row["_op"] == "delete" else row["name"]) for row in got
        ] == want
        for run, (query, count, parallelism, batches) in enumerate(queries, 1):
            assert sum(input_rows(query)) == count, f"run {run}: {input_rows(query)}"
            widths = [collector.partitions[batch] for batch in batches]
            assert widths, f"run {run} ran no micro-batch"
            assert max(widths) <= parallelism, f"run {run}: {widths}"
        assert max(collector.partitions[batch] for batch in first) > 1  # chunks read in parallel
    finally:
        db.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (SLOT,),
        )
        db.close()
