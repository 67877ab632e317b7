"""A streaming driver host to kill: runs streaming queries in its own Spark session until killed.

``python -m tests.integration.kill_stream_driver <config.json>`` starts a ``local[2]``
session and one streaming `SinkTopologyTranslator.apply` per job of the config, all at
once (one crashed host then tests several sinks and sources). Every stage event a
query reaches is recorded as an empty marker file ``<markers>/<sink id>.<event>.<epoch>``;
at the job's ``stop_at`` event of its ``stop_epoch`` it also writes
``<sink id>.stopped`` and sleeps, so the test kills it exactly there. The micro-batch
thread sleeps, so ``foreachBatch`` does not return and Spark does not log the
micro-batch's commit; with ``decoupled`` the commit thread sleeps, and Spark goes on.

Two replayable sources, both giving columns ``id`` (long) and ``key`` (string):

- ``"files"``: Spark's JSON file source over `write_input`'s files, one file per
  micro-batch, with the ``availableNow`` trigger;
- ``"rate"``: Spark's ``rate`` source (``id`` is its ``value``: 0, 1, 2, ...), with a
  ``processingTime`` trigger.

The test (`test_stream_driver_kill.py`) restarts the queries from their checkpoint
locations with `stream` and `kill_driver.make_sink`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

N_FILES = 3
"""Input files of the file source: one micro-batch each.

Three: the host is killed in micro-batch 1, and the restart replays it and runs
micro-batch 2, a new one (with ``decoupled_commit`` the host has already recorded
micro-batch 2 when it dies, and the restart commits it). A fourth file only added a
micro-batch to every restart.
"""

ROWS_PER_FILE = 120
"""Rows per input file: its micro-batch's 2 subtasks stage a part file per key (3 keys)."""

RATE_ROWS_PER_SECOND = 20
"""The rate source's rows per second; its offset is whole seconds since it started."""

RATE_TRIGGER = {"processingTime": "1 second"}
FILES_TRIGGER = {"availableNow": True}


def input_rows(index: int) -> list[dict[str, Any]]:
    """Input file ``index``'s rows: ids ``index * ROWS_PER_FILE + j``, keys k0..k2."""
    start = index * ROWS_PER_FILE
    return [{"id": i, "key": f"k{i % 3}"} for i in range(start, start + ROWS_PER_FILE)]


def write_input(directory: Path) -> list[int]:
    """Write the file source's input; returns every id in it.

    Each file's modification time is a step later than the one before, so Spark's
    file source takes them in order, one per micro-batch.
    """
    directory.mkdir(parents=True)
    ids = []
    for index in range(N_FILES):
        rows = input_rows(index)
        path = directory / f"part-{index:04d}.json"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        mtime = 1_600_000_000 + 10 * index
        os.utime(path, (mtime, mtime))
        ids += [row["id"] for row in rows]
    return ids


def stream(spark: Any, source: str, input_dir: str | None) -> Any:
    """The streaming DataFrame of ``source`` (``"files"`` or ``"rate"``): ``id``, ``key``."""
    if source == "files":
        return (
            spark.readStream.schema("id long, key string")
            .option("maxFilesPerTrigger", 1)
            .json(input_dir)
            .repartition(2)
        )
    if source == "rate":
        return (
            spark.readStream.format("rate")
            .option("rowsPerSecond", RATE_ROWS_PER_SECOND)
            .option("numPartitions", 2)
            .load()
            .selectExpr("value as id", "concat('k', cast(value % 3 as string)) as key")
        )
    raise ValueError(f"unknown source {source!r}; use 'files' or 'rate'")


def trigger_of(source: str) -> dict[str, Any]:
    """The trigger the killed run uses for ``source``."""
    return FILES_TRIGGER if source == "files" else RATE_TRIGGER


def _start(spark: Any, job: dict[str, Any], markers: Path) -> Any:
    from sinkv2_spark import SinkTopologyTranslator
    from tests.integration.kill_driver import make_sink

    sink_id = job["sink_id"]
    stop = (job["stop_at"], job["stop_epoch"])

    def on_stage(event: str, epoch: int) -> None:
        (markers / f"{sink_id}.{event}.{epoch}").touch()
        if (event, epoch) == stop:
            (markers / f"{sink_id}.stopped").touch()
            time.sleep(3600)  # killed from outside meanwhile

    return SinkTopologyTranslator().apply(
        stream(spark, job["source"], job.get("input")),
        make_sink(job["kind"], job["location"]),
        sink_id=sink_id,
        checkpoint_location=job["checkpoint"],
        trigger=trigger_of(job["source"]),
        decoupled_commit=job["decoupled"],
        on_stage=on_stage,
    )


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    markers = Path(config["markers"])
    queries = [_start(spark, job, markers) for job in config["jobs"]]
    for query in queries:  # a killed run never gets past the first stopped query
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
