"""The lease of `PostgresCommitStateStore`: a connection holding an advisory lock.

The lease's connection holds a session-level advisory lock on the sink id; the
lock lives exactly as long as the connection, so a driver that dies (or whose
connection is cut) lets go of the sink id. Every write is one transaction that
first reads the sink's fence row ``FOR SHARE`` and checks the lease's fencing
token is still the current one, then applies the transition table of ``_store``:
a takeover, which increments the token, waits for that transaction to end.

A lease whose connection is lost (the server restarted, the backend was
terminated, the network failed) no longer holds the lock, and another driver may
take the sink id over at once; the lease never reconnects. Its calls raise
`CommitStateError` from then on; the driver must stop and be re-run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, final

import attrs
from typing_extensions import Self

from sinkv2._context import INITIAL_CHECKPOINT_ID
from sinkv2._text import describe
from sinkv2.errors import (
    CommitStateError,
    IllegalLifecycleError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime._postgres_schema import COLUMNS, Connection, import_psycopg
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

__all__ = ["PostgresSinkLease", "record_from_row"]


def record_from_row(row: tuple[Any, ...], where: str) -> EpochRecord:
    """An `EpochRecord` from a row of ``SELECT {COLUMNS} FROM pending_sink_state``.

    Raises:
        CommitStateError: The row does not hold what this release writes.
    """
    sink_id, epoch, status, explicit, version, payload, token, job_id, updated_at, cid, ws = row
    try:
        return EpochRecord(
            sink_id=_as(str, sink_id),
            epoch=_as(int, epoch),
            status=EpochStatus(status),
            explicit=_as(bool, explicit),
            serializer_version=_as(int, version),
            payload=_as(bytes, payload),
            fencing_token=_as(int, token),
            job_id=_as(str, job_id),
            updated_at=_as(float, updated_at),
            checkpoint_id=_as(int, cid),
            writer_states=_as(bytes, ws),
        )
    except (TypeError, ValueError) as error:
        raise CommitStateError(
            f"{where} holds an unreadable row for epoch {epoch!r} of sink {sink_id!r}: "
            f"{error}; the table was changed by something other than this sinkv2 release"
        ) from error


def _as(kind: type[Any], value: object) -> Any:
    if isinstance(value, memoryview) and kind is bytes:
        return value.tobytes()
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected a {kind.__name__} column, got {describe(value)}")
    return value


@final
class PostgresSinkLease:
    """The `SinkLease` of `PostgresCommitStateStore`: a connection holding a lock.

    Safe to use from several threads of the acquiring process; calls are serialised.
    """

    def __init__(
        self,
        *,
        where: str,
        schema: str,
        sink_id: str,
        job_id: str,
        fencing_token: int,
        lock_key: int,
        connection: Connection,
    ) -> None:
        psycopg = import_psycopg()
        self._where = where
        self._sink_id = sink_id
        self._job_id = job_id
        self._token = fencing_token
        self._connection = connection
        self._backend_pid = int(connection.info.backend_pid)
        self._pid = os.getpid()
        self._released = False
        self._lost: str | None = None
        self._mutex = threading.RLock()
        schema_id = psycopg.sql.Identifier(schema)
        self._table = psycopg.sql.SQL("{}.pending_sink_state").format(schema_id)
        self._fence = psycopg.sql.SQL("{}.sink_fence").format(schema_id)
        self._jobs = psycopg.sql.SQL("{}.sink_job").format(schema_id)
        self._origins = psycopg.sql.SQL("{}.sink_origin").format(schema_id)
        self._sql = psycopg.sql.SQL
        self._lock_key = lock_key
        self._finalizer = weakref.finalize(
            self, _abandon, sink_id, job_id, self._pid, connection, lock_key
        )
        self._finalizer.atexit = False

    @property
    def sink_id(self) -> str:
        """The sink id this lease holds."""
        return self._sink_id

    @property
    def fencing_token(self) -> int:
        """This lease's token; every acquire of the sink id gets a larger one."""
        return self._token

    @property
    def job_id(self) -> str:
        """The job this lease was acquired for."""
        return self._job_id

    @property
    def backend_pid(self) -> int:
        """The PostgreSQL backend process of this lease's connection (``pg_backend_pid()``)."""
        return self._backend_pid

    def get(self, epoch: int) -> EpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded."""
        check_epoch(epoch)
        with self._reading(f"read epoch {epoch}") as connection:
            row = connection.execute(
                self._sql("SELECT {} FROM {} WHERE sink_id = %s AND epoch = %s").format(
                    self._sql(COLUMNS), self._table
                ),
                (self._sink_id, epoch),
            ).fetchone()
            return None if row is None else record_from_row(row, self._where)

    def epochs(self, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of this sink id with one of ``statuses`` (all if none), by epoch."""
        for status in statuses:
            if not isinstance(status, EpochStatus):
                raise SinkConfigurationError(
                    f"epochs() takes EpochStatus members (got {describe(status)}); pass e.g. "
                    "EpochStatus.PENDING"
                )
        wanted = [s.value for s in statuses] if statuses else [s.value for s in EpochStatus]
        with self._reading("list epochs") as connection:
            rows = connection.execute(
                self._sql(
                    "SELECT {} FROM {} WHERE sink_id = %s AND status = ANY(%s) ORDER BY epoch"
                ).format(self._sql(COLUMNS), self._table),
                (self._sink_id, wanted),
            ).fetchall()
            return [record_from_row(row, self._where) for row in rows]

    def next_epoch(self) -> int:
        """The largest epoch ever recorded for this sink id plus one; 1 if none was."""
        with self._reading("find the next epoch") as connection:
            row = connection.execute(
                self._sql("SELECT MAX(epoch) FROM {} WHERE sink_id = %s").format(self._table),
                (self._sink_id,),
            ).fetchone()
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
        with self._writing(f"replace the writer states of epoch {epoch}") as connection:
            current = self._current(connection, epoch)
            if current is None or current.status is not EpochStatus.COMMITTED:
                status = "absent" if current is None else current.status.value
                raise IllegalLifecycleError(
                    f"epoch {epoch} of sink {self._sink_id!r} is {status}; only a committed "
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
                self._sql(
                    "UPDATE {} SET writer_states = %s, fencing_token = %s, job_id = %s, "
                    "updated_at = %s WHERE sink_id = %s AND epoch = %s"
                ).format(self._table),
                (writer_states, self._token, self._job_id, record.updated_at, self._sink_id, epoch),
            )
            return record

    def prune(self, below: int) -> int:
        """Forget committed and aborted epochs below ``below``; durable on return."""
        check_epoch(below, name="below")
        with self._writing(f"prune epochs below {below}") as connection:
            cursor = connection.execute(
                self._sql(
                    "DELETE FROM {} WHERE sink_id = %s AND epoch < %s "
                    "AND status IN ('committed', 'aborted')"
                ).format(self._table),
                (self._sink_id, below),
            )
            return int(cursor.rowcount)

    def origin(self) -> str | None:
        """The stream the sink id is bound to, or ``None``."""
        with self._reading("read the origin") as connection:
            row = connection.execute(
                self._sql("SELECT origin FROM {} WHERE sink_id = %s").format(self._origins),
                (self._sink_id,),
            ).fetchone()
        return None if row is None else str(row[0])

    def bind_origin(self, origin: str) -> None:
        """Bind the sink id to ``origin``; durable on return. Idempotent."""
        check_name("origin", origin, "pass the stream's identity, e.g. its checkpoint location")
        with self._writing(f"bind origin {origin!r}") as connection:
            row = connection.execute(
                self._sql("SELECT origin FROM {} WHERE sink_id = %s").format(self._origins),
                (self._sink_id,),
            ).fetchone()
            if row is not None and row[0] != origin:
                raise IllegalLifecycleError(
                    f"sink {self._sink_id!r} is bound to the stream {row[0]!r}, not to "
                    f"{origin!r}; give the other stream a sink id of its own"
                )
            if row is None:
                connection.execute(
                    self._sql(
                        "INSERT INTO {} (sink_id, origin, bound_at) VALUES (%s, %s, %s)"
                    ).format(self._origins),
                    (self._sink_id, origin, time.time()),
                )

    def record_job(self) -> None:
        """Record this lease's job as running; durable on return. Idempotent."""
        with self._writing(f"record job {self._job_id!r}") as connection:
            connection.execute(
                self._sql(
                    "INSERT INTO {} (sink_id, job_id, fencing_token, started_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (sink_id, job_id) DO NOTHING"
                ).format(self._jobs),
                (self._sink_id, self._job_id, self._token, time.time()),
            )

    def unfinished_jobs(self) -> list[str]:
        """Recorded, unfinished jobs other than this lease's, oldest first."""
        with self._reading("list unfinished jobs") as connection:
            rows = connection.execute(
                self._sql(
                    "SELECT job_id FROM {} WHERE sink_id = %s AND job_id <> %s "
                    "ORDER BY started_at, job_id"
                ).format(self._jobs),
                (self._sink_id, self._job_id),
            ).fetchall()
        return [str(job_id) for (job_id,) in rows]

    def finish_job(self, job_id: str) -> None:
        """Forget ``job_id``; durable on return. Idempotent."""
        check_name("job_id", job_id, "pass a job id that unfinished_jobs() returned")
        with self._writing(f"finish job {job_id!r}") as connection:
            connection.execute(
                self._sql("DELETE FROM {} WHERE sink_id = %s AND job_id = %s").format(self._jobs),
                (self._sink_id, job_id),
            )

    def release(self) -> None:
        """Unlock the sink id and close the connection. Idempotent.

        The advisory lock is released explicitly before the connection closes: a
        closed connection's backend lets go of its locks only when it exits, a
        moment later, and an acquire in that moment would be refused.
        """
        with self._mutex:
            self._check_process("release")
            if self._released:
                return
            self._released = True
            self._finalizer.detach()
            _unlock_and_close(self._connection, self._lock_key)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be pickled or copied: it holds an advisory lock through a "
            f"database connection of process {self._pid}. Ship the PostgresCommitStateStore "
            "(its settings) instead, and acquire the sink id in the process that commits"
        )

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
        return (
            f"<SinkLease sink_id={self._sink_id!r} fencing_token={self._token} "
            f"job_id={self._job_id!r} pid={self._pid} backend_pid={self._backend_pid} "
            f"{state} on {self._where}>"
        )

    # -- internals -------------------------------------------------------------

    def _check_process(self, action: str) -> None:
        if os.getpid() != self._pid:
            raise IllegalLifecycleError(
                f"cannot {action}: the lease on sink {self._sink_id!r} belongs to process "
                f"{self._pid}, and this is process {os.getpid()}; its lock and database "
                "connection do not carry over to another process. Acquire the sink id in "
                "this process instead"
            )

    def _check_usable(self, action: str) -> None:
        self._check_process(action)
        if self._released:
            raise IllegalLifecycleError(
                f"cannot {action}: the lease on sink {self._sink_id!r} (fencing token "
                f"{self._token}) was released; acquire the sink id again to go on"
            )
        if self._lost is not None:
            raise self._lost_error(action, self._lost)

    def _lost_error(self, action: str, cause: str) -> CommitStateError:
        return CommitStateError(
            f"{self._where}: cannot {action} for sink {self._sink_id!r}: the lease's "
            f"connection (backend pid {self._backend_pid}) was lost ({cause}), and its "
            "advisory lock on the sink id with it, so another driver may hold the sink id "
            "now. This driver must stop without committing; re-run the job, which acquires "
            "the sink id again and recovers. Nothing was written by this call"
        )

    @contextlib.contextmanager
    def _reading(self, action: str) -> Iterator[Connection]:
        psycopg = import_psycopg()
        with self._mutex:
            self._check_usable(action)
            try:
                yield self._connection
            except psycopg.Error as error:
                raise self._database_error(action, error) from error

    @contextlib.contextmanager
    def _writing(self, action: str) -> Iterator[Connection]:
        """One transaction that starts by checking the fencing token."""
        psycopg = import_psycopg()
        with self._mutex:
            self._check_usable(action)
            connection = self._connection
            try:
                with connection.transaction():
                    self._check_fence(connection, action)
                    yield connection
            except psycopg.Error as error:
                raise self._database_error(action, error) from error

    def _check_fence(self, connection: Connection, action: str) -> None:
        row = connection.execute(
            self._sql(
                "SELECT fencing_token, holder_job_id, holder_pid, holder_host, holder_since "
                "FROM {} WHERE sink_id = %s FOR SHARE"
            ).format(self._fence),
            (self._sink_id,),
        ).fetchone()
        if row is not None and row[0] == self._token:
            return
        if row is None:
            current = "the sink's fence row is gone"
        else:
            from sinkv2.runtime._sink_lock import Holder  # noqa: PLC0415  # one use, an error

            holder = Holder(job_id=row[1], pid=row[2], host=row[3], since=row[4])
            current = f"the sink's current token is {row[0]}, held by {holder}"
        raise StaleFencingTokenError(
            f"cannot {action}: the lease on sink {self._sink_id!r} of job {self._job_id!r} "
            f"has fencing token {self._token}, but {current}. A newer driver took over this "
            "sink id; this one must stop without committing. Nothing was written"
        )

    def _current(self, connection: Connection, epoch: int) -> EpochRecord | None:
        row = connection.execute(
            self._sql("SELECT {} FROM {} WHERE sink_id = %s AND epoch = %s FOR UPDATE").format(
                self._sql(COLUMNS), self._table
            ),
            (self._sink_id, epoch),
        ).fetchone()
        return None if row is None else record_from_row(row, self._where)

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
        with self._writing(f"record epoch {epoch} as {target.value}") as connection:
            current = self._current(connection, epoch)
            rule = TRANSITIONS[(None if current is None else current.status, target)]
            if isinstance(rule, str):
                raise IllegalLifecycleError(rule.format(epoch=epoch, sink=self._sink_id))
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
                sink_id=self._sink_id,
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
                self._sql(
                    "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (sink_id, epoch) DO UPDATE SET status = excluded.status, "
                    "explicit = excluded.explicit, "
                    "serializer_version = excluded.serializer_version, "
                    "payload = excluded.payload, fencing_token = excluded.fencing_token, "
                    "job_id = excluded.job_id, updated_at = excluded.updated_at, "
                    "checkpoint_id = excluded.checkpoint_id, "
                    "writer_states = excluded.writer_states"
                ).format(self._table, self._sql(COLUMNS)),
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

    def _database_error(self, action: str, error: Exception) -> CommitStateError:
        if self._connection.closed or self._connection.broken:
            self._lost = f"{type(error).__name__}: {str(error).strip()}"
            return self._lost_error(action, self._lost)
        return CommitStateError(
            f"{self._where}: could not {action} for sink {self._sink_id!r}: "
            f"{type(error).__name__}: {str(error).strip()}; any transaction was rolled back, "
            "so nothing was written by this call"
        )


def _unlock_and_close(connection: Connection, lock_key: int) -> None:
    # A lost connection holds nothing any more: errors here change nothing.
    with contextlib.suppress(Exception):
        if not connection.closed and not connection.broken:
            connection.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))
    with contextlib.suppress(Exception):
        connection.close()


def _abandon(sink_id: str, job_id: str, pid: int, connection: Connection, lock_key: int) -> None:
    """Release a lease that was garbage-collected without `SinkLease.release`."""
    if os.getpid() != pid:
        return  # a forked child's copy; closing it would end the parent's session
    _unlock_and_close(connection, lock_key)
    warnings.warn(
        f"the lease on sink {sink_id!r} of job {job_id!r} was never released; it was "
        "released when garbage-collected. Call release() or use the lease in a `with` block",
        ResourceWarning,
        stacklevel=2,
    )


if TYPE_CHECKING:
    _LEASE_CONFORMS: type[SinkLease] = PostgresSinkLease
