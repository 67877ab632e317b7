"""Write throughput of sinkv2's translator against Spark's own writer paths.

One command, one process tree, one run::

    .venv/bin/python benchmarks/translator_bench.py                 # N = 5M and 20M
    .venv/bin/python benchmarks/translator_bench.py --rows 1000000  # quicker
    .venv/bin/python benchmarks/translator_bench.py --write-results # also rewrite RESULTS.md

For each N a child process (local[2]) writes the same generated data
(``spark.range(N)`` + ``key`` string + ``value`` double) to Parquet by every path:

- ``native``: Spark's ``df.write.parquet``;
- ``mapInArrow pass-through``: raw ``mapInArrow``, batches straight into pyarrow's ParquetWriter;
- ``mapInArrow per-row``: raw ``mapInArrow``, elements built with ``to_pylist``, buffered
  and written as the per-element sink does;
- ``DataSourceArrowWriter`` / ``DataSourceWriter``: PySpark's Python Data Source API;
- ``sinkv2 Arrow path`` / ``sinkv2 per-element path``: the exactly-once example
  Parquet sink through ``SinkTopologyTranslator.apply``.

Separate children measure the driver's peak memory for the sinkv2 Arrow path at
each N (Python driver ``ru_maxrss`` and the JVM driver's ``VmHWM``), and the commit
stage's overhead per epoch over many tiny epochs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
from common import ROOT, data, session  # the benchmarks folder is not a package

ROWS_PER_BATCH = 8192


# --- the baselines ---------------------------------------------------------------------------


def _task_file(out: str) -> str:
    from pyspark import TaskContext

    task = TaskContext.get()
    return os.path.join(out, f"part-{task.partitionId():05d}-{task.taskAttemptId()}.parquet")


def native(spark: Any, rows: int, out: str) -> None:
    data(spark, rows).write.mode("overwrite").parquet(out)


def map_in_arrow_pass_through(spark: Any, rows: int, out: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = None
        count = 0
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(_task_file(out), batch.schema)
            writer.write_batch(batch)
            count += batch.num_rows
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pydict({"n": [count]}, schema=pa.schema([("n", pa.int64())]))

    os.makedirs(out, exist_ok=True)
    data(spark, rows).mapInArrow(write, "n long").collect()


def map_in_arrow_per_row(spark: Any, rows: int, out: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = None
        schema = None
        buffer: list[dict[str, Any]] = []
        count = 0

        def drain() -> None:
            nonlocal writer, schema, buffer
            if buffer:
                batch = pa.RecordBatch.from_pylist(buffer, schema=schema)
                if writer is None:
                    schema = batch.schema
                    writer = pq.ParquetWriter(_task_file(out), schema)
                writer.write_batch(batch)
                buffer = []

        def write_one(row: dict[str, Any]) -> None:
            buffer.append(row)
            if len(buffer) >= ROWS_PER_BATCH:
                drain()

        for batch in batches:
            for row in batch.to_pylist():
                write_one(row)
            count += batch.num_rows
        drain()
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pydict({"n": [count]}, schema=pa.schema([("n", pa.int64())]))

    os.makedirs(out, exist_ok=True)
    data(spark, rows).mapInArrow(write, "n long").collect()


def _register_data_sources(spark: Any) -> None:
    from dataclasses import dataclass

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceWriter,
        WriterCommitMessage,
    )

    @dataclass
    class Written(WriterCommitMessage):
        rows: int

    class ArrowWriter(DataSourceArrowWriter):
        def __init__(self, out: str) -> None:
            self.out = out

        def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
            writer = None
            count = 0
            for batch in iterator:
                if writer is None:
                    writer = pq.ParquetWriter(_task_file(self.out), batch.schema)
                writer.write_batch(batch)
                count += batch.num_rows
            if writer is not None:
                writer.close()
            return Written(count)

    class RowWriter(DataSourceWriter):
        def __init__(self, out: str) -> None:
            self.out = out

        def write(self, iterator: Iterator[Any]) -> Written:
            writer = None
            schema = None
            buffer: list[dict[str, Any]] = []
            count = 0
            for row in iterator:
                buffer.append(row.asDict())
                if len(buffer) >= ROWS_PER_BATCH:
                    batch = pa.RecordBatch.from_pylist(buffer, schema=schema)
                    if writer is None:
                        schema = batch.schema
                        writer = pq.ParquetWriter(_task_file(self.out), schema)
                    writer.write_batch(batch)
                    count += len(buffer)
                    buffer = []
            if buffer:
                batch = pa.RecordBatch.from_pylist(buffer, schema=schema)
                if writer is None:
                    writer = pq.ParquetWriter(_task_file(self.out), batch.schema)
                writer.write_batch(batch)
                count += len(buffer)
            if writer is not None:
                writer.close()
            return Written(count)

    class ArrowSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_arrow"

        def writer(self, schema: Any, overwrite: bool) -> ArrowWriter:
            return ArrowWriter(self.options["path"])

    class RowSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_rows"

        def writer(self, schema: Any, overwrite: bool) -> RowWriter:
            return RowWriter(self.options["path"])

    spark.dataSource.register(ArrowSource)
    spark.dataSource.register(RowSource)


def data_source_arrow_writer(spark: Any, rows: int, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    data(spark, rows).write.format("bench_arrow").mode("append").option("path", out).save()


def data_source_row_writer(spark: Any, rows: int, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    data(spark, rows).write.format("bench_rows").mode("append").option("path", out).save()


def _sinkv2(arrow: bool) -> Callable[[Any, int, str], None]:
    def run(spark: Any, rows: int, out: str) -> None:
        from examples.parquet_sink import ParquetSink
        from sinkv2.runtime import SqliteCommitStateStore
        from sinkv2_spark import SinkTopologyTranslator

        store = SqliteCommitStateStore(Path(out) / "_state.sqlite")
        SinkTopologyTranslator(state_store=store).apply(
            data(spark, rows), ParquetSink(out, arrow=arrow), sink_id="bench"
        )

    return run


PATHS: dict[str, Callable[[Any, int, str], None]] = {
    "native df.write.parquet": native,
    "mapInArrow pass-through": map_in_arrow_pass_through,
    "sinkv2 Arrow path": _sinkv2(arrow=True),
    "DataSourceArrowWriter": data_source_arrow_writer,
    "mapInArrow per-row (to_pylist)": map_in_arrow_per_row,
    "sinkv2 per-element path": _sinkv2(arrow=False),
    "DataSourceWriter (rows)": data_source_row_writer,
}


def child_throughput(rows: int, repeat: int) -> None:
    import pyarrow.parquet as pq

    spark = session("sinkv2-bench")
    _register_data_sources(spark)
    seconds: dict[str, list[float]] = {name: [] for name in PATHS}
    with tempfile.TemporaryDirectory(prefix="sinkv2-bench-") as scratch:
        for name, path in PATHS.items():  # warm up every path's JVM and Python workers
            path(spark, 50_000, os.path.join(scratch, "warm", name.replace(" ", "_")))
        for round_ in range(repeat):
            # Interleaved rounds: a slow minute on the machine hits every path alike.
            for name, path in PATHS.items():
                out = os.path.join(scratch, f"{round_}-" + name.replace(" ", "_").replace("/", "_"))
                start = time.perf_counter()
                path(spark, rows, out)
                seconds[name].append(time.perf_counter() - start)
                written = sum(
                    pq.ParquetFile(f).metadata.num_rows for f in Path(out).glob("part-*.parquet")
                )
                if written != rows:
                    raise RuntimeError(f"{name} wrote {written} rows, expected {rows}")
                shutil.rmtree(out)
        for name, runs in seconds.items():
            print(
                json.dumps(
                    {
                        "kind": "throughput",
                        "rows": rows,
                        "path": name,
                        "seconds": statistics.median(runs),
                        "runs": runs,
                    }
                )
            )
    spark.stop()


def child_memory(rows: int) -> None:
    spark = session("sinkv2-bench")
    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()  # the py4j gateway
    with tempfile.TemporaryDirectory(prefix="sinkv2-mem-") as scratch:
        _sinkv2(arrow=True)(spark, rows, scratch)
    python_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    jvm_peak_kb = 0
    for line in Path(f"/proc/{jvm_pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            jvm_peak_kb = int(line.split()[1])
    print(
        json.dumps(
            {
                "kind": "memory",
                "rows": rows,
                "python_peak_mb": python_peak_kb / 1024,
                "jvm_peak_mb": jvm_peak_kb / 1024,
            }
        )
    )
    spark.stop()


def child_commit_overhead(epochs: int = 40) -> None:
    from examples.parquet_sink import ParquetSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    spark = session("sinkv2-bench")
    with tempfile.TemporaryDirectory(prefix="sinkv2-commit-") as scratch:
        translator = SinkTopologyTranslator(
            state_store=SqliteCommitStateStore(Path(scratch) / "state.sqlite")
        )
        sink = ParquetSink(Path(scratch) / "out")
        df = data(spark, 1000).repartition(2)
        seconds, runs = [], []
        for _ in range(epochs):
            start = time.perf_counter()
            result = translator.apply(df, sink, sink_id="overhead")
            runs.append(time.perf_counter() - start)
            seconds.append(result.stage_seconds["commit"])
        seconds, runs = seconds[5:], runs[5:]  # the first epochs warm up the committer path
        # The coordinator's job bookkeeping alone: acquire, record the job, recover (nothing
        # to do), finish (clean up, forget the job), release - no Spark job at all.
        from sinkv2.runtime import CommitCoordinator
        from sinkv2_spark._engine.committable_streams import SparkCommittableStreams

        bookkeeping = []
        for _ in range(epochs):
            start = time.perf_counter()
            job = CommitCoordinator(
                sink,
                sink_id="overhead",
                store=translator.state_store,
                streams=SparkCommittableStreams(spark, "overhead"),
            )
            job.open()
            job.finish()
            bookkeeping.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "kind": "commit",
                "epochs": len(seconds),
                "mean_ms": statistics.mean(seconds) * 1000,
                "p95_ms": sorted(seconds)[int(len(seconds) * 0.95) - 1] * 1000,
                "run_mean_ms": statistics.mean(runs) * 1000,
                "job_bookkeeping_mean_ms": statistics.mean(bookkeeping) * 1000,
            }
        )
    )
    spark.stop()


def _run_child(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"benchmark child {args} failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | path | median s | runs (s) | rows/s | x native |",
        "|---:|---|---:|---|---:|---:|",
    ]
    runs = {(r["rows"], r["path"]): r["runs"] for r in results if r["kind"] == "throughput"}
    by_rows: dict[int, dict[str, float]] = {}
    for r in results:
        if r["kind"] == "throughput":
            by_rows.setdefault(r["rows"], {})[r["path"]] = r["seconds"]
    for rows, paths in by_rows.items():
        native_rate = rows / paths["native df.write.parquet"]
        for path, seconds in paths.items():
            rate = rows / seconds
            each = ", ".join(f"{run:.2f}" for run in runs[rows, path])
            lines.append(
                f"| {rows:,} | {path} | {seconds:.2f} | {each} | {rate:,.0f} | "
                f"{rate / native_rate:.2f} |"
            )
    lines.append("")
    lines.append("| rows | target | measured | met |")
    lines.append("|---:|---|---:|---|")
    for rows, paths in by_rows.items():
        checks = [
            (
                "sinkv2 Arrow path >= 0.95 x mapInArrow pass-through",
                "sinkv2 Arrow path",
                "mapInArrow pass-through",
                0.95,
            ),
            (
                "sinkv2 per-element >= 0.9 x mapInArrow per-row",
                "sinkv2 per-element path",
                "mapInArrow per-row (to_pylist)",
                0.9,
            ),
            (
                "sinkv2 per-element >= 2.5 x DataSourceWriter",
                "sinkv2 per-element path",
                "DataSourceWriter (rows)",
                2.5,
            ),
        ]
        for label, ours, theirs, target in checks:
            ratio = paths[theirs] / paths[ours]
            lines.append(
                f"| {rows:,} | {label} | {ratio:.2f} x | {'yes' if ratio >= target else 'NO'} |"
            )
    memory = {r["rows"]: r for r in results if r["kind"] == "memory"}
    if len(memory) >= 2:
        small, large = min(memory), max(memory)
        growth = memory[large]["python_peak_mb"] / memory[small]["python_peak_mb"] - 1
        lines.append(
            f"| {small:,} -> {large:,} | Python driver peak RSS within 10 % | "
            f"{memory[small]['python_peak_mb']:.0f} -> {memory[large]['python_peak_mb']:.0f} MB "
            f"({growth:+.1%}); JVM driver {memory[small]['jvm_peak_mb']:.0f} -> "
            f"{memory[large]['jvm_peak_mb']:.0f} MB | {'yes' if abs(growth) <= 0.10 else 'NO'} |"
        )
    for r in results:
        if r["kind"] == "commit":
            lines.append(
                f"| {r['epochs']} epochs | commit stage < 20 ms per epoch | "
                f"mean {r['mean_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms | "
                f"{'yes' if r['mean_ms'] < 20 else 'NO'} |"
            )
            lines.append(
                f"| {r['epochs']} runs | job bookkeeping (record, recover, clean up, forget) | "
                f"mean {r['job_bookkeeping_mean_ms']:.1f} ms of {r['run_mean_ms']:.0f} ms per "
                "tiny run | - |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000, 20_000_000])
    parser.add_argument("--repeat", type=int, default=3, help="rounds per path; the median counts")
    parser.add_argument(
        "--write-results", action="store_true", help="rewrite benchmarks/RESULTS.md"
    )
    parser.add_argument(
        "--child", choices=["throughput", "memory", "commit"], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child == "throughput":
        child_throughput(args.rows[0], args.repeat)
        return
    if args.child == "memory":
        child_memory(args.rows[0])
        return
    if args.child == "commit":
        child_commit_overhead()
        return
    results: list[dict[str, Any]] = []
    for rows in args.rows:
        print(f"throughput at {rows:,} rows ...", file=sys.stderr, flush=True)
        results += _run_child(
            "--child", "throughput", "--rows", str(rows), "--repeat", str(args.repeat)
        )
    for rows in args.rows:
        print(f"driver memory at {rows:,} rows ...", file=sys.stderr, flush=True)
        results += _run_child("--child", "memory", "--rows", str(rows))
    print("commit stage overhead ...", file=sys.stderr, flush=True)
    results += _run_child("--child", "commit")
    table = report(results)
    print(table)
    if args.write_results:
        (ROOT / "benchmarks" / "RESULTS.md").write_text(
            _results_page(table, args.rows, args.repeat)
        )


def _results_page(table: str, rows: list[int], repeat: int) -> str:
    machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
    import pyspark

    return (
        "# Benchmark results\n\n"
        f"`benchmarks/translator_bench.py --rows {' '.join(map(str, rows))} --repeat {repeat}`, "
        "local[2], "
        f"{machine}, pyspark {pyspark.__version__}; the median of interleaved rounds.\n\n"
        "Every path writes the same generated data to Parquet; `x native` is throughput "
        "relative to `df.write.parquet`. See the module docstring for what each path does.\n\n"
        f"{table}\n"
    )


if __name__ == "__main__":
    main()
