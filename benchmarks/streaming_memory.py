"""Driver memory and commit state store size over many micro-batches of a FileSink stream.

One command, one child process (local[2]); progress goes to stderr as it is measured::

    .venv/bin/python benchmarks/streaming_memory.py                    # 1,000 micro-batches
    .venv/bin/python benchmarks/streaming_memory.py --batches 300 --every 50
    .venv/bin/python benchmarks/streaming_memory.py --decoupled

Spark's rate source (``--rows-per-second``, 2 partitions) feeds
``SinkTopologyTranslator().apply(stream, FileSink(out, "parquet", native_write=False),
...)`` (the sink's own writers, as measured before the native path became FileSink's
default) with Spark's default trigger (micro-batches back to back) until ``--batches``
micro-batches are committed. Every ``--every`` micro-batches the `SinkResult` listener samples:

- the Python driver's RSS (``VmRSS`` in ``/proc/self/status``) and its Python object
  count (``gc.get_objects()``);
- the JVM driver's RSS (for context: it is Spark's heap, sized by Spark);
- the commit state store: its file size (``commit_state.sqlite`` plus its WAL) and its
  rows (epochs) for the sink id. The runner prunes committed epochs to the newest 100
  every 10 epochs (so a sample every 100 lands just after a prune); the largest row
  count and size are tracked over every micro-batch and must stay at or below 110 rows.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import session  # the benchmarks folder is not a package

SINK_ID = "memory-bench"


def _rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _store(path: Path) -> tuple[int, int, int, int]:
    """Bytes on disk (database + WAL), rows, lowest and highest epoch of the sink id."""
    size = sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as connection:
        rows, low, high = connection.execute(
            "SELECT count(*), min(epoch), max(epoch) FROM pending_sink_state WHERE sink_id = ?",
            (SINK_ID,),
        ).fetchone()
    connection.close()
    return size, rows, low or 0, high or 0


def _entries(folder: Path) -> int:
    return len(list(folder.iterdir())) if folder.exists() else 0


def _files(folder: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(folder))


def child(batches: int, every: int, rows_per_second: int, decoupled: bool) -> None:
    from reference_sinks.files import FileSink
    from sinkv2_spark import SinkTopologyTranslator

    spark = session("sinkv2-streaming-memory")
    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    with tempfile.TemporaryDirectory(prefix="sinkv2-stream-memory-") as scratch:
        checkpoint = Path(scratch) / "checkpoint"
        out = Path(scratch) / "out"
        store = checkpoint / "sinkv2" / "commit_state.sqlite"
        stream = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", rows_per_second)
            .option("numPartitions", 2)
            .load()
        )
        done = threading.Event()
        started = time.perf_counter()
        counted = {"batches": 0, "rows": 0, "most_store_rows": 0, "most_store_bytes": 0}

        def sample(result: Any) -> None:
            counted["batches"] += 1
            counted["rows"] += result.records_written
            n = counted["batches"]
            size, rows, low, high = _store(store)  # every micro-batch: prunes come every 10
            counted["most_store_rows"] = max(counted["most_store_rows"], rows)
            counted["most_store_bytes"] = max(counted["most_store_bytes"], size)
            if n == 1 or n % every == 0:
                print(
                    json.dumps(
                        {
                            "batches": n,
                            "checkpoint_id": result.checkpoint_id,
                            "seconds": time.perf_counter() - started,
                            "rows_written": counted["rows"],
                            "python_rss_mb": _rss_kb() / 1024,
                            "python_objects": len(gc.get_objects()),
                            "jvm_rss_mb": _rss_kb(jvm_pid) / 1024,
                            "store_bytes": size,
                            "store_rows": rows,
                            "store_epochs": [low, high],
                            "most_store_rows": counted["most_store_rows"],
                            "most_store_bytes": counted["most_store_bytes"],
                            "staging_entries": _entries(out / "_staging"),
                            "spark_checkpoint_files": _files(checkpoint) - _files(store.parent),
                        }
                    ),
                    flush=True,
                )
            if n >= batches:
                done.set()

        handle = SinkTopologyTranslator().apply(
            stream,
            FileSink(out, "parquet", native_write=False),
            sink_id=SINK_ID,
            checkpoint_location=str(checkpoint),
            decoupled_commit=decoupled,
        )
        handle.add_result_listener(sample)
        while not done.wait(5):
            if not handle.isActive:
                raise RuntimeError(f"the query ended: {handle.exception()!r}")
        handle.stop()
    spark.stop()


def report(samples: list[dict[str, Any]]) -> str:
    lines = [
        "| micro-batches | elapsed s | rows written | Python RSS MB | Python objects | "
        "JVM RSS MB | store KB | store rows (epochs) | _staging entries | Spark checkpoint files |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for s in samples:
        low, high = s["store_epochs"]
        lines.append(
            f"| {s['batches']:,} | {s['seconds']:.0f} | {s['rows_written']:,} | "
            f"{s['python_rss_mb']:.1f} | {s['python_objects']:,} | {s['jvm_rss_mb']:.0f} | "
            f"{s['store_bytes'] / 1024:.0f} | {s['store_rows']} ({low}-{high}) | "
            f"{s['staging_entries']} | {s['spark_checkpoint_files']} |"
        )
    later = [s for s in samples if s["batches"] >= samples[-1]["batches"] // 10]
    if len(later) >= 2:
        first, last = later[0], later[-1]
        growth = last["python_rss_mb"] - first["python_rss_mb"]
        span = last["batches"] - first["batches"]
        lines.append("")
        lines.append(
            f"Python driver RSS from micro-batch {first['batches']:,} to {last['batches']:,}: "
            f"{growth:+.1f} MB ({growth * 1024 / span:+.1f} KB per micro-batch); "
            f"store rows at most {last['most_store_rows']} over every micro-batch "
            f"(bounded at 110: {'yes' if last['most_store_rows'] <= 110 else 'NO'}), store "
            f"size at most {last['most_store_bytes'] / 1024:.0f} KB"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100, help="sample every N micro-batches")
    parser.add_argument("--rows-per-second", type=int, default=1000)
    parser.add_argument("--decoupled", action="store_true", help="decoupled_commit=True")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.batches, args.every, args.rows_per_second, args.decoupled)
        return
    command = [
        sys.executable,
        __file__,
        "--child",
        "--batches",
        str(args.batches),
        "--every",
        str(args.every),
        "--rows-per-second",
        str(args.rows_per_second),
    ]
    if args.decoupled:
        command.append("--decoupled")
    samples = []
    with (
        tempfile.TemporaryFile("w+") as errors,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as running,
    ):
        assert running.stdout is not None
        for line in running.stdout:
            if line.startswith("{"):
                samples.append(json.loads(line))
                print(line.rstrip(), file=sys.stderr, flush=True)
        running.wait()
        if running.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"benchmark child failed:\n{errors.read()[-4000:]}")
    print(report(samples))


if __name__ == "__main__":
    main()
