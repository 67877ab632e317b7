"""The splits an enumerator has not handed out yet, and the readers waiting for one.

`FileSource` and `IcebergSource` assign the same way, as Flink's file and Iceberg
enumerators do with their split assigners: a reader asks for a split when it has
none left; the request waits until a split is there and the reader is registered;
a failed reader's splits go back to the front, so they are read again first. A
bounded source answers a request with "no more splits" once none is left; a
continuous one keeps the request until its discovery adds splits.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Generic, TypeVar, final

from sinkv2.source import SplitEnumeratorContext

__all__ = ["SplitQueue"]

SplitT = TypeVar("SplitT")


@final
class SplitQueue(Generic[SplitT]):
    """Assigns splits in order, one per request.

    Args:
        context: The enumerator's context, to assign through.
        remaining: The splits not assigned yet (a listing's, a plan's or a checkpoint's).
        continuous: Whether more splits may come (requests then wait for them).
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[SplitT],
        remaining: Iterable[SplitT],
        *,
        continuous: bool,
    ) -> None:
        self._context = context
        self._remaining = collections.deque(remaining)
        self._continuous = continuous
        self._awaiting: dict[int, str | None] = {}  # subtask -> its host, in request order

    @property
    def remaining(self) -> tuple[SplitT, ...]:
        """The splits not assigned, in the order they will be (for a checkpoint)."""
        return tuple(self._remaining)

    def request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """A reader asks for a split: assign the next; bounded and none left: no more splits."""
        if not self._continuous and not self._remaining:
            self._context.signal_no_more_splits(subtask_id)
            return
        self._awaiting[subtask_id] = requester_hostname
        self.assign()

    def add(self, splits: Iterable[SplitT]) -> None:
        """Newly discovered splits, after those already waiting."""
        self._remaining.extend(splits)
        self.assign()

    def add_back(self, splits: list[SplitT]) -> None:
        """A failed reader's splits, first for the next requests."""
        self._remaining.extendleft(reversed(splits))
        self.assign()

    def forget_request(self, subtask_id: int) -> None:
        """A reader (re)registered: a request of an earlier reader of its subtask is void."""
        self._awaiting.pop(subtask_id, None)

    def assign(self) -> None:
        """Answer the waiting requests of registered readers while splits are left."""
        registered = self._context.registered_readers()
        for subtask in list(self._awaiting):
            if not self._remaining:
                return
            if subtask in registered:
                del self._awaiting[subtask]
                self._context.assign_split(self._remaining.popleft(), subtask)
