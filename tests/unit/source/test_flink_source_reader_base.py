"""Flink's ``SourceReaderBaseTest`` (and ``SourceReaderBaseUnitTest``), one test per Java test.

flink-connector-base's tests of ``SourceReaderBase``, restated through sinkv2's
public reader framework with Flink's mocks (`flink_reader_mocks`). The
``SourceReaderTestBase`` cases it inherits are at the end, with Flink's mock reader
and its settings (queue capacity 1, a blocking fetch of 2 records per split).

Left out: ``testPerSplitWatermark`` (per-split watermarks are not on Spark, see
design/SOURCES.md) and ``testMultipleSplitsAndFinishedByRecordEvaluator`` (sinkv2
has no ``RecordEvaluator``).

One deliberate difference (``sinkv2.source.reader._base``'s docstring): a
`poll_next` call emits every record the current fetch holds of the current split,
not one record, so ``testRecordsWithSplitsNotRecycledWhenRecordsLeft`` is stated
at that granularity.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from flink_reader_mocks import (
    UNBOUNDED,
    WAIT,
    MockSourceReader,
    MockSourceSplit,
    MockSplitReader,
    PassThroughReader,
    TestingReaderContext,
    TestingReaderOutput,
    TestingRecordsWithSplitIds,
    TestingSourceSplit,
    TestingSplitReader,
    TwoSplitRecords,
    get_split,
)

from sinkv2.source import Boundedness, InputStatus, SourceReaderError
from sinkv2.source.reader import ElementQueue, SingleThreadFetcherManager
from sinkv2.testing import check_source_reader

NUM_RECORDS_PER_SPLIT = 10


def read_to_end(reader: Any, output: TestingReaderOutput) -> None:
    """Poll, waiting on `is_available` after NOTHING_AVAILABLE, until END_OF_INPUT."""
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, f"no END_OF_INPUT within {WAIT} s: {reader!r}"
        status = reader.poll_next(output)
        if status is InputStatus.END_OF_INPUT:
            return
        if status is InputStatus.NOTHING_AVAILABLE:
            reader.is_available().result(WAIT)


def poll_until_it_raises(reader: Any) -> None:
    """Poll (waiting when told to) until poll_next raises; it never says END_OF_INPUT."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        status = reader.poll_next(TestingReaderOutput())
        assert status is not InputStatus.END_OF_INPUT
        if status is InputStatus.NOTHING_AVAILABLE:
            reader.is_available().result(WAIT)


def test_exception_in_split_reader():
    """``testExceptionInSplitReader``: a fetch error surfaces in poll_next, never END_OF_INPUT."""

    class Failing(TestingSplitReader):
        def fetch(self) -> Any:
            raise RuntimeError("Testing Exception")

    reader = MockSourceReader(Failing)
    try:
        reader.add_splits([get_split(0, NUM_RECORDS_PER_SPLIT, bounded=False)])
        reader.notify_no_more_splits()
        with pytest.raises(SourceReaderError, match="split fetcher failed") as raised:
            poll_until_it_raises(reader)
        assert isinstance(raised.value.__cause__, RuntimeError)
        assert str(raised.value.__cause__) == "Testing Exception"
    finally:
        reader.close()


def await_available(records: Any) -> PassThroughReader:
    """``createReaderAndAwaitAvailable``: a reader of one fetch, its future done."""
    reader = PassThroughReader(lambda: TestingSplitReader(records))
    reader.start()
    split_ids = ["test-split"] if isinstance(records, TestingRecordsWithSplitIds) else ["a", "b"]
    reader.add_splits([TestingSourceSplit(split_id) for split_id in split_ids])
    reader.is_available().result(WAIT)
    return reader


def test_records_with_splits_not_recycled_when_records_left():
    """``testRecordsWithSplitsNotRecycledWhenRecordsLeft``, at sinkv2's per-split granularity.

    A poll that leaves records of the fetch unread (here: the second split's) must
    not recycle it.
    """
    records = TwoSplitRecords({"a": ["value1", "value2"], "b": ["value3"]})
    reader = await_available(records)
    try:
        output = TestingReaderOutput()
        assert reader.poll_next(output) is InputStatus.MORE_AVAILABLE
        assert output.emitted == ["value1", "value2"]
        assert not records.recycled
    finally:
        reader.close()


def test_records_with_splits_recycled_when_empty():
    """``testRecordsWithSplitsRecycledWhenEmpty``: three polls recycle a fetch of two records."""
    records = TestingRecordsWithSplitIds("test-split", "value1", "value2")
    reader = await_available(records)
    try:
        for _ in range(3):
            reader.poll_next(TestingReaderOutput())
        assert records.recycled
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("sizes", "separated"),
    [((10, 12), False), ((10, 10), True)],
    ids=[
        "testMultipleSplitsWithDifferentFinishingMoments",
        "testMultipleSplitsWithSeparatedFinishedRecord",
    ],
)
def test_multiple_splits_reach_end_of_input(sizes: tuple[int, int], separated: bool):
    """``testMultipleSplitsWithDifferentFinishingMoments`` / ``...WithSeparatedFinishedRecord``.

    Two bounded splits read two records per fetch, their ends reported with the last
    records or in a fetch of their own: the reader reaches END_OF_INPUT with every
    record once, each split finished (and its output released) once, at its end.
    """
    split_reader = MockSplitReader(2, separated_finished_record=separated)
    reader = MockSourceReader(lambda: split_reader)
    try:
        reader.start()
        reader.add_splits([get_split(i, size, bounded=True) for i, size in enumerate(sizes)])
        reader.notify_no_more_splits()
        output = TestingReaderOutput()
        read_to_end(reader, output)
        expected = [i * 10 + j for i, size in enumerate(sizes) for j in range(size)]
        assert sorted(output.emitted) == sorted(expected)
        assert sorted(k for call in reader.finished_calls for k in call) == ["0", "1"]
        assert {k: v for call in reader.finished_calls for k, v in call.items()} == {
            "0": sizes[0],
            "1": sizes[1],
        }
        assert sorted(output.released) == ["0", "1"]
        assert reader.snapshot_state(1) == []
    finally:
        reader.close()


class BlockingShutdownSplitFetcherManager:
    """Flink's test helper: shutting fetchers down first runs a hook, then waits for it."""

    def __init__(self, queue: ElementQueue[Any], supplier: Any, on_shutdown: Any) -> None:
        self._inner = SingleThreadFetcherManager(queue, supplier)
        self._on_shutdown = on_shutdown

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def maybe_shutdown_finished_fetchers(self) -> bool:
        self._on_shutdown()
        deadline = time.monotonic() + WAIT
        while not self._inner.maybe_shutdown_finished_fetchers():
            assert time.monotonic() < deadline, "the fetcher did not go idle"
            time.sleep(0.001)
        return True


def test_poll_next_return_more_available_when_all_split_fetcher_close_with_leftover_element_in_queue():  # noqa: E501
    """``testPollNextReturnMoreAvailableWhenAllSplitFetcherCloseWithLeftoverElementInQueue``.

    The fetcher hands over a split's last record while the reader shuts the idle
    fetchers down after notify_no_more_splits: the record is still in the queue, so
    the status is MORE_AVAILABLE, not END_OF_INPUT.
    """
    from sinkv2.source.reader import SourceReaderBase

    split = MockSourceSplit(0, 0, 1)  # one record, not there yet: the fetch blocks
    queue: ElementQueue[Any] = ElementQueue(1)
    manager = BlockingShutdownSplitFetcherManager(
        queue, lambda: MockSplitReader(1, blocking_fetch=True), lambda: split.add_record(1)
    )

    class Reader(SourceReaderBase[Any, int, MockSourceSplit, Any]):
        initialized_state = MockSourceReader.initialized_state
        to_split_type = MockSourceReader.to_split_type

        def on_split_finished(self, finished_split_ids: dict[str, Any]) -> None:
            pass

    from flink_reader_mocks import MockRecordEmitter

    reader = Reader(queue, manager, MockRecordEmitter(), TestingReaderContext())  # type: ignore[arg-type]
    try:
        reader.add_splits([split])
        reader.notify_no_more_splits()
        output = TestingReaderOutput()
        assert reader.poll_next(output) is InputStatus.MORE_AVAILABLE
        read_to_end(reader, output)
        assert output.emitted == [1]
    finally:
        reader.close()


# --- what SourceReaderBase does, per its Java source, that connector code relies on --------


def test_no_more_splits_without_splits_ends_the_input():
    """``SourceReaderBase#notifyNoMoreSplits``: the waiting future completes; the next poll ends.

    With no split ever added, ``finishedOrAvailableLater`` finds no fetcher and an
    empty queue: END_OF_INPUT.
    """
    reader = MockSourceReader(lambda: MockSplitReader(2))
    try:
        future = reader.is_available()
        assert reader.poll_next(TestingReaderOutput()) is InputStatus.NOTHING_AVAILABLE
        assert not future.done()
        reader.notify_no_more_splits()
        future.result(WAIT)
        assert reader.poll_next(TestingReaderOutput()) is InputStatus.END_OF_INPUT
    finally:
        reader.close()


def test_no_more_splits_after_the_last_split_finished_ends_the_input():
    """``notifyNoMoreSplits`` after every split finished (fetcher shut down): END_OF_INPUT."""
    reader = MockSourceReader(lambda: MockSplitReader(2))
    try:
        output = TestingReaderOutput()
        reader.add_splits([get_split(0, 3, bounded=True)])
        deadline = time.monotonic() + WAIT
        while not reader.finished_calls:
            assert time.monotonic() < deadline
            if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
                reader.is_available().result(WAIT)
        assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE  # no end yet
        future = reader.is_available()
        reader.notify_no_more_splits()
        future.result(WAIT)
        read_to_end(reader, output)
        assert output.emitted == [0, 1, 2]
    finally:
        reader.close()


def test_splits_added_after_no_more_splits_are_still_read():
    """``SourceReaderBase#addSplits`` takes splits whatever came before (no check)."""
    reader = MockSourceReader(lambda: MockSplitReader(2))
    try:
        reader.notify_no_more_splits()
        reader.add_splits([get_split(3, 5, bounded=True)])
        output = TestingReaderOutput()
        read_to_end(reader, output)
        assert output.emitted == [30, 31, 32, 33, 34]
    finally:
        reader.close()


def test_a_new_split_reader_is_made_when_splits_come_after_the_fetcher_shut_down():
    """``SingleThreadFetcherManager#addSplits``: no running fetcher -> a new one, a new reader."""
    made: list[MockSplitReader] = []

    def supplier() -> MockSplitReader:
        made.append(MockSplitReader(2))
        return made[-1]

    reader = MockSourceReader(supplier)
    try:
        output = TestingReaderOutput()
        reader.add_splits([get_split(0, 3, bounded=True)])
        deadline = time.monotonic() + WAIT
        while not reader.finished_calls:
            assert time.monotonic() < deadline
            if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
                reader.is_available().result(WAIT)
        # The poll that found the queue empty shut the idle fetcher down (and closed its reader).
        deadline = time.monotonic() + WAIT
        while not made[0].closed:
            assert time.monotonic() < deadline, "the idle fetcher's split reader was not closed"
            reader.poll_next(output)
            time.sleep(0.001)
        reader.add_splits([get_split(1, 2, bounded=True)])
        reader.notify_no_more_splits()
        read_to_end(reader, output)
        assert sorted(output.emitted) == [0, 1, 2, 10, 11]
        assert len(made) == 2
    finally:
        reader.close()


def test_snapshot_holds_splits_in_progress_and_drops_finished_ones():
    """``SourceReaderBase#snapshotState``: every split not finished, at its position."""
    split_reader = MockSplitReader(2, blocking_fetch=True)
    reader = MockSourceReader(lambda: split_reader)
    try:
        reader.add_splits([get_split(0, 2, bounded=True), get_split(1, 4, bounded=False)])
        output = TestingReaderOutput()
        deadline = time.monotonic() + WAIT
        while (
            reader.poll_next(output) is not InputStatus.NOTHING_AVAILABLE or len(output.emitted) < 6
        ):
            assert time.monotonic() < deadline
            if len(output.emitted) < 6:
                reader.is_available().result(WAIT)
        state = reader.snapshot_state(1)
        assert [(s.split_id(), s.index) for s in state] == [("1", 4)]
        assert reader.finished_calls == [{"0": 2}]
    finally:
        reader.close()


def test_close_closes_the_split_reader_and_can_be_called_twice():
    """``SourceReaderBase#close`` -> ``SplitFetcherManager#close``: the split reader is closed."""
    split_reader = MockSplitReader(2, blocking_fetch=True)
    reader = MockSourceReader(lambda: split_reader)
    reader.add_splits([get_split(0, 2, bounded=False)])
    reader.close()
    reader.close()
    assert split_reader.closed


def test_num_records_in_counts_every_emitted_record():
    """``SourceReaderBase``'s ``numRecordsInCounter``: one per record emitted."""
    context = TestingReaderContext()
    reader = MockSourceReader(lambda: MockSplitReader(3), context)
    try:
        reader.add_splits([get_split(0, 7, bounded=True), get_split(1, 4, bounded=True)])
        reader.notify_no_more_splits()
        read_to_end(reader, TestingReaderOutput())
        assert context.metrics.counts()["numRecordsIn"] == 11
    finally:
        reader.close()


# --- SourceReaderTestBase, which SourceReaderBaseTest extends ---------------------------------
# Flink's createReader: a blocking mock split reader of 2 records per split per fetch, an
# element queue of capacity 1; `check_source_reader` runs the same cases through the kit.

NUM_SPLITS = 10
TOTAL_NUM_RECORDS = NUM_SPLITS * NUM_RECORDS_PER_SPLIT


def create_reader() -> MockSourceReader:
    split_reader = MockSplitReader(2, blocking_fetch=True)
    return MockSourceReader(lambda: split_reader)


def consume_records(reader: MockSourceReader, output: TestingReaderOutput, n: int) -> None:
    deadline = time.monotonic() + WAIT
    while len(output.emitted) < n:
        assert time.monotonic() < deadline, f"{len(output.emitted)} of {n} records arrived"
        status = reader.poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE and len(output.emitted) < n:
            reader.is_available().result(WAIT)


def validate(output: TestingReaderOutput) -> None:
    """``ValidatingSourceOutput#validate``: 0 .. 99, each once."""
    assert sorted(output.emitted) == list(range(TOTAL_NUM_RECORDS))


def test_read():
    """``SourceReaderTestBase#testRead``."""
    reader = create_reader()
    try:
        reader.add_splits([get_split(i, NUM_RECORDS_PER_SPLIT, True) for i in range(NUM_SPLITS)])
        output = TestingReaderOutput()
        consume_records(reader, output, TOTAL_NUM_RECORDS)
        validate(output)
    finally:
        reader.close()


def test_add_split_to_existing_fetcher():
    """``SourceReaderTestBase#testAddSplitToExistingFetcher``."""
    reader = create_reader()
    try:
        output = TestingReaderOutput()
        reader.add_splits([get_split(0, NUM_RECORDS_PER_SPLIT, True)])
        consume_records(reader, output, 5)
        reader.add_splits([get_split(i, NUM_RECORDS_PER_SPLIT, True) for i in range(1, NUM_SPLITS)])
        consume_records(reader, output, TOTAL_NUM_RECORDS)
        validate(output)
    finally:
        reader.close()


def test_polling_from_empty_queue():
    """``SourceReaderTestBase#testPollingFromEmptyQueue``."""
    reader = create_reader()
    try:
        output = TestingReaderOutput()
        reader.add_splits([get_split(0, NUM_RECORDS_PER_SPLIT, True)])
        consume_records(reader, output, NUM_RECORDS_PER_SPLIT)
        assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE
    finally:
        reader.close()


def test_available_on_empty_queue():
    """``SourceReaderTestBase#testAvailableOnEmptyQueue``."""
    reader = create_reader()
    try:
        future = reader.is_available()
        assert not future.done()
        reader.add_splits([get_split(0, NUM_RECORDS_PER_SPLIT, True)])
        future.result(WAIT)
    finally:
        reader.close()


def test_snapshot():
    """``SourceReaderTestBase#testSnapshot``: 10 unbounded splits, all read: each at 10."""
    reader = create_reader()
    try:
        output = TestingReaderOutput()
        reader.add_splits([get_split(i, NUM_RECORDS_PER_SPLIT, False) for i in range(NUM_SPLITS)])
        consume_records(reader, output, TOTAL_NUM_RECORDS)
        state = reader.snapshot_state(1)
        assert len(state) == NUM_SPLITS
        assert [split.index for split in state] == [NUM_RECORDS_PER_SPLIT] * NUM_SPLITS
    finally:
        reader.close()


def test_a_fetch_error_while_polling_from_another_thread_stops_the_blocking_wait():
    """``SplitFetcherManager``'s error handler completes the reader's availability future."""
    gate = threading.Event()

    class FailsLater(TestingSplitReader):
        def fetch(self) -> Any:
            gate.wait(WAIT)
            raise OSError("test")

    reader = MockSourceReader(FailsLater)
    try:
        reader.add_splits([get_split(0, 1, bounded=False)])
        assert reader.poll_next(TestingReaderOutput()) is InputStatus.NOTHING_AVAILABLE
        future = reader.is_available()
        assert not future.done()
        gate.set()
        future.result(WAIT)
        with pytest.raises(SourceReaderError) as raised:
            reader.poll_next(TestingReaderOutput())
        assert isinstance(raised.value.__cause__, OSError)
    finally:
        reader.close()


def test_the_kit_runs_these_cases_on_the_blocking_mock_reader():
    """The kit waits on ``is_available`` only while records are missing, as Flink's
    ``consumeRecords`` does: a NOTHING_AVAILABLE that came with the last record needed is
    not waited on (a blocking fetch of an unbounded split never completes it)."""

    def split(index: int, records: int, boundedness: Boundedness) -> MockSourceSplit:
        bounded = boundedness is Boundedness.BOUNDED
        made = MockSourceSplit(index, 0, records if bounded else UNBOUNDED)
        for j in range(records):
            made.add_record(index * records + j)
        return made

    check_source_reader(
        lambda _context: create_reader(),
        split,
        value_of=lambda value: value,
        next_record_index=lambda s: s.index,
    )
