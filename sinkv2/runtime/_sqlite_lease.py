"""The lease of `SqliteCommitStateStore`: an OS lock on the sink id and a connection.

Every write is one ``BEGIN IMMEDIATE`` transaction that first checks the lease's
fencing token is still the sink id's current one, then applies the transition
table of ``_store``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn, final

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
from sinkv2.runtime._sink_lock import Holder, describe_holder, drop_lock
from sinkv2.runtime._sqlite_schema import COLUMNS
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

__all__ = ["SqliteSinkLease", "record_from_row"]


@final
class SqliteSinkLease:
    """The `SinkLease` of `SqliteCommitStateStore`: an OS lock and a connection.

    Safe to use from several threads of the acquiring process; calls are serialised.
    """

    def __init__(
        self,
        *,
        path: pathlib.Path,
        sink_id: str,
        job_id: str,
        fencing_token: int,
        connection: sqlite3.Connection,
        lock_fd: int,
    ) -> None:
        self._path = path
        self._sink_id = sink_id
        self._job_id = job_id
        self._token = fencing_token
        self._connection = connection
        self._lock_fd = lock_fd
        self._pid = os.getpid()
        self._released = False
        self._mutex = threading.RLock()
        self._finalizer = weakref.finalize(
            self, _abandon, sink_id, job_id, self._pid, connection, lock_fd
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

    def get(self, epoch: int) -> EpochRecord | None:
        """The record of ``epoch``, or ``None`` if it was never recorded."""
        check_epoch(epoch)
        with self._reading(f"read epoch {epoch}") as connection:
            row = connection.execute(
                f"SELECT {COLUMNS} FROM pending_sink_state WHERE sink_id = ? AND epoch = ?",
                (self._sink_id, epoch),
            ).fetchone()
            return None if row is None else self._record(row)

    def epochs(self, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of this sink id with one of ``statuses`` (all if none), by epoch."""
        for status in statuses:
            if not isinstance(status, EpochStatus):
                raise SinkConfigurationError(
                    f"epochs() takes EpochStatus members (got {describe(status)}); pass e.g. "
                    "EpochStatus.PENDING"
                )
        query = f"SELECT {COLUMNS} FROM pending_sink_state WHERE sink_id = ?"
        if statuses:
            query += f" AND status IN ({', '.join('?' * len(statuses))})"
        with self._reading("list epochs") as connection:
            rows = connection.execute(
                query + " ORDER BY epoch", (self._sink_id, *(s.value for s in statuses))
            ).fetchall()
            return [self._record(row) for row in rows]

    def next_epoch(self) -> int:
        """The largest epoch ever recorded for this sink id plus one; 1 if none was."""
        with self._reading("find the next epoch") as connection:
            (largest,) = connection.execute(
                "SELECT MAX(epoch) FROM pending_sink_state WHERE sink_id = ?", (self._sink_id,)
            ).fetchone()
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
        action = f"replace the writer states of epoch {epoch}"
        with self._writing(action) as connection:
            row = connection.execute(
                f"SELECT {COLUMNS} FROM pending_sink_state WHERE sink_id = ? AND epoch = ?",
                (self._sink_id, epoch),
            ).fetchone()
            current = None if row is None else self._record(row)
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
                "UPDATE pending_sink_state SET writer_states = ?, fencing_token = ?, "
                "job_id = ?, updated_at = ? WHERE sink_id = ? AND epoch = ?",
                (writer_states, self._token, self._job_id, record.updated_at, self._sink_id, epoch),
            )
            return record

    def prune(self, below: int) -> int:
        """Forget committed and aborted epochs below ``below``; durable on return."""
        check_epoch(below, name="below")
        with self._writing(f"prune epochs below {below}") as connection:
            cursor = connection.execute(
                "DELETE FROM pending_sink_state WHERE sink_id = ? AND epoch < ? "
                "AND status IN ('committed', 'aborted')",
                (self._sink_id, below),
            )
            return int(cursor.rowcount)

    def origin(self) -> str | None:
        """The stream the sink id is bound to, or ``None``."""
        with self._reading("read the origin") as connection:
            row = connection.execute(
                "SELECT origin FROM sink_origin WHERE sink_id = ?", (self._sink_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def bind_origin(self, origin: str) -> None:
        """Bind the sink id to ``origin``; durable on return. Idempotent."""
        check_name("origin", origin, "pass the stream's identity, e.g. its checkpoint location")
        with self._writing(f"bind origin {origin!r}") as connection:
            row = connection.execute(
                "SELECT origin FROM sink_origin WHERE sink_id = ?", (self._sink_id,)
            ).fetchone()
            if row is not None and row[0] != origin:
                raise IllegalLifecycleError(
                    f"sink {self._sink_id!r} is bound to the stream {row[0]!r}, not to "
                    f"{origin!r}; give the other stream a sink id of its own"
                )
            if row is None:
                connection.execute(
                    "INSERT INTO sink_origin (sink_id, origin, bound_at) VALUES (?, ?, ?)",
                    (self._sink_id, origin, time.time()),
                )

    def record_job(self) -> None:
        """Record this lease's job as running; durable on return. Idempotent."""
        with self._writing(f"record job {self._job_id!r}") as connection:
            connection.execute(
                "INSERT INTO sink_job (sink_id, job_id, fencing_token, started_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (sink_id, job_id) DO NOTHING",
                (self._sink_id, self._job_id, self._token, time.time()),
            )

    def unfinished_jobs(self) -> list[str]:
        """Recorded, unfinished jobs other than this lease's, oldest first."""
        with self._reading("list unfinished jobs") as connection:
            rows = connection.execute(
                "SELECT job_id FROM sink_job WHERE sink_id = ? AND job_id != ? "
                "ORDER BY started_at, job_id",
                (self._sink_id, self._job_id),
            ).fetchall()
        return [str(job_id) for (job_id,) in rows]

    def finish_job(self, job_id: str) -> None:
        """Forget ``job_id``; durable on return. Idempotent."""
        check_name("job_id", job_id, "pass a job id that unfinished_jobs() returned")
        with self._writing(f"finish job {job_id!r}") as connection:
            connection.execute(
                "DELETE FROM sink_job WHERE sink_id = ? AND job_id = ?", (self._sink_id, job_id)
            )

    def release(self) -> None:
        """Close the connection and drop the OS lock. Idempotent."""
        with self._mutex:
            self._check_process("release")
            if self._released:
                return
            self._released = True
            self._finalizer.detach()
            try:
                self._connection.close()
            finally:
                drop_lock(self._lock_fd)

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
            f"{self!r} cannot be pickled or copied: it holds an OS lock and a database "
            f"connection of process {self._pid}. Ship the SqliteCommitStateStore (a path) "
            "instead, and acquire the sink id in the process that commits"
        )

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return (
            f"<SinkLease sink_id={self._sink_id!r} fencing_token={self._token} "
            f"job_id={self._job_id!r} pid={self._pid} {state} on {str(self._path)!r}>"
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

    @contextlib.contextmanager
    def _reading(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            self._check_usable(action)
            try:
                yield self._connection
            except sqlite3.Error as error:
                raise self._database_error(action, error) from error

    @contextlib.contextmanager
    def _writing(self, action: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction that starts by checking the fencing token."""
        with self._mutex:
            self._check_usable(action)
            connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    self._check_fence(connection, action)
                    yield connection
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise self._database_error(action, error) from error

    def _check_fence(self, connection: sqlite3.Connection, action: str) -> None:
        row = connection.execute(
            "SELECT fencing_token, holder FROM sink_fence WHERE sink_id = ?", (self._sink_id,)
        ).fetchone()
        if row is not None and row[0] == self._token:
            return
        if row is None:
            current = "the sink's fence row is gone"
        else:
            holder = describe_holder(Holder.load(str(row[1])))
            current = f"the sink's current token is {row[0]}, held by {holder}"
        raise StaleFencingTokenError(
            f"cannot {action}: the lease on sink {self._sink_id!r} of job {self._job_id!r} "
            f"has fencing token {self._token}, but {current}. A newer driver took over this "
            "sink id; this one must stop without committing. Nothing was written"
        )

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
        action = f"record epoch {epoch} as {target.value}"
        with self._writing(action) as connection:
            row = connection.execute(
                f"SELECT {COLUMNS} FROM pending_sink_state WHERE sink_id = ? AND epoch = ?",
                (self._sink_id, epoch),
            ).fetchone()
            current = None if row is None else self._record(row)
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
                f"INSERT INTO pending_sink_state ({COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (sink_id, epoch) DO UPDATE SET status = excluded.status, "
                "explicit = excluded.explicit, serializer_version = excluded.serializer_version, "
                "payload = excluded.payload, fencing_token = excluded.fencing_token, "
                "job_id = excluded.job_id, updated_at = excluded.updated_at, "
                "checkpoint_id = excluded.checkpoint_id, writer_states = excluded.writer_states",
                (
                    record.sink_id,
                    record.epoch,
                    record.status.value,
                    int(record.explicit),
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

    def _record(self, row: tuple[object, ...]) -> EpochRecord:
        return record_from_row(row, self._path, self._sink_id)

    def _database_error(self, action: str, error: sqlite3.Error) -> CommitStateError:
        return CommitStateError(
            f"commit state database {str(self._path)!r}: could not {action} for sink "
            f"{self._sink_id!r}: {type(error).__name__}: {error}; any transaction was rolled "
            "back, so nothing was written by this call"
        )


def record_from_row(row: tuple[object, ...], path: pathlib.Path, sink_id: str) -> EpochRecord:
    """The `EpochRecord` of a ``pending_sink_state`` row read as ``COLUMNS``.

    Raises:
        CommitStateError: The row does not hold what this release writes.
    """
    _, epoch, status, explicit, version, payload, token, job_id, updated_at, cid, ws = row
    try:
        return EpochRecord(
            sink_id=str(row[0]),
            epoch=_as_int(epoch),
            status=EpochStatus(status),
            explicit=bool(explicit),
            serializer_version=_as_int(version),
            payload=bytes(payload),  # type: ignore[call-overload]  # a BLOB column
            fencing_token=_as_int(token),
            job_id=str(job_id),
            updated_at=float(updated_at),  # type: ignore[arg-type]  # a REAL column
            checkpoint_id=(
                default_checkpoint_id(_as_int(epoch), explicit=bool(explicit))
                if cid is None
                else _as_int(cid)
            ),
            writer_states=bytes(ws),  # type: ignore[call-overload]  # a BLOB column
        )
    except (TypeError, ValueError) as error:
        raise CommitStateError(
            f"commit state database {str(path)!r} holds an unreadable row for "
            f"epoch {epoch!r} of sink {sink_id!r}: {error}; the file was changed by "
            "something other than this sinkv2 release"
        ) from error


def _as_int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an INTEGER column, got {describe(value)}")
    return value


def _abandon(
    sink_id: str, job_id: str, pid: int, connection: sqlite3.Connection, lock_fd: int
) -> None:
    """Release a lease that was garbage-collected without `SinkLease.release`."""
    if os.getpid() != pid:
        return  # a forked child's copy; the lock belongs to the parent
    try:
        connection.close()
    finally:
        drop_lock(lock_fd)
    warnings.warn(
        f"the lease on sink {sink_id!r} of job {job_id!r} was never released; it was "
        "released when garbage-collected. Call release() or use the lease in a `with` block",
        ResourceWarning,
        stacklevel=2,
    )


if TYPE_CHECKING:
    _LEASE_CONFORMS: type[SinkLease] = SqliteSinkLease
