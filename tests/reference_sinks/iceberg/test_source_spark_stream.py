"""IcebergSource streaming on Spark: Flink's ``SourceTestSuiteBase`` cases.

As ``tests/spark/test_source_stream.py`` does them for the log source: an Iceberg table
(the embedded `local_catalog`) gets append snapshots, each one data file, and
``IcebergSource.local(...).monitor_continuously(...)`` is read with
``from_source(..., streaming=True)`` into a ``foreachBatch`` `Collector` (each batch
kept once by batch id: the exactly-once view). Checks: every appended row once, none
extra; a restart from the checkpoint location after ``stop()`` reads exactly what was
appended meanwhile, with another parallelism (2 -> 4, 4 -> 2); more subtasks than data
files, and micro-batches with no new snapshot, end and lose nothing; the sum of
``numInputRows`` equals the rows appended.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.iceberg import IcebergSource, local_catalog
from sinkv2_spark import from_source
from tests.spark.stream_reading import TIMEOUT_S, Collector, input_rows, start, wait_for

pytestmark = pytest.mark.spark

TABLE = "ns.appends"
ROWS = 40
"""Rows of each appended snapshot (one data file)."""


def create(warehouse: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table(
        TABLE,
        schema=Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "snapshot", LongType(), required=False),
        ),
    )


def append(warehouse: Path, snapshot: int, count: int = 1) -> int:
    """``count`` append snapshots numbered from ``snapshot``, each one data file; rows added."""
    table = local_catalog(warehouse).load_table(TABLE)
    for n in range(snapshot, snapshot + count):
        table.append(
            pa.table(
                {
                    "id": pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64()),
                    "snapshot": pa.array([n] * ROWS, pa.int64()),
                }
            )
        )
    return count * ROWS


def data_files(warehouse: Path) -> int:
    table = local_catalog(warehouse).load_table(TABLE)
    return len(table.inspect.files())


def stream(spark: Any, warehouse: Path, state: Path, parallelism: int) -> Any:
    source = IcebergSource.local(warehouse, TABLE).monitor_continuously(0.05)
    return from_source(
        spark,
        source,
        source_id="appends",
        streaming=True,
        state_store=str(state),
        parallelism=parallelism,
    )


def once(collector: Collector, appended: int) -> None:
    """Every id of the ``appended`` rows exactly once, each snapshot's rows in order."""
    ids = [row["id"] for row in collector.rows()]
    assert sorted(ids) == list(range(appended)), (
        f"{len(ids)} rows, {len(set(ids))} distinct, expected {appended} once"
    )
    per_snapshot: dict[int, list[int]] = collections.defaultdict(list)
    for row in collector.rows():
        per_snapshot[row["snapshot"]].append(row["id"])
    assert all(got == sorted(got) for got in per_snapshot.values())


def progress_up_to(query: Any, rows: int) -> None:
    """Wait until ``query``'s progress reports ``rows`` input rows (it comes after the batch)."""
    deadline = time.monotonic() + TIMEOUT_S
    while sum(input_rows(query)) < rows:
        assert time.monotonic() < deadline, f"progress reports {input_rows(query)}, not {rows}"
        time.sleep(0.05)


def run_until(df: Any, checkpoint: Path, collector: Collector, rows: int, reported: int) -> Any:
    """Run ``df`` until ``collector`` holds ``rows`` and the progress ``reported`` rows; stop."""
    query = start(df, checkpoint, collector)
    try:
        wait_for(query, collector, rows)
        progress_up_to(query, reported)
    finally:
        query.stop()
    return query


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    create(path)
    return path


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2)], ids=["scale-up", "scale-down"])
def test_a_restart_with_another_parallelism_reads_the_appends_meanwhile_once(
    spark, warehouse, tmp_path, before, after
):
    """testSavepoint + testScaleUp/testScaleDown + testSourceMetrics, on one table.

    Four snapshots, read with ``before`` subtasks; ``stop()``; four more snapshots
    appended while down; restart from the checkpoint location with ``after`` subtasks:
    exactly the new rows, and the sum of every batch's ``numInputRows`` is the rows appended.
    """
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    appended = append(warehouse, 0, 4)
    collector = Collector()
    first = run_until(
        stream(spark, warehouse, state, before), checkpoint, collector, appended, appended
    )
    first_batches = set(collector.partitions)
    assert max(collector.partitions.values()) <= before
    appended += append(warehouse, 4, 4)
    assert data_files(warehouse) == 8
    second = run_until(
        stream(spark, warehouse, state, after), checkpoint, collector, appended, appended // 2
    )
    once(collector, appended)
    new = [n for b, n in collector.partitions.items() if b not in first_batches]
    assert new
    assert max(new) <= after
    if after > before:  # four new data files: the new subtasks read some of them
        assert max(new) > before
    assert sum(input_rows(first)) + sum(input_rows(second)) == appended


def test_idle_readers_and_batches_without_a_new_snapshot_lose_nothing(spark, warehouse, tmp_path):
    """testIdleReader: five subtasks over two data files; then ticks with no new snapshot,
    then one more append: read once, and no micro-batch reads anything twice."""
    state, checkpoint = tmp_path / "state.sqlite", tmp_path / "checkpoint"
    appended = append(warehouse, 0, 2)
    collector = Collector()
    query = start(stream(spark, warehouse, state, 5), checkpoint, collector)
    try:
        wait_for(query, collector, appended)
        batches = len(collector.batches)
        time.sleep(1.0)  # twenty monitor ticks with no new snapshot
        assert collector.count() == appended
        assert query.isActive
        assert query.exception() is None
        idle = [p["numInputRows"] for p in query.recentProgress[batches:]]
        assert sum(idle) == 0
        appended += append(warehouse, 2)
        wait_for(query, collector, appended)
        progress_up_to(query, appended)
    finally:
        query.stop()
    once(collector, appended)
    assert max(collector.partitions.values()) <= 2  # no more partitions than data files
    assert sum(input_rows(query)) == appended
