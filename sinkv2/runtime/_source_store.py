"""The source epoch store contract: per source id a fenced lease, per epoch one record.

A FLIP-27 source read as a stream (Spark's ``streamReader()``) keeps its split state
between micro-batches in the commit state store, not in the engine's offset: the
offset is a small pointer (source id and epoch) to one `SourceEpochRecord`, which
holds what the driver decided for that epoch - the enumerator's checkpoint, the
split assignment of its tasks and, for unbounded splits, the end positions. A
replay after a crash loads the record and reads exactly the same rows. The epoch
protocol (``shared/research/flip27-sources.md`` section 3.3) uses a store in this
order:

1. `SourceStateStore.acquire_source` the source id: an exclusive lease, refused
   with `ConcurrentCommitError` while another live driver holds it (two queries on
   one source id);
2. `SourceLease.get` / `SourceLease.latest` the epoch an offset points to, and
   restore the enumerator from its checkpoint;
3. `SourceLease.record_epoch` the next epoch before its offset is returned to the
   engine: written once, so that every later read of that epoch (a replay, another
   planner) sees the same assignment;
4. `SourceLease.mark_acknowledged` once the engine has committed the epoch, so
   that ``notify_checkpoint_complete`` fires for it once;
5. `SourceLease.prune` the epochs below the one the engine will restart from;
6. `SourceLease.release` when the query stops.

Epochs start at 0: epoch 0 is the enumerator's first checkpoint, persisted once so
that the engine's initial offset is the same on every call and every run.

The SQL stores (``_sql``) keep the records beside the sinks' epochs, with the same
locks and fencing, in a key space of their own: a source id and a sink id of the
same name never exclude each other.
"""

from __future__ import annotations

from typing import Final, Protocol, final

import attrs

from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime._store import MAX_INT64, Lease

__all__ = [
    "SourceEpochRecord",
    "SourceLease",
    "SourceStateStore",
    "check_source_epoch",
    "check_source_payload",
]

FIRST_SOURCE_EPOCH: Final = 0
"""The epoch of a source's first enumerator checkpoint (the stable initial offset)."""


def _bytes_repr(value: bytes | None) -> str:
    return "None" if value is None else f"<{len(value)} bytes>"


@final
@attrs.frozen
class SourceEpochRecord:
    """One epoch of a source: what the driver decided for it, written once.

    Attributes:
        source_id: The source the epoch belongs to.
        epoch: The epoch, from 0 (the enumerator's first checkpoint).
        enumerator_checkpoint: The enumerator's state after this epoch's splits
            were assigned, serialized by the caller; opaque to the store.
        assignment: The epoch's split assignment (each task's splits and their
            start positions), serialized by the caller; opaque to the store.
        end_positions: Where each unbounded split stops in this epoch, serialized
            by the caller; ``None`` when every split of the epoch is read whole.
        acknowledged: Whether the engine's commit of this epoch was seen and
            ``notify_checkpoint_complete`` fired for it (`SourceLease.mark_acknowledged`).
        fencing_token: The token of the lease that recorded the epoch.
        job_id: The job that recorded the epoch.
        created_at: When the epoch was recorded, in unix seconds.
    """

    source_id: str
    epoch: int
    enumerator_checkpoint: bytes = attrs.field(repr=_bytes_repr)
    assignment: bytes = attrs.field(repr=_bytes_repr)
    end_positions: bytes | None = attrs.field(repr=_bytes_repr)
    acknowledged: bool
    fencing_token: int
    job_id: str
    created_at: float


class SourceStateStore(Protocol):
    """Where a source's epochs are kept (required: `acquire_source`); the SQL stores are."""

    def acquire_source(self, source_id: str, *, job_id: str) -> SourceLease:
        """Take the source id for this driver, without waiting.

        ``source_id`` is the source's stable id, the same in every run of the
        query; ``job_id`` names this run, is recorded with every write, and is
        shown to a driver that finds the source id taken. The lease's fencing
        token is larger than any earlier lease's of the source id; a sink id of
        the same name is independent of it.

        Raises:
            SinkConfigurationError: ``source_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the source id; the
                message names it.
            CommitStateError: The store is unreadable, or of a newer layout.
        """
        ...


class SourceLease(Lease, Protocol):
    """Exclusive use of one source id by one driver, from `SourceStateStore.acquire_source`.

    Reads and writes go to the store directly: every write is durable when its
    method returns, and checks first, in its own transaction, that no newer lease
    took over the source id (`StaleFencingTokenError` otherwise, naming the
    source id and the newer holder). A lease belongs to the process that acquired
    it; it cannot be pickled or used in another process. It is a context manager:
    leaving the ``with`` block releases it.

    Required: every method and property below, and those of `Lease` (its
    ``fencing_token``, ``job_id``, ``release`` and context manager).
    """

    @property
    def source_id(self) -> str:
        """The source id this lease holds."""
        ...

    def latest(self) -> SourceEpochRecord | None:
        """The record of the largest epoch recorded and not pruned, or ``None``.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def get(self, epoch: int) -> SourceEpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded (or was pruned).

        Raises:
            SinkConfigurationError: ``epoch`` is not an int in [0, 2**63).
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read.
        """
        ...

    def record_epoch(
        self,
        epoch: int,
        *,
        enumerator_checkpoint: bytes,
        assignment: bytes,
        end_positions: bytes | None = None,
    ) -> SourceEpochRecord:
        """Record ``epoch`` once: the enumerator's checkpoint, assignment and end positions.

        Write-once: recording an epoch that exists with the same three values is
        a no-op that returns the stored record (a replay that decided the same);
        with any other value it is refused, because a replay must read exactly
        what the first attempt read. Durable when this returns.

        Returns:
            The record as written, or as it was if it existed with the same values.

        Raises:
            SinkConfigurationError: An argument has the wrong type or range.
            IllegalLifecycleError: The epoch is recorded with other values (the
                message names the source id, the epoch and what differs); or the
                lease was released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the source id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def mark_acknowledged(self, epoch: int) -> bool:
        """Record that the engine committed ``epoch`` and its notification fired.

        Once per epoch: ``True`` when this call marked it, ``False`` when it was
        marked already, so a driver that marks first and notifies on ``True``
        notifies at most once, across restarts too. Durable when this returns.

        Raises:
            SinkConfigurationError: ``epoch`` is not an int in [0, 2**63).
            IllegalLifecycleError: The epoch has no record; or the lease was
                released, or is used in another process. Nothing was written.
            StaleFencingTokenError: A newer lease took over the source id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...

    def prune(self, below: int) -> int:
        """Forget every epoch below ``below``, acknowledged or not.

        The engine restarts from its last committed offset, never from an older
        one, so the epochs before it are never read again; pruning them keeps
        the store flat over a long-running stream.

        Returns:
            How many epochs were forgotten.

        Raises:
            SinkConfigurationError: ``below`` is not an int in [0, 2**63).
            IllegalLifecycleError: The lease was released, or is used in another process.
            StaleFencingTokenError: A newer lease took over the source id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        ...


def check_source_epoch(epoch: object, *, name: str = "epoch") -> None:
    """Raise `SinkConfigurationError` unless ``epoch`` is an int in [0, 2**63)."""
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch <= MAX_INT64:
        raise SinkConfigurationError(
            f"{name!r} must be an int from {FIRST_SOURCE_EPOCH} to 2**63 - 1 (got "
            f"{describe(epoch)}); a source's epochs start at {FIRST_SOURCE_EPOCH}, its "
            "first enumerator checkpoint"
        )


def check_source_payload(
    epoch: object, *, enumerator_checkpoint: object, assignment: object, end_positions: object
) -> None:
    """Raise `SinkConfigurationError` unless `SourceLease.record_epoch`'s arguments are valid."""
    check_source_epoch(epoch)
    for name, value in (
        ("enumerator_checkpoint", enumerator_checkpoint),
        ("assignment", assignment),
    ):
        if not isinstance(value, bytes):
            raise SinkConfigurationError(
                f"{name!r} must be bytes (got {describe(value)}); serialize it with the "
                "source's serializer first"
            )
    if end_positions is not None and not isinstance(end_positions, bytes):
        raise SinkConfigurationError(
            f"'end_positions' must be bytes or None (got {describe(end_positions)}); pass "
            "None when every split of the epoch is read whole"
        )
