"""A streaming driver host to kill, writing through ``df.writeStream.format("sinkv2")``.

``python -m tests.integration.kill_stream_door <config.json>`` is
`kill_stream_driver`'s host with the streaming door instead of ``apply()``: a
``local[2]`` session, one query per job of the config, all at once, with the same
sources (`kill_stream_driver.stream`), and the sinks by short name (``files``:
partitioned by ``key``, 70 rows a file; ``iceberg``: an unpartitioned table, since the
door cannot run a pre-write topology that repartitions).

The coordinator's steps run in Spark's planner and commit workers, not in this
process, so the ``on_stage`` option names `on_stage` here, which finds the config
through ``$SINKV2_DOOR_KILL_CONFIG`` (the workers inherit the host's environment):
every step a query reaches is an empty marker file ``<markers>/<sink id>.<event>.<epoch>``;
at the job's ``stop_at`` event of its ``stop_epoch`` it also writes ``<sink id>.stopped``
and sleeps inside Spark's ``commit``, so Spark does not log the micro-batch's commit
and the test kills the host exactly there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.integration.kill_driver import TABLE
from tests.integration.kill_stream_driver import stream, trigger_of

CONFIG_ENV = "SINKV2_DOOR_KILL_CONFIG"
HOOK = "tests.integration.kill_stream_door:on_stage"


def create_unpartitioned_table(warehouse: str) -> None:
    """The Iceberg table the door's jobs append to (``id`` long, ``key`` string)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from reference_sinks.iceberg import local_catalog

    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    catalog.create_table_if_not_exists(
        TABLE, schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "key", StringType()))
    )


def sink_options(job: dict[str, Any]) -> dict[str, str]:
    """The door's options for ``job``'s sink: short name and its options."""
    if job["kind"] == "files":
        return {"sink": "files", "path": job["location"], "partition_by": "key", "max_rows": "70"}
    if job["kind"] == "iceberg":
        return {"sink": "iceberg", "warehouse": job["location"], "table": TABLE}
    raise ValueError(f"unknown sink kind {job['kind']!r}; use 'files' or 'iceberg'")


def start(spark: Any, job: dict[str, Any], trigger: dict[str, Any], **extra: str) -> Any:
    """Start ``job``'s query through the door; its started `StreamingQuery`."""
    writer = (
        stream(spark, job["source"], job.get("input"))
        .writeStream.format("sinkv2")
        .option("sink_id", job["sink_id"])
        .option("checkpointLocation", job["checkpoint"])
        .trigger(**trigger)
    )
    for key, value in {**sink_options(job), **extra}.items():
        writer = writer.option(key, value)
    return writer.start()


def on_stage(sink_id: str, event: str, epoch: int) -> None:
    """The ``on_stage`` hook, in Spark's workers: markers, and a stop where configured."""
    config = json.loads(Path(os.environ[CONFIG_ENV]).read_text())
    markers = Path(config["markers"])
    (markers / f"{sink_id}.{event}.{epoch}").touch()
    job = next((j for j in config["jobs"] if j["sink_id"] == sink_id), None)
    if job is not None and (event, epoch) == (job["stop_at"], job["stop_epoch"]):
        (markers / f"{sink_id}.stopped").touch()
        time.sleep(3600)  # killed from outside meanwhile


def main(config_path: str) -> None:
    os.environ[CONFIG_ENV] = str(Path(config_path).resolve())  # before the JVM starts
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sinkv2_spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    queries = [
        start(spark, job, trigger_of(job["source"]), on_stage=HOOK) for job in config["jobs"]
    ]
    for query in queries:  # a killed run never gets past the first stopped query
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
