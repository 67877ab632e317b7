"""`check_source_reader`: Flink's ``SourceReaderTestBase`` for a Python `SourceReader`.

Flink's fixture, restated: 10 splits of 10 records each, whose values are
``0..99`` (split ``i`` holds ``10 * i .. 10 * i + 9``). The reader runs alone, with
no enumerator, on a test context; `poll_next` is called in this thread and
``is_available`` is awaited with a timeout, so a reader that never wakes up fails
instead of hanging.
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, Final

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.source import Boundedness, InputStatus, SourceEvent

__all__ = ["check_source_reader"]

SPLITS: Final = 10
RECORDS_PER_SPLIT: Final = 10
TOTAL: Final = SPLITS * RECORDS_PER_SPLIT
_WAIT_SECONDS: Final = 30.0
_OVERREAD: Final = 10


class _Context:
    def __init__(self) -> None:
        self.split_requests = 0
        self.events: list[SourceEvent] = []
        self._metrics = InMemoryMetricGroup()

    def get_index_of_subtask(self) -> int:
        return 0

    def current_parallelism(self) -> int:
        return 1

    def send_split_request(self) -> None:
        self.split_requests += 1

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        self.events.append(source_event)

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


class _Collect:
    """A `ReaderOutput` that keeps each record's value, and counts records per split."""

    def __init__(self, value_of: Callable[[Any], int]) -> None:
        self.values: list[int] = []
        self.per_split: collections.Counter[str] = collections.Counter()
        self.unattributed = 0
        self.value_of = value_of

    def add(self, split_id: str | None, values: list[int]) -> None:
        self.values.extend(values)
        if split_id is None:
            self.unattributed += len(values)
        else:
            self.per_split[split_id] += len(values)

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self.add(None, [self.value_of(record)])

    def collect_batch(self, batch: Any) -> None:
        self.add(None, [self.value_of(row) for row in batch.to_pylist()])

    def create_output_for_split(self, split_id: str) -> _SplitCollect:
        return _SplitCollect(self, split_id)

    def release_output_for_split(self, split_id: str) -> None:
        pass


class _SplitCollect:
    def __init__(self, parent: _Collect, split_id: str) -> None:
        self._parent = parent
        self._split_id = split_id

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._parent.add(self._split_id, [self._parent.value_of(record)])

    def collect_batch(self, batch: Any) -> None:
        value_of = self._parent.value_of
        self._parent.add(self._split_id, [value_of(row) for row in batch.to_pylist()])


def _poll_until(reader: Any, output: _Collect, count: int, case: str) -> InputStatus:
    """Poll until ``count`` values arrived, waiting on ``is_available`` when told to."""
    deadline = time.monotonic() + _WAIT_SECONDS
    status = InputStatus.MORE_AVAILABLE
    while len(output.values) < count:
        status = reader.poll_next(output)
        if status is InputStatus.END_OF_INPUT:
            break
        if status is InputStatus.NOTHING_AVAILABLE and len(output.values) < count:
            _await(reader, deadline, case)  # as Flink's consumeRecords: wait only for more
        if time.monotonic() > deadline:
            break
    if len(output.values) < count:
        raise AssertionError(
            f"check_source_reader: {case}: {len(output.values)} of {count} records arrived "
            f"within {_WAIT_SECONDS:.0f} s (last status {status.name})"
        )
    return status


def _await(reader: Any, deadline: float, case: str) -> None:
    future = reader.is_available()
    try:
        future.result(max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        raise AssertionError(
            f"check_source_reader: {case}: poll_next returned NOTHING_AVAILABLE and "
            f"is_available() did not complete within {_WAIT_SECONDS:.0f} s"
        ) from None


def _expect(condition: bool, case: str, message: str) -> None:
    if not condition:
        raise AssertionError(f"check_source_reader: {case}: {message}")


def check_source_reader(
    create_reader: Callable[[Any], Any],
    get_split: Callable[[int, int, Boundedness], Any],
    *,
    value_of: Callable[[Any], int],
    next_record_index: Callable[[Any], int],
    split_serializer: Any = None,
) -> None:
    """Run Flink's five ``SourceReaderTestBase`` cases against a reader.

    Args:
        create_reader: Makes a reader from a `SourceReaderContext` (e.g.
            ``source.create_reader``).
        get_split: ``(index, records, boundedness) -> split``: split ``index`` holds
            the values ``index * records .. index * records + records - 1``; an
            unbounded split goes on after them (it never finishes). ``testSnapshot``
            stops a reader that reads its splits one at a time after 1,000 records,
            so a finite split longer than that (a long file) can stand in for an
            unbounded one.
        value_of: The int value of an emitted record (a dict, or a row of a batch).
        next_record_index: How many records of its split a snapshotted split has
            emitted (its position, in records).
        split_serializer: If given, every snapshotted split must round-trip through it.

    Raises:
        AssertionError: A case failed; the message names it (Flink's test name).
    """
    for case in (_test_read, _test_add_split_to_existing_fetcher, _test_polling_from_empty_queue):
        reader = create_reader(_Context())
        try:
            case(reader, get_split, value_of)
        finally:
            reader.close()
    reader = create_reader(_Context())
    try:
        _test_available_on_empty_queue(reader, get_split)
    finally:
        reader.close()
    reader = create_reader(_Context())
    try:
        _test_snapshot(reader, get_split, value_of, next_record_index, split_serializer)
    finally:
        reader.close()


def _all_values(case: str, values: list[int]) -> None:
    _expect(
        sorted(values) == list(range(TOTAL)),
        case,
        f"expected each of 0..{TOTAL - 1} once, got {len(values)} values "
        f"({len(set(values))} distinct, min {min(values, default=None)}, "
        f"max {max(values, default=None)})",
    )


def _test_read(reader: Any, get_split: Callable[..., Any], value_of: Callable[..., int]) -> None:
    case = "testRead"
    output = _Collect(value_of)
    reader.start()
    reader.add_splits([get_split(i, RECORDS_PER_SPLIT, Boundedness.BOUNDED) for i in range(SPLITS)])
    reader.notify_no_more_splits()
    _poll_until(reader, output, TOTAL, case)
    _all_values(case, output.values)


def _test_add_split_to_existing_fetcher(
    reader: Any, get_split: Callable[..., Any], value_of: Callable[..., int]
) -> None:
    case = "testAddSplitToExistingFetcher"
    output = _Collect(value_of)
    reader.start()
    reader.add_splits([get_split(0, RECORDS_PER_SPLIT, Boundedness.BOUNDED)])
    _poll_until(reader, output, 5, case)
    reader.add_splits(
        [get_split(i, RECORDS_PER_SPLIT, Boundedness.BOUNDED) for i in range(1, SPLITS)]
    )
    reader.notify_no_more_splits()
    _poll_until(reader, output, TOTAL, case)
    _all_values(case, output.values)


def _test_polling_from_empty_queue(
    reader: Any, get_split: Callable[..., Any], value_of: Callable[..., int]
) -> None:
    case = "testPollingFromEmptyQueue"
    output = _Collect(value_of)
    reader.start()
    reader.add_splits([get_split(0, RECORDS_PER_SPLIT, Boundedness.BOUNDED)])
    _poll_until(reader, output, RECORDS_PER_SPLIT, case)
    deadline = time.monotonic() + _WAIT_SECONDS
    status = reader.poll_next(output)
    while status is InputStatus.MORE_AVAILABLE and time.monotonic() < deadline:
        status = reader.poll_next(output)
    _expect(
        status is InputStatus.NOTHING_AVAILABLE,
        case,
        f"with its one split read and no notify_no_more_splits(), poll_next must return "
        f"NOTHING_AVAILABLE (got {status.name})",
    )
    reader.notify_no_more_splits()
    status = _poll_until(reader, output, RECORDS_PER_SPLIT, case)
    while status is not InputStatus.END_OF_INPUT and time.monotonic() < deadline:
        status = reader.poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE:
            _await(reader, deadline, case)
    _expect(
        status is InputStatus.END_OF_INPUT,
        case,
        f"after notify_no_more_splits(), poll_next must end with END_OF_INPUT (got {status.name})",
    )
    _expect(
        len(output.values) == RECORDS_PER_SPLIT,
        case,
        f"expected {RECORDS_PER_SPLIT} records, got {len(output.values)}",
    )


def _test_available_on_empty_queue(reader: Any, get_split: Callable[..., Any]) -> None:
    case = "testAvailableOnEmptyQueue"
    reader.start()
    future = reader.is_available()
    _expect(
        isinstance(future, concurrent.futures.Future),
        case,
        f"is_available() must return a concurrent.futures.Future (got {describe(future)})",
    )
    _expect(not future.done(), case, "is_available() is done although the reader has no split")
    reader.add_splits([get_split(0, RECORDS_PER_SPLIT, Boundedness.BOUNDED)])
    try:
        future.result(_WAIT_SECONDS)
    except concurrent.futures.TimeoutError:
        raise AssertionError(
            f"check_source_reader: {case}: the future is_available() returned did not "
            f"complete within {_WAIT_SECONDS:.0f} s of add_splits()"
        ) from None


def _test_snapshot(
    reader: Any,
    get_split: Callable[..., Any],
    value_of: Callable[..., int],
    next_record_index: Callable[[Any], int],
    serializer: Any,
) -> None:
    case = "testSnapshot"
    output = _Collect(value_of)
    reader.start()
    splits = [
        get_split(i, RECORDS_PER_SPLIT, Boundedness.CONTINUOUS_UNBOUNDED) for i in range(SPLITS)
    ]
    reader.add_splits(splits)
    _poll_until(reader, output, TOTAL, case)
    deadline = time.monotonic() + _WAIT_SECONDS
    while (
        not output.unattributed
        and min(output.per_split[split.split_id()] for split in splits) < RECORDS_PER_SPLIT
        and len(output.values) < _OVERREAD * TOTAL  # a reader that reads one split at a time
        and time.monotonic() < deadline
    ):
        if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
            _await(reader, deadline, case)
    state = reader.snapshot_state(1)
    ids = sorted(split.split_id() for split in state)
    _expect(
        ids == sorted(split.split_id() for split in splits),
        case,
        f"snapshot_state(1) must hold the {SPLITS} unbounded splits (got {ids})",
    )
    for split in state:
        emitted = output.per_split[split.split_id()] if not output.unattributed else None
        if emitted is None and len(output.values) == TOTAL:
            emitted = RECORDS_PER_SPLIT
        _expect(
            emitted is None or next_record_index(split) == emitted,
            case,
            f"split {split.split_id()!r} was snapshotted at record {next_record_index(split)} "
            f"but {emitted} of its records were emitted: a snapshot holds the position after "
            "the last record emitted",
        )
        if serializer is not None:
            framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, split)
            back = SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
            _expect(
                back == split,
                case,
                f"split {split.split_id()!r} does not round-trip through the split serializer: "
                f"wrote {short_repr(split)}, read {short_repr(back)}",
            )
