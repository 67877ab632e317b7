"""`SqlSinkLease`: the `SinkLease` of both SQL stores, written once.

Every write is one transaction of `FencedLease.writing` (``BEGIN IMMEDIATE`` in
SQLite; in PostgreSQL a transaction that reads the fence row ``FOR SHARE``, so a
takeover waits for it) that first checks the lease's fencing token, then applies
the transition table of ``_store`` to the epoch's row, read ``FOR UPDATE``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

import attrs

from sinkv2._context import INITIAL_CHECKPOINT_ID
from sinkv2._text import describe
from sinkv2.errors import IllegalLifecycleError, SinkConfigurationError
from sinkv2.runtime._sql.dialect import Connection, Dialect, render
from sinkv2.runtime._sql.fence import FencedLease, Hold
from sinkv2.runtime._sql.schema import COLUMNS, SINKS, record_from_row
from sinkv2.runtime._store import (
    TRANSITIONS,
    EpochRecord,
    EpochStatus,
    SinkLease,
    Transition,
    check_epoch,
    check_name,
    check_pending,
    default_checkpoint_id,
)

__all__ = ["SqlSinkLease", "check_statuses", "epochs_query"]

_UPSERT_EPOCH = (
    "INSERT INTO {schema}pending_sink_state ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (sink_id, epoch) DO UPDATE SET status = excluded.status, "
    "explicit = excluded.explicit, serializer_version = excluded.serializer_version, "
    "payload = excluded.payload, fencing_token = excluded.fencing_token, "
    "job_id = excluded.job_id, updated_at = excluded.updated_at, "
    "checkpoint_id = excluded.checkpoint_id, writer_states = excluded.writer_states"
)


def check_statuses(statuses: tuple[EpochStatus, ...]) -> list[str]:
    """The values of ``statuses``.

    Raises:
        SinkConfigurationError: A status is not an `EpochStatus`.
    """
    for status in statuses:
        if not isinstance(status, EpochStatus):
            raise SinkConfigurationError(
                f"epochs() takes EpochStatus members (got {describe(status)}); pass e.g. "
                "EpochStatus.PENDING"
            )
    return [s.value for s in statuses]


def epochs_query(dialect: Dialect, count: int) -> str:
    """The rows of one sink id with one of ``count`` statuses (any if 0), by epoch.

    Every row is read when no status is asked for, so that a row with a status no
    release writes is reported, not skipped.
    """
    where = f" AND status IN ({', '.join([dialect.param] * count)})" if count else ""
    return render(
        dialect,
        "SELECT {columns} FROM {schema}pending_sink_state WHERE sink_id = ?{where} ORDER BY epoch",
        columns=COLUMNS,
        where=where,
    )


class SqlSinkLease(FencedLease):
    """The `SinkLease` of `SqliteCommitStateStore` and `PostgresCommitStateStore`.

    Safe to use from several threads of the acquiring process; calls are serialised.
    Final but for ``PostgresSinkLease``, which adds the backend pid.
    """

    lease_name: ClassVar[str] = "SinkLease"

    def __init__(
        self, *, dialect: Dialect, sink_id: str, job_id: str, fencing_token: int, hold: Hold
    ) -> None:
        super().__init__(
            dialect=dialect,
            keyspace=SINKS,
            key=sink_id,
            job_id=job_id,
            fencing_token=fencing_token,
            hold=hold,
        )

        def sql(template: str) -> str:
            return render(dialect, template, columns=COLUMNS)

        self._get = sql(
            "SELECT {columns} FROM {schema}pending_sink_state WHERE sink_id = ? AND epoch = ?"
        )
        self._get_for_update = self._get + dialect.words["for_update"]
        self._upsert = sql(_UPSERT_EPOCH)
        self._max_epoch = sql("SELECT MAX(epoch) FROM {schema}pending_sink_state WHERE sink_id = ?")
        self._set_states = sql(
            "UPDATE {schema}pending_sink_state SET writer_states = ?, fencing_token = ?, "
            "job_id = ?, updated_at = ? WHERE sink_id = ? AND epoch = ?"
        )
        self._prune = sql(
            "DELETE FROM {schema}pending_sink_state WHERE sink_id = ? AND epoch < ? "
            "AND status IN ('committed', 'aborted')"
        )
        self._origin = sql("SELECT origin FROM {schema}sink_origin WHERE sink_id = ?")
        self._bind = sql(
            "INSERT INTO {schema}sink_origin (sink_id, origin, bound_at) VALUES (?, ?, ?)"
        )
        self._add_job = sql(
            "INSERT INTO {schema}sink_job (sink_id, job_id, fencing_token, started_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (sink_id, job_id) DO NOTHING"
        )
        self._other_jobs = sql(
            "SELECT job_id FROM {schema}sink_job WHERE sink_id = ? AND job_id <> ? "
            "ORDER BY started_at, job_id"
        )
        self._drop_job = sql("DELETE FROM {schema}sink_job WHERE sink_id = ? AND job_id = ?")

    @property
    def sink_id(self) -> str:
        """The sink id this lease holds."""
        return self._key

    def get(self, epoch: int) -> EpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded."""
        check_epoch(epoch)
        with self.reading(f"read epoch {epoch}") as connection:
            row = connection.execute(self._get, (self._key, epoch)).fetchone()
            return None if row is None else record_from_row(row, self._dialect)

    def epochs(self, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of this sink id with one of ``statuses`` (all if none), by epoch."""
        wanted = check_statuses(statuses)
        with self.reading("list epochs") as connection:
            query = epochs_query(self._dialect, len(wanted))
            rows = connection.execute(query, (self._key, *wanted)).fetchall()
            return [record_from_row(row, self._dialect) for row in rows]

    def next_epoch(self) -> int:
        """The largest epoch ever recorded for this sink id plus one; 1 if none was."""
        with self.reading("find the next epoch") as connection:
            row = connection.execute(self._max_epoch, (self._key,)).fetchone()
        largest = None if row is None else row[0]
        return INITIAL_CHECKPOINT_ID if largest is None else int(largest) + 1

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
        """Record ``epoch`` as pending with its committables; durable on return."""
        check_pending(
            epoch,
            explicit=explicit,
            serializer_version=serializer_version,
            payload=payload,
            checkpoint_id=checkpoint_id,
            writer_states=writer_states,
        )
        return self._move(
            epoch,
            EpochStatus.PENDING,
            explicit=explicit,
            serializer_version=serializer_version,
            payload=payload,
            checkpoint_id=checkpoint_id,
            writer_states=writer_states,
        )

    def mark_committed(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` committed; a committed one is returned unchanged."""
        check_epoch(epoch)
        return self._move(epoch, EpochStatus.COMMITTED)

    def mark_aborted(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` aborted; an aborted one is returned unchanged."""
        check_epoch(epoch)
        return self._move(epoch, EpochStatus.ABORTED)

    def replace_writer_states(self, epoch: int, writer_states: bytes) -> EpochRecord:
        """Replace the writer states of committed ``epoch``; durable on return."""
        check_epoch(epoch)
        if not isinstance(writer_states, bytes):
            raise SinkConfigurationError(
                f"'writer_states' must be bytes (got {describe(writer_states)}); encode the "
                "writers' states with sinkv2.runtime.WriterStates.encode() first"
            )
        with self.writing(f"replace the writer states of epoch {epoch}") as connection:
            current = self._current(connection, epoch)
            if current is None or current.status is not EpochStatus.COMMITTED:
                status = "absent" if current is None else current.status.value
                raise IllegalLifecycleError(
                    f"epoch {epoch} of sink {self._key!r} is {status}; only a committed "
                    "epoch's writer states can be replaced (a pending epoch may still be "
                    "committed with the states recorded for it)"
                )
            record = attrs.evolve(
                current,
                writer_states=writer_states,
                fencing_token=self._token,
                job_id=self._job_id,
                updated_at=time.time(),
            )
            connection.execute(
                self._set_states,
                (writer_states, self._token, self._job_id, record.updated_at, self._key, epoch),
            )
            return record

    def prune(self, below: int) -> int:
        """Forget committed and aborted epochs below ``below``; durable on return."""
        check_epoch(below, name="below")
        with self.writing(f"prune epochs below {below}") as connection:
            return int(connection.execute(self._prune, (self._key, below)).rowcount)

    def origin(self) -> str | None:
        """The stream the sink id is bound to, or ``None``."""
        with self.reading("read the origin") as connection:
            row = connection.execute(self._origin, (self._key,)).fetchone()
        return None if row is None else str(row[0])

    def bind_origin(self, origin: str) -> None:
        """Bind the sink id to ``origin``; durable on return. Idempotent."""
        check_name("origin", origin, "pass the stream's identity, e.g. its checkpoint location")
        with self.writing(f"bind origin {origin!r}") as connection:
            row = connection.execute(self._origin, (self._key,)).fetchone()
            if row is not None and row[0] != origin:
                raise IllegalLifecycleError(
                    f"sink {self._key!r} is bound to the stream {row[0]!r}, not to "
                    f"{origin!r}; give the other stream a sink id of its own"
                )
            if row is None:
                connection.execute(self._bind, (self._key, origin, time.time()))

    def record_job(self) -> None:
        """Record this lease's job as running; durable on return. Idempotent."""
        with self.writing(f"record job {self._job_id!r}") as connection:
            connection.execute(self._add_job, (self._key, self._job_id, self._token, time.time()))

    def unfinished_jobs(self) -> list[str]:
        """Recorded, unfinished jobs other than this lease's, oldest first."""
        with self.reading("list unfinished jobs") as connection:
            rows = connection.execute(self._other_jobs, (self._key, self._job_id)).fetchall()
        return [str(job_id) for (job_id,) in rows]

    def finish_job(self, job_id: str) -> None:
        """Forget ``job_id``; durable on return. Idempotent."""
        check_name("job_id", job_id, "pass a job id that unfinished_jobs() returned")
        with self.writing(f"finish job {job_id!r}") as connection:
            connection.execute(self._drop_job, (self._key, job_id))

    # -- internals -------------------------------------------------------------

    def _current(self, connection: Connection, epoch: int) -> EpochRecord | None:
        row = connection.execute(self._get_for_update, (self._key, epoch)).fetchone()
        return None if row is None else record_from_row(row, self._dialect)

    def _move(
        self,
        epoch: int,
        target: EpochStatus,
        *,
        explicit: bool = False,
        serializer_version: int = 0,
        payload: bytes = b"",
        checkpoint_id: int | None = None,
        writer_states: bytes = b"",
    ) -> EpochRecord:
        """Apply the transition to ``target`` of ``_store.TRANSITIONS`` to ``epoch``."""
        with self.writing(f"record epoch {epoch} as {target.value}") as connection:
            current = self._current(connection, epoch)
            rule = TRANSITIONS[(None if current is None else current.status, target)]
            if isinstance(rule, str):
                raise IllegalLifecycleError(rule.format(epoch=epoch, sink=self._key))
            if rule is Transition.KEEP and current is not None:  # every KEEP starts from a row
                return current
            if target is not EpochStatus.PENDING and current is not None:
                explicit = current.explicit
                serializer_version = current.serializer_version
                payload = current.payload
                checkpoint_id = current.checkpoint_id
                writer_states = current.writer_states
            if checkpoint_id is None:
                checkpoint_id = default_checkpoint_id(epoch, explicit=explicit)
            record = EpochRecord(
                sink_id=self._key,
                epoch=epoch,
                status=target,
                explicit=explicit,
                serializer_version=serializer_version,
                payload=payload,
                fencing_token=self._token,
                job_id=self._job_id,
                updated_at=time.time(),
                checkpoint_id=checkpoint_id,
                writer_states=writer_states,
            )
            connection.execute(
                self._upsert,
                (
                    record.sink_id,
                    record.epoch,
                    record.status.value,
                    record.explicit,
                    record.serializer_version,
                    record.payload,
                    record.fencing_token,
                    record.job_id,
                    record.updated_at,
                    record.checkpoint_id,
                    record.writer_states,
                ),
            )
            return record


if TYPE_CHECKING:
    _LEASE_CONFORMS: type[SinkLease] = SqlSinkLease
