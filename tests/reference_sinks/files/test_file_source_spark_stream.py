"""FileSource streamed on Spark: clean-up after commit, through a crash; parity with Spark's stream.

Spark runs a reader per task and never tells it of a commit, so the clean-up is
driven by the source coordinator (`sinkv2.source.SupportsFinishedSplits`): a file is
archived or deleted once the micro-batch that read it is committed. The sink is a
FileSink written from ``foreachBatch`` with ``checkpoint_id = batch + 1`` (exactly once
per micro-batch); the crash is a fault in the sink's commit (its ``on_stage`` hook at
``writers-finished``: the rows are read and staged, not committed), which kills the
query; it restarts from its checkpoint location, and Spark replays the micro-batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from reference_sinks.files import FileSink, FileSource
from sinkv2_spark import from_source, register
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    rows,
    touch_old,
    write_jsonl,
    write_parquet,
)

pytestmark = pytest.mark.spark

TIMEOUT_S = 120
PER_FILE = 10


class SinkCrash(RuntimeError):
    """The fault: the sink's commit dies after its writers staged the rows."""


def ids_under(directory: Path) -> list[int]:
    """The ids in the visible Parquet files under ``directory`` (hidden ones skipped)."""
    found: list[int] = []
    for path in directory.rglob("*.parquet"):
        parts = path.relative_to(directory).parts
        if not any(part.startswith(("_", ".")) for part in parts):
            try:
                found += pq.read_table(path)["id"].to_pylist()
            except FileNotFoundError:  # the clean-up removed it after the listing: gone
                continue
    return sorted(found)


def arrive(directory: Path, index: int) -> None:
    """File ``index`` arrives as writers do: under a hidden name, then renamed."""
    hidden = write_parquet(directory / f".f{index}.parquet.tmp", rows(index * PER_FILE, PER_FILE))
    touch_old(hidden, 30)
    os.rename(hidden, directory / f"f{index}.parquet")


def wait_until(query: Any, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert query.isActive, f"the query died: {query.exception()}"
        assert time.monotonic() < deadline, "timed out waiting for the stream"
        time.sleep(0.2)


def test_clean_up_moves_a_file_only_after_its_micro_batch_is_committed_even_through_a_crash(
    spark: Any, translator: Any, tmp_path: Path
):
    mode = "archive"  # "delete" goes through the same path: the read door's test below
    base, archive, out = tmp_path / "in", tmp_path / "archive", tmp_path / "out"
    base.mkdir()
    files = 3
    for index in range(files - 1):
        arrive(base, index)
    source = FileSource(base, schema=SCHEMA).monitor_continuously(
        0.2, clean_source=mode, archive_dir=archive if mode == "archive" else None
    )
    everything = list(range(files * PER_FILE))

    def cleaned() -> list[int]:
        if mode == "archive":
            return ids_under(archive)
        present = set(ids_under(base))
        return [i for i in everything[: len(arrived) * PER_FILE] if i not in present]

    arrived = list(range(files - 1))
    early: list[str] = []
    crashed: list[list[int]] = []

    def write(df: Any, batch_id: int) -> None:
        committed = set(ids_under(out))
        gone = [i for i in cleaned() if i not in committed]
        if gone:  # cleaned, and not yet committed downstream
            early.append(f"before micro-batch {batch_id}: ids {gone}")
        read = sorted(row.id for row in df.select("id").collect())

        def fault(event: str, epoch: int) -> None:
            if event == "writers-finished" and batch_id == 1 and not crashed:
                crashed.append(read)
                raise SinkCrash(f"the sink dies before committing checkpoint {epoch}")

        translator.apply(
            df, FileSink(out), sink_id=f"clean-{mode}", checkpoint_id=batch_id + 1, on_stage=fault
        )

    def start() -> Any:
        df = from_source(
            spark,
            source,
            source_id=f"clean-{mode}",
            streaming=True,
            state_store=str(tmp_path / "source.sqlite"),
            parallelism=2,
            max_splits_per_trigger=1,
        )
        return (
            df.writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = start()
    try:
        with pytest.raises(Exception, match=r"sink dies"):
            query.awaitTermination(TIMEOUT_S)
    finally:
        query.stop()
    assert len(crashed) == 1
    assert len(crashed[0]) == PER_FILE
    # read and staged, never committed: the file is where it was, its rows not in the sink
    assert set(crashed[0]) <= set(ids_under(base))
    assert not set(crashed[0]) & set(ids_under(out))
    assert set(cleaned()) == set(ids_under(out))  # micro-batch 0's file, committed, is cleaned

    query = start()
    try:
        arrive(base, files - 1)
        arrived.append(files - 1)
        wait_until(query, lambda: ids_under(out) == everything and ids_under(base) == [])
    finally:
        query.stop()
    assert query.exception() is None
    assert early == []
    assert Counter(ids_under(out)) == Counter(everything)  # each row once: the replay too
    if mode == "archive":
        assert ids_under(archive) == everything
        assert sorted(p.name for p in archive.iterdir()) == [f"f{i}.parquet" for i in range(files)]


def test_the_read_door_streams_files_and_deletes_them_once_committed(spark: Any, tmp_path: Path):
    """``readStream.format("sinkv2").option("source", "files")`` with ``clean_source=delete``
    and ``maxRecordsPerTrigger``: every micro-batch holds at most the limit (a file is cut
    across micro-batches), and a file is deleted only once its last rows are committed."""
    register(spark)
    base = tmp_path / "in"
    base.mkdir()
    for index in range(2):
        arrive(base, index)
    early: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        early.extend(i for i in range(2 * PER_FILE) if i not in got and i not in ids_under(base))
        ids = [row.id for row in df.collect()]
        sizes.append(len(ids))
        got.extend(ids)

    got: list[int] = []
    sizes: list[int] = []
    df = (
        spark.readStream.format("sinkv2")
        .option("source", "files")
        .option("source_id", "door-clean")
        .option("state_store", str(tmp_path / "source.sqlite"))
        .option("path", str(base))
        .option("monitor_interval", "0.2")
        .option("clean_source", "delete")
        .option("maxRecordsPerTrigger", "7")
        .option("parallelism", "1")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_until(query, lambda: ids_under(base) == [])
    finally:
        query.stop()
    assert sorted(got) == list(range(2 * PER_FILE))
    assert early == []  # no file deleted before the micro-batch that read its last rows ran
    assert max(sizes) <= 7
    assert sum(1 for size in sizes if size) >= 3  # 20 rows, at most 7 a micro-batch


def test_a_record_limit_on_json_lines_files_is_warned_and_each_file_is_still_read_whole(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """``max_records_per_trigger`` smaller than a file, on files whose records are not counted:
    one WARNING from ``from_source`` in the caller's process, and the stream still moves on,
    each file whole in a micro-batch (never stalled on a split larger than the limit)."""
    caplog.set_level(logging.WARNING, logger="sinkv2")
    base = tmp_path / "in"
    for index in range(2):
        write_jsonl(base / f"f{index}.jsonl", rows(index * PER_FILE, PER_FILE))
    source = FileSource(base, "jsonl", schema=SCHEMA)
    df = from_source(
        spark,
        source,
        source_id="jsonl-limit",
        streaming=True,
        state_store=str(tmp_path / "source.sqlite"),
        parallelism=1,
        max_records_per_trigger=3,
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "JSON lines files are read whole" in warnings[0]
    assert "maxSplitsPerTrigger" in warnings[0]
    sizes: list[int] = []
    got: list[int] = []

    def collect(batch: Any, _: int) -> None:
        ids = [row.id for row in batch.select("id").collect()]
        sizes.append(len(ids))
        got.extend(ids)

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(TIMEOUT_S)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(got) == list(range(2 * PER_FILE))
    assert [size for size in sizes if size % PER_FILE] == []  # whole files, never cut
    assert max(sizes) > 3  # the limit did not bound them: the warning told so
    assert len(caplog.records) == len(warnings)  # nothing more said in this process


def test_a_file_source_stream_gives_the_rows_spark_own_parquet_stream_gives(
    spark: Any, tmp_path: Path
):
    """The same directory, files arriving (hidden name, then renamed): the same rows, once."""
    register(spark)
    base = tmp_path / "in"
    base.mkdir()
    arrive(base, 0)  # the read door infers the schema from the first file
    ours: list[tuple[Any, ...]] = []
    spark_own: list[tuple[Any, ...]] = []

    def keep(into: list[tuple[Any, ...]]) -> Callable[[Any, int], None]:
        return lambda df, _: into.extend(tuple(row) for row in df.collect())

    door = (
        spark.readStream.format("sinkv2")
        .option("source", "files")
        .option("source_id", "parity")
        .option("state_store", str(tmp_path / "source.sqlite"))
        .option("path", str(base))
        .option("monitor_interval", "0.2")
        .load()
    )
    native = spark.readStream.schema(door.schema).parquet(str(base))
    assert door.schema == native.schema
    queries = [
        df.writeStream.foreachBatch(keep(into))
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(processingTime="100 milliseconds")
        .start()
        for df, into, name in ((door, ours, "ours"), (native, spark_own, "native"))
    ]
    files = 5
    try:
        for index in range(1, files):
            time.sleep(0.3)
            arrive(base, index)
        for query in queries:
            wait_until(query, lambda: min(len(ours), len(spark_own)) >= files * PER_FILE)
    finally:
        for query in queries:
            query.stop()
    expected = [tuple(row.values()) for row in rows(0, files * PER_FILE)]
    assert Counter(ours) == Counter(spark_own) == Counter(expected)
