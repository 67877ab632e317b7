"""The fetcher thread: runs a `SplitReader` and hands its fetches to the reader.

Flink's ``SplitFetcher`` + ``SingleThreadFetcherManager`` in one small class pair:
one thread per fetcher, which runs queued tasks (add or remove splits) first, then
fetches while it has splits, and idles when it has none. A wake-up interrupts a
blocking `SplitReader.fetch` or a `put` into a full queue, so new splits are taken
in promptly; a fetch that was not handed over yet is kept and handed over later,
never dropped or fetched twice.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Collection
from typing import Generic, TypeVar, final

from sinkv2._text import describe
from sinkv2.source._errors import SourceContractError, SourceReaderError, raised_at
from sinkv2.source.reader._queue import ElementQueue
from sinkv2.source.reader._records import RecordsWithSplitIds
from sinkv2.source.reader._split_reader import SplitReader
from sinkv2.source.reader._splits_change import SplitsAddition, SplitsChange, SplitsRemoval

__all__ = ["SingleThreadFetcherManager"]

E = TypeVar("E")
SplitT = TypeVar("SplitT")

_JOIN_SECONDS = 30.0


@final
class _SplitFetcher(Generic[E, SplitT]):
    def __init__(
        self,
        index: int,
        queue: ElementQueue[RecordsWithSplitIds[E]],
        split_reader: SplitReader[E, SplitT],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._index = index
        self._queue = queue
        self._reader = split_reader
        self._on_error = on_error
        self._changes: collections.deque[SplitsChange[SplitT]] = collections.deque()
        self._assigned: set[str] = set()
        self._pending: RecordsWithSplitIds[E] | None = None
        self._closed = False
        self._fetching = False
        self._woken = False
        self._worked = False  # since it was last idle
        self._cond = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"sinkv2-split-fetcher-{index}", daemon=True
        )
        self._thread.start()

    def change(self, change: SplitsChange[SplitT], split_ids: Collection[str]) -> None:
        with self._cond:
            if isinstance(change, SplitsAddition):
                self._assigned.update(split_ids)
            self._changes.append(change)
            self._wake_up_locked()

    def idle(self) -> bool:
        if self._fetching or self._assigned:
            # Busy, read without the lock: if it turns idle just after, it notifies the
            # queue, which keeps the notification until the reader looks again.
            return False
        with self._cond:
            return not (self._changes or self._assigned or self._fetching or self._pending)

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._wake_up_locked()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_SECONDS)

    def _wake_up_locked(self) -> None:
        if self._fetching:
            self._woken = True
            self._reader.wake_up()
            self._queue.wake_up_putting_thread(self._index)
        self._cond.notify_all()

    def _run(self) -> None:
        try:
            while self._run_once():
                pass
        except BaseException as error:  # noqa: BLE001  # handed to the reader's thread
            self._on_error(error)
        finally:
            try:
                self._reader.close()
            except Exception as error:  # noqa: BLE001  # handed to the reader's thread
                self._on_error(error)

    def _run_once(self) -> bool:
        with self._cond:
            if self._worked and not (
                self._closed or self._changes or self._assigned or self._pending
            ):
                # Idle now: the reader may have looked at the queue before this fetcher
                # dropped its last split; wake it so it sees the fetcher is done.
                self._worked = False
                self._queue.notify_available()
            while not (self._closed or self._changes or self._assigned or self._pending):
                self._cond.wait()
            if self._closed:
                return False
            change = self._changes.popleft() if self._changes else None
            self._fetching = change is None
            self._worked = True
        if change is not None:
            self._reader.handle_splits_changes(change)
            return True
        try:
            self._fetch_until_interrupted()
        finally:
            with self._cond:
                self._fetching = False
                self._woken = False
                self._queue.forget_wake_up(self._index)
        return True

    def _woken_up(self) -> bool:
        return self._woken

    def _fetch_until_interrupted(self) -> None:
        """Fetch and hand over while nothing else is asked of this fetcher.

        A split change, a close or a wake-up ends the run, as does running out of
        splits; the flags are read without the lock (one atomic read each), which is
        safe: whoever sets them does so under the lock while ``_fetching`` is true,
        and wakes up a blocked `SplitReader.fetch` or a full `ElementQueue.put`, so
        the next check here sees them. A fetch that a wake-up kept from being handed
        over stays in ``_pending`` and goes first next time: none is lost or fetched twice.
        """
        fetch, put, index = self._reader.fetch, self._queue.put, self._index
        while not (self._woken or self._changes or self._closed) and (
            self._assigned or self._pending is not None
        ):
            pending = self._pending
            if pending is None:
                pending = self._pending = fetch()
                if not callable(getattr(pending, "finished_splits", None)):
                    self._pending = None
                    raise _not_records(self._reader, pending)
                if self._woken_up():  # a method: the flag changes under the loop's feet
                    return
            if not put(index, pending):
                return
            self._pending = None
            finished = pending.finished_splits()
            if finished:
                with self._cond:
                    self._assigned.difference_update(finished)


def _not_records(reader: object, fetched: object) -> SourceContractError:
    return SourceContractError(
        f"{type(reader).__qualname__}.fetch() returned {describe(fetched)}; return a "
        "RecordsWithSplitIds, e.g. RecordsBySplits({split_id: records}, "
        "finished_splits=[ids of the splits that ended])",
        method="fetch",
    )


@final
class SingleThreadFetcherManager(Generic[E, SplitT]):
    """One fetcher thread for all of a reader's splits (Flink's ``SingleThreadFetcherManager``).

    The thread starts with the first splits, stops once it has none left (when the
    reader asks, at the end of its input), and a new one starts if splits come again.
    """

    def __init__(
        self,
        queue: ElementQueue[RecordsWithSplitIds[E]],
        split_reader_supplier: Callable[[], SplitReader[E, SplitT]],
    ) -> None:
        self._queue = queue
        self._supplier = split_reader_supplier
        self._fetcher: _SplitFetcher[E, SplitT] | None = None
        self._error: BaseException | None = None
        self._next_index = 0
        self._lock = threading.Lock()

    def add_splits(self, splits: list[SplitT], split_ids: Collection[str]) -> None:
        """Hand ``splits`` to the fetcher, starting one if there is none."""
        self._running().change(SplitsAddition(tuple(splits)), split_ids)

    def remove_splits(self, splits: list[SplitT], split_ids: Collection[str]) -> None:
        """Ask the fetcher to drop ``splits``; they come back as finished."""
        self._running().change(SplitsRemoval(tuple(splits)), split_ids)

    def _running(self) -> _SplitFetcher[E, SplitT]:
        self.check_errors()
        if self._fetcher is None:
            reader = self._supplier()
            self._fetcher = _SplitFetcher(self._next_index, self._queue, reader, self._failed)
            self._next_index += 1
        return self._fetcher

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
        self._queue.notify_available()

    def check_errors(self) -> None:
        """Raise the fetcher's error in the caller's thread, if it had one.

        Raises:
            SourceReaderError: The split reader raised; the cause is chained.
        """
        error = self._error  # one atomic read; set once, under the lock, by the fetcher
        if error is not None:
            failed = SourceReaderError(f"the split fetcher failed: {type(error).__name__}: {error}")
            failed.add_note(raised_at(error))  # Spark drops __cause__, keeps notes
            raise failed from error

    def busy(self) -> bool:
        """Whether the fetcher plainly still works (a fetch or a split in hand); no lock taken.

        A ``True`` that is out of date is safe for a caller that then waits on the
        queue's availability: a fetcher that turns idle after working notifies it.
        """
        fetcher = self._fetcher
        return fetcher is not None and (fetcher._fetching or bool(fetcher._assigned))

    def maybe_shutdown_finished_fetchers(self) -> bool:
        """Stop the fetcher if it has no splits and nothing to do; whether none is left."""
        fetcher = self._fetcher
        if fetcher is None:
            return True
        if not fetcher.idle():
            return False
        fetcher.shutdown()
        self._fetcher = None
        return True

    def close(self) -> None:
        """Stop the fetcher thread (waiting up to 30 s for it) and close its split reader."""
        fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:
            fetcher.shutdown()
