"""`SqlSourceLease`: the `SourceLease` of both SQL stores, written once.

A source id's lease is a `FencedLease` in the `SOURCES` key space: its own fence
table (``source_fence``) and its own lock, so that a source id and a sink id of the
same name never exclude each other. Every write is one transaction of
`FencedLease.writing` that first checks the lease's fencing token; an epoch's row
is read ``FOR UPDATE`` before it is compared or changed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, Final

import attrs

from sinkv2.errors import IllegalLifecycleError
from sinkv2.runtime._source_store import (
    SourceEpochRecord,
    SourceLease,
    check_source_epoch,
    check_source_payload,
)
from sinkv2.runtime._sql.dialect import Connection, Dialect, render
from sinkv2.runtime._sql.fence import FencedLease
from sinkv2.runtime._sql.schema import SOURCE_COLUMNS, source_record_from_row

__all__ = ["SqlSourceLease", "source_epochs_query"]

_SELECT: Final = "SELECT {columns} FROM {schema}source_epoch_state WHERE source_id = ?"


def source_epochs_query(dialect: Dialect) -> str:
    """Every row of one source id, by epoch."""
    return render(dialect, _SELECT + " ORDER BY epoch", columns=SOURCE_COLUMNS)


class SqlSourceLease(FencedLease):
    """The `SourceLease` of `SqliteCommitStateStore` and `PostgresCommitStateStore`.

    Safe to use from several threads of the acquiring process; calls are serialised.
    Made with ``keyspace=SOURCES`` and the source id as ``key``.
    """

    lease_name: ClassVar[str] = "SourceLease"

    def _prepare(self) -> None:
        dialect = self._dialect
        self._get = render(dialect, _SELECT + " AND epoch = ?", columns=SOURCE_COLUMNS)
        self._get_for_update = self._get + dialect.words["for_update"]
        self._latest = render(
            dialect, _SELECT + " ORDER BY epoch DESC LIMIT 1", columns=SOURCE_COLUMNS
        )
        self._insert = render(
            dialect,
            "INSERT INTO {schema}source_epoch_state ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            columns=SOURCE_COLUMNS,
        )
        self._acknowledge = render(
            dialect,
            "UPDATE {schema}source_epoch_state SET acknowledged = ? "
            "WHERE source_id = ? AND epoch = ?",
        )
        self._prune = render(
            dialect, "DELETE FROM {schema}source_epoch_state WHERE source_id = ? AND epoch < ?"
        )

    @property
    def source_id(self) -> str:
        """The source id this lease holds."""
        return self._key

    def latest(self) -> SourceEpochRecord | None:
        """The record of the largest epoch recorded and not pruned, or ``None``."""
        with self.reading("read the latest epoch") as connection:
            return self._row(connection, self._latest)

    def get(self, epoch: int) -> SourceEpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded (or was pruned)."""
        check_source_epoch(epoch)
        with self.reading(f"read epoch {epoch}") as connection:
            return self._row(connection, self._get, epoch)

    def record_epoch(
        self,
        epoch: int,
        *,
        enumerator_checkpoint: bytes,
        assignment: bytes,
        end_positions: bytes | None = None,
    ) -> SourceEpochRecord:
        """Record ``epoch`` once; the same values again return the stored record."""
        check_source_payload(
            epoch,
            enumerator_checkpoint=enumerator_checkpoint,
            assignment=assignment,
            end_positions=end_positions,
        )
        with self.writing(f"record epoch {epoch}") as connection:
            decision = (enumerator_checkpoint, assignment, end_positions)
            current = self._row(connection, self._get_for_update, epoch)
            if current is not None:
                self._check_replay(current, decision)
                return current
            record = SourceEpochRecord(
                self._key, epoch, *decision, False, self._token, self._job_id, time.time()
            )
            connection.execute(self._insert, attrs.astuple(record, recurse=False))
            return record

    def mark_acknowledged(self, epoch: int) -> bool:
        """Mark ``epoch`` acknowledged; ``True`` if this call did, ``False`` if it was."""
        check_source_epoch(epoch)
        with self.writing(f"acknowledge epoch {epoch}") as connection:
            current = self._row(connection, self._get_for_update, epoch)
            if current is None:
                raise IllegalLifecycleError(
                    f"epoch {epoch} of source {self._key!r} has no record, so it cannot be "
                    "acknowledged; record it with record_epoch() before its offset is handed "
                    "to the engine (or it was pruned: acknowledge before pruning)"
                )
            if current.acknowledged:
                return False
            connection.execute(self._acknowledge, (True, self._key, epoch))
            return True

    def prune(self, below: int) -> int:
        """Forget every epoch below ``below``; how many were forgotten."""
        check_source_epoch(below, name="below")
        with self.writing(f"prune epochs below {below}") as connection:
            return int(connection.execute(self._prune, (self._key, below)).rowcount)

    # -- internals -------------------------------------------------------------

    def _row(self, connection: Connection, query: str, *epoch: int) -> SourceEpochRecord | None:
        row = connection.execute(query, (self._key, *epoch)).fetchone()
        return None if row is None else source_record_from_row(row, self._dialect)

    def _check_replay(
        self, current: SourceEpochRecord, wanted: tuple[bytes, bytes, bytes | None]
    ) -> None:
        stored = (current.enumerator_checkpoint, current.assignment, current.end_positions)
        names = ("enumerator_checkpoint", "assignment", "end_positions")
        differ = [name for name, old, new in zip(names, stored, wanted, strict=True) if old != new]
        if differ:
            raise IllegalLifecycleError(
                f"epoch {current.epoch} of source {self._key!r} is already recorded (by job "
                f"{current.job_id!r}, fencing token {current.fencing_token}) with another "
                f"{' and '.join(differ)}; an epoch is written once, and a replay must decide "
                "exactly what the first attempt decided, or it would read other rows under "
                "the same offset. Make the enumerator deterministic for a restored "
                "checkpoint, or record the new decision under the next epoch"
            )


if TYPE_CHECKING:
    _LEASE_CONFORMS: type[SourceLease] = SqlSourceLease
