"""The native path (issue 13): FileSink and IcebergSink with Spark writing the files, vs df.write.

One command, one local[2] Spark, interleaved rounds (every path once per round, in
turn, so drift and noise hit all of them alike)::

    .venv/bin/python benchmarks/native_write_bench.py --rows 5000000 20000000 --rounds 5
    .venv/bin/python benchmarks/native_write_bench.py --rows 200000 --rounds 1   # smoke
    .venv/bin/python benchmarks/native_write_bench.py --scratch /dev/shm   # no disk in the way

Every timed run starts after ``os.sync()``, so the previous run's pages being written
back to disk (or its files being removed) do not land in the next run's time.

The data is every benchmark's (``common.data``): ``spark.range(N)`` + ``key`` string +
``value`` double, 2 partitions. The paths:

- ``native df.write.parquet``: Spark's writer into a fresh directory (snappy);
- ``FileSink(path) defaults``: ``FileSink(path)`` with every option at its default
  (no row limit, one file per task as ``df.write.parquet``): the fast path a user gets
  without asking (issue 27);
- ``FileSink native``: ``FileSink(native_write=True, RollingPolicy(max_rows=None))``
  through ``SinkTopologyTranslator.apply``: Spark's writer into staging, a Pending
  record in SQLite, the renames, Committed;
- ``IcebergSink native``: ``IcebergSink(native_write=True)`` into an unpartitioned
  table (embedded SQL catalog), its ``write.parquet.compression-codec`` set to snappy
  as ``df.write.parquet`` writes (Iceberg's default, zstd, is measured as its own
  path): Spark's writer, footers to data files, one guarded fast append;
- ``FileSink Python`` / ``IcebergSink Python``: the same sinks with
  ``native_write=False`` (their own writers), for the before/after.

Prints one markdown table per N: median seconds, every run, rows/s and x native, plus
the medians of the native path's driver work after Spark's write (listing the files,
reading footers, making committables) and of the commit stage (Pending record,
committer, Committed record).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data, session  # the benchmarks folder is not a package

_TABLES = iter(range(10**6))


Timed = tuple[float, dict[str, float]]
"""Seconds of the write itself (creating a table or a sink is not timed), and its stages."""


def native(spark: Any, rows: int, out: Path) -> Timed:
    started = time.perf_counter()
    data(spark, rows).write.parquet(str(out / "parquet"))
    return time.perf_counter() - started, {}


def _translator(out: Path) -> Any:
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    return SinkTopologyTranslator(state_store=SqliteCommitStateStore(out / "state.sqlite"))


def _file_sink(spark: Any, rows: int, out: Path, *, native_write: bool) -> Timed:
    from reference_sinks.files import FileSink, RollingPolicy

    sink = FileSink(
        out / "files",
        rolling_policy=RollingPolicy(max_rows=None, max_bytes=None),
        native_write=native_write,
    )
    translator = _translator(out)
    started = time.perf_counter()
    result = translator.apply(data(spark, rows), sink, sink_id="bench-files")
    elapsed = time.perf_counter() - started
    assert result.native_write is native_write, result
    assert result.records_written == rows, result
    return elapsed, dict(result.stage_seconds)


def _default_file_sink(spark: Any, rows: int, out: Path) -> Timed:
    from reference_sinks.files import FileSink

    sink = FileSink(out / "files")
    translator = _translator(out)
    started = time.perf_counter()
    result = translator.apply(data(spark, rows), sink, sink_id="bench-files-defaults")
    elapsed = time.perf_counter() - started
    assert result.native_write, result  # the defaults take Spark's writer
    assert result.records_written == rows, result
    return elapsed, dict(result.stage_seconds)


def _iceberg_sink(
    spark: Any, rows: int, out: Path, *, native_write: bool, codec: str | None = "snappy"
) -> Timed:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    from reference_sinks.iceberg import IcebergSink

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "key", StringType()),
        NestedField(3, "value", DoubleType()),
    )
    name = f"bench.t{next(_TABLES)}"
    sink = IcebergSink.local(out / "warehouse", name, schema=schema, native_write=native_write)
    if codec is not None:
        with sink.load_table().transaction() as transaction:
            transaction.set_properties({"write.parquet.compression-codec": codec})
    translator = _translator(out)
    started = time.perf_counter()
    result = translator.apply(data(spark, rows), sink, sink_id=name)
    elapsed = time.perf_counter() - started
    assert result.native_write is native_write, result
    assert result.records_written == rows, result
    return elapsed, dict(result.stage_seconds)


PATHS: dict[str, Callable[[Any, int, Path], Timed]] = {
    "native df.write.parquet": native,
    "FileSink(path) defaults": _default_file_sink,
    "FileSink native": lambda s, r, o: _file_sink(s, r, o, native_write=True),
    "IcebergSink native (snappy)": lambda s, r, o: _iceberg_sink(s, r, o, native_write=True),
    "IcebergSink native (zstd, Iceberg's default)": lambda s, r, o: _iceberg_sink(
        s, r, o, native_write=True, codec=None
    ),
    "FileSink Python writers": lambda s, r, o: _file_sink(s, r, o, native_write=False),
    "IcebergSink Python writers": lambda s, r, o: _iceberg_sink(s, r, o, native_write=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000, 20_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", nargs="*", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--warmup", type=int, default=200_000, help="rows of the warm-up round")
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where the runs write (default: a temp dir)"
    )
    args = parser.parse_args()
    spark = session("native-write-bench")
    scratch = Path(tempfile.mkdtemp(prefix="native-bench-", dir=args.scratch))
    try:
        for name in args.paths:  # warm the JVM and Python workers once per path
            PATHS[name](spark, args.warmup, scratch / f"warm-{len(list(scratch.iterdir()))}")
        for rows in args.rows:
            seconds: dict[str, list[float]] = {name: [] for name in args.paths}
            commits: dict[str, list[float]] = {name: [] for name in args.paths}
            listings: dict[str, list[float]] = {name: [] for name in args.paths}
            for round_ in range(args.rounds):
                for name in args.paths:
                    out = scratch / f"{rows}-{round_}-{len(seconds[name])}-{abs(hash(name))}"
                    out.mkdir(parents=True)
                    os.sync()
                    elapsed, stages = PATHS[name](spark, rows, out)
                    seconds[name].append(elapsed)
                    if "commit" in stages:
                        commits[name].append(stages["commit"])
                    if "committables from files" in stages:
                        listings[name].append(stages["committables from files"])
                    shutil.rmtree(out, ignore_errors=True)
                    print(
                        f"# {rows:,} round {round_}: {name} {seconds[name][-1]:.2f} s", flush=True
                    )
            report(rows, seconds, commits, listings)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        spark.stop()


def report(
    rows: int,
    seconds: dict[str, list[float]],
    commits: dict[str, list[float]],
    listings: dict[str, list[float]],
) -> None:
    base = (
        statistics.median(seconds["native df.write.parquet"])
        if seconds.get("native df.write.parquet")
        else None
    )
    print()
    print(
        "| rows | path | median s | runs (s) | rows/s | x native | files -> committables "
        "| commit stage |"
    )
    print("|---:|---|---:|---|---:|---:|---:|---:|")
    for name, runs in seconds.items():
        median = statistics.median(runs)
        ratio = f"{base / median:.2f}" if base else "-"
        commit = f"{statistics.median(commits[name]) * 1000:.1f} ms" if commits[name] else "-"
        listed = f"{statistics.median(listings[name]) * 1000:.1f} ms" if listings[name] else "-"
        every = ", ".join(f"{run:.2f}" for run in runs)
        print(
            f"| {rows:,} | {name} | {median:.2f} | {every} | {rows / median:,.0f} | {ratio} "
            f"| {listed} | {commit} |"
        )
    print(flush=True)


if __name__ == "__main__":
    main()
