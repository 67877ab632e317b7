"""Flink's tests of ``NumberSequenceSource``, ``NumberSequenceIterator``, ``DataGeneratorSource``.

One test per Java test of flink-core's ``NumberSequenceSourceTest`` and
``NumberSequenceIteratorTest`` (how ``NumberSequenceSource#splitNumberRange`` cuts
the range), and flink-connector-datagen's ``DataGeneratorSourceTest`` and
``DataGeneratorSourceITCase`` (on `LocalSourceEngine` instead of a MiniCluster).

Readers here emit ``batch_size`` numbers per `poll_next`; with ``batch_size=1``
a poll emits one number, as Flink's ``IteratorSourceReader`` does, so the Java
tests' poll counts carry over. Left out: ``testGatedRateLimiter``
(``RateLimiterStrategy.perCheckpoint``; sinkv2 has per-second rates only) and
``testFailingGeneratorFunctionInitialization`` (disabled in Flink; sinkv2's
generator is a plain function, with no ``open``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pytest
from flink_reader_mocks import TestingReaderContext, TestingReaderOutput

from sinkv2.errors import SinkConfigurationError
from sinkv2.source import InputStatus, ReaderInfo, SourceReaderError, SplitsAssignment
from sinkv2.source.lib import DataGeneratorSource, NumberSequenceSource, NumberSequenceSplit
from sinkv2.testing import LocalSourceEngine

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
SCHEMA = pa.schema([("value", pa.int64())])


class MockSplitEnumeratorContext:
    """Flink's ``MockSplitEnumeratorContext``: keeps every assignment and no-more-splits signal."""

    def __init__(self, parallelism: int) -> None:
        self.parallelism = parallelism
        self.splits_assignment_sequence: list[SplitsAssignment[Any]] = []
        self.no_more_splits: list[int] = []

    def current_parallelism(self) -> int:
        return self.parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return {i: ReaderInfo(i) for i in range(self.parallelism)}

    def assign_split(self, split: Any, subtask_id: int) -> None:
        self.assign_splits(SplitsAssignment({subtask_id: [split]}))

    def assign_splits(self, new_split_assignments: SplitsAssignment[Any]) -> None:
        self.splits_assignment_sequence.append(new_split_assignments)

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self.no_more_splits.append(subtask_id)

    def call_async(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("not expected")

    def send_event_to_source_reader(self, subtask_id: int, event: Any) -> None:
        raise AssertionError("not expected")

    def run_in_coordinator_thread(self, runnable: Callable[[], None]) -> None:
        runnable()

    def metric_group(self) -> Any:
        return TestingReaderContext().metric_group()


def split_number_range(start: int, end: int, num_splits: int) -> list[NumberSequenceSplit]:
    """``NumberSequenceSource#splitNumberRange``, through the public enumerator."""
    source = NumberSequenceSource(start, end)
    enumerator = source.create_enumerator(MockSplitEnumeratorContext(num_splits))
    return list(enumerator.snapshot_state(0).remaining)


def poll(reader: Any, output: TestingReaderOutput, times: int) -> None:
    for _ in range(times):
        reader.poll_next(output)


# --- NumberSequenceSourceTest -----------------------------------------------------------------


def test_reader_checkpoints():
    """``NumberSequenceSourceTest#testReaderCheckpoints``: snapshot and restore every third.

    Two splits ``[177, 333]`` and ``[334, 563]``; after every ``(to - from) / 3`` polls
    the reader is snapshotted and a new one restored from the snapshot: the numbers
    come out exactly once, in order.
    """
    start, mid, end = 177, 333, 563
    per_cycle = (end - start) // 3
    output = TestingReaderOutput()

    def create_reader(splits: list[NumberSequenceSplit]) -> Any:
        # the arguments passed to the source matter only to the enumerator
        reader = NumberSequenceSource(0, 0, batch_size=1).create_reader(TestingReaderContext())
        reader.add_splits(splits)
        reader.notify_no_more_splits()
        return reader

    reader = create_reader(
        [NumberSequenceSplit("split-1", start, mid), NumberSequenceSplit("split-2", mid + 1, end)]
    )
    remaining_in_cycle = per_cycle
    for _ in range(10 * (end - start)):
        if reader.poll_next(output) is InputStatus.END_OF_INPUT:
            break
        remaining_in_cycle -= 1
        if remaining_in_cycle <= 0:
            remaining_in_cycle = per_cycle
            reader = create_reader(reader.snapshot_state(1))
    assert output.emitted == list(range(start, end + 1))


# --- NumberSequenceIteratorTest, as NumberSequenceSource cuts its range ----------------------


def check_splitting(start: int, end: int, num_splits: int) -> None:
    """``testSplitting``: contiguous, covering, sizes at most one apart.

    Flink's ``splitNumberRange`` drops the iterator's empty parts, so a range shorter
    than ``num_splits`` gives one split per number.
    """
    splits = split_number_range(start, end, num_splits)
    assert len(splits) == min(num_splits, end - start + 1)
    assert splits[0].current == start
    assert splits[-1].to == end
    for before, after in itertools.pairwise(splits):
        assert before.to is not None
        assert before.to + 1 == after.current
    sizes = [split.to - split.current + 1 for split in splits if split.to is not None]
    assert max(sizes) - min(sizes) <= 1


def test_split_regular():
    """``NumberSequenceIteratorTest#testSplitRegular``."""
    check_splitting(0, 10, 2)
    check_splitting(100, 100000, 7)
    check_splitting(-100, 0, 5)
    check_splitting(-100, 100, 3)


def test_splitting_large_ranges_by_2():
    """``NumberSequenceIteratorTest#testSplittingLargeRangesBy2``: up to the whole long range."""
    check_splitting(0, LONG_MAX, 2)
    check_splitting(-1000000000, LONG_MAX, 2)
    check_splitting(LONG_MIN, LONG_MAX, 2)


def test_splitting_too_small_ranges():
    """``NumberSequenceIteratorTest#testSplittingTooSmallRanges``."""
    check_splitting(0, 0, 2)
    check_splitting(-5, -5, 2)
    check_splitting(-5, -4, 3)
    check_splitting(10, 15, 10)


def test_the_first_splits_take_the_remainder_and_ids_count_from_1():
    """``NumberSequenceIterator#split`` + ``splitNumberRange``: 10 over 4 is 3, 3, 2, 2.

    The first ``(to - from + 1) % n`` parts get one number more, and the splits are
    named ``"1"``, ``"2"``, ... in order (Flink's ``int splitId = 1``).
    """
    splits = split_number_range(0, 9, 4)
    assert [(s.split_id(), s.current, s.to) for s in splits] == [
        ("1", 0, 2),
        ("2", 3, 5),
        ("3", 6, 7),
        ("4", 8, 9),
    ]


def test_the_range_is_one_of_longs():
    """Flink's ``from`` and ``to`` are ``long``s: a number outside int64 is refused up front."""
    NumberSequenceSource(LONG_MIN, LONG_MAX)
    with pytest.raises(SinkConfigurationError, match=r"'end'.*int64"):
        NumberSequenceSource(0, LONG_MAX + 1)
    with pytest.raises(SinkConfigurationError, match=r"'start'.*int64"):
        NumberSequenceSource(LONG_MIN - 1, 0)


def test_the_extreme_longs_are_emitted():
    """The numbers at both ends of the long range come out as int64 values."""
    output = TestingReaderOutput()
    reader = NumberSequenceSource(0, 0).create_reader(TestingReaderContext())
    reader.add_splits(
        [
            NumberSequenceSplit("1", LONG_MIN, LONG_MIN + 1),
            NumberSequenceSplit("2", LONG_MAX - 1, LONG_MAX),
        ]
    )
    reader.notify_no_more_splits()
    while reader.poll_next(output) is not InputStatus.END_OF_INPUT:
        pass
    assert output.emitted == [LONG_MIN, LONG_MIN + 1, LONG_MAX - 1, LONG_MAX]


# --- DataGeneratorSourceTest -------------------------------------------------------------------


def generator(count: int | None, **kwargs: Any) -> DataGeneratorSource:
    return DataGeneratorSource(lambda index: {"value": index}, count, SCHEMA, **kwargs)


def test_restore_enumerator():
    """``DataGeneratorSourceTest#testRestoreEnumerator``."""
    source = generator(100)
    context = MockSplitEnumeratorContext(2)
    enumerator = source.create_enumerator(context)
    enumerator.start()
    state = enumerator.snapshot_state(0)
    assert len(state.remaining) == 2

    enumerator = source.restore_enumerator(context, state)
    assert context.splits_assignment_sequence == []
    for _ in state.remaining:
        enumerator.handle_split_request(0, "hostname")
    assert len(context.splits_assignment_sequence) == len(state.remaining)
    assert context.no_more_splits == []


def test_generator_reader_checkpoints():
    """``DataGeneratorSourceTest#testReaderCheckpoints``: snapshot sizes 2, 1, 0, then the end.

    Each cycle polls once and then ``elementsPerCycle`` times, one number a poll
    (Flink's rate-limited reader answers NOTHING_AVAILABLE to each poll, to make the
    caller ask ``isAvailable``; sinkv2's reader without a rate answers MORE_AVAILABLE).
    """
    num_cycles, start, mid, end = 3, 0, 156, 383
    per_cycle = (end - start + 1) // num_cycles
    output = TestingReaderOutput()

    def create_reader() -> Any:
        # the arguments passed to the source matter only to the enumerator
        return generator(LONG_MAX, batch_size=1).create_reader(TestingReaderContext())

    reader = create_reader()
    reader.add_splits(
        [NumberSequenceSplit("split-1", start, mid), NumberSequenceSplit("split-2", mid + 1, end)]
    )
    for cycle in range(num_cycles):
        poll(reader, output, 1)
        for _ in range(per_cycle):
            if len(output.emitted) < end + 1:  # once all is read, no split, no end: not yet
                assert reader.is_available().done()
            poll(reader, output, 1)
        splits = reader.snapshot_state(1)
        assert len(splits) == num_cycles - cycle - 1
        reader = create_reader()
        if splits:
            reader.add_splits(splits)
        else:
            reader.notify_no_more_splits()

    assert reader.is_available().done()
    assert reader.poll_next(output) is InputStatus.END_OF_INPUT
    assert output.emitted == list(range(start, end + 1))


# --- DataGeneratorSourceITCase -----------------------------------------------------------------


def read_all(source: Any, parallelism: int) -> list[int]:
    engine = LocalSourceEngine(source, parallelism)
    try:
        engine.run()
        engine.finish()
    finally:
        engine.close()
    return sorted(record.record["value"] for record in engine.committed)


def test_parallel_source_execution():
    """``DataGeneratorSourceITCase#testParallelSourceExecution``: 4 readers, 0 .. 999."""
    assert read_all(generator(1_000, batch_size=64), 4) == list(range(1_000))


def test_less_splits_than_parallelism():
    """``DataGeneratorSourceITCase#testLessSplitsThanParallelism``: 2 numbers, 4 readers."""
    assert read_all(generator(2), 4) == [0, 1]
    assert len(split_number_range(0, 1, 4)) == 2


def test_failing_generator_function():
    """``DataGeneratorSourceITCase#testFailingGeneratorFunction``: the error is not swallowed.

    Flink's assertion: some cause says "exception on this input:" and some says "boom".
    """

    def boom(index: int) -> Any:
        raise ValueError("boom")

    with pytest.raises(Exception) as raised:  # noqa: PT011  # whatever the engine wraps it in
        read_all(DataGeneratorSource(boom, 1_000, SCHEMA), 4)
    chain = []
    error: BaseException | None = raised.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("exception on this input:" in message for message in chain), chain
    assert any("boom" in message for message in chain), chain


def test_a_failing_generator_names_the_index():
    """Flink's ``GeneratingIteratorSourceReader#convert``: the message names the input."""

    def fails_at_7(index: int) -> Any:
        if index == 7:
            raise ValueError("boom")
        return {"value": index}

    reader = DataGeneratorSource(fails_at_7, 20, SCHEMA, batch_size=5).create_reader(
        TestingReaderContext()
    )
    reader.add_splits([NumberSequenceSplit("1", 0, 19)])
    output = TestingReaderOutput()
    assert reader.poll_next(output) is InputStatus.MORE_AVAILABLE
    with pytest.raises(SourceReaderError, match="threw an exception on this input: 7") as raised:
        reader.poll_next(output)
    assert isinstance(raised.value.__cause__, ValueError)
    assert output.emitted == [0, 1, 2, 3, 4]
    assert [(s.current, s.to) for s in reader.snapshot_state(1)] == [(5, 19)]


def test_each_subtask_generates_its_share():
    """``DataGeneratorSource`` cuts ``count`` indices as ``NumberSequenceSource(0, count - 1)``."""
    context = MockSplitEnumeratorContext(4)
    state = generator(1_000).create_enumerator(context).snapshot_state(0)
    assert [(s.current, s.to) for s in state.remaining] == [
        (0, 249),
        (250, 499),
        (500, 749),
        (750, 999),
    ]


# --- NumberSequenceSourceITCase ----------------------------------------------------------------


def test_checkpointing_with_delayed_assignment():
    """``NumberSequenceSourceITCase#testCheckpointingWithDelayedAssignment``.

    ``fromSequence(0, 100)`` at parallelism 1 with a checkpoint at every step (so
    checkpoints fall while the split is being asked for and assigned): 0 .. 100 in order.
    """
    engine = LocalSourceEngine(NumberSequenceSource(0, 100, batch_size=1), 1)
    try:
        engine.run(checkpoint_every=1)
        engine.finish()
    finally:
        engine.close()
    assert [record.record["value"] for record in engine.committed] == list(range(101))


def test_restore_from_a_checkpoint_reads_the_rest_once():
    """``testCheckpointingWithDelayedAssignment`` with a crash: restored at another parallelism.

    Stopped after a checkpoint mid-way and restored from it on 3 readers instead of 4,
    every number comes out exactly once across both runs.
    """
    source = NumberSequenceSource(0, 999, batch_size=7)
    first = LocalSourceEngine(source, 4)
    try:
        first.run(until=lambda engine: len(engine.committed) >= 300, checkpoint_every=2)
        checkpoint = first.checkpoint()
        before = [record.record["value"] for record in first.committed]
    finally:
        first.close()
    second = LocalSourceEngine(source, 3, checkpoint=checkpoint)
    try:
        second.run()
        second.finish()
        after = [record.record["value"] for record in second.committed]
    finally:
        second.close()
    assert sorted(before + after) == list(range(1_000))
