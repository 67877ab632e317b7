"""Committer signals and failures the kit injects around a sink's real committer."""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import Any, final

from sinkv2._committer import Committer

__all__ = ["CommitFault", "FaultInjectingCommitter", "InjectedCommitFailure"]


class InjectedCommitFailure(RuntimeError):
    """The failure the kit injects into a commit; never the sink's fault."""


class CommitFault(enum.Enum):
    """What goes wrong in the first ``commit`` call of one commit."""

    NONE = "no fault"
    RETRY_LATER_ONCE = (
        "the first request asks retry_later() once (the real committer sees it later)"
    )
    RAISE_BEFORE = "the commit raises before the real committer runs"
    RAISE_AFTER = "the commit raises after the real committer committed everything"
    RAISE_HALFWAY = "the real committer commits half the requests, then the commit raises"

    @property
    def raises(self) -> bool:
        """Whether the commit fails, so the job must fail and recover."""
        return self in (
            CommitFault.RAISE_BEFORE,
            CommitFault.RAISE_AFTER,
            CommitFault.RAISE_HALFWAY,
        )

    def __repr__(self) -> str:
        return f"CommitFault.{self.name}"


@final
class FaultInjectingCommitter(Committer[Any]):
    """Wraps the sink's real committer and injects ``fault`` into its first call."""

    def __init__(self, committer: Committer[Any], fault: CommitFault) -> None:
        self._committer = committer
        self._fault = fault
        self._calls = 0

    def commit(self, requests: Collection[Committer.CommitRequest[Any]]) -> None:
        """Pass ``requests`` on, injecting the fault into the first call."""
        self._calls += 1
        listed = list(requests)
        if self._calls > 1 or self._fault is CommitFault.NONE or not listed:
            self._committer.commit(listed)
            return
        if self._fault is CommitFault.RETRY_LATER_ONCE:
            listed[0].retry_later()
            if listed[1:]:
                self._committer.commit(listed[1:])
            return
        if self._fault is CommitFault.RAISE_BEFORE:
            raise InjectedCommitFailure("injected: the commit failed before committing anything")
        half = listed if self._fault is CommitFault.RAISE_AFTER else listed[: len(listed) // 2]
        if half:
            self._committer.commit(half)
        raise InjectedCommitFailure(
            f"injected: the commit failed after committing {len(half)} of {len(listed)} request(s)"
        )

    def close(self) -> None:
        """Close the real committer."""
        self._committer.close()
