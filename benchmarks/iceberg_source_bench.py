"""`IcebergSource` (bounded, through `from_source`) against pyiceberg's ``scan().to_arrow()``.

One command, one local[2] Spark, interleaved rounds (each path once per round, in
turn, so drift and noise hit both alike)::

    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 5000000 --rounds 5
    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 200000 --rounds 1   # smoke
    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 20000000 --no-python-path

The data is every benchmark's (``common.data``: ``id`` long, ``key`` string,
``value`` double), appended once to a table of the embedded catalog
(`local_catalog`) as ``--files`` Parquet data files. Each path reads all of it:

- ``pyiceberg scan().to_arrow()``: pyiceberg plans and reads the table into one
  Arrow table in this process (its own thread pool), then counts rows and sums
  ``id`` with pyarrow;
- ``from_source(IcebergSource)``: `reference_sinks.iceberg.IcebergSource` planned
  and read by `sinkv2_spark.from_source` with parallelism 2 (the split enumerator,
  the reader framework's fetcher thread, Arrow batches by field id); Spark counts
  the rows and sums ``id``, ``native_read=False``: rows through Spark's Python
  data source;
- ``from_source(IcebergSource) native``: the same with ``native_read=True``
  (`IcebergSource.native_read`: Spark's own Parquet reader reads the data files).

The load average (1 min) is printed with every run: the machine may be shared.

Target (issue 24): ``IcebergSource`` >= 1 x pyiceberg's ``to_arrow()``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package

from reference_sinks.iceberg import IcebergSource, local_catalog
from sinkv2_spark import from_source


def timed(read: Callable[[], tuple[int, int]]) -> tuple[float, int, int]:
    start = time.perf_counter()
    count, total = read()
    return time.perf_counter() - start, count, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument(
        "--no-python-path",
        action="store_true",
        help="leave out native_read=False (slow on large tables; not the default path)",
    )
    args = parser.parse_args()
    spark = session("iceberg-source-bench")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="sinkv2-iceberg-source-bench-") as scratch:
            catalog = local_catalog(scratch)
            catalog.create_namespace("bench")
            frame = data(spark, rows)
            schema = pa.schema([f.with_nullable(True) for f in frame.limit(1).toArrow().schema])
            table = catalog.create_table("bench.rows", schema=schema)
            per_file = -(-rows // args.files)
            with table.transaction() as transaction:  # one snapshot, --files data files
                for start in range(0, rows, per_file):
                    part = frame.where(f"id >= {start} and id < {start + per_file}").toArrow()
                    transaction.append(part.cast(schema))
            source = IcebergSource(catalog, "bench.rows")

            def pyiceberg_read(catalog: Any = catalog) -> tuple[int, int]:
                arrow = catalog.load_table("bench.rows").scan().to_arrow()
                return arrow.num_rows, int(pc.sum(arrow["id"]).as_py())

            def sinkv2_read(source: IcebergSource = source) -> tuple[int, int]:
                df = from_source(spark, source, parallelism=2, native_read=False)
                (row,) = df.selectExpr("count(*) as n", "sum(id) as s").collect()
                return int(row.n), int(row.s)

            def native_read(source: IcebergSource = source) -> tuple[int, int]:
                df = from_source(spark, source, parallelism=2, native_read=True)
                (row,) = df.selectExpr("count(*) as n", "sum(id) as s").collect()
                return int(row.n), int(row.s)

            paths = {
                "pyiceberg scan().to_arrow()": pyiceberg_read,
                "from_source(IcebergSource) Python path": sinkv2_read,
                "from_source(IcebergSource) native": native_read,
            }
            if args.no_python_path:
                del paths["from_source(IcebergSource) Python path"]
            sums = set()
            for name, read in paths.items():  # warm-up, and the rows checked
                _, counted, total = timed(read)
                assert counted == rows, (name, counted, rows)
                sums.add(total)
            assert len(sums) == 1, sums
            runs: dict[str, list[float]] = {name: [] for name in paths}
            for round_index in range(args.rounds):
                for name, read in paths.items():
                    seconds, _, _ = timed(read)
                    runs[name].append(seconds)
                    load = os.getloadavg()[0]
                    print(
                        f"# {rows:,} round {round_index}: {name} {seconds:.2f} s "
                        f"(load average {load:.2f})",
                        flush=True,
                    )
            baseline = statistics.median(runs["pyiceberg scan().to_arrow()"])
            print("\n| rows | path | median s | runs (s) | rows/s | x pyiceberg |")
            print("|---:|---|---:|---|---:|---:|")
            for name, seconds in runs.items():
                median = statistics.median(seconds)
                print(
                    f"| {rows:,} | {name} | {median:.2f} | "
                    f"{', '.join(f'{s:.2f}' for s in seconds)} | {rows / median:,.0f} | "
                    f"{baseline / median:.2f} |"
                )
            print()
    spark.stop()


if __name__ == "__main__":
    main()
