"""Committers: what makes staged output visible, once per checkpoint.

A committer receives every committable of a checkpoint as `CommitRequest`s and
signals the outcome of each. Commit semantics, kept from Flink:

- a request that is neither signalled nor retried is committed;
- `CommitRequest.retry_later` / `CommitRequest.update_and_retry_later` commit it
  again, with a bounded number of retries; exhausting them fails the job;
- `CommitRequest.signal_failed_with_known_reason` drops it with a logged warning
  and the job goes on; `CommitRequest.signal_failed_with_unknown_reason` fails the job;
- `CommitRequest.signal_already_committed` counts it as committed.

Committers must be idempotent: after any failure, recovery commits the same
committables again, possibly in a new process.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, TypeVar

__all__ = ["CommitRequest", "Committer"]

CommT = TypeVar("CommT")
RequestT = TypeVar("RequestT")


class Committer(Protocol[CommT]):
    """Commits the committables that writers prepared.

    Required: `commit`, `close`.
    """

    class CommitRequest(Protocol[RequestT]):
        """One committable handed to `Committer.commit`, and the way to report its outcome.

        Signal each request at most once per `Committer.commit` call, or not at all
        (meaning: committed).
        """

        def get_committable(self) -> RequestT:
            """The committable to commit."""
            ...

        def get_number_of_retries(self) -> int:
            """How many times this committable was retried before; 0 on the first try."""
            ...

        def signal_failed_with_known_reason(self, error: BaseException) -> None:
            """Drop the committable: it failed for an understood, accepted reason.

            For example its data is gone. The job goes on; a warning is logged.
            """

        def signal_failed_with_unknown_reason(self, error: BaseException) -> None:
            """Fail the job: the committable cannot be committed and nobody knows why.

            The error the job fails with names the committable.
            """

        def retry_later(self) -> None:
            """The commit failed in a way that may pass; try this committable again."""

        def update_and_retry_later(self, committable: RequestT) -> None:
            """Part of the committable was committed; try again with what is left."""

        def signal_already_committed(self) -> None:
            """The committable was committed before (a replay); count it as committed."""

    def commit(self, requests: Collection[Committer.CommitRequest[CommT]]) -> None:
        """Commit every request's committable, and signal the ones that did not commit.

        Must be idempotent: any committable may arrive again after a failure,
        including one this committer already committed. Recognise it (for example by
        a checkpoint id recorded in the destination) and call
        `CommitRequest.signal_already_committed`, or commit it again harmlessly.

        Raises:
            Exception: Raising fails the whole commit; every request in the call is
                treated as not committed and will be committed again on recovery.
        """

    def close(self) -> None:
        """Release resources. Called once, also after failures."""


CommitRequest = Committer.CommitRequest
"""The same as `Committer.CommitRequest`."""
