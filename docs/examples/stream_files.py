"""Stream new files of a landing directory into Parquet files, exactly once, through a crash.

This is the complete program of the how-to "Read a source as a stream, exactly once"
(docs/howto/stream-a-source.md). A `FileSource` monitors a landing directory of
JSON-lines files; `spark.readStream.format("sinkv2")` reads it as a stream whose
split positions are recorded per micro-batch under a ``source_id``; a `FileSink`
writes each micro-batch through ``writeStream.format("sinkv2")``, committed once per
checkpoint. The program runs the query three times from one checkpoint location -
the second time after a simulated crash that lost Spark's commit of the last
micro-batch - and checks that every order arrived once. Run it with::

    python docs/examples/stream_files.py [WORK_DIRECTORY]

It needs ``pip install 'sinkv2[spark]'``. Without an argument it works in a fresh
temporary directory.
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from sinkv2_spark import register

# --8<-- [end:imports]


def land(landing: Path, first: int, count: int) -> None:
    """Drop orders ``first`` .. ``first + count - 1`` into the landing directory, as one file.

    The file is written under a hidden name and renamed: a reader never sees it half
    written (FileSource also waits until two listings saw a file unchanged).
    """
    landing.mkdir(parents=True, exist_ok=True)
    rows = (
        {"order_id": n, "customer": f"c{n % 7}", "amount": 5 + n % 40 * 0.25}
        for n in range(first, first + count)
    )
    hidden = landing / f".orders-{first:08d}.jsonl.tmp"
    hidden.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    os.replace(hidden, landing / f"orders-{first:08d}.jsonl")


# --8<-- [start:read]
def read_orders(spark: SparkSession, landing: Path, state: Path) -> DataFrame:
    """The landing directory as a stream: each new file read once, positions recorded."""
    return (
        spark.readStream.format("sinkv2")
        .option("source", "files")  # reference_sinks.files.FileSource
        .option("path", str(landing))
        .option("format", "jsonl")
        .option("monitor_interval", "1")  # list the directory every second
        .option("source_id", "landing-orders")  # the name of its position history
        .option("state_store", str(state))  # where positions and commits are recorded
        .option("maxSplitsPerTrigger", "2")  # at most two files per micro-batch
        .load()
    )


# --8<-- [end:read]


# --8<-- [start:write]
def run_once(spark: SparkSession, work: Path) -> list[int]:
    """One run of the query, to the end of what has landed (``availableNow``)."""
    query = (
        read_orders(spark, work / "landing", work / "state.sqlite")
        .writeStream.format("sinkv2")
        .option("sink", "files")  # reference_sinks.files.FileSink
        .option("path", str(work / "orders"))
        .option("sink_id", "orders-to-parquet")
        .option("state_store", str(work / "state.sqlite"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


# --8<-- [end:write]


def lose_last_commit(checkpoint: Path) -> int:
    """What a driver killed mid-micro-batch leaves: its offsets logged, its commit not."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def main(work: Path) -> int:
    """Three runs, one crash in between; the number of orders written (each once)."""
    python = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.pyspark.python", python)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    register(spark)
    land(work / "landing", 0, 300)
    land(work / "landing", 300, 300)
    land(work / "landing", 600, 300)
    print("run 1: micro-batches of", run_once(spark, work), "rows")
    replayed = lose_last_commit(work / "checkpoint")
    land(work / "landing", 900, 300)
    print(f"run 2 (micro-batch {replayed} replayed):", run_once(spark, work), "rows")
    land(work / "landing", 1200, 300)
    print("run 3: micro-batches of", run_once(spark, work), "rows")
    orders = spark.read.parquet(str(work / "orders"))
    total, distinct = orders.count(), orders.select("order_id").distinct().count()
    print(f"{total} orders written, {distinct} distinct")
    if total != 1500 or distinct != 1500:
        raise SystemExit(f"expected 1500 orders once each, found {total} ({distinct} distinct)")
    return total


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="sinkv2-")))
