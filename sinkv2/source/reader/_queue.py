"""The bounded hand-over queue between a fetcher thread and its reader.

Flink's ``FutureCompletingBlockingQueue``: `put` blocks while the queue is full (so
a slow consumer bounds the memory a fast fetcher can fill), a blocked `put` can be
woken up without enqueuing, and the consumer waits on a future instead of blocking.

Built for a cheap hand-over per fetch, since a fetch is handed over thousands of
times a second on the Arrow path: one plain lock guards the queue, a `put` that
finds room and a `poll` that finds an element touch nothing else (the condition a
full `put` waits on is notified only when a `put` waits), and the consumer's future
is an `AvailabilityFuture`, whose `result` waits on a bare lock that `put` releases
after completing it, so a waiting reader wakes up once, not once for the future's
condition and again for its lock.
"""

from __future__ import annotations

import _thread
import collections
import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
    RUNNING,
)
from typing import Any, Generic, TypeVar, final

__all__ = ["DEFAULT_ELEMENT_QUEUE_CAPACITY", "AvailabilityFuture", "ElementQueue", "done_future"]

E = TypeVar("E")

DEFAULT_ELEMENT_QUEUE_CAPACITY = 2
"""Fetches the hand-over queue holds (Flink's ``source.reader.element.queue.capacity``)."""


def _completed() -> concurrent.futures.Future[None]:
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    future.set_result(None)
    return future


_DONE = _completed()


def done_future() -> concurrent.futures.Future[None]:
    """A future that is already complete: "available now" (one shared, immutable instance)."""
    return _DONE


# A Future's states (its private attribute ``_state``, which the condition-free paths set).
_CANCELLED_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED)
_DONE_STATES = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_MAKING_CONDITIONS = _thread.allocate_lock()


@final
class AvailabilityFuture(concurrent.futures.Future[None]):
    """The future `ElementQueue.availability` hands out: a `concurrent.futures.Future`.

    It works with everything a ``Future`` works with (``concurrent.futures.wait``,
    callbacks, ``cancel``, ``repr``); what the hand-over uses costs less. A reader
    that blocks in `result` waits on a bare lock, released once the future is
    complete (or cancelled, or failed), so it wakes up once. And the
    ``threading.Condition`` every ``Future`` has is made only when something other
    than `complete`, `result` and `done` asks for it (``wait``, a callback,
    ``cancel``): a fetch handed over costs two bare locks, not a condition over a
    reentrant lock and a notification. The condition, once made, is over the bare
    lock `complete` takes, so the two paths exclude each other.
    """

    def __init__(self) -> None:  # not Future.__init__, which makes the condition at once
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks: list[Callable[[concurrent.futures.Future[None]], object]] = []
        self._mutex = _thread.allocate_lock()  # the condition's lock, once there is one
        self._signal = _thread.allocate_lock()  # held until the future is done
        self._signal.acquire()

    def __getattr__(self, name: str) -> Any:
        # Reached only for an attribute never set: the condition, made on first use.
        if name != "_condition":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with _MAKING_CONDITIONS:
            condition = self.__dict__.get("_condition")
            if condition is None:
                condition = self.__dict__["_condition"] = threading.Condition(self._mutex)
        return condition

    def complete(self) -> None:
        """Complete with ``None`` and release a waiting `result`; nothing if already done."""
        self._finish(None)

    def set_result(self, result: None) -> None:
        """See ``concurrent.futures.Future.set_result``; also releases a waiting `result`.

        Raises:
            concurrent.futures.InvalidStateError: The future is already done.
        """
        if not self._finish(None):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def set_exception(self, exception: BaseException | None) -> None:
        """See ``concurrent.futures.Future.set_exception``; also releases a waiting `result`.

        Raises:
            concurrent.futures.InvalidStateError: The future is already done.
        """
        if not self._finish(exception):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def _finish(self, exception: BaseException | None) -> bool:
        with self._mutex:
            if self._state in _DONE_STATES:
                return False
            self._exception = exception
            self._state = FINISHED
            condition = self.__dict__.get("_condition")
            if condition is not None:
                condition.notify_all()
            for waiter in self._waiters:
                if exception is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
        self._signal.release()
        if self._done_callbacks:
            self._invoke_callbacks()
        return True

    def done(self) -> bool:
        """See ``concurrent.futures.Future.done`` (one read, no lock)."""
        return self._state in _DONE_STATES

    def cancel(self) -> bool:
        """See ``concurrent.futures.Future.cancel``; also releases a waiting `result`."""
        with self._mutex:
            state = self._state
            if state in _CANCELLED_STATES:
                return True
            if state in (RUNNING, FINISHED):
                return False
            self._state = CANCELLED
            condition = self.__dict__.get("_condition")
            if condition is not None:
                condition.notify_all()
        self._signal.release()
        self._invoke_callbacks()
        return True

    def result(self, timeout: float | None = None) -> None:
        """``None`` once available; see ``concurrent.futures.Future.result``.

        Raises:
            TimeoutError: Not available within ``timeout`` seconds.
            concurrent.futures.CancelledError: The future was cancelled.
        """
        signal = self._signal
        if signal.acquire(True, -1 if timeout is None else max(timeout, 0.0)):
            signal.release()  # leave it released: every later call returns at once
            if self._state == FINISHED and self._exception is None:
                return None
        return super().result(0)  # raises: timed out, cancelled or failed


@final
class ElementQueue(Generic[E]):
    """A queue of fetches with a fixed capacity; many putting threads, one consumer.

    Flink's ``FutureCompletingBlockingQueue``; its default capacity is Flink's too (2).
    """

    def __init__(self, capacity: int = DEFAULT_ELEMENT_QUEUE_CAPACITY) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"the queue capacity must be an int >= 1 (got {capacity!r})")
        self._capacity = capacity
        self._items: collections.deque[E] = collections.deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._putters = 0  # threads waiting in put for room
        self._woken: set[int] = set()
        self._waiting: AvailabilityFuture | None = None
        # Flink's AVAILABLE state without an element: set by notify_available, kept until
        # a poll finds the queue empty, so a notification that comes before the consumer
        # asks for its future is not lost.
        self._notified = False

    @property
    def capacity(self) -> int:
        """How many fetches the queue holds at most."""
        return self._capacity

    def put(self, thread_index: int, element: E) -> bool:
        """Append ``element``, waiting while the queue is full.

        Returns:
            Whether it was enqueued: ``False`` when `wake_up_putting_thread` woke
            this thread while it waited (the caller keeps the element for later).
        """
        with self._lock:
            if len(self._items) >= self._capacity and not self._wait_for_room(thread_index):
                return False
            self._items.append(element)
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.complete()
        return True

    def _wait_for_room(self, thread_index: int) -> bool:
        self._putters += 1
        try:
            while len(self._items) >= self._capacity:
                if thread_index in self._woken:
                    self._woken.discard(thread_index)
                    return False
                self._not_full.wait()
        finally:
            self._putters -= 1
        return True

    def poll(self) -> E | None:
        """The oldest element, or ``None`` when empty; never blocks."""
        with self._lock:
            if not self._items:
                self._notified = False
                return None
            element = self._items.popleft()
            if self._putters:
                self._not_full.notify_all()
            return element

    def peek(self) -> E | None:
        """The oldest element without removing it, or ``None`` when empty."""
        with self._lock:
            return self._items[0] if self._items else None

    def is_empty(self) -> bool:
        """Whether nothing is queued."""
        return not self._items  # one atomic read: a snapshot, as under a lock

    def size(self) -> int:
        """How many elements are queued."""
        return len(self._items)

    def remaining_capacity(self) -> int:
        """How many more elements fit before `put` waits (Flink's ``remainingCapacity``)."""
        return self._capacity - len(self._items)

    def wake_up_putting_thread(self, thread_index: int) -> None:
        """Make ``thread_index``'s waiting (or next full) `put` return ``False``."""
        with self._lock:
            self._woken.add(thread_index)
            if self._putters:
                self._not_full.notify_all()

    def forget_wake_up(self, thread_index: int) -> None:
        """Drop a wake-up of ``thread_index`` that no `put` consumed."""
        if self._woken:
            with self._lock:
                self._woken.discard(thread_index)

    def availability(self) -> concurrent.futures.Future[None]:
        """A future that completes once an element is queued (done now if one is).

        Also done now after `notify_available`, until a `poll` finds the queue empty.
        """
        with self._lock:
            if self._items or self._notified:
                return _DONE
            if self._waiting is None:
                self._waiting = AvailabilityFuture()
            return self._waiting

    def notify_available(self) -> None:
        """Make the consumer look again without an element (an end, an error, an idle fetcher).

        Completes its pending future; if it has none yet, the next `availability` is
        done at once (until a `poll` finds the queue empty).
        """
        with self._lock:
            self._notified = True
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.complete()
