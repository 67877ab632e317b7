"""The reader framework's cost: `SourceReaderBase` on a trivial file split reader, against a loop.

The data is ``--splits`` local Parquet files (``id`` long, ``v`` double, ``s``
string). The split reader reads one batch of ``--batch`` rows per fetch (Arrow
batches, or the batch's rows as dicts) on the fetcher thread; the reader emits them
through a counting output, driven engine-free by ``poll_next`` / ``is_available``.
The baseline is a plain generator over the same files, emitted through the same
output, keeping a position per split as the emitter does. What differs is the
framework: the fetcher thread, the hand-over queue, the split bookkeeping and the
emitter call. One warm-up run of each side, then rounds alternate framework, bare,
framework, bare..., and medians are printed (with the process CPU time, which
other load on a shared machine disturbs less than the wall clock)::

    .venv/bin/python benchmarks/source_reader_bench.py                 # both paths
    .venv/bin/python benchmarks/source_reader_bench.py --memory        # slow consumer
    .venv/bin/python benchmarks/source_reader_bench.py --handover      # cost per fetch

``--memory``: a fetcher that makes a new batch per fetch against a consumer that
sleeps, with Flink's queue capacity (2) and an effectively unbounded one, measuring
how far the fetcher runs ahead and the peak Arrow memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attrs
import common  # noqa: F401  # puts the repository on sys.path
import pyarrow as pa

from sinkv2.runtime import InMemorySinkWriterMetricGroup
from sinkv2.source import InputStatus
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)


@attrs.frozen
class Split:
    id: str
    position: int = 0

    def split_id(self) -> str:
        return self.id


@attrs.define
class State:
    id: str
    position: int


class Context:
    def __init__(self) -> None:
        self._metrics = InMemorySinkWriterMetricGroup()

    def get_index_of_subtask(self) -> int:
        return 0

    def current_parallelism(self) -> int:
        return 1

    def send_split_request(self) -> None:
        pass

    def send_source_event_to_coordinator(self, event: Any) -> None:
        pass

    def metric_group(self) -> Any:
        return self._metrics


class Count:
    """The cheapest output: counts rows."""

    def __init__(self) -> None:
        self.rows = 0

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self.rows += 1

    def collect_batch(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows

    def create_output_for_split(self, split_id: str) -> Count:
        return self

    def release_output_for_split(self, split_id: str) -> None:
        pass


class BatchEmitter:
    def emit_record(self, element: pa.RecordBatch, output: Any, state: State) -> None:
        output.collect_batch(element)
        state.position += 1


class RowEmitter:
    def emit_record(self, element: Any, output: Any, state: State) -> None:
        output.collect(element)
        state.position += 1


class Reader(SingleThreadMultiplexSourceReaderBase[Any, Any, Split, State]):
    def initialized_state(self, split: Split) -> State:
        return State(split.id, split.position)

    def to_split_type(self, split_id: str, state: State) -> Split:
        return Split(split_id, state.position)

    def on_split_finished(self, finished: dict[str, State]) -> None:
        pass


def write_files(directory: Path, rows: int, splits: int) -> dict[str, Path]:
    """``splits`` Parquet files of ``id`` long, ``v`` double, ``s`` string: the external system."""
    import pyarrow.parquet as pq

    files = {}
    per_split = rows // splits
    for index in range(splits):
        ids = pa.array(range(index * per_split, (index + 1) * per_split), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "v": pa.compute.multiply(pa.compute.cast(ids, pa.float64()), 0.5),
                "s": pa.compute.cast(pa.compute.bit_wise_and(ids, 1023), pa.string()),
            }
        )
        files[f"s{index}"] = directory / f"part-{index}.parquet"
        pq.write_table(table, files[f"s{index}"], row_group_size=1 << 20)
    return files


def batches(path: Path, batch: int, arrow: bool) -> Any:
    """The file's rows in batches of ``batch``: Arrow batches, or lists of row dicts."""
    import pyarrow.parquet as pq

    for record_batch in pq.ParquetFile(path).iter_batches(batch_size=batch):
        yield record_batch if arrow else record_batch.to_pylist()


class FileSplitReader:
    """Reads its splits' files one batch per fetch, splits in turn (a trivial file reader)."""

    def __init__(self, files: dict[str, Path], batch: int, arrow: bool) -> None:
        self.files = files
        self.batch = batch
        self.arrow = arrow
        self.open: dict[str, Any] = {}
        self.order: list[str] = []
        self.turn = 0

    def fetch(self) -> RecordsBySplits[Any]:
        if not self.order:
            return RecordsBySplits({})
        split_id = self.order[self.turn % len(self.order)]
        self.turn += 1
        element = next(self.open[split_id], None)
        if element is None:
            self.order.remove(split_id)
            return RecordsBySplits.finished(split_id)
        return RecordsBySplits({split_id: [element] if self.arrow else element})

    def handle_splits_changes(self, change: SplitsChange[Split]) -> None:
        assert isinstance(change, SplitsAddition)
        for split in change.splits:
            self.open[split.id] = batches(self.files[split.id], self.batch, self.arrow)
            self.order.append(split.id)

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def framework(files: dict[str, Path], batch: int, arrow: bool) -> tuple[float, int]:
    reader = Reader(
        lambda: FileSplitReader(files, batch, arrow),
        BatchEmitter() if arrow else RowEmitter(),
        Context(),
    )
    output = Count()
    start = time.perf_counter()
    reader.add_splits([Split(split_id) for split_id in files])
    reader.notify_no_more_splits()
    poll, available = reader.poll_next, reader.is_available
    while True:
        status = poll(output)
        if status is InputStatus.END_OF_INPUT:
            break
        if status is InputStatus.NOTHING_AVAILABLE:
            available().result()
    elapsed = time.perf_counter() - start
    reader.close()
    return elapsed, output.rows


def bare(files: dict[str, Path], batch: int, arrow: bool) -> tuple[float, int]:
    """The same files read by a plain generator, emitted through the same output.

    It keeps a position per split as the emitter does (what a loop that can be
    checkpointed needs), so both sides do the same work per element.
    """
    output = Count()
    start = time.perf_counter()
    for path in files.values():
        state = State(str(path), 0)
        if arrow:
            emit = output.collect_batch
            for element in batches(path, batch, arrow):
                emit(element)
                state.position += 1
        else:
            collect = output.collect
            for rows in batches(path, batch, arrow):
                for row in rows:
                    collect(row)
                    state.position += 1
    return time.perf_counter() - start, output.rows


def throughput(args: argparse.Namespace) -> None:
    import tempfile

    paths = {"both": (True, False), "arrow": (True,), "rows": (False,)}[args.paths]
    for arrow in paths:
        rows = args.rows if arrow else args.rows // 10
        with tempfile.TemporaryDirectory(prefix="sinkv2-source-bench-") as directory:
            files = write_files(Path(directory), rows, args.splits)
            load_before = os.getloadavg()[0]
            results: dict[str, list[float]] = {"framework": [], "bare": []}
            cpu: dict[str, list[float]] = {"framework": [], "bare": []}
            for run in (framework, bare):
                run(files, args.batch, arrow)  # warm-up: imports, file cache, allocator
            for _ in range(args.rounds):
                for name, run in (("framework", framework), ("bare", bare)):
                    started = time.process_time()
                    elapsed, counted = run(files, args.batch, arrow)
                    cpu[name].append(time.process_time() - started)
                    assert counted == rows, (name, counted, rows)
                    results[name].append(rows / elapsed)
            load_after = os.getloadavg()[0]
        fw = statistics.median(results["framework"])
        base = statistics.median(results["bare"])
        # Each round's two runs are next to each other in time, so their ratio sees
        # (nearly) the same load: the median of those is the steadier figure.
        paired = statistics.median(
            a / b for a, b in zip(results["framework"], results["bare"], strict=True)
        )
        fw_cpu = statistics.median(cpu["framework"])
        base_cpu = statistics.median(cpu["bare"])
        path = f"Arrow batches of {args.batch}" if arrow else "rows (dicts)"
        print(
            f"{path:>24}: {rows:>10,} rows  framework {fw:>12,.0f} rows/s  "
            f"bare generator {base:>12,.0f} rows/s  framework/bare {fw / base:.3f} "
            f"(median of the rounds' ratios {paired:.3f}; {args.rounds} interleaved rounds; "
            f"process CPU s framework {fw_cpu:.3f}, bare {base_cpu:.3f}, "
            f"framework/bare {fw_cpu / base_cpu:.3f}; load average {load_before:.1f} -> "
            f"{load_after:.1f})"
        )


class InstantReader:
    """Hands out one ready batch per fetch, ``fetches`` times: nothing but the hand-over."""

    def __init__(self, batch: pa.RecordBatch, fetches: int) -> None:
        self.batch = batch
        self.left = fetches
        self.order: list[str] = []

    def fetch(self) -> RecordsBySplits[Any]:
        self.left -= 1
        if self.left < 0:
            return RecordsBySplits.finished(self.order.pop())
        return RecordsBySplits({"s0": [self.batch]})

    def handle_splits_changes(self, change: SplitsChange[Split]) -> None:
        assert isinstance(change, SplitsAddition)
        self.order.extend(split.id for split in change.splits)

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def handover(args: argparse.Namespace) -> None:
    """The framework's own cost per fetch: a split reader with nothing to do, both threads busy."""
    batch = pa.record_batch([pa.array(range(args.batch), pa.int64())], ["id"])
    fetches = 20_000
    wall, cpu = [], []
    for _ in range(args.rounds):
        reader = Reader(lambda: InstantReader(batch, fetches), BatchEmitter(), Context())
        output = Count()
        started, started_cpu = time.perf_counter(), time.process_time()
        reader.add_splits([Split("s0")])
        reader.notify_no_more_splits()
        while (status := reader.poll_next(output)) is not InputStatus.END_OF_INPUT:
            if status is InputStatus.NOTHING_AVAILABLE:
                reader.is_available().result()
        wall.append((time.perf_counter() - started) / fetches * 1e6)
        cpu.append((time.process_time() - started_cpu) / fetches * 1e6)
        reader.close()
        assert output.rows == fetches * args.batch
    print(
        f"hand-over alone: {statistics.median(wall):.1f} us wall, "
        f"{statistics.median(cpu):.1f} us process CPU per fetch "
        f"(medians of {args.rounds} runs of {fetches:,} fetches)"
    )


class MakingReader:
    """Makes a fresh batch per fetch (what a real reader allocates), for ever."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.fetches = 0

    def fetch(self) -> RecordsBySplits[Any]:
        self.fetches += 1
        batch = pa.record_batch([pa.array(range(self.batch), pa.int64())], ["value"])
        return RecordsBySplits({"s0": [batch]})

    def handle_splits_changes(self, change: SplitsChange[Split]) -> None:
        pass

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


def memory(args: argparse.Namespace) -> None:
    for capacity in (2, 10_000):
        made: list[MakingReader] = []

        def supplier(made: list[MakingReader] = made) -> MakingReader:
            made.append(MakingReader(args.batch))
            return made[-1]

        reader = Reader(supplier, BatchEmitter(), Context(), element_queue_capacity=capacity)
        base = pa.total_allocated_bytes()
        reader.add_splits([Split("s0")])
        output = Count()
        polls, peak = 0, 0
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
                reader.is_available().result()
            polls += 1
            peak = max(peak, pa.total_allocated_bytes() - base)
            time.sleep(0.01)  # the slow consumer
        fetches = made[0].fetches
        reader.close()
        batch_bytes = args.batch * 8
        print(
            f"queue capacity {capacity:>6}: slow consumer for {args.seconds} s: {polls} polls, "
            f"{fetches} fetches (ahead by {fetches - polls}); peak Arrow memory "
            f"{peak / 1e6:.1f} MB = {peak / batch_bytes:.1f} batches of {batch_bytes / 1e6:.2f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows on the Arrow path")
    parser.add_argument("--splits", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--paths", choices=["both", "arrow", "rows"], default="both", help="which paths to time"
    )
    parser.add_argument("--memory", action="store_true")
    parser.add_argument(
        "--handover", action="store_true", help="the cost per fetch with nothing to fetch"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.memory:
        memory(args)
    elif args.handover:
        handover(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
