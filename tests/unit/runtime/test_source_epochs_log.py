"""The source coordinator over a source with unbounded splits: the append-only log source.

Engine-neutral (no Spark): `SourceEpochCoordinator` plans epochs as Spark's stream
reader would ask for them, each epoch's slices are read with `read_epoch_slice`, and
the rows are checked against the log files (``tests/spark/log_source.py``). A
"restart" is a new coordinator on the same store, as a new query run makes one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sinkv2.errors import ConcurrentCommitError
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from tests.spark.log_source import SCHEMA, LogSource, append, records_of


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    directory = tmp_path / "logs"
    directory.mkdir()
    return directory


class Run:
    """One query run: a coordinator, and the rows each epoch it planned holds."""

    def __init__(self, source: LogSource, store: Any, parallelism: int = 2) -> None:
        self.source = source
        self.coordinator = SourceEpochCoordinator(source, store, "logs", parallelism=parallelism)
        self.rows: dict[int, list[dict[str, Any]]] = {}

    def rows_of(self, epoch: int) -> list[dict[str, Any]]:
        return [
            row
            for piece in self.coordinator.slices(epoch)
            for batch in read_epoch_slice(self.source, SCHEMA, piece)
            for row in batch.to_pylist()
        ]

    def step(self, start: int, limit: ReadLimit | None = None) -> int:
        """Plan the epoch after ``start`` and read it; the new epoch (``start`` if none)."""
        time.sleep(self.source.discovery_interval_ms / 1000 * 2)  # a discovery is due
        end = self.coordinator.next_epoch(start, limit or ReadLimit())
        if end != start:
            self.rows[end] = self.rows_of(end)
        return end

    def drain(self, start: int, limit: ReadLimit | None = None) -> int:
        while (end := self.step(start, limit)) != start:
            start = end
        return start

    def close(self) -> None:
        self.coordinator.close()


def every_line(logs: Path) -> list[tuple[str, int, Any]]:
    return sorted(
        (r["file"], r["line"], r["value"])
        for path in logs.glob("*.log")
        for r in records_of(logs, path.name)
    )


def got(*runs: Run) -> list[tuple[str, int, Any]]:
    rows = [r for run in runs for epoch_rows in run.rows.values() for r in epoch_rows]
    return sorted((r["file"], r["line"], r["value"]) for r in rows)


def make(logs: Path, **kwargs: Any) -> LogSource:
    return LogSource(logs, discovery_interval_ms=10, **kwargs)


def test_a_file_discovered_while_the_others_go_on_is_read_and_kept(logs, tmp_path):
    """A split the enumerator pushes on discovery (no split request) joins the next epoch."""
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    append(logs, "a.log", range(3))
    append(logs, "b.log", range(3))
    run = Run(make(logs), store)
    epoch = run.step(run.coordinator.initial_epoch())
    append(logs, "c.log", range(5))  # every subtask still carries a split: nobody asks
    append(logs, "a.log", range(3, 5))
    epoch = run.drain(epoch)
    run.close()
    again = Run(make(logs), store)
    append(logs, "c.log", range(5, 7))
    again.drain(epoch)
    again.close()
    assert got(run, again) == every_line(logs)


def test_a_restart_replays_an_epoch_exactly(logs, tmp_path):
    """The slices of a logged epoch, loaded by a new run, hold the same rows."""
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    for name in ("a.log", "b.log", "c.log"):
        append(logs, name, range(40))
    run = Run(make(logs), store)
    epoch = run.step(run.coordinator.initial_epoch(), ReadLimit(max_records=25))
    first = run.rows[epoch]
    run.close()
    append(logs, "a.log", range(40, 50))  # new lines must not change a replay
    again = Run(make(logs), store)
    assert again.rows_of(epoch) == first
    assert len(first) == 25
    again.close()


@pytest.mark.parametrize("parallelisms", [(2, 4, 1), (4, 2, 3)])
def test_rescaled_runs_lose_and_repeat_nothing(logs, tmp_path, parallelisms):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    runs = []
    epoch = None
    for round_, parallelism in enumerate(parallelisms):
        for index in range(5):
            append(logs, f"f{index}.log", range(round_ * 10, round_ * 10 + 10))
        run = Run(make(logs), store, parallelism)
        if epoch is None:
            epoch = run.coordinator.initial_epoch()
        epoch = run.drain(epoch, ReadLimit(max_records=17))
        run.close()
        runs.append(run)
    assert got(*runs) == every_line(logs)
    assert all(len(rows) <= 17 for run in runs for rows in run.rows.values())


def test_available_now_reads_the_ends_fixed_at_its_start(logs, tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    append(logs, "a.log", range(30))
    append(logs, "b.log", range(30))
    run = Run(make(logs), store, parallelism=3)
    run.coordinator.prepare_available_now()
    epoch = run.step(run.coordinator.initial_epoch(), ReadLimit(max_records=20))
    append(logs, "a.log", range(30, 40))  # during the run: for the next run
    append(logs, "new.log", range(10))
    run.drain(epoch, ReadLimit(max_records=20))
    run.close()
    want = {(name, n) for name in ("a.log", "b.log") for n in range(30)}
    assert {(r[0], r[1]) for r in got(run)} == want


def test_each_epoch_is_acknowledged_once(logs, tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    acks = tmp_path / "acks"
    append(logs, "a.log", range(50))
    run = Run(make(logs, ack_path=acks), store)
    last = run.drain(run.coordinator.initial_epoch(), ReadLimit(max_records=10))
    for epoch in range(1, last + 1):
        run.coordinator.acknowledge(epoch)  # Spark's late commit(end): no second notification
    run.close()
    assert [int(n) for n in acks.read_text().split()] == list(range(1, last + 1))


def test_a_second_run_on_the_same_source_id_is_refused(logs, tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    append(logs, "a.log", range(5))
    first = Run(make(logs), store)
    first.coordinator.initial_epoch()
    second = Run(make(logs), store)
    with pytest.raises(ConcurrentCommitError, match="logs"):
        second.coordinator.initial_epoch()
    first.close()
    second.close()


def test_available_now_waits_for_an_enumerator_whose_first_discovery_is_delayed(logs, tmp_path):
    """Flink's continuous enumerators often list first after one interval, not at once."""
    from tests.spark.log_source import LogEnumerator

    class Delayed(LogEnumerator):
        def start(self) -> None:
            interval = self._source.discovery_interval_ms
            self._context.call_async(
                self._source.list_files,
                self._discovered,
                initial_delay_ms=interval,
                period_ms=interval,
            )

    class DelayedSource(LogSource):
        def create_enumerator(self, context: Any) -> Delayed:
            return Delayed(context, self)

        def restore_enumerator(self, context: Any, checkpoint: Any) -> Delayed:
            return Delayed(context, self, checkpoint.assigned, checkpoint.pending)

    append(logs, "a.log", range(10))
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    coordinator = SourceEpochCoordinator(
        DelayedSource(logs, discovery_interval_ms=200), store, "delayed", parallelism=1
    )
    coordinator.prepare_available_now()  # Spark calls it before initialOffset
    start = coordinator.initial_epoch()
    end = coordinator.next_epoch(start, ReadLimit())
    assert end == start + 1
    assert [piece.records for piece in coordinator.slices(end)] == [10]
    coordinator.close()
