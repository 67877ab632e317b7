"""Flink's ``SplitFetcherTest`` and ``SplitFetcherManagerTest``, one test per Java test.

sinkv2's fetcher is private; its public face is `SingleThreadFetcherManager` (one
fetcher thread) over an `ElementQueue`, so each case drives the manager where
Flink drives a ``SplitFetcher`` by hand. "Idle" is what
`SingleThreadFetcherManager.maybe_shutdown_finished_fetchers` answers (Flink's
``SplitFetcher#isIdle`` is what that method asks).

Left out: ``testCloseAfterPause`` and ``SplitFetcherPauseResumeSplitReaderTest``
(pausing splits serves watermark alignment, which is not on Spark) and
``testWakeUpRemovesConditionFromQueue`` (reflection on the queue's internals; its
effect, a woken putter leaves no waiter behind, is `test_wake_up_put` and
``testWakeUpDoesNotStrandAnotherPutter`` in ``test_flink_element_queue.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from flink_reader_mocks import (
    WAIT,
    MockSourceSplit,
    MockSplitReader,
    TestingRecordsWithSplitIds,
    TestingSourceSplit,
    TestingSplitReader,
)

from sinkv2.source import SourceReaderError
from sinkv2.source.reader import ElementQueue, RecordsBySplits, SingleThreadFetcherManager


def finished_split_fetch(split_id: str) -> RecordsBySplits[Any]:
    return RecordsBySplits.finished(split_id)


def manager_with_split(
    split_id: str, reader: Any, queue: ElementQueue[Any] | None = None
) -> tuple[SingleThreadFetcherManager[Any, Any], ElementQueue[Any]]:
    """``createFetcherWithSplit``: a fetcher that holds ``split_id``."""
    queue = queue if queue is not None else ElementQueue()
    manager: SingleThreadFetcherManager[Any, Any] = SingleThreadFetcherManager(
        queue, lambda: reader
    )
    manager.add_splits([TestingSourceSplit(split_id)], [split_id])
    return manager, queue


def wait_idle(manager: SingleThreadFetcherManager[Any, Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not manager.maybe_shutdown_finished_fetchers():
        assert time.monotonic() < deadline, "the fetcher did not go idle"
        time.sleep(0.001)


# --- SplitFetcherTest -------------------------------------------------------------------------


def test_new_fetcher_is_idle():
    """``testNewFetcherIsIdle``: no split, no fetcher at work."""
    manager = SingleThreadFetcherManager(ElementQueue(), TestingSplitReader)
    assert not manager.busy()
    assert manager.maybe_shutdown_finished_fetchers()


def test_fetcher_not_idle_after_split_added():
    """``testFetcherNotIdleAfterSplitAdded``: a split in hand (its fetch blocks) is work."""
    reader = TestingSplitReader()  # no fetches: fetch() blocks until woken up
    manager, _ = manager_with_split("test-split", reader)
    try:
        assert manager.busy()
        assert not manager.maybe_shutdown_finished_fetchers()
    finally:
        manager.close()
    assert reader.closed


def test_idle_after_finished_splits_enqueued():
    """``testIdleAfterFinishedSplitsEnqueued``: the fetch that ends its only split -> idle."""
    manager, queue = manager_with_split(
        "test-split", TestingSplitReader(finished_split_fetch("test-split"))
    )
    try:
        queue.availability().result(WAIT)
        assert list(queue.poll().finished_splits()) == ["test-split"]
        wait_idle(manager)
    finally:
        manager.close()


@pytest.mark.parametrize(
    "future_first",
    [False, True],
    ids=["testNotifiesWhenGoingIdle", "testNotifiesOlderFutureWhenGoingIdle"],
)
def test_notifies_when_going_idle(future_first: bool):
    """``testNotifiesWhenGoingIdle`` / ``testNotifiesOlderFutureWhenGoingIdle``.

    Once the fetcher goes idle the queue's future completes - also one handed out
    before (so a reader waiting on it looks again and sees that the fetcher is done).
    """
    queue: ElementQueue[Any] = ElementQueue()
    older = queue.availability() if future_first else None
    manager, _ = manager_with_split(
        "test-split", TestingSplitReader(finished_split_fetch("test-split")), queue
    )
    try:
        wait_idle(manager)
        assert queue.availability().done()
        assert older is None or older.done()
    finally:
        manager.close()


@pytest.mark.parametrize(
    "future_first",
    [False, True],
    ids=["testNotifiesWhenGoingIdleConcurrent", "testNotifiesOlderFutureWhenGoingIdleConcurrent"],
)
def test_notifies_when_going_idle_concurrent(future_first: bool):
    """``testNotifiesWhenGoingIdleConcurrent`` / ``testNotifiesOlderFutureWhenGoingIdleConcurrent``.

    A consumer drains the fetch that ends the split while the fetcher goes idle: after
    it took the fetch, the queue's future completes - the idle notification is never
    lost, whichever came first.
    """
    queue: ElementQueue[Any] = ElementQueue()
    drained = threading.Event()

    def drain() -> None:
        deadline = time.monotonic() + WAIT
        while queue.poll() is None and time.monotonic() < deadline:
            time.sleep(0)
        drained.set()

    drainer = threading.Thread(target=drain)
    drainer.start()
    older = queue.availability() if future_first else None
    manager, _ = manager_with_split(
        "test-split", TestingSplitReader(finished_split_fetch("test-split")), queue
    )
    try:
        drainer.join(WAIT)
        assert drained.is_set()
        queue.availability().result(WAIT)
        if older is not None:
            older.result(WAIT)
        wait_idle(manager)
    finally:
        manager.close()


def test_wakeup():
    """``testWakeup``: 3 splits read under frequent wake-ups, every record exactly once.

    A wake-up comes from outside the fetcher when the reader adds splits, so every
    10 records read the consumer adds an empty split (which ends at once).
    """
    num_splits, per_split = 3, 2_000
    queue: ElementQueue[Any] = ElementQueue(1)
    manager: SingleThreadFetcherManager[Any, Any] = SingleThreadFetcherManager(
        queue, lambda: MockSplitReader(2, blocking_fetch=True)
    )
    splits = []
    for i in range(num_splits):
        split = MockSourceSplit(i, 0, per_split)
        for value in range(i * per_split, (i + 1) * per_split):
            split.add_record(value)
        splits.append(split)
    manager.add_splits(splits, [s.split_id() for s in splits])
    read: set[int] = set()
    wake_ups = 0
    last_wake_up = 0
    try:
        deadline = time.monotonic() + WAIT
        while len(read) < num_splits * per_split:
            assert time.monotonic() < deadline, f"{len(read)} records read"
            fetch = queue.poll()
            if fetch is None:
                queue.availability().result(WAIT)
                continue
            while fetch.next_split() is not None:
                while (record := fetch.next_record_from_split()) is not None:
                    assert record[0] not in read, f"record {record[0]} read twice"
                    read.add(record[0])
            if len(read) >= last_wake_up + 10:
                empty = MockSourceSplit(100 + wake_ups, 0, 0)
                manager.add_splits([empty], [empty.split_id()])
                wake_ups += 1
                last_wake_up = len(read)
        assert read == set(range(num_splits * per_split))
        assert wake_ups > 0
    finally:
        manager.close()


def test_close():
    """``testClose``: closing the fetcher closes its split reader."""
    reader = TestingSplitReader()
    manager, _ = manager_with_split("test-split", reader)
    manager.close()
    assert reader.closed


def test_close_wakes_a_fetcher_blocked_on_a_full_queue():
    """``SplitFetcher#shutdown`` -> ``FetchTask#wakeUp`` -> ``wakeUpPuttingThread``.

    A fetcher waiting for room in a full queue (nobody polls) is shut down at once,
    and its split reader is closed.
    """
    queue: ElementQueue[Any] = ElementQueue(1)
    reader = MockSplitReader(1)  # non-blocking: it fills the queue and waits in put
    split = MockSourceSplit(0, 0, None)
    for value in range(10):
        split.add_record(value)
    manager: SingleThreadFetcherManager[Any, Any] = SingleThreadFetcherManager(
        queue, lambda: reader
    )
    manager.add_splits([split], [split.split_id()])
    queue.availability().result(WAIT)
    deadline = time.monotonic() + WAIT
    while split.index < 2:  # the second fetch is made: it waits for room
        assert time.monotonic() < deadline
        time.sleep(0.001)
    manager.close()
    assert reader.closed
    assert queue.size() == 1


# --- SplitFetcherManagerTest ------------------------------------------------------------------


class AwaitingReader(TestingSplitReader):
    """``AwaitingReader``: hands out its fetches, then blocks until told to raise."""

    def __init__(self, error: BaseException, *fetches: Any) -> None:
        super().__init__(*fetches)
        self.error = error
        self.in_blocking = threading.Event()
        self.throw_error = threading.Event()

    def fetch(self) -> Any:
        if self.fetches:
            return self.fetches.popleft()
        self.in_blocking.set()
        self.throw_error.wait(WAIT)
        raise self.error

    def wake_up(self) -> None:
        pass


@pytest.mark.parametrize(
    "fetches",
    [(), ((1, 2, 3, 4), (5, 6, 7, 8))],
    ids=["testExceptionPropagationFirstFetch", "testExceptionPropagationSuccessiveFetch"],
)
def test_exception_propagation(fetches: tuple[tuple[int, ...], ...]):
    """``testExceptionPropagationFirstFetch`` / ``...SuccessiveFetch``.

    The split reader's error completes the queue's future and `check_errors` raises
    it, chained (Flink: ``e.getCause().getCause()`` is the very exception).
    """
    error = OSError("test")
    queue: ElementQueue[Any] = ElementQueue(10)
    reader = AwaitingReader(error, *(TestingRecordsWithSplitIds("testSplit", *f) for f in fetches))
    manager, _ = manager_with_split("testSplit", reader, queue)
    try:
        assert reader.in_blocking.wait(WAIT)
        while queue.poll() is not None:
            pass
        assert not queue.availability().done()
        reader.throw_error.set()
        queue.availability().result(WAIT)
        with pytest.raises(SourceReaderError) as raised:
            manager.check_errors()
        assert raised.value.__cause__ is error
    finally:
        manager.close()


def test_close_fetcher_with_exception():
    """``testCloseFetcherWithException``: a split reader failing to close is reported."""
    reader = TestingSplitReader(close_with_exception=True)
    manager, _ = manager_with_split("test-split", reader)
    manager.close()
    with pytest.raises(SourceReaderError) as raised:
        manager.check_errors()
    assert str(raised.value.__cause__) == "Artificial exception on closing the split reader."
