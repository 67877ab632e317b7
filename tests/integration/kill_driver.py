"""A driver host to kill: runs sink jobs in its own Spark session until killed from outside.

``python -m tests.integration.kill_driver <config.json>`` starts a ``local[2]`` session
and runs one `SinkTopologyTranslator.apply` per job of the config, concurrently (one
thread each: one crashed host then tests several sinks). Every stage event a job
reaches is recorded as an empty marker file ``<markers>/<sink id>.<event>``; at the
job's ``stop_at`` event it also writes ``<sink id>.stopped`` and sleeps, so the test
kills it exactly there. The test (`test_driver_kill.py`) builds the same sinks with
`make_sink` for its re-runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

N_ROWS = 3000
"""Rows per job: 3 subtasks x 5 keys x 200 rows, rolled at 70 rows: 45 staged files."""

TABLE = "ns.events"
PG_TABLE = "kill_events"


def dataframe(spark: Any) -> Any:
    """The input of every run (the killed one and the re-run): ids 0..N_ROWS-1, 5 keys."""
    return (
        spark.range(N_ROWS)
        .selectExpr("id", "concat('k', cast(id % 5 as string)) as key")
        .repartition(3)
    )


def create_table(warehouse: str) -> None:
    """The Iceberg table the jobs append to, partitioned by ``key`` (several files a writer)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from reference_sinks.iceberg import local_catalog

    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table_if_not_exists(
        TABLE,
        schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "key", StringType())),
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "key")),
    )


def create_postgres_table(url: str) -> None:
    """The PostgreSQL table the ``"postgres"`` jobs load into."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {PG_TABLE} (id bigint, key text)")


def make_sink(kind: str, location: str, *, filesystem: Any = None) -> Any:
    """The sink of a job: ``"files"``, ``"compacting"`` (FileSink), ``"iceberg"`` or ``"postgres"``.

    ``location`` is a directory, a warehouse, or for ``"postgres"`` the database's URL.
    ``"files-native"`` and ``"iceberg-native"`` are FileSink and IcebergSink with
    Spark's writer writing the files (``native_write=True``); ``"files"`` and
    ``"iceberg"`` run the sinks' own writers.
    """
    from reference_sinks.files import CompactionPolicy, FileSink, RollingPolicy
    from reference_sinks.iceberg import IcebergSink, local_catalog

    rolling = RollingPolicy(max_rows=70)
    if kind == "files":
        return FileSink(location, partition_by=["key"], rolling_policy=rolling, native_write=False)
    if kind == "compacting":
        return FileSink(
            location,
            partition_by=["key"],
            rolling_policy=rolling,
            compaction=CompactionPolicy(min_files=2, target_bytes=10**7),
            filesystem=filesystem,
        )
    if kind == "files-native":
        rolling = RollingPolicy(max_rows=70, max_bytes=None)
        return FileSink(location, partition_by=["key"], rolling_policy=rolling, native_write=True)
    if kind in ("iceberg", "iceberg-native"):
        native = kind == "iceberg-native"
        return IcebergSink(local_catalog(location), TABLE, write_parallelism=3, native_write=native)
    if kind == "postgres":
        from reference_sinks.postgres import PostgresSink

        return PostgresSink(location, PG_TABLE)
    raise ValueError(
        f"unknown sink kind {kind!r}; use 'files', 'compacting', 'iceberg', 'postgres', "
        "'files-native' or 'iceberg-native'"
    )


def _run_job(spark: Any, job: dict[str, Any], config: dict[str, Any]) -> None:
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    markers = Path(config["markers"])
    sink_id = job["sink_id"]
    filesystem = None
    if job.get("block_compaction"):
        from tests.integration.fault_fs import fault_injecting_fs

        filesystem = fault_injecting_fs(markers, "block")

    def on_stage(event: str, epoch: int) -> None:
        (markers / f"{sink_id}.{event}").touch()
        if event == job.get("stop_at"):
            (markers / f"{sink_id}.stopped").touch()
            time.sleep(3600)  # killed from outside meanwhile

    sink = make_sink(job["kind"], job["location"], filesystem=filesystem)
    if job.get("stall_native_write"):  # subtask 0 stops mid-write: <sink id>-stall/stalled-0-0
        from tests.integration.stalled_input import StalledInput, with_stalled_input

        stall_markers = markers / f"{sink_id}-stall"
        stall_markers.mkdir(exist_ok=True)
        sink = with_stalled_input(sink, StalledInput(str(stall_markers), frozenset({(0, 0)})))
    store = SqliteCommitStateStore(job["store"])
    SinkTopologyTranslator(state_store=store).apply(
        dataframe(spark),
        sink,
        sink_id=sink_id,
        checkpoint_id=config["checkpoint_id"],
        on_stage=on_stage,
    )
    (markers / f"{sink_id}.returned").touch()


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    threads = [
        threading.Thread(target=_run_job, args=(spark, job, config), name=job["sink_id"])
        for job in config["jobs"]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
