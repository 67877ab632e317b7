"""Drive a `Committer` over a set of committables with Flink's commit semantics.

This is the loop Flink runs in ``CheckpointCommittableManagerImpl.commit``, kept
exactly, with two deliberate improvements:

- retries wait with exponential backoff and jitter instead of re-calling the
  committer back to back;
- ``signal_failed_with_unknown_reason`` does not raise inside the committer (where a
  broad ``except`` could swallow it); the failure is recorded and raised as
  `CommitFailedError` as soon as ``commit()`` returns.

Known-reason failures are logged (Flink's javadoc promises a log; its code has none).
"""

from __future__ import annotations

import enum
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar, final

import attrs

from sinkv2._committer import CommitRequest, Committer
from sinkv2._metrics import (
    InMemoryMetricGroup,
    InMemorySinkCommitterMetricGroup,
    SinkCommitterMetricGroup,
)
from sinkv2._text import describe
from sinkv2.errors import (
    CommitFailedError,
    CommitRetriesExhaustedError,
    IllegalLifecycleError,
    SinkConfigurationError,
)

__all__ = [
    "CommitOutcome",
    "CommitRequestImpl",
    "CommitRequestState",
    "CommitRetryPolicy",
    "commit_with_retries",
]

CommT = TypeVar("CommT")

logger = logging.getLogger("sinkv2.commit")

_MAX_NAMED = 5


class CommitRequestState(enum.Enum):
    """Where a commit request is in its lifecycle (Flink's ``CommitRequestState``)."""

    RECEIVED = "received"
    """Handed to the committer, not signalled yet."""
    RETRY = "retry"
    """Asked to be committed again."""
    FAILED = "failed"
    """Final: failed with a known or unknown reason."""
    COMMITTED = "committed"
    """Final: committed, now or before."""

    @property
    def is_final(self) -> bool:
        """Whether no further commit attempt will be made."""
        return self in (CommitRequestState.FAILED, CommitRequestState.COMMITTED)


@final
class CommitRequestImpl(CommitRequest[CommT]):
    """The runtime's `CommitRequest`: one committable and its outcome.

    A request may be signalled once per commit round, and only while the round
    runs (that is, inside ``Committer.commit``). An unsignalled request becomes
    committed when the round ends.
    """

    __slots__ = (
        "_already_committed",
        "_committable",
        "_error",
        "_in_round",
        "_num_retries",
        "_signal",
        "_state",
    )

    def __init__(self, committable: CommT, *, number_of_retries: int = 0) -> None:
        self._committable = committable
        self._num_retries = number_of_retries
        self._state = CommitRequestState.RECEIVED
        self._in_round = False
        self._signal: str | None = None
        self._error: BaseException | None = None
        self._already_committed = False

    @property
    def state(self) -> CommitRequestState:
        """The lifecycle state."""
        return self._state

    @property
    def error(self) -> BaseException | None:
        """The error the committer signalled, if it failed."""
        return self._error

    @property
    def failed_with_known_reason(self) -> bool:
        """Whether the request failed with a known reason (and is dropped)."""
        return self._state is CommitRequestState.FAILED and self._signal == "known"

    @property
    def already_committed(self) -> bool:
        """Whether the committer signalled the committable as committed before."""
        return self._already_committed

    def get_committable(self) -> CommT:
        """The committable (the updated one after `update_and_retry_later`)."""
        return self._committable

    def get_number_of_retries(self) -> int:
        """Retries before the current attempt; 0 on the first."""
        return self._num_retries

    def _set(self, signal: str, state: CommitRequestState) -> None:
        if not self._in_round:
            raise IllegalLifecycleError(
                f"commit request for {describe(self._committable)} was signalled "
                f"({signal}) outside Committer.commit(); signal requests only while "
                "commit() runs"
            )
        if self._signal is not None:
            raise IllegalLifecycleError(
                f"commit request for {describe(self._committable)} was already signalled "
                f"({self._signal}) in this commit() call and cannot also be {signal}; "
                "signal each request at most once per call"
            )
        self._signal = signal
        self._state = state

    def signal_failed_with_known_reason(self, error: BaseException) -> None:
        """Drop the committable with a logged warning."""
        self._set("known", CommitRequestState.FAILED)
        self._error = error

    def signal_failed_with_unknown_reason(self, error: BaseException) -> None:
        """Fail the job once the committer returns."""
        self._set("unknown", CommitRequestState.FAILED)
        self._error = error

    def retry_later(self) -> None:
        """Commit again in the next round."""
        self._set("retry", CommitRequestState.RETRY)
        self._num_retries += 1

    def update_and_retry_later(self, committable: CommT) -> None:
        """Commit ``committable`` instead, in the next round."""
        self._set("retry", CommitRequestState.RETRY)
        self._committable = committable
        self._num_retries += 1

    def signal_already_committed(self) -> None:
        """Count as committed before."""
        self._set("already-committed", CommitRequestState.COMMITTED)
        self._already_committed = True

    def begin_round(self) -> None:
        """Open a commit round: the committer may signal this request until `end_round`."""
        if self._state.is_final:
            raise IllegalLifecycleError(
                f"commit request for {describe(self._committable)} is already "
                f"{self._state.value} and cannot be committed again"
            )
        self._state = CommitRequestState.RECEIVED
        self._signal = None
        self._in_round = True

    def end_round(self) -> None:
        """Close the round: an unsignalled request is committed."""
        self._in_round = False
        if self._state is CommitRequestState.RECEIVED:
            self._state = CommitRequestState.COMMITTED

    def __repr__(self) -> str:
        return (
            f"CommitRequestImpl({self._committable!r}, state={self._state.value}, "
            f"retries={self._num_retries})"
        )


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SinkConfigurationError(
            f"{attribute.name!r} must be a non-negative int (got {describe(value)}); "
            f"Flink's default is {attribute.default!r}"
        )


def _finite_at_least(bound: float) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value < bound
        ):
            raise SinkConfigurationError(
                f"{attribute.name!r} must be a finite number >= {bound} (got {describe(value)})"
            )

    return check


def _jitter_range(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    _finite_at_least(0.0)(instance, attribute, value)
    if value > 1.0:
        raise SinkConfigurationError(
            f"'jitter' must be a fraction in [0, 1] (got {describe(value)}); 0.2 means +-20%"
        )


@final
@attrs.frozen(kw_only=True)
class CommitRetryPolicy:
    """How often and how patiently to retry committables that ask for it.

    Attributes:
        max_retries: Retries after the first attempt before the job fails (Flink's
            ``sink.committer.retries``, default 10). At most ``max_retries + 1``
            calls to ``Committer.commit`` per checkpoint.
        initial_backoff_s: Wait before the first retry, in seconds.
        max_backoff_s: Upper bound of any wait.
        multiplier: Growth of the wait per retry.
        jitter: Random spread of each wait, as a fraction (0.2 = +-20 %), so that
            many jobs retrying against one destination do not move in lockstep.
    """

    max_retries: int = attrs.field(default=10, validator=_non_negative_int)
    initial_backoff_s: float = attrs.field(default=0.1, validator=_finite_at_least(0.0))
    max_backoff_s: float = attrs.field(default=10.0, validator=_finite_at_least(0.0))
    multiplier: float = attrs.field(default=2.0, validator=_finite_at_least(1.0))
    jitter: float = attrs.field(default=0.2, validator=_jitter_range)

    def __attrs_post_init__(self) -> None:
        if self.max_backoff_s < self.initial_backoff_s:
            raise SinkConfigurationError(
                f"'max_backoff_s' ({self.max_backoff_s}) must be >= 'initial_backoff_s' "
                f"({self.initial_backoff_s})"
            )

    def backoff_seconds(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (0 for the first)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier**retry)
        spread = base * self.jitter
        return max(0.0, min(self.max_backoff_s, base + rng.uniform(-spread, spread)))


@final
@attrs.frozen
class CommitOutcome(Generic[CommT]):
    """What committing a set of committables did.

    Attributes:
        committed: Committables committed by this call (in their final, possibly
            updated, form).
        already_committed: Committables the committer found committed before.
        failed_with_known_reason: Committables dropped, each with its error.
        retries: Retries asked for, over all committables and rounds.
        commit_calls: Calls made to ``Committer.commit``.
    """

    committed: tuple[CommT, ...] = ()
    already_committed: tuple[CommT, ...] = ()
    failed_with_known_reason: tuple[tuple[CommT, BaseException], ...] = ()
    retries: int = 0
    commit_calls: int = 0

    @property
    def successful(self) -> tuple[CommT, ...]:
        """Committed now or before: what a post-commit topology receives."""
        return self.committed + self.already_committed

    def __str__(self) -> str:
        return (
            f"{len(self.committed)} committed, {len(self.already_committed)} already committed, "
            f"{len(self.failed_with_known_reason)} dropped with a known reason, "
            f"{self.retries} retries in {self.commit_calls} commit call(s)"
        )


def _name_committables(committables: Sequence[object]) -> str:
    named = ", ".join(describe(c) for c in committables[:_MAX_NAMED])
    more = len(committables) - _MAX_NAMED
    return named + (f" and {more} more" if more > 0 else "")


def commit_with_retries(
    committer: Committer[CommT],
    committables: Iterable[CommT],
    *,
    policy: CommitRetryPolicy | None = None,
    metrics: SinkCommitterMetricGroup | None = None,
    what: str = "",
    number_of_retries: int = 0,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> CommitOutcome[CommT]:
    """Commit ``committables`` with ``committer``, following Flink's commit semantics.

    Every committable goes to one ``commit`` call; the ones that ask to be retried
    go to the next call, after a backoff, until none is left or the retry budget is
    spent. With no committables, the committer is not called.

    Args:
        committer: The sink's committer.
        committables: Everything to commit for one checkpoint.
        policy: Retry budget and backoff; Flink's defaults if omitted.
        metrics: Where to count committables (Flink's committer metrics).
        what: Names the commit in errors and logs, e.g. ``"sink 'orders' checkpoint 7"``.
        number_of_retries: Retries already made for these committables in an earlier
            run (Flink keeps this count across restarts).
        sleep: Waits between rounds; tests pass a recorder.
        rng: Source of jitter.

    Returns:
        What was committed, found committed, dropped, and how many retries it took.

    Raises:
        CommitFailedError: A committable failed with an unknown reason, or the
            committer raised. The error names the committables and chains the cause.
        CommitRetriesExhaustedError: Committables still asked for retries after
            ``policy.max_retries`` retries.
    """
    policy = policy or CommitRetryPolicy()
    rng = rng or random.Random()
    metrics = metrics if metrics is not None else InMemorySinkCommitterMetricGroup()
    prefix = f"{what}: " if what else ""
    requests = [CommitRequestImpl(c, number_of_retries=number_of_retries) for c in committables]
    metrics.get_num_committables_total_counter().inc(len(requests))
    metrics.set_current_pending_committables_gauge(
        InMemoryMetricGroup.gauge_from(  # type: ignore[arg-type]  # the gauge reads an int
            lambda: sum(not r.state.is_final for r in requests)
        )
    )

    pending = requests
    retries = 0
    calls = 0
    while pending:
        calls += 1
        _run_round(committer, pending, prefix)
        _settle_round(pending, metrics, prefix)
        pending = [r for r in pending if r.state is CommitRequestState.RETRY]
        retries += len(pending)
        metrics.get_num_committables_retry_counter().inc(len(pending))
        if pending and calls > policy.max_retries:
            waiting = [r.get_committable() for r in pending]
            raise CommitRetriesExhaustedError(
                f"{prefix}failed to commit {len(pending)} committable(s) after "
                f"{policy.max_retries} retries: {_name_committables(waiting)}; the committer "
                "kept asking to retry them. Committers are idempotent, so re-running the "
                "commit once the destination recovers is safe",
                committables=waiting,
                retries=policy.max_retries,
            )
        if pending:
            sleep(policy.backoff_seconds(calls - 1, rng))

    return CommitOutcome(
        committed=tuple(
            r.get_committable()
            for r in requests
            if r.state is CommitRequestState.COMMITTED and not r.already_committed
        ),
        already_committed=tuple(r.get_committable() for r in requests if r.already_committed),
        failed_with_known_reason=tuple(
            (r.get_committable(), r.error)  # type: ignore[misc]  # error is set for FAILED
            for r in requests
            if r.failed_with_known_reason
        ),
        retries=retries,
        commit_calls=calls,
    )


def _run_round(
    committer: Committer[CommT], pending: list[CommitRequestImpl[CommT]], prefix: str
) -> None:
    """One ``Committer.commit`` call over ``pending``; unsignalled requests end committed."""
    for request in pending:
        request.begin_round()
    try:
        committer.commit(tuple(pending))
    except Exception as error:
        stuck = [r.get_committable() for r in pending]
        raise CommitFailedError(
            f"{prefix}{type(committer).__qualname__}.commit() raised {type(error).__name__}: "
            f"{error}; {len(stuck)} committable(s) are not known to be committed: "
            f"{_name_committables(stuck)}",
            committables=stuck,
        ) from error
    finally:
        for request in pending:
            request.end_round()


def _settle_round(
    pending: list[CommitRequestImpl[CommT]], metrics: SinkCommitterMetricGroup, prefix: str
) -> None:
    """Count a round's outcomes, log known failures, raise on unknown ones."""
    for request in pending:
        if request.failed_with_known_reason:
            metrics.get_num_committables_failure_counter().inc()
            logger.warning(
                "%sdropping committable %s: the committer signalled a known failure: %r",
                prefix,
                describe(request.get_committable()),
                request.error,
            )
        elif request.already_committed:
            metrics.get_num_committables_already_committed_counter().inc()
        elif request.state is CommitRequestState.COMMITTED:
            metrics.get_num_committables_success_counter().inc()
    unknown = [
        r
        for r in pending
        if r.state is CommitRequestState.FAILED and not r.failed_with_known_reason
    ]
    if not unknown:
        return
    metrics.get_num_committables_failure_counter().inc(len(unknown))
    first = unknown[0]
    others = [r.get_committable() for r in unknown[1:]]
    raise CommitFailedError(
        f"{prefix}failed to commit {describe(first.get_committable())}: the committer "
        f"signalled an unknown failure: {first.error!r}"
        + (f" (and {len(others)} more: {_name_committables(others)})" if others else ""),
        committables=[r.get_committable() for r in unknown],
    ) from first.error
