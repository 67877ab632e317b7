"""An IcebergSource stream killed with SIGKILL mid-stream, restarted: every row once.

The crash host of the log-source test (`tests.integration.kill_source_stream`, with its
``source`` hook) runs two queries, each ``IcebergSource.local(...).monitor_continuously``
over one table (three append snapshots of `ROWS` rows; at most ``PER_TRIGGER`` rows a
micro-batch) read with ``from_source(..., streaming=True)`` into a FileSink through
``writeStream.format("sinkv2")``, each stopped in micro-batch 1 (source epoch 2, the
sink's checkpoint 2) at one step of the source's epoch protocol:

- ``epoch-recorded``: the coordinator recorded epoch 2 (its splits and positions) in
  the store; Spark has not logged ``offsets/1``. The restart must get the recorded
  epoch, not a new plan over a table that has grown meanwhile;
- ``writers-finished``: Spark logged ``offsets/1`` and the tasks read epoch 2 (the
  FileSink staged it), no ``commits/1``. The restart replays epoch 2 from its record.

The test kills the host there (a crashed machine), appends two more snapshots, and
restarts both queries from their checkpoint locations with ``availableNow`` and the
plain source and store. Afterwards every appended row is in the FileSink's output
exactly once, nothing is left under ``_staging/``, the sink's store records every
checkpoint Committed, and the source's store holds no lease and only Spark's last epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.iceberg import IcebergSource, local_catalog
from sinkv2_spark import register
from tests.integration import test_driver_kill
from tests.integration.kill_source_stream import start
from tests.integration.test_driver_kill import staging_leftovers
from tests.integration.test_source_stream_kill import (
    SourceHost,
    killed_problems,
    source_store_problems,
)
from tests.integration.test_stream_door_kill import store_problems, wait_for

pytestmark = pytest.mark.spark

TABLE = "ns.appends"
ROWS = 40
"""Rows of each append snapshot (one data file): ``PER_TRIGGER``, one micro-batch each."""
STOPS = ("epoch-recorded", "writers-finished")


def iceberg_source(job: dict[str, Any]) -> IcebergSource:
    """The host's ``source`` hook: the job's table, followed every 50 ms."""
    return IcebergSource.local(job["warehouse"], TABLE).monitor_continuously(0.05)


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


def append(warehouse: Path, first: int, count: int) -> int:
    """``count`` append snapshots numbered from ``first``; the rows added."""
    table = local_catalog(warehouse).load_table(TABLE)
    for n in range(first, first + count):
        ids = pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64())
        table.append(pa.table({"id": ids, "snapshot": pa.array([n] * ROWS, pa.int64())}))
    return count * ROWS


def jobs_for(tmp_path: Path, warehouse: Path) -> list[dict[str, Any]]:
    jobs = []
    for stop in STOPS:
        base = tmp_path / stop
        jobs.append(
            {
                "kind": "files",
                "source": f"{__name__}:iceberg_source",
                "warehouse": str(warehouse),
                "sink_id": f"{stop}-files",
                "source_id": f"appends-{stop}",
                "ack": str(base / "acks"),  # the log source's; IcebergSource acknowledges nothing
                "source_store": str(base / "source.sqlite"),
                "checkpoint": str(base / "checkpoint"),
                "location": str(base / "out"),
                "stop_at": stop,
                "stop_epoch": 2,
            }
        )
    return jobs


def test_an_iceberg_source_stream_killed_mid_stream_is_read_exactly_once(
    spark, tmp_path, monkeypatch
):
    monkeypatch.setattr(test_driver_kill, "START_TIMEOUT_S", 2 * test_driver_kill.START_TIMEOUT_S)
    warehouse = tmp_path / "warehouse"
    create(warehouse)
    appended = append(warehouse, 0, 3)
    jobs = jobs_for(tmp_path, warehouse)
    host = SourceHost(tmp_path, jobs)
    try:
        host.wait_for(*(f"{job['sink_id']}.stopped" for job in jobs))
    finally:
        host.kill()

    problems = [f"{job['sink_id']}: {p}" for job in jobs for p in killed_problems(job)]
    assert problems == [], "\n".join(problems)

    appended += append(warehouse, 3, 2)  # while the queries are down
    register(spark)
    for job in jobs:  # one after the other: few Python workers at once
        query = start(spark, job, iceberg_source(job), job["source_store"], {"availableNow": True})
        try:
            wait_for(query)
        except Exception as error:  # noqa: BLE001  # reported with the other job's problems
            problems.append(f"{job['sink_id']}: the restart failed: {error!r}")
            continue
        out = Path(job["location"])
        ids = sorted(row.id for row in spark.read.parquet(str(out)).select("id").collect())
        if ids != list(range(appended)):
            problems.append(
                f"{job['sink_id']}: {len(ids)} rows, {len(set(ids))} distinct "
                f"(expected {appended} once)"
            )
        if left := staging_leftovers(out):
            problems.append(f"{job['sink_id']}: {len(left)} leftovers under _staging/: {left[:8]}")
        found = store_problems(job) + source_store_problems(job)
        problems += [f"{job['sink_id']}: {problem}" for problem in found]
    assert problems == [], "\n".join(problems)
