"""Flink's reader-framework mocks, restated in Python for the ``test_flink_*`` ports.

Each class names the Flink mock it stands for (in
``flink-connector-base/src/test/.../source/reader/mocks`` and
``flink-core/src/test/.../api/connector/source/mocks``); they are written against
sinkv2's public API, not translated line by line.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import attrs

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2.source import SourceEvent
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

WAIT = 30.0
UNBOUNDED = None


class TestingReaderContext:
    """Flink's ``TestingReaderContext``: counts split requests, keeps sent events."""

    __test__ = False

    def __init__(self, subtask: int = 0, parallelism: int = 1) -> None:
        self.subtask = subtask
        self.parallelism = parallelism
        self.split_requests = 0
        self.sent_events: list[SourceEvent] = []
        self.metrics = InMemoryMetricGroup()

    def get_index_of_subtask(self) -> int:
        return self.subtask

    def current_parallelism(self) -> int:
        return self.parallelism

    def send_split_request(self) -> None:
        self.split_requests += 1

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        self.sent_events.append(source_event)

    def metric_group(self) -> InMemoryMetricGroup:
        return self.metrics


class TestingReaderOutput:
    """Flink's ``TestingReaderOutput``: every record emitted, and what was released."""

    __test__ = False

    def __init__(self) -> None:
        self.emitted: list[Any] = []
        self.by_split: dict[str, list[Any]] = {}
        self.created: list[str] = []
        self.released: list[str] = []

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self.emitted.append(record)

    def collect_batch(self, batch: Any) -> None:
        self.emitted.extend(next(iter(row.values())) for row in batch.to_pylist())

    def create_output_for_split(self, split_id: str) -> Any:
        self.created.append(split_id)
        parent = self

        class SplitOutput:
            def collect(self, record: Any, timestamp: int | None = None) -> None:
                parent.emitted.append(record)
                parent.by_split.setdefault(split_id, []).append(record)

            def collect_batch(self, batch: Any) -> None:
                for row in batch.to_pylist():
                    self.collect(next(iter(row.values())))

        return SplitOutput()

    def release_output_for_split(self, split_id: str) -> None:
        self.released.append(split_id)


class MockSourceSplit:
    """Flink's ``MockSourceSplit``: records ``(value, index)``; unbounded when ``end`` is None.

    Records can be added while a blocking fetch waits for them (`add_record`).
    """

    def __init__(self, split_id: int, index: int = 0, end: int | None = UNBOUNDED) -> None:
        self.id = split_id
        self.index = index
        self.end = end
        self.records: list[int] = []
        self._cond = threading.Condition()
        self._woken = False

    def split_id(self) -> str:
        return str(self.id)

    def add_record(self, value: int) -> MockSourceSplit:
        with self._cond:
            self.records.append(value)
            self._cond.notify_all()
        return self

    def is_finished(self) -> bool:
        return self.end is not None and self.index >= self.end

    def get_next(self, blocking: bool) -> tuple[int, int] | None:
        """The next ``(value, index)``, or None (non-blocking, or woken up)."""
        with self._cond:
            while self.index >= len(self.records):
                if not blocking or self._woken:
                    self._woken = False
                    return None
                self._cond.wait()
            record = (self.records[self.index], self.index)
            self.index += 1
            return record

    def wake_up(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()


def get_split(split_id: int, num_records: int, bounded: bool) -> MockSourceSplit:
    """``SourceReaderBaseTest#getSplit``: values ``split_id * 10 + j``."""
    split = MockSourceSplit(split_id, 0, num_records if bounded else UNBOUNDED)
    for j in range(num_records):
        split.add_record(split_id * 10 + j)
    return split


class MockSplitReader:
    """Flink's ``MockSplitReader`` (its builder's three settings).

    Args:
        records_per_split_per_fetch: At most this many records of each split per fetch.
        separated_finished_record: A split that ended is reported finished in a fetch of
            its own, with no records, instead of with its last records.
        blocking_fetch: A fetch waits for records of an unbounded split until `wake_up`.
    """

    def __init__(
        self,
        records_per_split_per_fetch: int = 2,
        *,
        separated_finished_record: bool = False,
        blocking_fetch: bool = False,
    ) -> None:
        self.per_fetch = records_per_split_per_fetch
        self.separated = separated_finished_record
        self.blocking = blocking_fetch
        self.splits: dict[str, MockSourceSplit] = {}
        self.closed = False
        self._lock = threading.Lock()
        self._woken = False
        self._fetching: MockSourceSplit | None = None

    def fetch(self) -> RecordsBySplits[tuple[int, int]]:
        """Up to ``per_fetch`` records of each split; a wake-up returns what it has."""
        records: dict[str, list[tuple[int, int]]] = {}
        finished: list[str] = []
        for split_id, split in list(self.splits.items()):
            got = False
            for _ in range(self.per_fetch):
                if split.is_finished():
                    break
                with self._lock:
                    if self._woken:  # Flink's mock: an interrupt ends the fetch
                        self._woken = False
                        return RecordsBySplits(records, finished)
                    self._fetching = split
                record = split.get_next(self.blocking)
                with self._lock:
                    self._fetching = None
                if record is None:
                    break
                records.setdefault(split_id, []).append(record)
                got = True
            if split.is_finished() and (not self.separated or not got):
                finished.append(split_id)
                del self.splits[split_id]
                if self.separated:
                    break
        return RecordsBySplits(records, finished)

    def handle_splits_changes(self, splits_changes: SplitsChange[MockSourceSplit]) -> None:
        if isinstance(splits_changes, SplitsAddition):
            for split in splits_changes.splits:
                self.splits[split.split_id()] = split

    def wake_up(self) -> None:
        with self._lock:
            self._woken = True
            fetching = self._fetching
        if fetching is not None:
            fetching.wake_up()

    def close(self) -> None:
        self.closed = True


@attrs.define
class Position:
    """The split state of `MockSourceReader`: Flink's ``AtomicInteger``."""

    value: int


class MockRecordEmitter:
    """Flink's ``MockRecordEmitter``: emits the value, moves the state after its index."""

    def emit_record(self, element: tuple[int, int], output: Any, split_state: Position) -> None:
        output.collect(element[0])
        split_state.value = element[1] + 1


class MockSourceReader(SingleThreadMultiplexSourceReaderBase[Any, int, MockSourceSplit, Position]):
    """Flink's ``MockSourceReader``; also keeps every ``on_split_finished`` call."""

    def __init__(
        self,
        split_reader: Callable[[], Any],
        context: TestingReaderContext | None = None,
        *,
        element_queue_capacity: int = 1,
    ) -> None:
        super().__init__(
            split_reader,
            MockRecordEmitter(),
            context or TestingReaderContext(),
            element_queue_capacity=element_queue_capacity,
        )
        self.finished_calls: list[dict[str, int]] = []

    def initialized_state(self, split: MockSourceSplit) -> Position:
        return Position(split.index)

    def to_split_type(self, split_id: str, split_state: Position) -> MockSourceSplit:
        return MockSourceSplit(int(split_id), split_state.value)

    def on_split_finished(self, finished_split_ids: dict[str, Position]) -> None:
        self.finished_calls.append({k: v.value for k, v in finished_split_ids.items()})


@attrs.frozen
class TestingSourceSplit:
    """Flink's ``TestingSourceSplit``: an id only."""

    __test__ = False

    id: str

    def split_id(self) -> str:
        return self.id


class TestingRecordsWithSplitIds:
    """Flink's ``TestingRecordsWithSplitIds``: one split's records; knows if recycled."""

    __test__ = False

    def __init__(self, split_id: str, *records: Any, finished: Collection[str] = ()) -> None:
        self._split_id: str | None = split_id
        self._records = collections.deque(records)
        self._finished = list(finished)
        self.recycled = False

    def next_split(self) -> str | None:
        split_id, self._split_id = self._split_id, None
        return split_id

    def next_record_from_split(self) -> Any:
        return self._records.popleft() if self._records else None

    def finished_splits(self) -> Collection[str]:
        return self._finished

    def recycle(self) -> None:
        self.recycled = True


class TwoSplitRecords:
    """A `TestingRecordsWithSplitIds` over two splits, for the per-split granularity."""

    def __init__(self, records: dict[str, Sequence[Any]]) -> None:
        self._splits = iter(list(records.items()))
        self._records: collections.deque[Any] = collections.deque()
        self.recycled = False

    def next_split(self) -> str | None:
        found = next(self._splits, None)
        if found is None:
            return None
        self._records = collections.deque(found[1])
        return found[0]

    def next_record_from_split(self) -> Any:
        return self._records.popleft() if self._records else None

    def finished_splits(self) -> Collection[str]:
        return ()

    def recycle(self) -> None:
        self.recycled = True


class TestingSplitReader:
    """Flink's ``TestingSplitReader``: hands out the given fetches, then blocks until woken."""

    __test__ = False

    def __init__(self, *fetches: Any, close_with_exception: bool = False) -> None:
        self.fetches = collections.deque(fetches)
        self.close_with_exception = close_with_exception
        self.closed = False
        self._gate = threading.Event()

    def fetch(self) -> Any:
        if self.fetches:
            return self.fetches.popleft()
        self._gate.wait(WAIT)
        self._gate.clear()
        return RecordsBySplits({})

    def handle_splits_changes(self, splits_changes: Any) -> None:
        pass

    def wake_up(self) -> None:
        self._gate.set()

    def close(self) -> None:
        self.closed = True
        self._gate.set()
        if self.close_with_exception:
            raise RuntimeError("Artificial exception on closing the split reader.")


class PassThroughReader(SingleThreadMultiplexSourceReaderBase[Any, Any, TestingSourceSplit, Any]):
    """``createReaderAndAwaitAvailable``'s anonymous reader: the split is its own state."""

    def __init__(self, split_reader: Callable[[], Any]) -> None:
        class PassThroughRecordEmitter:
            def emit_record(self, element: Any, output: Any, split_state: Any) -> None:
                output.collect(element)

        super().__init__(split_reader, PassThroughRecordEmitter(), TestingReaderContext())

    def initialized_state(self, split: TestingSourceSplit) -> TestingSourceSplit:
        return split

    def to_split_type(self, split_id: str, split_state: TestingSourceSplit) -> TestingSourceSplit:
        return split_state

    def on_split_finished(self, finished_split_ids: dict[str, Any]) -> None:
        pass


def values(records: Iterable[Any]) -> list[int]:
    return sorted(records)
