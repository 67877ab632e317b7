"""`FileSource` (bounded, through `from_source`) against ``spark.read.parquet`` on the same files.

One command, one local[2] Spark, interleaved rounds (each path once per round, in
turn, so drift and noise hit both alike)::

    .venv/bin/python benchmarks/file_source_bench.py --rows 5000000 --rounds 5
    .venv/bin/python benchmarks/file_source_bench.py --rows 200000 --rounds 1   # smoke

The data is every benchmark's (``common.data``: ``id`` long, ``key`` string,
``value`` double) written once by ``df.write.parquet`` into ``--files`` files. Each
path reads all of it and Spark counts the rows and sums ``id``:

- ``spark.read.parquet``: Spark's own reader (vectorized, in the JVM);
- ``from_source(FileSource)``: `reference_sinks.files.FileSource(out)` planned and
  read by `sinkv2_spark.from_source` with parallelism 2 and ``native_read=False`` (the
  listing, the split enumerator, the reader framework's fetcher thread, Arrow
  batches);
- ``from_source(FileSource), native``: the same plan, read by Spark's own Parquet
  reader (the native read path, `from_source`'s default for FileSource's Parquet files).

Target (issue 24): ``FileSource`` >= 0.75 x ``spark.read.parquet``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package

from reference_sinks.files import FileSource
from sinkv2_spark import from_source


def timed(make_frame: Callable[[], Any]) -> tuple[float, int]:
    start = time.perf_counter()
    (row,) = make_frame().selectExpr("count(*) as n", "sum(id) as s").collect()
    return time.perf_counter() - start, int(row.n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()
    spark = session("file-source-bench")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="sinkv2-file-source-bench-") as scratch:
            out = Path(scratch) / "data"
            data(spark, rows).repartition(args.files).write.parquet(str(out))
            paths: dict[str, Callable[[], Any]] = {
                "spark.read.parquet": lambda out=out: spark.read.parquet(str(out)),
                "from_source(FileSource)": lambda out=out: from_source(
                    spark, FileSource(out), parallelism=2, native_read=False
                ),
                "from_source(FileSource), native": lambda out=out: from_source(
                    spark, FileSource(out), parallelism=2, native_read=True
                ),
            }
            for name, make in paths.items():  # warm-up, and the row count checked
                _, counted = timed(make)
                assert counted == rows, (name, counted, rows)
            runs: dict[str, list[float]] = {name: [] for name in paths}
            for round_index in range(args.rounds):
                for name, make in paths.items():
                    seconds, _ = timed(make)
                    runs[name].append(seconds)
                    print(f"# {rows:,} round {round_index}: {name} {seconds:.2f} s", flush=True)
            native = statistics.median(runs["spark.read.parquet"])
            print("\n| rows | path | median s | runs (s) | rows/s | x native |")
            print("|---:|---|---:|---|---:|---:|")
            for name, seconds in runs.items():
                median = statistics.median(seconds)
                print(
                    f"| {rows:,} | {name} | {median:.2f} | "
                    f"{', '.join(f'{s:.2f}' for s in seconds)} | {rows / median:,.0f} | "
                    f"{native / median:.2f} |"
                )
            print()
    spark.stop()


if __name__ == "__main__":
    main()
