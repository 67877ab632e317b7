"""Per-micro-batch overhead of a FLIP-27 stream on Spark, and the driver's memory over a long run.

One command, one Spark session (local[2])::

    .venv/bin/python benchmarks/source_stream_bench.py                  # 60 files, 3 rounds
    .venv/bin/python benchmarks/source_stream_bench.py --files 100 --rounds 5
    .venv/bin/python benchmarks/source_stream_bench.py --memory 1000   # 1,000 micro-batches

**Overhead.** ``--files`` small Parquet files (``--rows`` rows each) read one file per
micro-batch with ``availableNow``, into a ``foreachBatch`` that counts the rows:

- ``native``: Spark's file stream, ``spark.readStream.parquet(dir)`` with
  ``maxFilesPerTrigger=1``;
- ``FileSource``: ``spark.readStream.format("sinkv2").option("source", "files")`` with
  ``maxSplitsPerTrigger=1`` - the source coordinator records each epoch in a SQLite
  store before Spark logs the offset, and acknowledges and prunes the one before.

Per path and round: the median of Spark's ``triggerExecution`` per micro-batch and the
median interval between micro-batch starts (the first two micro-batches dropped). Paths
run in interleaved rounds; the ratio of the medians is the overhead (target <= 1.2 x).

**Memory** (``--memory N``): N micro-batches of the ``FileSource`` path in one query;
every 100 micro-batches, the driver JVM's used heap (after a GC) and the resident memory
of the driver's process tree (the JVM and its Python workers: the streaming source
runner holding the enumerator among them), and the number of epoch records the store
keeps. Flat means: no growth with the number of micro-batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import itertools

from common import session  # the benchmarks folder is not a package


def write_files(folder: Path, files: int, rows: int) -> None:
    """``files`` Parquet files of ``rows`` rows (``id``, ``key``, ``value``), an hour old."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    old = time.time() - 3600
    for index in range(files):
        ids = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "key": pa.array([f"k{i % 13}" for i in range(rows)]),
                "value": pa.array([float(i) for i in range(rows)]),
            }
        )
        path = folder / f"part-{index:06d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (old, old))


def run_query(spark: Any, path: str, folder: Path, work: Path, tag: str) -> list[dict[str, Any]]:
    """One availableNow query over ``folder``; Spark's progress reports."""
    if path == "native":
        stream = (
            spark.readStream.schema("id long, key string, value double")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(folder))
        )
    else:
        stream = (
            spark.readStream.format("sinkv2")
            .option("source", "files")
            .option("path", str(folder))
            .option("format", "parquet")
            .option("monitor_interval", "0.2")
            .option("source_id", f"bench-{tag}")
            .option("state_store", str(work / "state.sqlite"))
            .option("maxSplitsPerTrigger", "1")
            .option("parallelism", "1")
            .load()
        )
    query = (
        stream.writeStream.foreachBatch(lambda df, _batch: df.count())
        .option("checkpointLocation", str(work / f"cp-{tag}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def _millis(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def per_batch(progress: list[dict[str, Any]]) -> tuple[float, float, int]:
    """Median triggerExecution, median interval between starts (ms), micro-batches with data."""
    batches = [p for p in progress if p["numInputRows"]][2:]
    trigger = statistics.median(p["durationMs"]["triggerExecution"] for p in batches)
    starts = [_millis(p["timestamp"]) for p in batches]
    interval = statistics.median(b - a for a, b in itertools.pairwise(starts))
    return trigger, interval, len(batches) + 2


def overhead(spark: Any, files: int, rows: int, rounds: int, work: Path) -> None:
    folder = work / "in"
    write_files(folder, files, rows)
    results: dict[str, list[tuple[float, float]]] = {"native": [], "FileSource": []}
    for round_ in range(rounds):
        for path in ("native", "FileSource") if round_ % 2 == 0 else ("FileSource", "native"):
            trigger, interval, count = per_batch(
                run_query(spark, path, folder, work, f"{path}-{round_}")
            )
            assert count == files, (path, count)
            results[path].append((trigger, interval))
            print(
                f"round {round_} {path:<10} trigger {trigger:7.1f} ms  interval {interval:7.1f} ms"
            )
    for index, what in enumerate(("trigger", "interval")):
        native = statistics.median(r[index] for r in results["native"])
        ours = statistics.median(r[index] for r in results["FileSource"])
        print(
            f"{what:<8}: native {native:7.1f} ms, FileSource {ours:7.1f} ms "
            f"-> {ours / native:.2f} x"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


def _tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
        )
        todo += children.get(pid, [])
    return total


def memory(spark: Any, batches: int, work: Path) -> None:
    from sinkv2.runtime import SqliteCommitStateStore

    folder = work / "in"
    write_files(folder, batches, 10)
    jvm = spark.sparkContext._jvm
    jvm_pid = int(jvm.ProcessHandle.current().pid())
    query = (
        spark.readStream.format("sinkv2")
        .option("source", "files")
        .option("path", str(folder))
        .option("format", "parquet")
        .option("monitor_interval", "0.2")
        .option("source_id", "bench-memory")
        .option("state_store", str(work / "state.sqlite"))
        .option("maxSplitsPerTrigger", "1")
        .option("parallelism", "1")
        .load()
        .writeStream.foreachBatch(lambda df, _batch: df.count())
        .option("checkpointLocation", str(work / "cp-memory"))
        .trigger(availableNow=True)
        .start()
    )
    store = SqliteCommitStateStore(work / "state.sqlite")
    seen = -1
    while query.isActive:
        progress = query.lastProgress
        done = progress["batchId"] if progress else -1
        if done // 100 > seen // 100 and done >= 0:
            runtime = jvm.java.lang.Runtime.getRuntime()
            jvm.java.lang.System.gc()
            heap = (runtime.totalMemory() - runtime.freeMemory()) / 2**20
            rss = _tree_rss_kib(jvm_pid) / 1024
            records = len(store.source_epochs("bench-memory"))
            print(
                f"micro-batch {done:5d}: JVM heap {heap:7.1f} MiB, driver tree RSS "
                f"{rss:7.1f} MiB, epoch records {records}"
            )
            seen = done
        time.sleep(0.5)
    query.awaitTermination()
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", type=int, default=0, help="micro-batches of the memory run")
    args = parser.parse_args()
    spark = session("source-stream-bench")
    from sinkv2_spark import register

    register(spark)
    with tempfile.TemporaryDirectory(prefix="sinkv2-stream-bench-") as tmp:
        if args.memory:
            memory(spark, args.memory, Path(tmp))
        else:
            overhead(spark, args.files, args.rows, args.rounds, Path(tmp))


if __name__ == "__main__":
    main()
