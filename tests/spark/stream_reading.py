"""What the streaming-source tests share: the log stream, a foreachBatch collector, runs.

Rows reach the test through `Collector`, a ``foreachBatch`` function (it runs in this
process, on Spark's driver) that keeps each micro-batch's rows by batch id: a
replayed batch replaces its first run, as an idempotent sink keyed by
``(query, batchId)`` does, so `Collector.rows` is the exactly-once view, and
`Collector.calls` keeps every call, replays included. A collector can also fail a
chosen batch after keeping its rows: the query then dies with ``offsets/N`` written
and ``commits/N`` missing, which is what a driver crash mid-batch leaves behind.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.spark.log_source import records_of

TIMEOUT_S = 180
LOG_SOURCE = "tests.spark.log_source:make"


class BatchFailed(RuntimeError):
    """Raised by a `Collector` on purpose, to stop a query in the middle of a batch."""


class Collector:
    """A ``foreachBatch`` function that keeps every micro-batch's rows (see the module)."""

    def __init__(
        self, fail_batch: int | None = None, before_batch: Callable[[int], None] | None = None
    ):
        self.batches: dict[int, list[dict[str, Any]]] = {}
        self.partitions: dict[int, int] = {}
        self.calls: list[tuple[int, list[dict[str, Any]]]] = []
        self.fail_batch = fail_batch
        self.before_batch = before_batch

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.before_batch is not None:
            self.before_batch(batch_id)
        self.partitions[batch_id] = df.rdd.getNumPartitions()
        rows = [row.asDict() for row in df.collect()]
        self.calls.append((batch_id, rows))
        self.batches[batch_id] = rows
        if batch_id == self.fail_batch:
            self.fail_batch = None
            raise BatchFailed(f"batch {batch_id} fails on purpose (a simulated crash)")

    def rows(self) -> list[dict[str, Any]]:
        """Every batch's rows, in batch order (a replay counted once)."""
        return [row for batch in sorted(self.batches) for row in self.batches[batch]]

    def count(self) -> int:
        return sum(map(len, self.batches.values()))


def by_file(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by their log file, each file's in arrival order."""
    grouped: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        grouped[row["file"]].append(dict(row))
    return dict(grouped)


def expected_by_file(logs: Path) -> dict[str, list[dict[str, Any]]]:
    """Every complete line of every log file now, by file: what an exactly-once read gives."""
    return {
        path.name: records_of(logs, path.name)
        for path in sorted(logs.glob("*.log"))
        if records_of(logs, path.name)
    }


def log_stream(spark: Any, logs: Path, state: Path, source_id: str = "logs", **options: Any) -> Any:
    """``spark.readStream.format("sinkv2")`` over the log directory, with ``options``."""
    reader = (
        spark.readStream.format("sinkv2")
        .option("source", LOG_SOURCE)
        .option("path", str(logs))
        .option("source_id", source_id)
        .option("state_store", str(state))
        .option("discovery_interval_ms", "50")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start(df: Any, checkpoint: Path, collector: Collector, **trigger: Any) -> Any:
    """Start ``df`` into ``collector`` with ``trigger`` (default: Spark's default trigger)."""
    writer = df.writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def run_available_now(df: Any, checkpoint: Path, collector: Collector) -> Any:
    """Run ``df`` under ``availableNow`` until it ends by itself; the query (for its progress)."""
    query = start(df, checkpoint, collector, availableNow=True)
    try:
        ended = query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    assert ended, f"the availableNow query did not end in {TIMEOUT_S} s"
    return query


def wait_for(query: Any, collector: Collector, rows: int) -> None:
    """Wait until ``collector`` holds ``rows`` rows; fail if the query ends or time runs out."""
    deadline = time.monotonic() + TIMEOUT_S
    while collector.count() < rows:
        if query.exception() is not None or not query.isActive:
            raise AssertionError(f"the query ended early: {query.exception()}")
        assert time.monotonic() < deadline, (
            f"only {collector.count()} of {rows} rows arrived in {TIMEOUT_S} s"
        )
        time.sleep(0.05)


def run_until(
    df: Any, checkpoint: Path, collector: Collector, rows: int, *, stop: bool = True
) -> Any:
    """Run ``df`` with the default trigger until ``collector`` holds ``rows`` rows; then stop."""
    query = start(df, checkpoint, collector)
    try:
        wait_for(query, collector, rows)
    finally:
        if stop:
            query.stop()
    return query


def input_rows(query: Any) -> list[int]:
    """``numInputRows`` of each micro-batch the query ran, in order."""
    return [progress["numInputRows"] for progress in query.recentProgress]


def source_offsets(checkpoint: Path) -> dict[int, str]:
    """The source's line of each ``offsets/N`` file, by batch id."""
    lines = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines[int(path.name)] = path.read_text().strip().splitlines()[-1]
    return lines


def offset_epoch(line: str) -> int:
    """The epoch an offset line points to."""
    return int(json.loads(line)["epoch"])
