"""`SupportsFinishedSplits`: the coordinator tells which splits a committed epoch ended.

A log whose partitions can be closed: a closed partition's split ends when its cut
reaches the end (the cut has no rest). Real SQLite stores; a crash is a coordinator
abandoned with its lease released, as a killed driver leaves it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from sinkv2.runtime import ReadLimit, SourceEpochCoordinator, SqliteCommitStateStore
from sinkv2.source import SplitCut, SupportsFinishedSplits
from sinkv2.source.lib import NumberSequenceSource
from tests.unit.runtime.log_fixtures import LOGS, NOTIFIED, LogEnumerator, LogSource, LogSplit

_NAMES = itertools.count()
CLOSED: dict[str, set[int]] = {}
REPORTED: dict[str, list[tuple[int, list[str]]]] = {}


class ClosingLogEnumerator(LogEnumerator):
    def notify_splits_finished(self, checkpoint_id: int, split_ids: Sequence[str]) -> None:
        REPORTED.setdefault(self.log, []).append((checkpoint_id, sorted(split_ids)))


class ClosingLogSource(LogSource):
    """`LogSource` whose closed partitions end: their last cut has no rest."""

    def create_enumerator(self, enum_context: Any) -> ClosingLogEnumerator:
        return ClosingLogEnumerator(self.log, enum_context, ())

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> ClosingLogEnumerator:
        return ClosingLogEnumerator(self.log, enum_context, checkpoint.assigned)

    def cut_split(
        self, split: LogSplit, end: object, max_records: int | None
    ) -> SplitCut[LogSplit]:
        cut = super().cut_split(split, end, max_records)
        closed = split.partition in CLOSED.get(self.log, set())
        stop = split.position if cut.read is None else cut.read.stop
        if closed and stop == len(LOGS[self.log][split.partition]):
            return SplitCut(cut.read, None, cut.records)
        return cut


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state.sqlite")


@pytest.fixture
def log():
    name = f"closing{next(_NAMES)}"
    LOGS[name] = [[], [], []]
    yield name
    for registry in (LOGS, NOTIFIED, CLOSED, REPORTED):
        registry.pop(name, None)  # type: ignore[attr-defined]


def coordinator(source: Any, store: Any, parallelism: int = 2) -> SourceEpochCoordinator:
    return SourceEpochCoordinator(source, store, "src", parallelism=parallelism)


def test_the_enumerator_implements_the_extension():
    assert isinstance(ClosingLogEnumerator("x", None, ()), SupportsFinishedSplits)  # type: ignore[arg-type]
    assert not isinstance(LogEnumerator("x", None, ()), SupportsFinishedSplits)  # type: ignore[arg-type]


def test_a_cut_with_no_rest_is_told_only_after_its_epoch_is_committed(store, log):
    source = ClosingLogSource(log)
    LOGS[log][0].extend([1, 2, 3])
    LOGS[log][1].extend([4])
    coord = coordinator(source, store)
    start = coord.initial_epoch()
    assert coord.next_epoch(start, ReadLimit(max_records=2)) == 1  # p0 cut at 2 of 3
    CLOSED[log] = {0}
    assert coord.next_epoch(1, ReadLimit()) == 2  # p0's end: epoch 2 finishes it
    assert REPORTED.get(log) is None  # epoch 1 committed, and it ended nothing
    assert coord.next_epoch(2, ReadLimit()) == 2  # nothing new; epoch 2 committed
    assert REPORTED[log] == [(2, ["p0"])]
    coord.acknowledge(2)  # the engine's late commit: already told
    assert REPORTED[log] == [(2, ["p0"])]
    assert NOTIFIED[log] == [1, 2]
    coord.close()


def test_a_crash_after_the_report_repeats_it_and_a_crash_before_it_loses_nothing(store, log):
    source = ClosingLogSource(log)
    CLOSED[log] = {0}
    LOGS[log][0].extend([1, 2])
    coord = coordinator(source, store)
    assert coord.next_epoch(coord.initial_epoch(), ReadLimit()) == 1  # ends p0
    coord._lease.release()  # killed before the engine committed epoch 1: nothing told
    assert REPORTED.get(log) is None
    coord = coordinator(source, store)
    coord.acknowledge(1)  # the engine's commit, after the restart
    assert REPORTED[log] == [(1, ["p0"])]
    coord._lease.release()  # killed after the report, before a later record
    coord = coordinator(source, store, parallelism=3)  # and rescaled
    LOGS[log][1].extend([5])
    CLOSED[log].add(1)
    assert coord.next_epoch(1, ReadLimit()) == 2  # told again (at least once), then p1
    assert REPORTED[log] == [(1, ["p0"]), (1, ["p0"])]
    assert coord.next_epoch(2, ReadLimit()) == 2
    assert REPORTED[log][2:] == [(2, ["p1"])]
    coord.close()
    coord = coordinator(source, store)
    LOGS[log][2].extend([7])
    assert coord.next_epoch(2, ReadLimit()) == 3  # no record since the report: told again
    assert REPORTED[log][3:] == [(2, ["p1"])]
    coord.close()
    coord = coordinator(source, store)
    assert coord.next_epoch(3, ReadLimit()) == 3  # epoch 3 was recorded after it: done
    assert len(REPORTED[log]) == 4
    coord.close()


@attrs.define
class _Recording:
    """An enumerator that records the splits it is told, around a real one."""

    inner: Any
    told: list[tuple[int, list[str]]]

    def notify_splits_finished(self, checkpoint_id: int, split_ids: Sequence[str]) -> None:
        self.told.append((checkpoint_id, sorted(split_ids)))

    def start(self) -> None:
        self.inner.start()

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        self.inner.handle_split_request(subtask_id, requester_hostname)

    def add_splits_back(self, splits: list[Any], subtask_id: int) -> None:
        self.inner.add_splits_back(splits, subtask_id)

    def add_reader(self, subtask_id: int) -> None:
        self.inner.add_reader(subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return self.inner.snapshot_state(checkpoint_id)

    def close(self) -> None:
        self.inner.close()


class _RecordingSequence:
    def __init__(self, told: list[tuple[int, list[str]]]) -> None:
        self.inner = NumberSequenceSource(1, 40)
        self.told = told

    def create_enumerator(self, context: Any) -> Any:
        return _Recording(self.inner.create_enumerator(context), self.told)

    def restore_enumerator(self, context: Any, checkpoint: Any) -> Any:
        return _Recording(self.inner.restore_enumerator(context, checkpoint), self.told)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_splits_read_whole_are_told_once_each_epoch_by_epoch(store):
    told: list[tuple[int, list[str]]] = []
    source = _RecordingSequence(told)
    coord = coordinator(source, store)
    start, read = coord.initial_epoch(), []
    while (end := coord.next_epoch(start, ReadLimit(max_splits=1))) != start:
        ids = [i for piece in coord.slices(end) for i in piece.split_ids(source)]
        assert len(ids) == 1
        read.append((end, ids))
        assert [epoch for epoch, _ in told] == [epoch for epoch, _ in read[:-1]]
        start = end
    assert told == read  # each split told once, with the epoch that read it
    coord.close()
