"""flink-connector-base in Python: the fetcher thread, the hand-over queue, `SourceReaderBase`."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from flip27_fixtures import (
    BlockingSplitReader,
    ListSource,
    ListSourceReader,
    ListSplit,
    ListSplitReader,
    RowEmitter,
)

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.source import Boundedness, InputStatus, SourceContractError, SourceReaderError
from sinkv2.source.reader import (
    ElementQueue,
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
)
from sinkv2.testing import check_source_reader
from sinkv2.testing._source_reader_check import _Context as Context

WAIT = 30.0


class Output:
    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.by_split: dict[str, list[Any]] = {}
        self.released: list[str] = []

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self.rows.append(record)

    def collect_batch(self, batch: Any) -> None:
        self.rows.extend(batch.to_pylist())

    def create_output_for_split(self, split_id: str) -> Any:
        output = self

        class Split:
            def collect(self, record: Any, timestamp: int | None = None) -> None:
                output.rows.append(record)
                output.by_split.setdefault(split_id, []).append(record)

            def collect_batch(self, batch: Any) -> None:
                for row in batch.to_pylist():
                    self.collect(row)

        return Split()

    def release_output_for_split(self, split_id: str) -> None:
        self.released.append(split_id)


def drain(reader: Any, output: Output, until: int | None = None) -> InputStatus:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if until is not None and len(output.rows) >= until:
            return InputStatus.MORE_AVAILABLE
        status = reader.poll_next(output)
        if status is InputStatus.END_OF_INPUT:
            return status
        if status is InputStatus.NOTHING_AVAILABLE:
            if until is None and not reader._states and reader._no_more_splits is False:
                return status
            reader.is_available().result(WAIT)
    raise AssertionError(f"no end within {WAIT} s; {len(output.rows)} rows")


def poll_for(reader: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reader.poll_next(Output())


def splits(count: int = 3, size: int = 7) -> list[ListSplit]:
    return [ListSplit(f"s{i}", tuple(range(i * size, (i + 1) * size))) for i in range(count)]


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "arrow"])
def test_a_multiplexed_reader_emits_every_split_in_order_and_then_ends(arrow: bool):
    reader = ListSourceReader(Context(), arrow=arrow)
    output = Output()
    reader.start()
    reader.add_splits(splits())
    reader.notify_no_more_splits()
    assert drain(reader, output) is InputStatus.END_OF_INPUT
    assert sorted(row["value"] for row in output.rows) == list(range(21))
    for split_id, rows in output.by_split.items():
        values = [row["value"] for row in rows]
        assert values == sorted(values), split_id
    assert sorted(output.released) == ["s0", "s1", "s2"]
    assert reader.snapshot_state(1) == []
    reader.close()
    assert reader.split_readers[-1].closed


def test_finished_splits_are_reported_to_the_subclass_which_asks_for_more():
    finished: list[set[str]] = []

    class Recording(ListSourceReader):
        def on_split_finished(self, finished_split_ids: dict[str, Any]) -> None:
            finished.append(set(finished_split_ids))
            super().on_split_finished(finished_split_ids)

    context = Context()
    reader = Recording(context)
    reader.start()
    assert context.split_requests == 1
    reader.add_splits(splits(2))
    reader.notify_no_more_splits()
    assert drain(reader, Output()) is InputStatus.END_OF_INPUT
    assert set().union(*finished) == {"s0", "s1"}
    assert context.split_requests == 1 + len(finished)  # one at start, one per report
    reader.close()


def test_snapshot_holds_every_unfinished_split_at_the_position_after_the_last_emitted_record():
    reader = ListSourceReader(Context())
    output = Output()
    reader.add_splits(splits(3, size=30))
    drain(reader, output, until=10)
    state = {split.id: split for split in reader.snapshot_state(1)}
    emitted = {sid: len(rows) for sid, rows in output.by_split.items()}
    assert set(state) == {"s0", "s1", "s2"}
    for split_id, split in state.items():
        assert split.position == emitted.get(split_id, 0)
    reader.close()


def test_a_split_added_while_the_fetcher_blocks_wakes_it_up():
    blocking = BlockingSplitReader()
    reader = SingleThreadMultiplexSourceReaderBase_with(lambda: blocking)
    reader.add_splits(splits(1))
    assert blocking.blocked.wait(WAIT)
    reader.add_splits([ListSplit("late", (100, 101))])
    deadline = time.monotonic() + WAIT
    while blocking.wake_ups == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert blocking.wake_ups >= 1  # the blocking fetch was woken up for the new split
    blocking.gate.set()
    output = Output()
    reader.notify_no_more_splits()
    deadline = time.monotonic() + WAIT
    status = InputStatus.MORE_AVAILABLE
    while status is not InputStatus.END_OF_INPUT and time.monotonic() < deadline:
        blocking.gate.set()
        status = reader.poll_next(output)
    assert status is InputStatus.END_OF_INPUT
    assert sorted(row["value"] for row in output.rows) == [*range(7), 100, 101]
    reader.close()


class _StateReader(SingleThreadMultiplexSourceReaderBase[Any, Any, ListSplit, Any]):
    def initialized_state(self, split: ListSplit) -> Any:
        from flip27_fixtures import ListSplitState

        return ListSplitState(split, split.position)

    def to_split_type(self, split_id: str, split_state: Any) -> ListSplit:
        return ListSplit(split_id, split_state.split.values, split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, Any]) -> None:
        pass


def SingleThreadMultiplexSourceReaderBase_with(  # reads as the class it makes
    supplier: Any, capacity: int = 2
) -> _StateReader:
    return _StateReader(supplier, RowEmitter(), Context(), element_queue_capacity=capacity)


def test_the_queue_bounds_what_a_fast_fetcher_holds_while_the_consumer_is_slow():
    split_reader = ListSplitReader(per_fetch=1)
    reader = SingleThreadMultiplexSourceReaderBase_with(lambda: split_reader, capacity=2)
    reader.add_splits([ListSplit("big", tuple(range(10_000)))])
    time.sleep(0.3)  # the fetcher runs ahead until the queue is full, then blocks in put
    fetched_while_idle = split_reader.fetches
    assert reader._queue.size() <= 2
    # capacity 2 in the queue, one fetch waiting to be put, one being made: never more
    assert fetched_while_idle <= 2 + 2
    output = Output()
    for _ in range(5):
        reader.poll_next(output)
    time.sleep(0.2)
    assert split_reader.fetches <= fetched_while_idle + 5 + 1
    reader.close()


def test_a_fetcher_error_reaches_the_reader_thread_as_source_reader_error():
    class Failing(ListSplitReader):
        def fetch(self) -> Any:
            raise OSError("the disk went away")

    reader = SingleThreadMultiplexSourceReaderBase_with(Failing)
    reader.add_splits(splits(1))
    reader.is_available().result(WAIT)
    with pytest.raises(
        SourceReaderError, match="the split fetcher failed: OSError: the disk went away"
    ) as info:
        poll_for(reader, WAIT)
    assert isinstance(info.value.__cause__, OSError)
    reader.close()


def test_records_of_a_split_the_reader_does_not_hold_are_a_contract_error():
    class Stray(ListSplitReader):
        def fetch(self) -> Any:
            return RecordsBySplits({"stranger": [1]})

    reader = SingleThreadMultiplexSourceReaderBase_with(Stray)
    reader.add_splits(splits(1))
    reader.is_available().result(WAIT)
    with pytest.raises(SourceContractError, match="records of split 'stranger'") as info:
        reader.poll_next(Output())
    assert (info.value.method, info.value.split_id) == ("fetch", "stranger")
    reader.close()


@pytest.mark.parametrize("fetched", [[], {"s0": [1]}], ids=["list", "dict"])
def test_a_fetch_that_is_not_records_with_split_ids_is_named(fetched: Any):
    class Wrong(ListSplitReader):
        def fetch(self) -> Any:
            return fetched

    reader = SingleThreadMultiplexSourceReaderBase_with(Wrong)
    reader.add_splits(splits(1))
    reader.is_available().result(WAIT)
    with pytest.raises(SourceReaderError) as info:
        poll_for(reader, WAIT)
    cause = info.value.__cause__
    assert isinstance(cause, SourceContractError)
    assert cause.method == "fetch"
    assert f"Wrong.fetch() returned {fetched!r} of type {type(fetched).__name__}" in str(cause)
    assert "return a RecordsWithSplitIds, e.g. RecordsBySplits({split_id: records}" in str(cause)
    reader.close()


def test_records_by_splits_refuses_a_list_of_records_and_one_str_of_finished_splits():
    listed = r"mapping of split id to that split's records \(got \[1, 2\] of type list\)"
    with pytest.raises(TypeError, match=listed):
        RecordsBySplits([1, 2])  # type: ignore[arg-type]
    one_str = r"got the str 's0', which would be its characters\); pass \['s0'\]"
    with pytest.raises(TypeError, match=one_str):
        RecordsBySplits({}, "s0")


def test_a_subclass_that_skips_super_init_is_told_to_call_it():
    class Forgetful(_StateReader):
        def __init__(self, context: Any) -> None:
            self.own = context

    reader = Forgetful(Context())
    message = (
        r"Forgetful has no context: its __init__ did not call "
        r"SingleThreadMultiplexSourceReaderBase\.__init__\(split_reader_supplier, "
        r"record_emitter, context\); call super\(\)\.__init__\(\.\.\.\) first"
    )
    with pytest.raises(AttributeError, match=message):
        reader.context.send_split_request()
    with pytest.raises(AttributeError, match="has no _states: its __init__ did not call"):
        reader.snapshot_state(1)
    with pytest.raises(AttributeError, match="'Forgetful' object has no attribute 'other'"):
        reader.other  # noqa: B018  # any other missing attribute: Python's own message
    assert reader.own is not None


def test_a_split_added_twice_is_refused():
    reader = SingleThreadMultiplexSourceReaderBase_with(ListSplitReader)
    reader.add_splits(splits(1))
    with pytest.raises(
        SourceContractError, match="split 's0' was added to reader 0 while it already holds it"
    ):
        reader.add_splits(splits(1))
    reader.close()


def test_bad_constructor_arguments_are_named():
    with pytest.raises(TypeError, match="split_reader_supplier must be a callable"):
        _StateReader(ListSplitReader(), RowEmitter(), Context())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="element_queue_capacity must be an int >= 1"):
        _StateReader(ListSplitReader, RowEmitter(), Context(), element_queue_capacity=0)


def test_the_queue_blocks_a_full_put_until_polled_or_woken_up():
    queue: ElementQueue[int] = ElementQueue(1)
    assert queue.put(0, 1)
    results: list[bool] = []
    putter = threading.Thread(target=lambda: results.append(queue.put(0, 2)))
    putter.start()
    time.sleep(0.05)
    assert results == []  # blocked: the queue is full
    queue.wake_up_putting_thread(0)
    putter.join(WAIT)
    assert results == [False]  # woken up: not enqueued
    future = queue.availability()
    assert future.done()
    assert queue.poll() == 1
    waiting = queue.availability()
    assert not waiting.done()
    assert queue.put(0, 3)
    assert waiting.done()
    assert queue.poll() == 3
    assert queue.poll() is None
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        ElementQueue(0)


def test_splits_changes_and_records_by_splits_read_as_flinks():
    records: RecordsBySplits[int] = RecordsBySplits({"a": [1, 2], "b": [3]}, ["b"])
    seen = []
    while (split_id := records.next_split()) is not None:
        while (record := records.next_record_from_split()) is not None:
            seen.append((split_id, record))
    assert seen == [("a", 1), ("a", 2), ("b", 3)]
    assert set(records.finished_splits()) == {"b"}
    assert RecordsBySplits.finished("x").next_split() is None
    assert SplitsAddition((ListSplit("a", ()),)).splits[0].id == "a"


@pytest.mark.parametrize("arrow", [False, True], ids=["rows", "arrow"])
def test_the_framework_passes_flinks_source_reader_test_base(arrow: bool):
    def get_split(index: int, records: int, boundedness: Boundedness) -> ListSplit:
        count = records if boundedness is Boundedness.BOUNDED else records * 3
        first = index * records
        values = tuple(range(first, first + records)) + tuple(
            range(10_000 + first, 10_000 + first + count - records)
        )
        return ListSplit(str(index), values)

    check_source_reader(
        lambda context: ListSourceReader(context, arrow=arrow),
        get_split,
        value_of=lambda row: row["value"],
        next_record_index=lambda split: split.position,
        split_serializer=AttrsMsgpackSerializer(ListSplit),
    )


def test_the_framework_passes_the_source_kit():
    from sinkv2.testing import check_source

    check_source(lambda: ListSource(arrow=True), expected=ListSource().expected(), max_examples=15)
