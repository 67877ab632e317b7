"""RedisStreamSource streamed on local Spark into FileSink: every entry exactly once, trimmed after.

One test checks several things (Spark time is scarce): the short name
``redis_stream`` through ``spark.readStream.format("sinkv2")``, a pattern's keys
discovered while the query runs, entries appended between micro-batches, a
``maxRecordsPerTrigger`` cap (cuts counted on the driver), a ``stop()`` and a
restart from the checkpoint location with entries appended meanwhile, and
``trim``: what committed micro-batches read is deleted, nothing else.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sinkv2_spark import register
from tests.reference_sinks.files.test_contract import read_visible
from tests.reference_sinks.redis.stream_data import append

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
