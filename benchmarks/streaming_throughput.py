"""Sustained rows/s of FileSink on a stream against Spark's own streaming Parquet sink.

One command, one child process (local[2])::

    .venv/bin/python benchmarks/streaming_throughput.py                  # 5M rows, 3 rounds
    .venv/bin/python benchmarks/streaming_throughput.py --rows 10000000 --files 100 --repeat 5

The input is ``--files`` pre-written Parquet files holding ``--rows`` rows of the
benchmarks' data (``id``, ``key``, ``value``). Every path writes all of it to Parquet:

- ``batch native``: ``spark.read.parquet(in).write.parquet(out)``;
- ``batch FileSink``: ``SinkTopologyTranslator().apply(spark.read.parquet(in),
  FileSink(out, native_write=False))`` (its own writers, as measured before the native
  path became FileSink's default);
- ``stream native``: ``readStream`` (``maxFilesPerTrigger``, ``availableNow``)
  ``.writeStream.format("parquet")``: Spark's file sink with its ``_spark_metadata`` log;
- ``stream FileSink`` / ``stream FileSink decoupled``: the same stream through
  ``apply(stream, FileSink(out), checkpoint_location=..., trigger={"availableNow": True})``,
  with ``decoupled_commit`` False / True.

Rates: ``wall`` is rows / (start to end of the query or job: a stream's start-up and
its last commit included); ``steady`` is the stream's cadence once running: rows of
micro-batches 1 .. n-2 / (start of micro-batch n-1 - start of micro-batch 1), from
Spark's progress reports. Paths run in interleaved rounds after a warm-up; medians.
Target: the streaming ratio (FileSink / native) >= 0.9 x the batch ratio.
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
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import session  # the benchmarks folder is not a package

SCHEMA_DDL = "id long, key string, value double"


def write_input(folder: str, files: int, rows: int) -> None:
    """``rows`` rows of the benchmarks' data in ``files`` Parquet files, ids consecutive."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = pa.array([f"key-{k}" for k in range(1000)])
    os.makedirs(folder, exist_ok=True)
    per_file = rows // files
    for i in range(files):
        end = rows if i == files - 1 else (i + 1) * per_file
        ids = np.arange(i * per_file, end, dtype=np.int64)
        table = pa.table({"id": ids, "key": keys.take(pa.array(ids % 1000)), "value": ids / 3})
        pq.write_table(table, os.path.join(folder, f"in-{i:06d}.parquet"))


# Each path returns Spark's progress reports (streams) or None (batch).


def batch_native(spark: Any, source: str, out: str, checkpoint: str, per_trigger: int) -> Any:
    spark.read.parquet(source).write.mode("overwrite").parquet(out)


def batch_file_sink(spark: Any, source: str, out: str, checkpoint: str, per_trigger: int) -> Any:
    from reference_sinks.files import FileSink
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    store = SqliteCommitStateStore(Path(checkpoint) / "state.sqlite")
    SinkTopologyTranslator(state_store=store).apply(
        spark.read.parquet(source), FileSink(out, "parquet", native_write=False), sink_id="bench"
    )


def _stream(spark: Any, source: str, per_trigger: int) -> Any:
    return (
        spark.readStream.schema(SCHEMA_DDL)
        .option("maxFilesPerTrigger", per_trigger)
        .parquet(source)
    )


def stream_native(spark: Any, source: str, out: str, checkpoint: str, per_trigger: int) -> Any:
    query = (
        _stream(spark, source, per_trigger)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query.recentProgress


def _stream_file_sink(decoupled: bool) -> Callable[..., Any]:
    def run(spark: Any, source: str, out: str, checkpoint: str, per_trigger: int) -> Any:
        from reference_sinks.files import FileSink
        from sinkv2_spark import SinkTopologyTranslator

        handle = SinkTopologyTranslator().apply(
            _stream(spark, source, per_trigger),
            FileSink(out, "parquet", native_write=False),
            sink_id="bench-" + os.path.basename(out),
            checkpoint_location=checkpoint,
            trigger={"availableNow": True},
            decoupled_commit=decoupled,
        )
        handle.awaitTermination()
        return handle.recentProgress

    return run


PATHS: dict[str, Callable[..., Any]] = {
    "batch native": batch_native,
    "batch FileSink": batch_file_sink,
    "stream native": stream_native,
    "stream FileSink": _stream_file_sink(decoupled=False),
    "stream FileSink decoupled": _stream_file_sink(decoupled=True),
}


def _started(progress: Any) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _steady_rate(progress: list[Any]) -> float | None:
    batches = [p for p in progress if p["numInputRows"] > 0]
    if len(batches) < 4:
        return None
    middle = batches[1:-1]
    rows = sum(p["numInputRows"] for p in middle[:-1])
    return rows / (_started(middle[-1]) - _started(middle[0]))


def _visible_rows(out: str) -> int:
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(f).metadata.num_rows
        for f in Path(out).rglob("part-*.parquet")
        if not any(part.startswith("_") for part in f.relative_to(out).parts)
    )


def child(rows: int, files: int, per_trigger: int, repeat: int) -> None:
    spark = session("sinkv2-streaming-throughput")
    with tempfile.TemporaryDirectory(prefix="sinkv2-stream-throughput-") as scratch:
        source = os.path.join(scratch, "in")
        write_input(source, files, rows)
        warm = os.path.join(scratch, "warm-in")
        write_input(warm, 2 * per_trigger, 100_000)
        for name, path in PATHS.items():  # warm up the JVM and the Python workers
            slug = "warm-" + name.replace(" ", "_")
            path(
                spark,
                warm,
                os.path.join(scratch, slug),
                os.path.join(scratch, "c" + slug),
                per_trigger,
            )
        for round_ in range(repeat):
            for name, path in PATHS.items():
                slug = f"{round_}-" + name.replace(" ", "_")
                out = os.path.join(scratch, slug)
                checkpoint = os.path.join(scratch, "ckpt-" + slug)
                start = time.perf_counter()
                progress = path(spark, source, out, checkpoint, per_trigger)
                seconds = time.perf_counter() - start
                written = _visible_rows(out)
                if written != rows:
                    raise RuntimeError(f"{name} wrote {written} visible rows, expected {rows}")
                print(
                    json.dumps(
                        {
                            "rows": rows,
                            "path": name,
                            "seconds": seconds,
                            "steady": _steady_rate(progress) if progress else None,
                            "batches": len([p for p in progress or [] if p["numInputRows"]]),
                        }
                    ),
                    flush=True,
                )
                shutil.rmtree(out)
                shutil.rmtree(checkpoint, ignore_errors=True)
    spark.stop()


def report(results: list[dict[str, Any]]) -> str:
    rows = results[0]["rows"]
    runs: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    batches: dict[str, int] = {}
    for r in results:
        runs.setdefault(r["path"], []).append(r["seconds"])
        if r["steady"] is not None:
            steady.setdefault(r["path"], []).append(r["steady"])
        batches[r["path"]] = r["batches"]
    wall = {p: rows / statistics.median(s) for p, s in runs.items()}
    cadence = {p: statistics.median(v) for p, v in steady.items()}
    lines = [
        "| rows | path | micro-batches | median s | runs (s) | wall rows/s | steady rows/s |",
        "|---:|---|---:|---:|---|---:|---:|",
    ]
    for path, seconds in runs.items():
        each = ", ".join(f"{s:.2f}" for s in seconds)
        rate = f"{cadence[path]:,.0f}" if path in cadence else "-"
        lines.append(
            f"| {rows:,} | {path} | {batches[path] or '-'} | {statistics.median(seconds):.2f} | "
            f"{each} | {wall[path]:,.0f} | {rate} |"
        )
    batch_ratio = wall["batch FileSink"] / wall["batch native"]
    lines += ["", "| ratio | wall | steady | target |", "|---|---:|---:|---|"]
    lines.append(f"| batch FileSink / batch native | {batch_ratio:.2f} | - | - |")
    for ours in ("stream FileSink", "stream FileSink decoupled"):
        ratio = wall[ours] / wall["stream native"]
        steady_ratio = cadence[ours] / cadence["stream native"]
        lines.append(
            f"| {ours} / stream native | {ratio:.2f} | {steady_ratio:.2f} | "
            f">= 0.9 x {batch_ratio:.2f} = {0.9 * batch_ratio:.2f}: "
            f"{'met' if ratio >= 0.9 * batch_ratio else 'NOT met'} (wall) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--per-trigger", type=int, default=5, help="maxFilesPerTrigger")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rows, args.files, args.per_trigger, args.repeat)
        return
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--rows",
            str(args.rows),
            "--files",
            str(args.files),
            "--per-trigger",
            str(args.per_trigger),
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
