"""The bounded hand-over queue between a fetcher thread and its reader.

Flink's ``FutureCompletingBlockingQueue``: `put` blocks while the queue is full (so
a slow consumer bounds the memory a fast fetcher can fill), a blocked `put` can be
woken up without enqueuing, and the consumer waits on a future instead of blocking.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Generic, TypeVar, final

__all__ = ["ElementQueue", "done_future"]

E = TypeVar("E")


def done_future() -> concurrent.futures.Future[None]:
    """A future that is already complete: "available now"."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    future.set_result(None)
    return future


@final
class ElementQueue(Generic[E]):
    """A queue of fetches with a fixed capacity; many putting threads, one consumer."""

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"the queue capacity must be an int >= 1 (got {capacity!r})")
        self._capacity = capacity
        self._items: collections.deque[E] = collections.deque()
        self._lock = threading.Lock()
        self._not_full = threading.Condition(self._lock)
        self._woken: set[int] = set()
        self._waiting: concurrent.futures.Future[None] | None = None

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
        with self._not_full:
            while len(self._items) >= self._capacity:
                if thread_index in self._woken:
                    self._woken.discard(thread_index)
                    return False
                self._not_full.wait()
            self._items.append(element)
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.set_result(None)
        return True

    def poll(self) -> E | None:
        """The oldest element, or ``None`` when empty; never blocks."""
        with self._not_full:
            if not self._items:
                return None
            element = self._items.popleft()
            self._not_full.notify_all()
            return element

    def is_empty(self) -> bool:
        """Whether nothing is queued."""
        with self._lock:
            return not self._items

    def size(self) -> int:
        """How many elements are queued."""
        with self._lock:
            return len(self._items)

    def wake_up_putting_thread(self, thread_index: int) -> None:
        """Make ``thread_index``'s waiting (or next full) `put` return ``False``."""
        with self._not_full:
            self._woken.add(thread_index)
            self._not_full.notify_all()

    def forget_wake_up(self, thread_index: int) -> None:
        """Drop a wake-up of ``thread_index`` that no `put` consumed."""
        with self._lock:
            self._woken.discard(thread_index)

    def availability(self) -> concurrent.futures.Future[None]:
        """A future that completes once an element is queued (done now if one is)."""
        with self._lock:
            if self._items:
                return done_future()
            if self._waiting is None:
                self._waiting = concurrent.futures.Future()
            return self._waiting

    def notify_available(self) -> None:
        """Complete the consumer's pending future without an element (an end, an error)."""
        with self._lock:
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.set_result(None)
