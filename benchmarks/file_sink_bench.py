"""Write throughput of reference_sinks.files.FileSink against Spark's own writer paths.

One command, one child process (local[2])::

    .venv/bin/python benchmarks/file_sink_bench.py                  # N = 2M, 3 rounds
    .venv/bin/python benchmarks/file_sink_bench.py --rows 5000000 --repeat 5

The same generated data (``spark.range(N)`` + ``key`` string + ``value`` double) is
written to Parquet by:

- ``native df.write.parquet``: Spark's own writer;
- ``mapInArrow pass-through``: raw ``mapInArrow``, batches straight into pyarrow's
  ParquetWriter, nothing else (no staging, no commit) - the ceiling for a Python sink;
- ``FileSink Arrow path``: ``SinkTopologyTranslator.apply`` with
  ``FileSink(out, "parquet")``: staging, commit by rename, cleanup, commit state store.

Paths run in interleaved rounds (a slow minute hits every path alike); the median
is reported, with every run. Target: FileSink >= 0.95 x the mapInArrow pass-through.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package

# The baselines repeat translator_bench's on purpose: functions imported from another
# script are pickled by reference, and Spark's executors cannot import benchmark scripts.


def native(spark: Any, rows: int, out: str) -> None:
    data(spark, rows).write.mode("overwrite").parquet(out)


def map_in_arrow_pass_through(spark: Any, rows: int, out: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = TaskContext.get()
        name = f"part-{task.partitionId():05d}-{task.taskAttemptId()}.parquet"
        writer = None
        count = 0
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(os.path.join(out, name), batch.schema)
            writer.write_batch(batch)
            count += batch.num_rows
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pydict({"n": [count]}, schema=pa.schema([("n", pa.int64())]))

    os.makedirs(out, exist_ok=True)
    data(spark, rows).mapInArrow(write, "n long").collect()


def file_sink(spark: Any, rows: int, out: str) -> None:
    from reference_sinks.files import FileSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    store = SqliteCommitStateStore(Path(out + "-state") / "state.sqlite")
    SinkTopologyTranslator(state_store=store).apply(
        data(spark, rows), FileSink(out, "parquet", native_write=False), sink_id="bench"
    )


PATHS: dict[str, Callable[[Any, int, str], None]] = {
    "native df.write.parquet": native,
    "mapInArrow pass-through": map_in_arrow_pass_through,
    "FileSink Arrow path": file_sink,
}


def child(rows: int, repeat: int) -> None:
    import pyarrow.parquet as pq

    spark = session("sinkv2-file-sink-bench")
    seconds: dict[str, list[float]] = {name: [] for name in PATHS}
    with tempfile.TemporaryDirectory(prefix="sinkv2-file-bench-") as scratch:
        for name, path in PATHS.items():  # warm up the JVM and the Python workers
            path(spark, 50_000, os.path.join(scratch, "warm-" + name.replace(" ", "_")))
        for round_ in range(repeat):
            for name, path in PATHS.items():
                out = os.path.join(scratch, f"{round_}-" + name.replace(" ", "_"))
                start = time.perf_counter()
                path(spark, rows, out)
                seconds[name].append(time.perf_counter() - start)
                written = sum(
                    pq.ParquetFile(f).metadata.num_rows for f in Path(out).glob("part-*.parquet")
                )
                if written != rows:
                    raise RuntimeError(f"{name} wrote {written} visible rows, expected {rows}")
                shutil.rmtree(out)
    for name, runs in seconds.items():
        print(json.dumps({"rows": rows, "path": name, "runs": runs}))
    spark.stop()


def report(results: list[dict[str, Any]]) -> str:
    rows = results[0]["rows"]
    median = {r["path"]: statistics.median(r["runs"]) for r in results}
    native_rate = rows / median["native df.write.parquet"]
    through_rate = rows / median["mapInArrow pass-through"]
    lines = [
        "| rows | path | median s | runs (s) | rows/s | x native | x mapInArrow pass-through |",
        "|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        rate = rows / median[r["path"]]
        each = ", ".join(f"{run:.2f}" for run in r["runs"])
        lines.append(
            f"| {rows:,} | {r['path']} | {median[r['path']]:.2f} | {each} | {rate:,.0f} | "
            f"{rate / native_rate:.2f} | {rate / through_rate:.2f} |"
        )
    ratio = median["mapInArrow pass-through"] / median["FileSink Arrow path"]
    lines.append("")
    lines.append(
        f"FileSink / mapInArrow pass-through = {ratio:.2f} x "
        f"(target >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'})"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rows, args.repeat)
        return
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--rows",
            str(args.rows),
            "--repeat",
            str(args.repeat),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{done.stderr[-4000:]}")
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    print(report(results))


if __name__ == "__main__":
    main()
