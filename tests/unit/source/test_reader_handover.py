"""The fetch hand-over's fast paths: the queue, its availability future, and the races they open.

The reader framework hands a fetch from the fetcher thread to the reader's thread
through `ElementQueue`; these tests pin what its cheaper paths must keep: a
notification is never lost (a reader never waits for ever after its last split
ends), a wake-up still reaches a fetcher that fetches in a loop, and under any
interleaving every record is emitted exactly once, in order within its split, with
exact positions in every snapshot.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import pytest
from flip27_fixtures import BatchEmitter, ListSplit, ListSplitReader, ListSplitState, RowEmitter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2.source import InputStatus
from sinkv2.source.reader import (
    ElementQueue,
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
)
from sinkv2.source.reader._queue import AvailabilityFuture
from sinkv2.testing._source_reader_check import _Context as Context

WAIT = 5.0


class Output:
    """Records every row with its split, and the splits whose outputs were released."""

    def __init__(self) -> None:
        self.by_split: dict[str, list[int]] = {}
        self.released: list[str] = []

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        raise AssertionError("records go to the split outputs")

    def collect_batch(self, batch: Any) -> None:
        raise AssertionError("records go to the split outputs")

    def create_output_for_split(self, split_id: str) -> Any:
        rows = self.by_split.setdefault(split_id, [])

        class Split:
            def collect(self, record: Any, timestamp: int | None = None) -> None:
                rows.append(record["value"])

            def collect_batch(self, batch: Any) -> None:
                rows.extend(batch.column("value").to_pylist())

        return Split()

    def release_output_for_split(self, split_id: str) -> None:
        self.released.append(split_id)


class Reader(SingleThreadMultiplexSourceReaderBase[Any, Any, ListSplit, ListSplitState]):
    """Reads list splits with the given split reader; records the splits that finished."""

    def __init__(
        self, split_reader: Callable[[], Any], *, arrow: bool = False, capacity: int = 2
    ) -> None:
        emitter = BatchEmitter() if arrow else RowEmitter()
        super().__init__(split_reader, emitter, Context(), element_queue_capacity=capacity)
        self.finished: list[str] = []

    def initialized_state(self, split: ListSplit) -> ListSplitState:
        return ListSplitState(split, split.position)

    def to_split_type(self, split_id: str, split_state: ListSplitState) -> ListSplit:
        return ListSplit(split_id, split_state.split.values, split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, ListSplitState]) -> None:
        self.finished.extend(finished_split_ids)


def read_to_the_end(reader: Reader, output: Output) -> None:
    deadline = time.monotonic() + WAIT
    status = InputStatus.MORE_AVAILABLE
    while status is not InputStatus.END_OF_INPUT:
        assert time.monotonic() < deadline, f"no end within {WAIT} s: {reader!r}"
        status = reader.poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE:
            _await(reader)


def _await(reader: Any) -> None:
    try:
        reader.is_available().result(WAIT)
    except concurrent.futures.TimeoutError:
        raise AssertionError(
            f"poll_next returned NOTHING_AVAILABLE and is_available() did not complete within "
            f"{WAIT} s: {reader!r}"
        ) from None


# --- the queue and its future ---------------------------------------------------------------


def test_a_notification_before_the_reader_asks_is_kept_until_a_poll_finds_the_queue_empty():
    queue: ElementQueue[int] = ElementQueue(2)
    assert not queue.availability().done()
    queue.notify_available()  # completes the pending future...
    queue.notify_available()  # ...and, with none pending, is kept
    assert queue.availability().done()
    assert queue.poll() is None  # the reader looked: forgotten
    waiting = queue.availability()
    assert not waiting.done()
    assert queue.put(0, 1)
    assert waiting.done()
    assert waiting.result(0) is None


def test_the_availability_future_works_as_a_concurrent_future():
    future = AvailabilityFuture()
    assert isinstance(future, concurrent.futures.Future)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(0.01)
    called: list[Any] = []
    future.add_done_callback(called.append)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(future.result(WAIT)))
    waiter.start()
    done, _ = concurrent.futures.wait([future], 0.01)
    assert not done
    future.complete()
    waiter.join(WAIT)
    assert results == [None]
    assert called == [future]
    assert future.result() is None  # again, at once
    assert future.result(0) is None
    done, _ = concurrent.futures.wait([future], 0)
    assert done == {future}


def test_a_cancelled_availability_future_releases_its_waiter_and_ignores_completion():
    future = AvailabilityFuture()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            future.result(WAIT)
        except BaseException as error:  # noqa: BLE001  # checked below
            errors.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.02)
    assert future.cancel()
    waiter.join(WAIT)
    assert [type(error) for error in errors] == [concurrent.futures.CancelledError]
    future.complete()  # the queue completing it later does no harm
    assert future.cancelled()


def test_a_failed_availability_future_raises_in_its_waiter():
    future = AvailabilityFuture()
    future.set_exception(OSError("gone"))
    with pytest.raises(OSError, match="gone"):
        future.result(WAIT)


def test_every_put_is_polled_once_across_a_full_queue_and_wake_ups():
    queue: ElementQueue[int] = ElementQueue(1)
    total = 5_000
    put: list[int] = []

    def producer() -> None:
        value = 0
        while value < total:
            if queue.put(0, value):
                put.append(value)
                value += 1
            else:
                queue.forget_wake_up(0)

    thread = threading.Thread(target=producer)
    thread.start()
    got: list[int] = []
    deadline = time.monotonic() + WAIT
    while len(got) < total and time.monotonic() < deadline:
        if len(got) % 97 == 0:
            queue.wake_up_putting_thread(0)
        element = queue.poll()
        if element is None:
            queue.availability().result(WAIT)
        else:
            got.append(element)
    thread.join(WAIT)
    assert got == list(range(total)) == put
    assert queue.size() == 0


# --- the reader: wake-ups, the generic records path, the idle notify ------------------------


class Endless(ListSplitReader):
    """One record of every split per fetch, for ever for the split ``endless``."""

    def fetch(self) -> RecordsBySplits[Any]:
        self.fetches += 1
        records: dict[str, list[int]] = {}
        finished = []
        for split_id, (split, position) in list(self.splits.items()):
            if split_id == "endless":
                records[split_id] = [position]
                self.splits[split_id] = [split, position + 1]
            elif position < len(split.values):
                records[split_id] = [split.values[position]]
                self.splits[split_id] = [split, position + 1]
            else:
                finished.append(split_id)
                del self.splits[split_id]
        return RecordsBySplits(records, finished)


def test_a_split_added_while_the_fetcher_fetches_in_a_loop_against_a_full_queue_is_taken_in():
    split_reader = Endless(per_fetch=1)
    reader = Reader(lambda: split_reader, capacity=1)
    output = Output()
    reader.add_splits([ListSplit("endless", ())])
    deadline = time.monotonic() + WAIT
    while split_reader.fetches < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the fetcher loops, then waits in a full put
    reader.add_splits([ListSplit("late", (100, 101, 102))])
    while "late" not in reader.finished and time.monotonic() < deadline:
        if reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE:
            _await(reader)
    assert output.by_split["late"] == [100, 101, 102]
    endless = output.by_split["endless"]
    assert endless == list(range(len(endless)))  # none lost or twice across the wake-ups
    reader.close()


class ByHand:
    """A `RecordsWithSplitIds` that is not a `RecordsBySplits`: the generic path."""

    def __init__(self, records: dict[str, list[int]], finished: Collection[str]) -> None:
        self._splits = list(records.items())
        self._records: list[int] = []
        self._finished = finished
        self.recycled = False

    def next_split(self) -> str | None:
        if not self._splits:
            return None
        split_id, self._records = self._splits.pop(0)
        self._records = list(self._records)
        return split_id

    def next_record_from_split(self) -> int | None:
        return self._records.pop(0) if self._records else None

    def finished_splits(self) -> Collection[str]:
        return self._finished

    def recycle(self) -> None:
        self.recycled = True


def test_a_records_with_split_ids_of_ones_own_is_read_record_by_record():
    fetches = [ByHand({"a": [1, 2], "b": [3]}, ()), ByHand({"b": [4]}, ["a", "b"])]
    to_hand_out = list(fetches)

    class HandReader(ListSplitReader):
        def fetch(self) -> Any:
            return to_hand_out.pop(0) if to_hand_out else RecordsBySplits({})

    reader = Reader(HandReader)
    output = Output()
    reader.add_splits([ListSplit("a", ()), ListSplit("b", ())])
    reader.notify_no_more_splits()
    read_to_the_end(reader, output)
    assert output.by_split == {"a": [1, 2], "b": [3, 4]}
    assert sorted(reader.finished) == ["a", "b"]
    assert all(fetch.recycled for fetch in fetches)
    reader.close()


def test_a_reader_never_waits_for_ever_after_its_last_split_ends():
    """The fetcher drops its last split while the reader looks at the queue: many times over."""
    for attempt in range(300):
        reader = Reader(lambda: ListSplitReader(per_fetch=2))
        output = Output()
        if attempt % 2:
            reader.notify_no_more_splits()  # before the split, or after it (below)
        split = ListSplit(f"s{attempt}", tuple(range(attempt % 5)))
        reader.add_splits([split])
        reader.notify_no_more_splits()
        read_to_the_end(reader, output)
        assert output.by_split.get(split.id, []) == list(split.values), attempt
        assert reader.finished == [split.id]
        reader.close()


# --- any interleaving: every record once, exact snapshots ----------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=10),
    per_fetch=st.integers(1, 6),
    capacity=st.integers(1, 3),
    arrow=st.booleans(),
    waves=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_any_interleaving_emits_every_record_once_with_exact_snapshots(  # noqa: PLR0917
    sizes: list[int], per_fetch: int, capacity: int, arrow: bool, waves: int, seed: int
) -> None:
    rng = random.Random(seed)
    splits = []
    first = 0
    for index, size in enumerate(sizes):
        splits.append(ListSplit(f"s{index}", tuple(range(first, first + size))))
        first += size
    reader = Reader(
        lambda: ListSplitReader(per_fetch=per_fetch, arrow=arrow), arrow=arrow, capacity=capacity
    )
    output = Output()
    pending = [splits[i::waves] for i in range(waves)]
    reader.add_splits(pending.pop(0))
    if not pending:
        reader.notify_no_more_splits()
    deadline = time.monotonic() + WAIT
    status = InputStatus.MORE_AVAILABLE
    while status is not InputStatus.END_OF_INPUT:
        assert time.monotonic() < deadline, f"no end within {WAIT} s: {reader!r}"
        choice = rng.random()
        if pending and (choice < 0.1 or status is InputStatus.NOTHING_AVAILABLE):
            # The enumerator assigns the next wave: at random, or when the reader waits.
            reader.add_splits(pending.pop(0))
            if not pending:
                reader.notify_no_more_splits()
            status = InputStatus.MORE_AVAILABLE
            continue
        if choice < 0.2:
            snapshot = {split.id: split.position for split in reader.snapshot_state(1)}
            by_id = {split.id: split for split in splits}
            for split_id, position in snapshot.items():
                emitted = output.by_split.get(split_id, [])
                assert position == len(emitted), split_id  # exactly what was emitted
                assert list(by_id[split_id].values[:position]) == emitted
            assert not set(snapshot) & set(reader.finished)  # finished splits left out
        if choice < 0.25:
            time.sleep(rng.choice([0, 0.0002, 0.002]))  # let the fetcher run ahead
        status = reader.poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE and not pending:
            _await(reader)
    for split in splits:
        assert output.by_split.get(split.id, []) == list(split.values), split.id
    assert sorted(reader.finished) == sorted(split.id for split in splits)
    assert sorted(output.released) == sorted(split.id for split in splits)
    assert reader.snapshot_state(2) == []
    reader.close()


# --- one poll_next per fetch: the status after the call, finished splits in the same call ----


class Gated(ListSplitReader):
    """Fetches as a list split reader, but each fetch after the first waits for its gate."""

    def __init__(self, per_fetch: int) -> None:
        super().__init__(per_fetch=per_fetch)
        self.gate = threading.Semaphore(0)
        self.waiting = threading.Event()
        self.woken = False

    def fetch(self) -> RecordsBySplits[Any]:
        if self.fetches:
            self.waiting.set()
            while not self.gate.acquire(timeout=0.01):
                if self.woken:
                    self.woken = False
                    return RecordsBySplits({})
            self.waiting.clear()
        return super().fetch()

    def wake_up(self) -> None:
        self.woken = True


def test_a_call_that_emits_a_whole_fetch_says_nothing_is_available_while_the_fetcher_works():
    split_reader = Gated(per_fetch=2)
    reader = Reader(lambda: split_reader)
    output = Output()
    reader.add_splits([ListSplit("s0", (0, 1, 2, 3))])
    assert split_reader.waiting.wait(WAIT)  # the first fetch is queued, the second waits
    # One call emits the first fetch and, with the queue empty and the fetcher at
    # work, says so: the caller waits on is_available instead of polling again.
    assert reader.poll_next(output) is InputStatus.NOTHING_AVAILABLE
    assert output.by_split == {"s0": [0, 1]}
    future = reader.is_available()
    assert not future.done()
    split_reader.gate.release()
    future.result(WAIT)
    # The second fetch holds s0's last records and says s0 ended: one call emits
    # them and reports s0 finished (it leaves the snapshot in the same call).
    assert reader.poll_next(output) in (InputStatus.NOTHING_AVAILABLE, InputStatus.MORE_AVAILABLE)
    assert output.by_split == {"s0": [0, 1, 2, 3]}
    assert reader.finished == ["s0"]
    assert output.released == ["s0"]
    assert reader.snapshot_state(1) == []
    reader.notify_no_more_splits()
    read_to_the_end(reader, output)
    assert output.by_split == {"s0": [0, 1, 2, 3]}
    reader.close()


def test_a_split_that_ends_with_its_last_records_is_reported_by_the_call_that_emits_them():
    fetches = [ByHand({"a": [1, 2]}, ["a"]), ByHand({"b": [3]}, ())]
    to_hand_out = list(fetches)

    class HandReader(ListSplitReader):
        def fetch(self) -> Any:
            return to_hand_out.pop(0) if to_hand_out else RecordsBySplits({}, ["b"])

    reader = Reader(HandReader)
    output = Output()
    reader.add_splits([ListSplit("a", ()), ListSplit("b", ())])
    deadline = time.monotonic() + WAIT
    status = InputStatus.NOTHING_AVAILABLE
    while not output.by_split and time.monotonic() < deadline:
        status = reader.poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE and not output.by_split:
            _await(reader)
    assert output.by_split == {"a": [1, 2]}
    assert reader.finished == ["a"]  # in the call that emitted its last records
    assert output.released == ["a"]
    assert [split.id for split in reader.snapshot_state(1)] == ["b"]
    assert fetches[0].recycled
    assert status in (InputStatus.MORE_AVAILABLE, InputStatus.NOTHING_AVAILABLE)
    reader.notify_no_more_splits()
    read_to_the_end(reader, output)
    assert output.by_split == {"a": [1, 2], "b": [3]}
    assert sorted(reader.finished) == ["a", "b"]
    reader.close()


# --- the availability future's condition, made only when asked for --------------------------


def test_the_availability_future_is_a_complete_future_before_and_after_its_condition_exists():
    plain = AvailabilityFuture()
    assert "_condition" not in vars(plain)  # none made for the hand-over's own calls
    assert not plain.done()
    plain.complete()
    assert plain.done()
    assert plain.result(0) is None
    assert "_condition" not in vars(plain)
    plain.complete()  # a second completion does nothing
    with pytest.raises(concurrent.futures.InvalidStateError):
        plain.set_result(None)
    assert "finished" in repr(plain)
    assert not plain.cancel()
    assert not plain.cancelled()

    watched = AvailabilityFuture()
    assert "pending" in repr(watched)  # repr takes the condition: made now
    assert "_condition" in vars(watched)
    assert watched.cancel()
    assert watched.cancel()  # again: still cancelled, the waiter released once
    with pytest.raises(concurrent.futures.CancelledError):
        watched.result(0)
    watched.complete()  # the queue completing it later does no harm
    assert watched.cancelled()

    failed = AvailabilityFuture()
    failed.set_exception(OSError("gone"))
    with pytest.raises(concurrent.futures.InvalidStateError):
        failed.set_exception(OSError("again"))
    assert isinstance(failed.exception(0), OSError)
    called: list[Any] = []
    failed.add_done_callback(called.append)  # done already: called at once
    assert called == [failed]


@settings(max_examples=30, deadline=None, database=None)
@given(
    watchers=st.lists(st.sampled_from(["wait", "as_completed", "result", "callback"]), max_size=4),
    pause=st.sampled_from([0.0, 0.0005, 0.002]),
)
def test_every_watcher_of_an_availability_future_sees_a_completion_that_races_it(
    watchers: list[str], pause: float
) -> None:
    """Threads that make the condition (wait, as_completed) race the condition-free complete."""
    future = AvailabilityFuture()
    seen: list[str] = []
    called = threading.Event()

    def watch(how: str) -> None:
        if how == "wait":
            done, _ = concurrent.futures.wait([future], WAIT)
            assert done == {future}
        elif how == "as_completed":
            assert list(concurrent.futures.as_completed([future], WAIT)) == [future]
        elif how == "result":
            assert future.result(WAIT) is None
        seen.append(how)

    threads = []
    for how in watchers:
        if how == "callback":
            future.add_done_callback(lambda _: called.set())
            seen.append(how)
            continue
        threads.append(threading.Thread(target=watch, args=(how,)))
        threads[-1].start()
    time.sleep(pause)
    future.complete()
    for thread in threads:
        thread.join(WAIT)
    assert sorted(seen) == sorted(watchers)
    if "callback" in watchers:
        assert called.wait(WAIT)
