"""An available-now run waits for no timer that would not run after the wait."""

from __future__ import annotations

import collections

import attrs
import pyarrow as pa

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.runtime import ReadLimit, SourceEpochCoordinator, SqliteCommitStateStore, _source_epochs
from sinkv2.source import Boundedness, SplitCut


@attrs.frozen
class LogSplit:
    name: str
    position: int = 0
    stop: int | None = None

    def split_id(self) -> str:
        return self.name


@attrs.frozen
class Pending:
    splits: tuple[LogSplit, ...]


class RetryLaterEnumerator:
    """Assigns its one split, and schedules a one-shot retry a minute away."""

    def __init__(self, context, pending, delay_ms, period_ms):
        self.context, self.pending = context, collections.deque(pending)
        self.delay_ms, self.period_ms = delay_ms, period_ms

    def start(self):
        self.context.call_async(
            lambda: None, lambda result, error: None, self.delay_ms, self.period_ms
        )

    def add_reader(self, subtask_id):
        pass

    def handle_split_request(self, subtask_id, host):
        if self.pending:
            self.context.assign_split(self.pending.popleft(), subtask_id)

    def add_splits_back(self, splits, subtask_id):
        self.pending.extend(splits)

    def snapshot_state(self, checkpoint_id):
        return Pending(tuple(self.pending))

    def close(self):
        pass


class LogSource:
    def __init__(self, delay_ms, period_ms):
        self.delay_ms, self.period_ms = delay_ms, period_ms

    def get_boundedness(self):
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, context):
        return RetryLaterEnumerator(context, [LogSplit("p0")], self.delay_ms, self.period_ms)

    def restore_enumerator(self, context, checkpoint):
        return RetryLaterEnumerator(context, checkpoint.splits, self.delay_ms, self.period_ms)

    def create_reader(self, context):
        raise NotImplementedError

    def get_split_serializer(self):
        return AttrsMsgpackSerializer(LogSplit, version=1)

    def get_enumerator_checkpoint_serializer(self):
        return AttrsMsgpackSerializer(Pending, version=1)

    def get_produced_type(self):
        return pa.schema([("n", pa.int64())])

    def end_positions(self, splits):
        return [10 for _ in splits]

    def cut_split(self, split, end, max_records):
        if end <= split.position:
            return SplitCut(read=None, rest=split, records=0)
        return SplitCut(
            read=attrs.evolve(split, stop=end),
            rest=attrs.evolve(split, position=end),
            records=end - split.position,
        )


def slept_while_planning(tmp_path, monkeypatch, delay_ms, period_ms):
    sleeps = []
    monkeypatch.setattr(_source_epochs.time, "sleep", sleeps.append)
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    coordinator = SourceEpochCoordinator(
        LogSource(delay_ms, period_ms), store, "log", parallelism=1
    )
    try:
        first = coordinator.initial_epoch()
        coordinator.prepare_available_now()
        assert coordinator.next_epoch(first, ReadLimit()) == first + 1
    finally:
        coordinator.close()
    return sleeps


def test_a_far_one_shot_timer_is_not_waited_for(tmp_path, monkeypatch):
    # it would not run after the wait (it is not due, and an available-now run runs no
    # timers later): waiting SETTLE_S for it only delays the run
    assert slept_while_planning(tmp_path, monkeypatch, 60_000, 0) == []


def test_a_periodic_discovery_is_still_run_a_second_time(tmp_path, monkeypatch):
    sleeps = slept_while_planning(tmp_path, monkeypatch, 0, 60_000)
    assert len(sleeps) == 1
    assert 0 < sleeps[0] <= _source_epochs.SETTLE_S
