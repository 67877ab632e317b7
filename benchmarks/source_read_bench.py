"""A bounded FLIP-27 read on Spark (`from_source`) vs a hand-written reader vs spark.read.parquet.

One command, one local[2] Spark, interleaved rounds (every path once per round, in
turn, so drift and noise hit all of them alike)::

    .venv/bin/python benchmarks/source_read_bench.py --rows 5000000 20000000 --rounds 5
    .venv/bin/python benchmarks/source_read_bench.py --rows 200000 --rounds 1   # smoke

The data is every benchmark's (``common.data``: ``id`` long, ``key`` string,
``value`` double) written once by ``df.write.parquet`` into ``--files`` files. Each
path reads all of it and Spark counts the rows and sums ``id`` (so every column
reaches the JVM's rows, not only a count from metadata):

- ``spark.read.parquet``: Spark's own reader (vectorized, in the JVM);
- ``spark.read.schema(...).parquet``: the same with the schema given, so Spark does
  not infer it (a Spark job reading a footer): what the native path runs;
- ``hand-written DataSourceReader``: the least a Python data source can do - one
  partition per group of files, ``pyarrow.parquet`` batches yielded as they are read;
- ``from_source (FLIP-27)``: a FLIP-27 source with one split per file, a lazy
  enumerator, a `SingleThreadMultiplexSourceReaderBase` whose split reader reads one
  batch per fetch on its fetcher thread and emits it with ``collect_batch``; planned
  and read by `sinkv2_spark.from_source`;
- ``FileSource, native``: `reference_sinks.files.FileSource` through ``from_source``
  with the native read path (the default): the enumerator plans on the driver, the
  source hands its splits over as whole Parquet files (footers checked), and Spark's
  own reader reads them;
- ``FileSource, Python path``: the same with ``native_read=False``: FileSource's
  readers in Python workers.

Targets (issues 23 and 24): the FLIP-27 paths >= 0.9 x the hand-written reader (the
framework's cost) and >= 0.75 x ``spark.read.parquet`` (met by the native path only:
every Python data source is below it, see RESULTS.md).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attrs
import pyarrow as pa
import pyarrow.parquet as pq
from common import data, session  # the benchmarks folder is not a package
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from reference_sinks.files import FileSource
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.source import Boundedness
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)
from sinkv2_spark import from_source

BATCH_ROWS = 65_536


@attrs.frozen
class FileSplit:
    """One Parquet file, and how many of its batches were read."""

    path: str
    batches_read: int = 0

    def split_id(self) -> str:
        return self.path


@attrs.define
class FileSplitState:
    split: FileSplit
    batches_read: int


@attrs.frozen
class Remaining:
    splits: tuple[FileSplit, ...]


class ParquetSplitReader:
    """Reads one batch of the current file per fetch; finished files are reported."""

    def __init__(self) -> None:
        self.pending: collections.deque[FileSplit] = collections.deque()
        self.current: tuple[FileSplit, Iterator[pa.RecordBatch]] | None = None

    def handle_splits_changes(self, splits_changes: SplitsChange[FileSplit]) -> None:
        if isinstance(splits_changes, SplitsAddition):
            self.pending.extend(splits_changes.splits)

    def fetch(self) -> RecordsBySplits[pa.RecordBatch]:
        if self.current is None:
            if not self.pending:
                return RecordsBySplits({})
            split = self.pending.popleft()
            batches = pq.ParquetFile(split.path).iter_batches(batch_size=BATCH_ROWS)
            for _ in range(split.batches_read):  # resume where the split's position says
                next(batches)
            self.current = split, batches
        split, batches = self.current
        batch = next(batches, None)
        if batch is None:
            self.current = None
            return RecordsBySplits.finished(split.path)
        return RecordsBySplits({split.path: [batch]})

    def wake_up(self) -> None:
        """A fetch never blocks: nothing to interrupt."""

    def close(self) -> None:
        self.current = None


class BatchEmitter:
    def emit_record(self, element: pa.RecordBatch, output: Any, state: FileSplitState) -> None:
        output.collect_batch(element)
        state.batches_read += 1


class ParquetReader(SingleThreadMultiplexSourceReaderBase[Any, Any, FileSplit, FileSplitState]):
    def __init__(self, context: Any) -> None:
        super().__init__(ParquetSplitReader, BatchEmitter(), context)

    def start(self) -> None:
        self.context.send_split_request()

    def on_split_finished(self, finished_split_ids: dict[str, FileSplitState]) -> None:
        self.context.send_split_request()  # Flink's FileSourceReader asks for the next file

    def initialized_state(self, split: FileSplit) -> FileSplitState:
        return FileSplitState(split, split.batches_read)

    def to_split_type(self, split_id: str, split_state: FileSplitState) -> FileSplit:
        return attrs.evolve(split_state.split, batches_read=split_state.batches_read)


class LazyEnumerator:
    """One split per request, as Flink's static file enumerator."""

    def __init__(self, context: Any, remaining: tuple[FileSplit, ...]) -> None:
        self.context = context
        self.remaining = collections.deque(remaining)

    def start(self) -> None:
        pass

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        if self.remaining:
            self.context.assign_split(self.remaining.popleft(), subtask_id)
        else:
            self.context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[FileSplit], subtask_id: int) -> None:
        self.remaining.extend(splits)

    def add_reader(self, subtask_id: int) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> Remaining:
        return Remaining(tuple(self.remaining))

    def close(self) -> None:
        pass


class ParquetFilesSource:
    """A bounded FLIP-27 source over Parquet files, one split per file."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.schema = pq.read_schema(paths[0])

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_enumerator(self, enum_context: Any) -> LazyEnumerator:
        return LazyEnumerator(enum_context, tuple(FileSplit(p) for p in self.paths))

    def restore_enumerator(self, enum_context: Any, checkpoint: Remaining) -> LazyEnumerator:
        return LazyEnumerator(enum_context, checkpoint.splits)

    def create_reader(self, reader_context: Any) -> ParquetReader:
        return ParquetReader(reader_context)

    def get_split_serializer(self) -> Any:
        return AttrsMsgpackSerializer(FileSplit)

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return AttrsMsgpackSerializer(Remaining)

    def get_produced_type(self) -> pa.Schema:
        return self.schema


class Files(InputPartition):
    def __init__(self, index: int, paths: list[str]) -> None:
        super().__init__(index)
        self.paths = paths


class HandWrittenReader(DataSourceReader):
    def __init__(self, paths: list[str], parallelism: int) -> None:
        self.paths = paths
        self.parallelism = parallelism

    def partitions(self) -> list[InputPartition]:
        groups = [self.paths[i :: self.parallelism] for i in range(self.parallelism)]
        return [Files(i, group) for i, group in enumerate(groups) if group]

    def read(self, partition: Files) -> Iterator[pa.RecordBatch]:
        for path in partition.paths:
            yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)


def hand_written_frame(spark: Any, paths: list[str], schema: Any) -> Any:
    class HandWritten(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_hand_written"

        def schema(self) -> Any:
            return schema

        def reader(self, schema: Any) -> HandWrittenReader:
            return HandWrittenReader(paths, 2)

    spark.dataSource.register(HandWritten)
    return spark.read.format("bench_hand_written").load()


def timed(make_frame: Callable[[], Any]) -> tuple[float, int]:
    started = time.perf_counter()
    (row,) = make_frame().selectExpr("count(*) as n", "sum(id) as s").collect()
    return time.perf_counter() - started, int(row.n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5_000_000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()
    print(f"# load average at start: {os.getloadavg()}", flush=True)
    spark = session("source-read-bench")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="sinkv2-source-bench-") as scratch:
            out = Path(scratch) / "data"
            data(spark, rows).repartition(args.files).write.parquet(str(out))
            paths = sorted(str(p) for p in out.glob("*.parquet"))
            file_schema = from_arrow_schema(pq.read_schema(paths[0]))  # as the files say
            paths_by_name: dict[str, Callable[[], Any]] = {
                "spark.read.parquet": lambda out=out: spark.read.parquet(str(out)),
                "spark.read.schema(...).parquet": lambda out=out, schema=file_schema: (
                    spark.read.schema(schema).parquet(str(out))
                ),
                "hand-written DataSourceReader": lambda paths=paths, schema=file_schema: (
                    hand_written_frame(spark, paths, schema)
                ),
                "from_source (FLIP-27)": lambda paths=paths: from_source(
                    spark, ParquetFilesSource(paths), parallelism=2
                ),
                "FileSource, native": lambda out=out: from_source(
                    spark, FileSource(out), parallelism=2, native_read=True
                ),
                "FileSource, Python path": lambda out=out: from_source(
                    spark, FileSource(out), parallelism=2, native_read=False
                ),
            }
            for name, make in paths_by_name.items():  # warm-up, and the row count checked
                seconds, counted = timed(make)
                assert counted == rows, (name, counted, rows)
            runs: dict[str, list[float]] = {name: [] for name in paths_by_name}
            for round_index in range(args.rounds):
                for name, make in paths_by_name.items():
                    seconds, _ = timed(make)
                    runs[name].append(seconds)
                    print(f"# {rows:,} round {round_index}: {name} {seconds:.2f} s", flush=True)
            native = statistics.median(runs["spark.read.parquet"])
            hand = statistics.median(runs["hand-written DataSourceReader"])
            print("\n| rows | path | median s | runs (s) | rows/s | x native | x hand-written |")
            print("|---:|---|---:|---|---:|---:|---:|")
            for name, seconds in runs.items():
                median = statistics.median(seconds)
                print(
                    f"| {rows:,} | {name} | {median:.2f} | "
                    f"{', '.join(f'{s:.2f}' for s in seconds)} | {rows / median:,.0f} | "
                    f"{native / median:.2f} | {hand / median:.2f} |"
                )
            print(f"# load average after {rows:,}: {os.getloadavg()}\n", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
