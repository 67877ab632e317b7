"""PostgresCdcSource streamed by Spark into a PostgresSink upsert target: one test, several checks.

The table holds rows (and a seeded random workload of inserts, updates and deletes)
before the query first starts: the source makes its slot and reads them from the
slot's exported snapshot (``snapshot=True``), in chunks of at most 30 rows a
micro-batch. Once the first micro-batch is in the target, a thread opens a
transaction (left open until the first run ends) and makes more changes; after the
run it commits, more changes follow, and a second run restarts from the checkpoint.
The query reads with ``from_source(..., streaming=True)`` at most 30 changes a
micro-batch and writes ``writeStream.format("sinkv2")`` into ``dst`` (upsert by
``id``; a delete lands as a tombstone row, ``_op = 'delete'``): it must end equal to
the table. Meanwhile a thread samples the slot's ``confirmed_flush_lsn`` and then the
target: every change at or below the confirmed position must already be committed in
the target (the slot never passes the sink). The change list comes from a second slot,
made before everything and never advanced.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresCdcSource
from reference_sinks.postgres._cdc_server import flush_lsn, parse_lsn
from sinkv2_spark import from_source, register

pytestmark = pytest.mark.spark

TIMEOUT_S = 240


def _random_changes(connection: Any, rng: random.Random, live: set[int], count: int) -> None:
    next_id = max(live, default=0) + 1
    for _ in range(count):
        with connection.transaction():
            for _ in range(rng.choice((1, 1, 2, 3))):
                roll = rng.random()
                if roll < 0.5 or not live:
                    connection.execute(
                        "INSERT INTO src VALUES (%s, %s, %s)", (next_id, f"n{next_id}", 0)
                    )
                    live.add(next_id)
                    next_id += 1
                elif roll < 0.8:
                    key = rng.choice(sorted(live))
                    connection.execute(
                        "UPDATE src SET qty = qty + 1, name = name || '+' WHERE id = %s", (key,)
                    )
                else:
                    key = rng.choice(sorted(live))
                    connection.execute("DELETE FROM src WHERE id = %s", (key,))
                    live.discard(key)


def _run(spark: Any, source: PostgresCdcSource, tmp_path: Path, url: str) -> list[int]:
    df = from_source(
        spark,
        source,
        source_id="items-cdc",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=2,
        max_records_per_trigger=30,
    )
    query = (
        df.writeStream.format("sinkv2")
        .option("sink", "postgres")
        .option("url", url)
        .option("table", "dst")
        .option("upsert_key", "id")
        .option("sink_id", "items-cdc")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(TIMEOUT_S), "the availableNow query did not end"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


class _Sampler(threading.Thread):
    """Samples (the slot's confirmed position, the target's ``_lsn`` values) every 20 ms."""

    def __init__(self, url: str, slot: str) -> None:
        super().__init__(daemon=True)
        self.url, self.slot = url, slot
        self.samples: list[tuple[int, set[int]]] = []
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            while not self.done.wait(0.02):
                row = connection.execute(
                    "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (self.slot,),
                ).fetchone()
                if row is None or row[0] is None:  # no slot, or one still being made
                    continue
                confirmed = parse_lsn(row[0])  # first the slot, then the target
                committed = {r[0] for r in connection.execute("SELECT _lsn FROM dst").fetchall()}
                self.samples.append((confirmed, committed))


def test_a_snapshot_then_changes_stream_into_an_upsert_target_that_ends_equal_to_the_table(
    spark, postgres_url, tmp_path
):
    register(spark)
    rng = random.Random(25)
    db = psycopg.connect(postgres_url, autocommit=True)
    long = psycopg.connect(postgres_url)
    sampler = _Sampler(postgres_url, "items_cdc")
    opener = _OpenWhenTheTargetFills(postgres_url, long, rng)
    try:
        db.execute("CREATE TABLE src (id int PRIMARY KEY, name text, qty int)")
        db.execute(
            "CREATE TABLE dst (id int PRIMARY KEY, name text, qty int, _op text, _lsn bigint, "
            "_seq int)"
        )
        db.execute("CREATE PUBLICATION src_pub FOR TABLE src")
        db.execute("SELECT pg_create_logical_replication_slot('oracle', 'pgoutput')")
        db.execute("INSERT INTO src SELECT n, 'n' || n, 0 FROM generate_series(1, 20) n")
        db.execute("INSERT INTO src VALUES (999, 'kept', 0)")  # the random changes leave it
        live = set(range(1, 21))
        _random_changes(db, rng, live, 15)  # all before the slot: read from the snapshot
        source = PostgresCdcSource(
            postgres_url,
            "src",
            publication="src_pub",
            slot_name="items_cdc",
            snapshot=True,
            snapshot_chunk_rows=8,
        )
        sampler.start()
        opener.start()  # once the target has rows: a transaction left open, more changes
        batches = _run(spark, source, tmp_path, postgres_url)
        opener.join()
        first = {row[0] for row in db.execute("SELECT id FROM dst").fetchall()}
        assert 1000 not in first  # not committed yet: not read
        assert {row[0] for row in db.execute("SELECT _op FROM dst").fetchall()} >= {"read"}
        long.commit()
        _random_changes(db, rng, live | opener.live, 15)
        batches += _run(spark, source, tmp_path, postgres_url)  # restarted from the checkpoint
        assert len([n for n in batches if n]) >= 3  # micro-batches of at most 30 changes
        assert max(batches) <= 30
        sampler.done.set()
        sampler.join()
        want = db.execute("SELECT id, name, qty FROM src ORDER BY id").fetchall()
        got = db.execute(
            "SELECT id, name, qty FROM dst WHERE _op <> 'delete' ORDER BY id"
        ).fetchall()
        assert got == want
        assert 1000 in {row[0] for row in got}
        assert db.execute("SELECT to_regclass('sinkv2_snap_items_cdc')").fetchone()[0] is None
        point = min(c for c, _ in sampler.samples)  # the slot's consistent point
        oracle = source.transactions(db, "oracle", flush_lsn(db))
        changes = sorted(t.end_lsn for t in oracle for _ in t.changes if t.end_lsn > point)
        assert len(changes) > 30
        assert max(c for c, _ in sampler.samples) > min(changes)  # the slot was advanced
        for confirmed, committed in sampler.samples:
            acknowledged = [lsn for lsn in changes if lsn <= confirmed]
            if acknowledged:  # the newest change it gave up is in the target already
                assert max(acknowledged) <= max(committed)
    finally:
        sampler.done.set()
        opener.join()
        long.close()
        db.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name IN ('oracle', 'items_cdc')"
        )
        db.close()


class _OpenWhenTheTargetFills(threading.Thread):
    """Once the first micro-batch is in the target: open a transaction, then more changes.

    The slot exists by then (a logical slot waits for open transactions when it is
    made), and the open transaction stays open until the test commits it.
    """

    def __init__(self, url: str, long: Any, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.long, self.rng = url, long, rng
        self.live: set[int] = set()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            deadline = time.monotonic() + TIMEOUT_S
            while not connection.execute("SELECT count(*) FROM dst").fetchone()[0]:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            self.long.execute("INSERT INTO src VALUES (1000, 'long', 1)")
            self.long.execute("UPDATE src SET qty = -1 WHERE id = 999")
            self.live = {2000}
            connection.execute("INSERT INTO src VALUES (2000, 'during', 0)")
            _random_changes(connection, self.rng, self.live, 10)
