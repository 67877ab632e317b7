"""Flink's ``FutureCompletingBlockingQueueTest``, one test per Java test (`ElementQueue`).

Left out: the ``releaseProducer`` cases (FLINK-37663's per-producer condition
objects; `ElementQueue` keeps only a set of pending wake-ups, which the fetcher
clears itself) and ``testQueueUsesShortCircuitFuture`` (Flink's reflection guard),
stated here as "a non-empty queue hands out the one shared completed future".
"""

from __future__ import annotations

import threading
import time

from sinkv2.source.reader import DEFAULT_ELEMENT_QUEUE_CAPACITY, ElementQueue

WAIT = 30.0


def test_basics():
    """``testBasics``."""
    queue: ElementQueue[int] = ElementQueue(5)
    future = queue.availability()
    assert queue.is_empty()
    assert queue.size() == 0

    queue.put(0, 1234)

    assert future.done()
    assert queue.size() == 1
    assert not queue.is_empty()
    assert queue.remaining_capacity() == 4
    assert queue.peek() == 1234
    assert queue.poll() == 1234

    assert queue.size() == 0
    assert queue.is_empty()
    assert queue.remaining_capacity() == 5
    assert queue.peek() is None


def test_poll():
    """``testPoll``."""
    queue: ElementQueue[int] = ElementQueue()
    queue.put(0, 1234)
    assert queue.poll() == 1234


def test_poll_empty_queue():
    """``testPollEmptyQueue``."""
    queue: ElementQueue[int] = ElementQueue()
    queue.put(0, 1234)
    assert queue.poll() is not None
    assert queue.poll() is None
    assert queue.poll() is None


def test_wake_up_put():
    """``testWakeUpPut``: a wake-up is kept for its thread; another thread's put is unaffected."""
    queue: ElementQueue[int] = ElementQueue(1)
    queue.wake_up_putting_thread(0)
    assert queue.put(1, 1234)
    assert not queue.put(0, 1234)


def test_wake_up_does_not_strand_another_putter():
    """``testWakeUpDoesNotStrandAnotherPutter`` (FLINK-37663)."""
    queue: ElementQueue[int] = ElementQueue(1)
    queue.put(2, 0)
    results: dict[str, bool] = {}
    woken = threading.Thread(target=lambda: results.__setitem__("woken", queue.put(0, 1)))
    genuine = threading.Thread(target=lambda: results.__setitem__("genuine", queue.put(1, 2)))
    woken.start()
    genuine.start()
    time.sleep(0.05)  # both wait for room (not asserted: no timing is relied on)

    queue.wake_up_putting_thread(0)
    woken.join(WAIT)
    assert results["woken"] is False

    assert queue.poll() == 0
    genuine.join(WAIT)
    assert not genuine.is_alive(), "a still-waiting putter must be signalled when room frees up"
    assert results["genuine"] is True
    assert queue.poll() == 2


def test_concurrency():
    """``testConcurrency``: 5 putting threads, every value polled exactly once."""
    queue: ElementQueue[int] = ElementQueue(5)
    per_thread, putters = 2_000, 5
    threads = [
        threading.Thread(
            target=lambda i=i: [queue.put(i, i * per_thread + j) for j in range(per_thread)]
        )
        for i in range(putters)
    ]
    for thread in threads:
        thread.start()
    seen: set[int] = set()
    deadline = time.monotonic() + WAIT
    while len(seen) < putters * per_thread:
        assert time.monotonic() < deadline
        value = queue.poll()
        if value is None:
            queue.availability().result(WAIT)
            continue
        assert value not in seen, f"value {value} has been consumed before"
        seen.add(value)
    for thread in threads:
        thread.join(WAIT)
    assert seen == set(range(putters * per_thread))


def test_specified_queue_capacity():
    """``testSpecifiedQueueCapacity``."""
    queue: ElementQueue[object] = ElementQueue(8_000)
    assert queue.remaining_capacity() == 8_000
    assert queue.capacity == 8_000


def test_queue_default_capacity():
    """``testQueueDefaultCapacity``: 2, which is also the reader's default."""
    queue: ElementQueue[object] = ElementQueue()
    assert queue.remaining_capacity() == 2
    assert DEFAULT_ELEMENT_QUEUE_CAPACITY == 2


def test_unavailable_when_empty():
    """``testUnavailableWhenEmpty``."""
    assert not ElementQueue().availability().done()


def test_immediately_available_after_put():
    """``testImmediatelyAvailableAfterPut``."""
    queue: ElementQueue[object] = ElementQueue()
    queue.put(0, object())
    assert queue.availability().done()


def test_future_becomes_available_after_put():
    """``testFutureBecomesAvailableAfterPut``."""
    queue: ElementQueue[object] = ElementQueue()
    future = queue.availability()
    queue.put(0, object())
    assert future.done()


def test_unavailable_when_becomes_empty():
    """``testUnavailableWhenBecomesEmpty``."""
    queue: ElementQueue[object] = ElementQueue()
    queue.put(0, object())
    queue.poll()
    assert not queue.availability().done()


def test_available_after_notify_available():
    """``testAvailableAfterNotifyAvailable``."""
    queue: ElementQueue[object] = ElementQueue()
    queue.notify_available()
    assert queue.availability().done()


def test_future_becomes_available_after_notify_available():
    """``testFutureBecomesAvailableAfterNotifyAvailable``."""
    queue: ElementQueue[object] = ElementQueue()
    future = queue.availability()
    queue.notify_available()
    assert future.done()


def test_poll_resets_availability():
    """``testPollResetsAvailability``."""
    queue: ElementQueue[object] = ElementQueue()
    queue.notify_available()
    before_poll = queue.availability()
    queue.poll()
    after_poll = queue.availability()
    assert before_poll.done()
    assert not after_poll.done()


def test_queue_uses_short_circuit_future():
    """``testQueueUsesShortCircuitFuture``: one shared completed future while available."""
    queue: ElementQueue[object] = ElementQueue()
    queue.put(0, object())
    assert queue.availability() is queue.availability()
    assert queue.availability().done()
