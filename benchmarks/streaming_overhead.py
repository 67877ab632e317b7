"""Per-micro-batch overhead of sinkv2's streaming path (the coordinator) on small micro-batches.

One command, one child process (local[2])::

    .venv/bin/python benchmarks/streaming_overhead.py      # 1k rows, 50 batches, 3 rounds
    .venv/bin/python benchmarks/streaming_overhead.py --rows 1000 --batches 50 --repeat 5

The input is ``warmup + batches`` pre-written Parquet files of ``--rows`` rows each (the
benchmarks' data: ``id``, ``key``, ``value``), read as a file stream with
``maxFilesPerTrigger=1`` and ``availableNow``: one file per micro-batch, back to back.
Every path reads the same files:

- ``foreachBatch df.write.parquet``: a bare ``foreachBatch`` writing each micro-batch
  with Spark's own Parquet writer - no sinkv2 at all;
- ``FileSink``: ``SinkTopologyTranslator().apply(stream, FileSink(out, "parquet",
  native_write=False), ...)`` (its own writers, as measured before the native default):
  the same Parquet, staged and committed by rename, each micro-batch recorded in the
  commit state store;
- ``FileSink decoupled``: the same, ``decoupled_commit=True`` (micro-batch N commits
  on a driver thread while N + 1 writes);
- ``foreachBatch mapInArrow count``: a bare ``foreachBatch`` running one
  ``mapInArrow`` that counts rows (the writer stage's Spark work and nothing else);
- ``NullSink``: ``apply()`` with a sink whose writer counts rows and whose committer
  does nothing: what is left is the coordinator's bookkeeping per micro-batch.

Per micro-batch (Spark's progress reports, the first ``warmup`` batches of each query
dropped): ``addBatch`` (the time in the ``foreachBatch`` function), ``trigger`` (the
whole micro-batch: offsets, write-ahead log, ``addBatch``, commit log), the interval
between micro-batch starts, and ``to visible``: from the micro-batch's start to the
moment its rows are visible (the end of the bare ``foreachBatch``; sinkv2's
``SinkResult`` listener, which runs once the commit is done). Paths run in interleaved
rounds; the median per micro-batch of each round, then the median of the rounds.
Overhead = sinkv2 path - its bare ``foreachBatch`` counterpart. Target: < 50 ms.
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
from collections.abc import Callable, Collection, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import session  # the benchmarks folder is not a package

SCHEMA_DDL = "id long, key string, value double"


def write_input(folder: str, files: int, rows: int) -> None:
    """``files`` Parquet files of ``rows`` rows of the benchmarks' data, ids consecutive."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = pa.array([f"key-{k}" for k in range(1000)])
    os.makedirs(folder, exist_ok=True)
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        table = pa.table({"id": ids, "key": keys.take(pa.array(ids % 1000)), "value": ids / 3})
        pq.write_table(table, os.path.join(folder, f"in-{i:06d}.parquet"))


# --- the sinks and foreachBatch functions (defined here: pickled by value) -----------------


def null_sink() -> Any:
    """A sink whose writers count rows and whose committer does nothing."""
    import attrs
    import pyarrow as pa

    from sinkv2 import (
        AttrsMsgpackSerializer,
        Committer,
        CommittingSinkWriter,
        Sink,
        SinkWriter,
        SupportsCommitter,
        WriterInitContext,
    )

    @attrs.frozen
    class Counted:
        rows: int

    class CountingWriter(CommittingSinkWriter[dict[str, Any], Counted]):
        def __init__(self) -> None:
            self.rows = 0

        def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
            self.rows += 1

        def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
            self.rows += batch.num_rows

        def flush(self, end_of_input: bool) -> None:
            pass

        def prepare_commit(self) -> list[Counted]:
            counted, self.rows = Counted(self.rows), 0
            return [counted]

        def close(self) -> None:
            pass

    class NothingCommitter(Committer[Counted]):
        def commit(self, requests: Collection[Committer.CommitRequest[Counted]]) -> None:
            pass

        def close(self) -> None:
            pass

    class NullSink(Sink[dict[str, Any]], SupportsCommitter[Counted]):
        def create_writer(self, context: WriterInitContext) -> CountingWriter:
            return CountingWriter()

        def create_committer(self, context: object) -> NothingCommitter:
            return NothingCommitter()

        def get_committable_serializer(self) -> AttrsMsgpackSerializer[Counted]:
            return AttrsMsgpackSerializer(Counted)

    return NullSink()


def count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    count = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"n": [count]}, schema=pa.schema([("n", pa.int64())]))


# --- the paths: each runs one query over the input and returns when it ended --------------

Visible = dict[int, float]  # batch id -> wall time its rows became visible


def _bare(stream: Any, work: Callable[[Any, int], None], checkpoint: str, visible: Visible) -> Any:
    def each(batch_df: Any, batch_id: int) -> None:
        work(batch_df, batch_id)
        visible[batch_id] = time.time()

    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def bare_parquet(stream: Any, out: str, checkpoint: str, visible: Visible) -> Any:
    def work(batch_df: Any, batch_id: int) -> None:
        batch_df.write.mode("append").parquet(out)

    return _bare(stream, work, checkpoint, visible), None


def bare_map_in_arrow(stream: Any, out: str, checkpoint: str, visible: Visible) -> Any:
    def work(batch_df: Any, batch_id: int) -> None:
        batch_df.mapInArrow(count_rows, "n long").toArrow()

    return _bare(stream, work, checkpoint, visible), None


def _sinkv2(make_sink: Callable[[str], Any], decoupled: bool) -> Callable[..., Any]:
    def run(stream: Any, out: str, checkpoint: str, visible: Visible) -> Any:
        from sinkv2_spark import SinkTopologyTranslator

        handle = SinkTopologyTranslator().apply(
            stream,
            make_sink(out),
            sink_id="bench-" + os.path.basename(out),
            checkpoint_location=checkpoint,
            trigger={"availableNow": True},
            decoupled_commit=decoupled,
        )
        handle.add_result_listener(
            lambda result: visible.__setitem__(result.checkpoint_id - 1, time.time())
        )
        handle.awaitTermination()
        return handle.query, handle.recent_results

    return run


def _file_sink(out: str) -> Any:
    from reference_sinks.files import FileSink

    return FileSink(out, "parquet", native_write=False)


PATHS: dict[str, Callable[..., Any]] = {
    "foreachBatch df.write.parquet": bare_parquet,
    "FileSink": _sinkv2(_file_sink, decoupled=False),
    "FileSink decoupled": _sinkv2(_file_sink, decoupled=True),
    "foreachBatch mapInArrow count": bare_map_in_arrow,
    "NullSink": _sinkv2(lambda out: null_sink(), decoupled=False),
}


def _started(progress: Any) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def child(rows: int, batches: int, warmup: int, repeat: int) -> None:
    import pyarrow.parquet as pq

    spark = session(
        "sinkv2-streaming-overhead", **{"spark.sql.streaming.numRecentProgressUpdates": "10000"}
    )
    with tempfile.TemporaryDirectory(prefix="sinkv2-stream-overhead-") as scratch:
        source = os.path.join(scratch, "in")
        write_input(source, warmup + batches, rows)
        for round_ in range(repeat):
            for name, path in PATHS.items():
                slug = f"{round_}-" + name.replace(" ", "_").replace(".", "_")
                out = os.path.join(scratch, slug)
                stream = (
                    spark.readStream.schema(SCHEMA_DDL)
                    .option("maxFilesPerTrigger", 1)
                    .parquet(source)
                )
                visible: Visible = {}
                query, results = path(stream, out, os.path.join(scratch, "ckpt-" + slug), visible)
                progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
                if len(progress) != warmup + batches:
                    raise RuntimeError(
                        f"{name}: {len(progress)} micro-batches, expected {warmup + batches}"
                    )
                if name.startswith(("foreachBatch df", "FileSink")):
                    written = sum(
                        pq.ParquetFile(f).metadata.num_rows
                        for f in Path(out).rglob("part-*.parquet")
                        if "_staging" not in f.parts
                    )
                    if written != rows * (warmup + batches):
                        raise RuntimeError(f"{name} wrote {written} visible rows")
                measured = [p for p in progress if p["batchId"] >= warmup]
                starts = [_started(p) for p in progress]
                stages: dict[str, list[float]] = {}
                for result in results or []:
                    if result.checkpoint_id - 1 >= warmup:
                        for stage, seconds in result.stage_seconds.items():
                            stages.setdefault(stage, []).append(seconds * 1000)
                print(
                    json.dumps(
                        {
                            "round": round_,
                            "path": name,
                            "add_batch_ms": [p["durationMs"]["addBatch"] for p in measured],
                            "trigger_ms": [p["durationMs"]["triggerExecution"] for p in measured],
                            "interval_ms": [
                                (b - a) * 1000
                                for a, b in zip(
                                    starts[warmup:-1], starts[warmup + 1 :], strict=True
                                )
                            ],
                            "visible_ms": [
                                (visible[p["batchId"]] - _started(p)) * 1000 for p in measured
                            ],
                            "stage_ms": {s: statistics.median(v) for s, v in stages.items()},
                        }
                    ),
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
    spark.stop()


METRICS = ("add_batch_ms", "trigger_ms", "interval_ms", "visible_ms")


def report(results: list[dict[str, Any]]) -> str:
    by_path: dict[str, dict[str, list[float]]] = {}
    stages: dict[str, dict[str, list[float]]] = {}
    for r in results:
        path = by_path.setdefault(r["path"], {m: [] for m in METRICS})
        for metric in METRICS:
            path[metric].append(statistics.median(r[metric]))
        for stage, ms in r["stage_ms"].items():
            stages.setdefault(r["path"], {}).setdefault(stage, []).append(ms)
    median = {p: {m: statistics.median(v) for m, v in ms.items()} for p, ms in by_path.items()}
    lines = [
        "| path | addBatch ms | per round | trigger ms | interval ms | to visible ms |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for path, values in median.items():
        each = ", ".join(f"{v:.0f}" for v in by_path[path]["add_batch_ms"])
        lines.append(
            f"| {path} | {values['add_batch_ms']:.0f} | {each} | {values['trigger_ms']:.0f} | "
            f"{values['interval_ms']:.0f} | {values['visible_ms']:.0f} |"
        )
    lines += ["", "| sinkv2 path | median stage ms (SinkResult.stage_seconds) |", "|---|---|"]
    for path, per_stage in stages.items():
        text = ", ".join(f"{s} {statistics.median(v):.1f}" for s, v in per_stage.items())
        lines.append(f"| {path} | {text} |")
    lines += [
        "",
        "| overhead per micro-batch | addBatch | to visible | < 50 ms |",
        "|---|---:|---:|---|",
    ]
    for ours, theirs in (
        ("FileSink", "foreachBatch df.write.parquet"),
        ("FileSink decoupled", "foreachBatch df.write.parquet"),
        ("NullSink", "foreachBatch mapInArrow count"),
    ):
        add = median[ours]["add_batch_ms"] - median[theirs]["add_batch_ms"]
        vis = median[ours]["visible_ms"] - median[theirs]["visible_ms"]
        lines.append(
            f"| {ours} - {theirs} | {add:+.0f} ms | {vis:+.0f} ms | "
            f"{'met' if vis < 50 else 'NOT met'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=50, help="measured micro-batches per run")
    parser.add_argument("--warmup", type=int, default=10, help="micro-batches dropped per run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rows, args.batches, args.warmup, args.repeat)
        return
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--rows",
            str(args.rows),
            "--batches",
            str(args.batches),
            "--warmup",
            str(args.warmup),
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
