"""The commit state store contract: epochs pending, aborted or committed; jobs running.

Over 450 lines because it is the contract, and the Protocols' docstrings are its
specification; the transition table and the argument checks every store runs belong
beside them.

The commit coordinator (`sinkv2.runtime.CommitCoordinator`) keeps one row per
(sink id, epoch) in a table ``pending_sink_state``, so that a driver that crashes
anywhere around a commit can be re-run, in a new process, and finish that commit
exactly once; and one row per running job, so that the next run can remove what a
dead job staged. This module is the contract every store keeps; the SQL stores
(``_sql``) implement it over SQLite and PostgreSQL. The coordinator uses a store in
this order:

1. `CommitStateStore.acquire` the sink id: an exclusive lease, refused with
   `ConcurrentCommitError` while another live driver holds it;
2. `SinkLease.record_job`: this job is about to stage output (before any writer runs);
3. recover: finish the pending epochs and clean up the `SinkLease.unfinished_jobs`
   that dead drivers left, then `SinkLease.finish_job` each of them;
4. look at the requested epoch (`SinkLease.get`, `SinkLease.epochs`,
   `SinkLease.next_epoch`) and decide what to do with it;
5. `SinkLease.record_pending` with the epoch's committables, before committing;
6. run the committer;
7. `SinkLease.mark_committed`;
8. `SinkLease.finish_job` once nothing the job staged is needed any more, and
   `SinkLease.release` the lease.

What a crash at each step leaves behind, and what a re-run finds:

- before 5 returns: no row for the epoch (or its earlier row, unchanged); nothing
  was committed by this run;
- between 5 and 7: a Pending row holding the committables; the re-run commits them
  again (committers are idempotent) or marks the epoch aborted;
- after 7: a Committed row; the re-run has nothing left to do for the epoch.

Allowed transitions, per (sink id, epoch); every other one raises
`IllegalLifecycleError` with a message of its own:

```text
absent    -> PENDING     record an epoch's committables before committing them
ABORTED   -> PENDING     re-run an aborted epoch
PENDING   -> PENDING     re-record (a re-run before the commit): replaces the payload
PENDING   -> COMMITTED   the committer finished
PENDING   -> ABORTED     the epoch's data will be replayed; never commit it
COMMITTED -> COMMITTED   no-op, returns the record (idempotent marking)
ABORTED   -> ABORTED     no-op, returns the record (idempotent marking)
```

Two mechanisms keep two drivers from both proceeding on one sink id:

- an exclusive hold on the sink id, taken without blocking by
  `CommitStateStore.acquire` and dropped when its process dies, so a crashed
  driver never blocks a re-run (the SQLite store uses ``flock``);
- a fencing token per sink id, incremented by every acquire; each write checks, in
  its own transaction, that the lease's token is still the sink's current one, and
  raises `StaleFencingTokenError` otherwise.

"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import TracebackType
from typing import Final, Protocol, Self, final

import attrs

from sinkv2._context import INITIAL_CHECKPOINT_ID
from sinkv2._messages import END_OF_INPUT
from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError

__all__ = [
    "TRANSITIONS",
    "CommitStateStore",
    "EpochRecord",
    "EpochStatus",
    "Lease",
    "SinkLease",
    "Transition",
    "check_epoch",
    "check_name",
    "check_pending",
    "default_checkpoint_id",
]

MAX_INT64: Final = 2**63 - 1


class EpochStatus(enum.Enum):
    """Where an epoch of a sink is in the commit protocol."""

    PENDING = "pending"
    """Its committables are recorded; they may or may not be committed yet."""
    ABORTED = "aborted"
    """Its committables must never be committed; its data is replayed under a later epoch."""
    COMMITTED = "committed"
    """Final: its committables are committed."""


def _payload_repr(payload: bytes) -> str:
    return f"<{len(payload)} bytes>"


@final
@attrs.frozen
class EpochRecord:
    """One row of ``pending_sink_state``: an epoch of a sink and its committables.

    Attributes:
        sink_id: The sink the epoch belongs to.
        epoch: The checkpoint id, from 1 (`sinkv2.INITIAL_CHECKPOINT_ID`).
        status: Where the epoch is in the commit protocol.
        explicit: ``True`` when the user chose this checkpoint id (a re-runnable
            batch), ``False`` when the runtime assigned it.
        serializer_version: The version of the committable serializer that wrote
            ``payload``; read it back with that version.
        payload: The epoch's committables, framed by the caller; opaque to the store.
        checkpoint_id: The checkpoint id the committables carry: the epoch itself
            for an explicit epoch, ``END_OF_INPUT`` for a batch run's assigned one
            (see `default_checkpoint_id`).
        fencing_token: The token of the lease that last wrote this row.
        job_id: The job that last wrote this row.
        updated_at: When this row was last written, in unix seconds.
        writer_states: The writers' states at this checkpoint (streaming), framed by
            the caller; opaque to the store. Empty for batch runs.
    """

    sink_id: str
    epoch: int
    status: EpochStatus
    explicit: bool
    serializer_version: int
    payload: bytes = attrs.field(repr=_payload_repr)
    fencing_token: int
    job_id: str
    updated_at: float
    checkpoint_id: int = attrs.field()

    writer_states: bytes = attrs.field(default=b"", repr=_payload_repr, kw_only=True)

    @checkpoint_id.default
    def _checkpoint_id_default(self) -> int:
        return default_checkpoint_id(self.epoch, explicit=self.explicit)


def default_checkpoint_id(epoch: int, *, explicit: bool) -> int:
    """The checkpoint id of an epoch recorded without one (layout 1 rows, batch runs).

    An explicit epoch is its own checkpoint id; an assigned epoch belongs to a
    batch run, whose committables carry ``END_OF_INPUT``.
    """
    return epoch if explicit else END_OF_INPUT


class Transition(enum.Enum):
    """What a store does when asked to move an epoch to a status."""

    WRITE = "write"
    KEEP = "keep"


_P, _A, _C = EpochStatus.PENDING, EpochStatus.ABORTED, EpochStatus.COMMITTED

TRANSITIONS: Final[Mapping[tuple[EpochStatus | None, EpochStatus], Transition | str]] = {
    (None, _P): Transition.WRITE,
    (_A, _P): Transition.WRITE,
    (_P, _P): Transition.WRITE,
    (_P, _C): Transition.WRITE,
    (_P, _A): Transition.WRITE,
    (_C, _C): Transition.KEEP,
    (_A, _A): Transition.KEEP,
    (_C, _P): (
        "epoch {epoch} of sink {sink!r} is already committed; it cannot be recorded as "
        "pending again, because its committables are visible at the destination. Skip "
        "this epoch, or write new data under lease.next_epoch()"
    ),
    (_C, _A): (
        "epoch {epoch} of sink {sink!r} is already committed; it cannot be aborted, "
        "because its committables are visible at the destination. Abort only pending epochs"
    ),
    (_A, _C): (
        "epoch {epoch} of sink {sink!r} was aborted; its committables must never be "
        "committed, because its data is replayed under a later epoch. To commit a re-run "
        "of this epoch, record its committables with record_pending() first"
    ),
    (None, _C): (
        "epoch {epoch} of sink {sink!r} has no record, so it cannot be marked committed; "
        "call record_pending() with its committables before running the committer, so "
        "that a crash in between can be recovered"
    ),
    (None, _A): (
        "epoch {epoch} of sink {sink!r} has no record, so there is nothing to abort; only "
        "recorded epochs can be aborted"
    ),
}
"""Every (current status or ``None`` if absent, requested status): write, keep, or why not."""


class Lease(Protocol):
    """What every lease of a store has, whatever its id names (a sink, a source).

    Required: every method and property below.
    """

    @property
    def fencing_token(self) -> int:
        """This lease's token; every acquire of the id gets a larger one."""
        ...

    @property
    def job_id(self) -> str:
        """The job this lease was acquired for."""
        ...

    def release(self) -> None:
        """Give the id up. Idempotent; the lease cannot be used afterwards.

        Raises:
            IllegalLifecycleError: Called in a process other than the acquiring one.
        """

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


class SinkLease(Lease, Protocol):
    """Exclusive use of one sink id by one driver, from `CommitStateStore.acquire`.

    Reads and writes go to the store directly: every write is durable when its
    method returns, and checks first that no newer lease took over the sink id.
    A lease belongs to the process that acquired it; it cannot be pickled or used
    in another process. It is a context manager: leaving the ``with`` block
    releases it.

    Required: every method and property below, and those of `Lease`.
    """

    @property
    def sink_id(self) -> str:
        """The sink id this lease holds."""
        ...

    def get(self, epoch: int) -> EpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded.

        Raises:
            SinkConfigurationError: ``epoch`` is not a positive int.
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def epochs(self, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of this sink id with one of ``statuses`` (all if none), by epoch.

        Raises:
            SinkConfigurationError: A status is not an `EpochStatus`.
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def next_epoch(self) -> int:
        """The largest epoch ever recorded for this sink id plus one; 1 if none was.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def record_pending(
        self,
        epoch: int,
        *,
        explicit: bool,
        serializer_version: int,
        payload: bytes,
        checkpoint_id: int | None = None,
        writer_states: bytes = b"",
    ) -> EpochRecord:
        """Record ``epoch`` as pending with its committables, before they are committed.

        Allowed when the epoch is absent, aborted (a re-run) or pending (a re-run
        before its commit: the new payload replaces the old one). Durable when this
        returns.

        Args:
            epoch: The checkpoint id, a positive int.
            explicit: Whether the user chose ``epoch`` (``True``) or it was assigned.
            serializer_version: The version of the serializer that framed ``payload``.
            payload: The epoch's committables, as bytes.
            checkpoint_id: The checkpoint id the committables carry; defaults to
                `default_checkpoint_id` of the epoch.
            writer_states: The writers' states at this checkpoint, as bytes; written
                in the same transaction as the committables.

        Returns:
            The record as written.

        Raises:
            SinkConfigurationError: An argument has the wrong type or range.
            IllegalLifecycleError: The epoch is already committed; or the lease was
                released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def mark_committed(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` committed; on a committed epoch, return it unchanged.

        Call it after the committer finished. Durable when this returns.

        Returns:
            The record as written, or as it was if it was committed already.

        Raises:
            SinkConfigurationError: ``epoch`` is not a positive int.
            IllegalLifecycleError: The epoch is absent or aborted; or the lease was
                released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def mark_aborted(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` aborted; on an aborted epoch, return it unchanged.

        Its committables must then never be committed. Durable when this returns.

        Returns:
            The record as written, or as it was if it was aborted already.

        Raises:
            SinkConfigurationError: ``epoch`` is not a positive int.
            IllegalLifecycleError: The epoch is absent or committed; or the lease was
                released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def replace_writer_states(self, epoch: int, writer_states: bytes) -> EpochRecord:
        """Replace the writer states of committed ``epoch`` (a draining stop sent them).

        Durable when this returns.

        Raises:
            SinkConfigurationError: An argument has the wrong type or range.
            IllegalLifecycleError: The epoch is not committed; or the lease was
                released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def prune(self, below: int) -> int:
        """Forget committed and aborted epochs below ``below``; pending ones stay.

        A stream's history grows by one epoch per micro-batch; only the latest
        ones can be replayed, so the older ones are pruned to keep the store flat.

        Returns:
            How many epochs were forgotten.

        Raises:
            SinkConfigurationError: ``below`` is not a positive int.
            IllegalLifecycleError: The lease was released, or is used in another process.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def origin(self) -> str | None:
        """The stream the sink id is bound to (`bind_origin`), or ``None`` if none is.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def bind_origin(self, origin: str) -> None:
        """Bind the sink id to ``origin``, the stream that numbers its checkpoints.

        A sink id is bound once, by its first stream, so that a second stream
        (whose checkpoint ids would collide with the first one's) can be refused.
        Idempotent for the bound origin; durable when this returns.

        Raises:
            SinkConfigurationError: ``origin`` is not a non-empty str.
            IllegalLifecycleError: The sink id is bound to another origin; or the
                lease was released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def record_job(self) -> None:
        """Record that this lease's job starts staging output for the sink id.

        Call it before any writer of the job runs: if the job's driver dies, the
        next lease of the sink id finds the job in `unfinished_jobs` and removes
        what it staged. Idempotent; durable when this returns.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def unfinished_jobs(self) -> list[str]:
        """Jobs recorded with `record_job` and not finished, except this lease's job.

        While this lease is held no other driver runs the sink id, so these are
        jobs whose drivers died (or stopped before `finish_job`). Oldest first.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def finish_job(self, job_id: str) -> None:
        """Forget ``job_id``: nothing it staged is needed or left any more.

        Idempotent: finishing an unknown or finished job does nothing.

        Raises:
            SinkConfigurationError: ``job_id`` is not a non-empty str.
            IllegalLifecycleError: The lease was released, or is used in another process.
            StaleFencingTokenError: A newer lease took over the sink id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...


class CommitStateStore(Protocol):
    """Where the commit coordinator keeps the state of each sink's epochs.

    Required: `acquire`.
    """

    def acquire(self, sink_id: str, *, job_id: str) -> SinkLease:
        """Take the sink id for this driver, without waiting.

        Args:
            sink_id: The sink's stable id, the same in every run of the job.
            job_id: This run's job id, recorded with every write and shown to a
                driver that finds the sink id taken.

        Returns:
            A lease with a fencing token larger than any earlier lease's.

        Raises:
            SinkConfigurationError: ``sink_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the sink id.
            CommitStateError: The store is unreadable, or of a newer layout.
        """
        ...


def check_name(name: str, value: object, hint: str) -> None:
    """Raise `SinkConfigurationError` unless ``value`` is a non-empty, encodable str.

    NUL is refused by every store, since PostgreSQL cannot keep it in a text column
    or a connection's application name: one id means the same in every store.
    """
    if isinstance(value, str) and value:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            if "\x00" not in value:
                return
            raise SinkConfigurationError(
                f"{name!r} must be a str without NUL characters (got {describe(value)}): "
                f"PostgreSQL cannot keep them, so no store takes them; {hint}"
            )
    raise SinkConfigurationError(
        f"{name!r} must be a non-empty str of valid unicode (got {describe(value)}); {hint}"
    )


def check_pending(
    epoch: object,
    *,
    explicit: object,
    serializer_version: object,
    payload: object,
    checkpoint_id: object,
    writer_states: object = b"",
) -> None:
    """Raise `SinkConfigurationError` unless `SinkLease.record_pending`'s arguments are valid.

    Every store checks them the same way, before it opens a transaction.
    """
    check_epoch(epoch)
    if checkpoint_id is not None:
        check_epoch(checkpoint_id, name="checkpoint_id")
    if not isinstance(explicit, bool):
        raise SinkConfigurationError(
            f"'explicit' must be a bool (got {describe(explicit)}); True when the user "
            "chose the checkpoint id, False when it was assigned"
        )
    if (
        not isinstance(serializer_version, int)
        or isinstance(serializer_version, bool)
        or not 0 <= serializer_version <= MAX_INT64
    ):
        raise SinkConfigurationError(
            f"'serializer_version' must be a non-negative int (got "
            f"{describe(serializer_version)}); pass the committable serializer's get_version()"
        )
    if not isinstance(payload, bytes):
        raise SinkConfigurationError(
            f"'payload' must be bytes (got {describe(payload)}); frame the committables "
            "with SimpleVersionedSerialization first"
        )
    if not isinstance(writer_states, bytes):
        raise SinkConfigurationError(
            f"'writer_states' must be bytes (got {describe(writer_states)}); encode the "
            "writers' states with sinkv2.runtime.WriterStates.encode() first"
        )


def check_epoch(epoch: object, *, name: str = "epoch") -> None:
    """Raise `SinkConfigurationError` unless ``epoch`` is an int in [1, 2**63)."""
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 1 <= epoch <= MAX_INT64:
        raise SinkConfigurationError(
            f"{name!r} must be a positive int below 2**63 (got {describe(epoch)}); checkpoint "
            f"ids start at {INITIAL_CHECKPOINT_ID} (sinkv2.INITIAL_CHECKPOINT_ID)"
        )
