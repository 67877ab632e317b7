"""The sinkv2 data source door against apply() on the same sink and data, and both against Spark.

One command, one child process (local[2])::

    .venv/bin/python benchmarks/datasource_bench.py                  # N = 5M, 5 rounds
    .venv/bin/python benchmarks/datasource_bench.py --rows 20000000 --repeat 3

The same generated data (``spark.range(N)`` + ``key`` string + ``value`` double) is
written to Parquet by:

- ``native df.write.parquet``: Spark's own writer;
- ``FileSink apply()``: ``SinkTopologyTranslator.apply(df, FileSink(out, "parquet",
  native_write=False))`` (its own writers, as the door runs them);
- ``FileSink format("sinkv2")``: ``df.write.format("sinkv2").option("sink", "files")``
  with the same FileSink options.

Both FileSink paths stage, commit by rename, clean up and record the epoch in a
SQLite commit state store. Paths run in interleaved rounds (a slow minute hits every
path alike); the median is reported, with every run. Target: the door's overhead
over ``apply()`` <= 5 %.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package


def native(spark: Any, rows: int, out: str) -> None:
    data(spark, rows).write.mode("overwrite").parquet(out)


def file_sink_apply(spark: Any, rows: int, out: str) -> None:
    from reference_sinks.files import FileSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    store = SqliteCommitStateStore(Path(out + "-state") / "state.sqlite")
    SinkTopologyTranslator(state_store=store).apply(
        data(spark, rows), FileSink(out, "parquet", native_write=False), sink_id="bench"
    )


def file_sink_door(spark: Any, rows: int, out: str) -> None:
    (
        data(spark, rows)
        .write.format("sinkv2")
        .option("sink", "files")
        .option("path", out)
        .option("sink_id", "bench")
        .option("state_store", str(Path(out + "-state") / "state.sqlite"))
        .mode("append")
        .save()
    )


PATHS: dict[str, Callable[[Any, int, str], None]] = {
    "native df.write.parquet": native,
    "FileSink apply()": file_sink_apply,
    'FileSink format("sinkv2")': file_sink_door,
}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def child(rows: int, repeat: int) -> None:
    import pyarrow.parquet as pq

    from sinkv2_spark import register

    spark = session("sinkv2-datasource-bench")
    register(spark)
    seconds: dict[str, list[float]] = {name: [] for name in PATHS}
    with tempfile.TemporaryDirectory(prefix="sinkv2-datasource-bench-") as scratch:
        for name, path in PATHS.items():  # warm up the JVM, the workers and the preflight
            path(spark, 50_000, os.path.join(scratch, "warm-" + _slug(name)))
        for round_ in range(repeat):
            for name, path in PATHS.items():
                out = os.path.join(scratch, f"{round_}-" + _slug(name))
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
    apply_rate = rows / median["FileSink apply()"]
    lines = [
        "| rows | path | median s | runs (s) | rows/s | x native | x apply() |",
        "|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        rate = rows / median[r["path"]]
        each = ", ".join(f"{run:.2f}" for run in r["runs"])
        lines.append(
            f"| {rows:,} | {r['path']} | {median[r['path']]:.2f} | {each} | {rate:,.0f} | "
            f"{rate / native_rate:.2f} | {rate / apply_rate:.2f} |"
        )
    overhead = median['FileSink format("sinkv2")'] / median["FileSink apply()"] - 1
    lines.append("")
    lines.append(
        f"door overhead over apply() = {overhead:+.1%} of apply()'s time "
        f"(target <= 5 %: {'met' if overhead <= 0.05 else 'NOT met'})"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=5)
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
