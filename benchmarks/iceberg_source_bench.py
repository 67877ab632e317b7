"""`IcebergSource` (bounded, through `from_source`) against pyiceberg's ``scan().to_arrow()``.

One command, one local[2] Spark, interleaved rounds (each path once per round, in
turn, so drift and noise hit both alike)::

    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 5000000 --rounds 5
    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 200000 --rounds 1   # smoke
    .venv/bin/python benchmarks/iceberg_source_bench.py --rows 20000000 --no-python-path
    .venv/bin/python benchmarks/iceberg_source_bench.py --query all id --phases

The data is every benchmark's (``common.data``: ``id`` long, ``key`` string,
``value`` double), appended once to a table of the embedded catalog
(`local_catalog`) as ``--files`` Parquet data files. Each path reads all of it:

- ``pyiceberg scan().to_arrow()``: pyiceberg plans and reads the table into one
  Arrow table in this process (its own thread pool), then computes the query's
  aggregates with pyarrow;
- ``from_source(IcebergSource)``: `reference_sinks.iceberg.IcebergSource` planned
  and read by `sinkv2_spark.from_source` with parallelism 2 (the split enumerator,
  the reader framework's fetcher thread, Arrow batches by field id); Spark computes
  the aggregates, ``native_read=False``: rows through Spark's Python data source;
- ``from_source(IcebergSource) native``: the same with ``native_read=True``
  (`IcebergSource.native_read`: Spark's own Parquet reader reads the data files);
- ``spark.read.parquet(data files)``: Spark's own Parquet reader given the table's
  data files directly (no Iceberg planning): the floor of any Spark-based read, so
  the source's own overhead is the difference between this and the native path.

``--query`` says what every path computes from what it read (each query is its own
set of paths; all paths of a query must agree on the result):

- ``all`` (default): ``count(*), sum(id), sum(value), sum(length(key))``: every
  value of every column is decoded on both sides (pyiceberg's ``to_arrow()``
  decodes every column whatever is asked of it afterwards), so this is the fair
  comparison;
- ``id``: ``count(*), sum(id)``, the query of the runs before 2026-11-27: Spark
  prunes the scan to the ``id`` column, pyiceberg still decodes all three.

``--phases`` turns on Spark's event log and prints, per Spark path, where each read's
time went (median over the rounds): the driver's work before the query starts
(planning, the DataFrame), Spark's planning up to the first job, the scan stage
(its tasks, their summed CPU, the slowest task), the later jobs (the final
aggregate after the exchange), and the return to Python.

``CPU s``: the CPU time one read used in this process (pyiceberg's threads included)
and in the driver's JVM (Spark's tasks, planning, JIT compiler and GC threads, all in
the one local-mode JVM); the Python path's Python workers are not counted. It is
less sensitive than the wall time to other work on the machine.

``--conf KEY=VALUE ...`` sets Spark settings for the session (the JVM's garbage
collector, for one: ``spark.driver.extraJavaOptions=-XX:+UseParallelGC``); the
settings are printed with the results.

``--warmup N`` reads every path N times before the timed rounds (default 1). Spark's
JVM is still compiling its own hot code for the first few dozen reads (in one
5 M-row session the JIT threads used 1.9 s of CPU per read for the first five
reads, 0.13 s by the fortieth): a young session pays that, a long-lived one does not.

The load average (1 min) is printed with every run: the machine may be shared.

Target (issue 24): ``IcebergSource`` >= 1 x pyiceberg's ``to_arrow()``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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

QUERIES = {
    "all": ("count(*) as n", "sum(id) as s", "sum(value) as v", "sum(length(key)) as k"),
    "id": ("count(*) as n", "sum(id) as s"),
}

Result = tuple[float, ...]


def arrow_query(table: pa.Table, query: str) -> Result:
    """The query's aggregates computed by pyarrow, in the order of `QUERIES`."""
    found: list[float] = [table.num_rows, pc.sum(table["id"]).as_py()]
    if query == "all":
        found.append(pc.sum(table["value"]).as_py())
        found.append(pc.sum(pc.utf8_length(table["key"])).as_py())
    return tuple(found)


def spark_query(df: Any, query: str) -> Result:
    (row,) = df.selectExpr(*QUERIES[query]).collect()
    return tuple(row)


def same(a: Result, b: Result) -> bool:
    """Equal, but for the order of a double sum's additions."""
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b, strict=True)
    )


def timed(read: Callable[[], Result]) -> tuple[float, Result]:
    start = time.perf_counter()
    result = read()
    return time.perf_counter() - start, result


def cpu_seconds(jvm: int | None) -> float:
    """CPU time used so far by this process (all its threads) and the driver's JVM."""
    used = time.process_time()
    if jvm is not None:
        fields = Path(f"/proc/{jvm}/stat").read_text().rsplit(")", 1)[1].split()
        used += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


class Phases:
    """Per Spark read, where the time went, from Spark's event log (``--phases``)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.marks: list[tuple[str, float, float]] = []

    def mark(self, name: str, start: float, end: float) -> None:
        self.marks.append((name, start * 1000, end * 1000))

    def report(self) -> None:  # noqa: PLR0912  # one event kind per branch
        events = []
        for path in Path(self.directory).rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                with path.open() as lines:
                    events.extend(json.loads(line) for line in lines)
        jobs: dict[int, dict[str, Any]] = {}
        stages: dict[int, dict[str, Any]] = {}
        tasks: dict[int, list[dict[str, Any]]] = {}
        queries: list[tuple[float, float]] = []
        starts: dict[int, float] = {}
        for event in events:
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                jobs[event["Job ID"]] = {
                    "start": event["Submission Time"],
                    "stages": event["Stage IDs"],
                }
            elif kind == "SparkListenerJobEnd":
                jobs[event["Job ID"]]["end"] = event["Completion Time"]
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                stages[info["Stage ID"]] = {
                    "start": info["Submission Time"],
                    "end": info["Completion Time"],
                }
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                tasks.setdefault(event["Stage ID"], []).append(
                    {
                        "launch": event["Task Info"]["Launch Time"],
                        "run": metrics.get("Executor Run Time", 0),
                        "cpu": (metrics.get("Executor CPU Time") or 0) / 1e6,
                        "deserialize": metrics.get("Executor Deserialize Time", 0),
                    }
                )
            elif kind.endswith("SQLExecutionStart"):
                starts[event["executionId"]] = event["time"]
            elif kind.endswith("SQLExecutionEnd") and event["executionId"] in starts:
                queries.append((starts[event["executionId"]], event["time"]))
        table: dict[str, dict[str, list[float]]] = {}
        for name, start, end in self.marks:
            mine = sorted(
                (j for j in jobs.values() if start <= j["start"] <= end and "end" in j),
                key=lambda j: j["start"],
            )
            query = [q for q in queries if start <= q[0] <= end]
            mine = [j for j in mine if query and j["start"] >= query[0][0]]  # not schema inference
            if not mine or not query:
                continue
            scan_ids = [s for j in mine for s in j["stages"] if s in stages and s in tasks]
            scan = max(scan_ids, key=lambda s: sum(t["run"] for t in tasks[s]))
            first_end = max(j["end"] for j in mine if scan in j["stages"])
            row = table.setdefault(name, {})
            for key, value in (
                ("wall", end - start),
                ("driver before query", query[0][0] - start),
                ("Spark planning to 1st job", mine[0]["start"] - query[0][0]),
                ("scan stage", stages[scan]["end"] - stages[scan]["start"]),
                ("scan tasks", len(tasks[scan])),
                (
                    "task launch delay",
                    min(t["launch"] for t in tasks[scan]) - stages[scan]["start"],
                ),
                ("scan task CPU (sum)", sum(t["cpu"] for t in tasks[scan])),
                ("slowest scan task run", max(t["run"] for t in tasks[scan])),
                ("later jobs", max(j["end"] for j in mine) - first_end),
                ("jobs", len(mine)),
                ("back in Python", end - max(j["end"] for j in mine)),
            ):
                row.setdefault(key, []).append(value)
        if not table:
            return
        columns = list(next(iter(table.values())))
        print(
            "| path | "
            + " | ".join(f"{c} (ms)" if c not in ("scan tasks", "jobs") else c for c in columns)
            + " |"
        )
        print("|---|" + "---:|" * len(columns))
        for name, row in table.items():
            print(
                f"| {name} | "
                + " | ".join(f"{statistics.median(row[c]):.0f}" for c in columns)
                + " |"
            )
        print()


def main() -> None:  # noqa: PLR0912, PLR0915  # one benchmark, start to end
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed reads of each path first (the JVM's JIT keeps compiling for ~40 reads)",
    )
    parser.add_argument("--query", nargs="+", choices=sorted(QUERIES), default=["all"])
    parser.add_argument(
        "--no-python-path",
        action="store_true",
        help="leave out native_read=False (slow on large tables; not the default path)",
    )
    parser.add_argument("--phases", action="store_true", help="Spark's event log, per phase")
    parser.add_argument(
        "--conf",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="Spark settings, e.g. spark.driver.extraJavaOptions=-XX:+UseParallelGC",
    )
    args = parser.parse_args()
    conf = dict(setting.split("=", 1) for setting in args.conf)
    phases = None
    if args.phases:
        events = tempfile.mkdtemp(prefix="sinkv2-iceberg-source-bench-events-")
        phases = Phases(events)
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    spark = session("iceberg-source-bench", **conf)
    jvm: int | None = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    if not Path(f"/proc/{jvm}/stat").exists():
        jvm = None  # not Linux: no CPU column
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
            data_files = [
                task.file.file_path.removeprefix("file://")
                for task in catalog.load_table("bench.rows").scan().plan_files()
            ]
            paths: dict[str, Callable[[], Result]] = {}
            for query in args.query:

                def pyiceberg_read(query: str = query, catalog: Any = catalog) -> Result:
                    arrow = catalog.load_table("bench.rows").scan().to_arrow()
                    return arrow_query(arrow, query)

                def sinkv2_read(query: str = query, source: Any = source) -> Result:
                    df = from_source(spark, source, parallelism=2, native_read=False)
                    return spark_query(df, query)

                def native_read(query: str = query, source: Any = source) -> Result:
                    df = from_source(spark, source, parallelism=2, native_read=True)
                    return spark_query(df, query)

                def spark_parquet_read(
                    query: str = query, data_files: list[str] = data_files
                ) -> Result:
                    return spark_query(spark.read.parquet(*data_files), query)

                paths[f"{query}: pyiceberg scan().to_arrow()"] = pyiceberg_read
                paths[f"{query}: spark.read.parquet(data files)"] = spark_parquet_read
                if not args.no_python_path:
                    paths[f"{query}: from_source(IcebergSource) Python path"] = sinkv2_read
                paths[f"{query}: from_source(IcebergSource) native"] = native_read
            results: dict[str, Result] = {}
            for name, read in [(n, r) for _ in range(args.warmup) for n, r in paths.items()]:
                _, results[name] = timed(read)  # warm-up, and the results checked
                query = name.split(":")[0]
                first = next(v for k, v in results.items() if k.startswith(f"{query}:"))
                assert results[name][0] == rows, (name, results[name], rows)
                assert same(results[name], first), (name, results[name], first)
            runs: dict[str, list[float]] = {name: [] for name in paths}
            cpu: dict[str, list[float]] = {name: [] for name in paths}
            for round_index in range(args.rounds):
                for name, read in paths.items():
                    started, used = time.time(), cpu_seconds(jvm)
                    seconds, _ = timed(read)
                    cpu[name].append(cpu_seconds(jvm) - used)
                    if phases is not None and "pyiceberg" not in name:
                        phases.mark(f"{rows:,} {name}", started, time.time())
                    runs[name].append(seconds)
                    load = os.getloadavg()[0]
                    print(
                        f"# {rows:,} round {round_index}: {name} {seconds:.2f} s "
                        f"(load average {load:.2f})",
                        flush=True,
                    )
            if conf:
                print(f"\nSpark settings: {conf}")
            print(
                "\n| rows | query: path | median s | runs (s) | rows/s | x pyiceberg "
                "| CPU s (driver + JVM) |"
            )
            print("|---:|---|---:|---|---:|---:|---:|")
            for name, seconds in runs.items():
                query = name.split(":")[0]
                baseline = statistics.median(runs[f"{query}: pyiceberg scan().to_arrow()"])
                median = statistics.median(seconds)
                print(
                    f"| {rows:,} | {name} | {median:.2f} | "
                    f"{', '.join(f'{s:.2f}' for s in seconds)} | {rows / median:,.0f} | "
                    f"{baseline / median:.2f} | {statistics.median(cpu[name]):.2f} |"
                )
            print()
    spark.stop()
    if phases is not None:
        phases.report()
        shutil.rmtree(phases.directory, ignore_errors=True)


if __name__ == "__main__":
    main()
