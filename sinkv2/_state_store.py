"""The commit state store: which epochs of a sink are pending, aborted or committed.

The exactly-once commit coordinator keeps one row per (sink id, epoch) in a table
``pending_sink_state``, so that a driver that crashes anywhere around a commit can
be re-run, in a new process, and finish that commit exactly once. The driver uses
the store in this order, once per epoch (a checkpoint id):

1. `CommitStateStore.acquire` the sink id: an exclusive lease, refused with
   `ConcurrentCommitError` while another live driver holds it;
2. look at the requested epoch (`SinkLease.get`, `SinkLease.epochs`,
   `SinkLease.next_epoch`) and decide what to do with it;
3. `SinkLease.record_pending` with the epoch's committables, before committing;
4. run the committer;
5. `SinkLease.mark_committed`;
6. `SinkLease.release` the lease.

What a crash at each step leaves behind, and what a re-run finds:

- before 3 returns: no row for the epoch (or its earlier row, unchanged); nothing
  was committed by this run;
- between 3 and 5: a Pending row holding the committables; the re-run commits them
  again (committers are idempotent) or marks the epoch aborted;
- after 5: a Committed row; the re-run has nothing left to do for the epoch.

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

- a process-scoped OS lock (``flock``) on a file per sink id beside the database,
  taken without blocking by `CommitStateStore.acquire` and dropped by the kernel
  when its process dies, so a crashed driver never blocks a re-run;
- a fencing token per sink id, incremented by every acquire; each write checks, in
  its own transaction, that the lease's token is still the sink's current one, and
  raises `StaleFencingTokenError` otherwise.

The SQLite store is for drivers on one host: ``flock`` and SQLite's WAL mode need a
local filesystem, not a network share.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import hashlib
import json
import os
import pathlib
import socket
import sqlite3
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Final, NoReturn, Protocol, final

import attrs
from typing_extensions import Self

from sinkv2._context import INITIAL_CHECKPOINT_ID
from sinkv2._text import describe
from sinkv2.errors import (
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
    SinkConfigurationError,
    StaleFencingTokenError,
)

__all__ = [
    "DEFAULT_FILE_NAME",
    "SCHEMA_VERSION",
    "STATE_DIR_ENV",
    "CommitStateStore",
    "EpochRecord",
    "EpochStatus",
    "SinkLease",
    "SqliteCommitStateStore",
    "default_state_store_path",
]

STATE_DIR_ENV: Final = "SINKV2_STATE_DIR"
"""The environment variable naming the directory of the default database."""

DEFAULT_FILE_NAME: Final = "commit_state.sqlite"
"""The database's file name inside the state directory."""

SCHEMA_VERSION: Final = 1
"""The table layout this release writes and reads, kept in ``PRAGMA user_version``."""

_MAX_INT64: Final = 2**63 - 1
_BUSY_TIMEOUT_S: Final = 30.0
_MAX_HOLDER_BYTES: Final = 4096

_SCHEMA: Final = (
    """
    CREATE TABLE pending_sink_state (
        sink_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit INTEGER NOT NULL,
        serializer_version INTEGER NOT NULL,
        payload BLOB NOT NULL,
        fencing_token INTEGER NOT NULL,
        job_id TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (sink_id, epoch)
    )
    """,
    """
    CREATE TABLE sink_fence (
        sink_id TEXT PRIMARY KEY NOT NULL,
        fencing_token INTEGER NOT NULL,
        holder TEXT NOT NULL
    )
    """,
)

_COLUMNS: Final = (
    "sink_id, epoch, status, explicit, serializer_version, payload, fencing_token, job_id, "
    "updated_at"
)


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
        fencing_token: The token of the lease that last wrote this row.
        job_id: The job that last wrote this row.
        updated_at: When this row was last written, in unix seconds.
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


class _Move(enum.Enum):
    WRITE = "write"
    KEEP = "keep"


_P, _A, _C = EpochStatus.PENDING, EpochStatus.ABORTED, EpochStatus.COMMITTED

_TRANSITIONS: Final[Mapping[tuple[EpochStatus | None, EpochStatus], _Move | str]] = {
    (None, _P): _Move.WRITE,
    (_A, _P): _Move.WRITE,
    (_P, _P): _Move.WRITE,
    (_P, _C): _Move.WRITE,
    (_P, _A): _Move.WRITE,
    (_C, _C): _Move.KEEP,
    (_A, _A): _Move.KEEP,
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


class SinkLease(Protocol):
    """Exclusive use of one sink id by one driver, from `CommitStateStore.acquire`.

    Reads and writes go to the store directly: every write is durable when its
    method returns, and checks first that no newer lease took over the sink id.
    A lease belongs to the process that acquired it; it cannot be pickled or used
    in another process. It is a context manager: leaving the ``with`` block
    releases it.

    Required: every method and property below.
    """

    @property
    def sink_id(self) -> str:
        """The sink id this lease holds."""
        ...

    @property
    def fencing_token(self) -> int:
        """This lease's token; every acquire of the sink id gets a larger one."""
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
        self, epoch: int, *, explicit: bool, serializer_version: int, payload: bytes
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

    def release(self) -> None:
        """Give the sink id up. Idempotent; the lease cannot be used afterwards.

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


def default_state_store_path() -> pathlib.Path:
    """Where `SqliteCommitStateStore` keeps its database when given no path.

    ``$SINKV2_STATE_DIR/commit_state.sqlite`` if that variable is set and not empty,
    else ``.sinkv2/commit_state.sqlite`` under the current working directory;
    resolved to an absolute path now.
    """
    state_dir = os.environ.get(STATE_DIR_ENV)
    base = pathlib.Path(state_dir).expanduser() if state_dir else pathlib.Path.cwd() / ".sinkv2"
    return (base / DEFAULT_FILE_NAME).resolve()


@final
class SqliteCommitStateStore:
    """A `CommitStateStore` in one SQLite file, for drivers on one host.

    The store is only a path: it pickles, and every `acquire` opens its own
    connection. Beside the database, ``<file>.locks/`` holds one small lock file
    per sink id that was ever acquired; they are never deleted, because deleting a
    lock file that another process has open would let two drivers lock two
    different files.

    Args:
        path: The database file; created with its tables on first acquire. Defaults
            to `default_state_store_path`. Relative paths are resolved against the
            current working directory now, not at acquire.

    Raises:
        SinkConfigurationError: ``path`` is not a str or path, or names a directory.
        CommitStateError: The parent directory could not be created.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            resolved = default_state_store_path()
        else:
            raw = os.fspath(path) if isinstance(path, os.PathLike) else path
            if not isinstance(raw, str) or not raw:
                raise SinkConfigurationError(
                    f"'path' must be a non-empty str or os.PathLike[str] naming the commit "
                    f"state database file (got {describe(path)}); or pass None to use "
                    f"${STATE_DIR_ENV}/{DEFAULT_FILE_NAME}"
                )
            resolved = pathlib.Path(raw).expanduser().resolve()
        if resolved.is_dir():
            raise SinkConfigurationError(
                f"'path' must name the commit state database file, but {str(resolved)!r} is "
                f"a directory; pass a file inside it, e.g. {str(resolved / DEFAULT_FILE_NAME)!r}"
            )
        try:
            resolved.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CommitStateError(
                f"cannot create the directory of the commit state database {str(resolved)!r}: "
                f"{type(error).__name__}: {error}; pick a writable location"
            ) from error
        self._path = resolved

    @property
    def path(self) -> pathlib.Path:
        """The database file, absolute."""
        return self._path

    def acquire(self, sink_id: str, *, job_id: str) -> SinkLease:
        """Take the sink id for this driver, without waiting.

        Takes the sink id's OS lock, then, in one transaction, increments its
        fencing token and records this driver as the holder.

        Raises:
            SinkConfigurationError: ``sink_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the sink id, or this
                process holds it through a lease not released yet.
            CommitStateError: The database is unreadable, of a newer layout, or not a
                commit state database; or the lock file could not be opened.
        """
        _check_name("sink_id", sink_id, "pass the sink's stable id, the same in every run")
        _check_name("job_id", job_id, "pass this run's id, e.g. the Spark application id")
        holder = _Holder(
            job_id=job_id, pid=os.getpid(), host=socket.gethostname(), since=time.time()
        )
        lock_path = _lock_path(self._path, sink_id)
        lock_fd = _take_lock(lock_path, sink_id, holder)
        connection: sqlite3.Connection | None = None
        try:
            connection = _connect(self._path)
            token = _advance_fence(connection, self._path, sink_id, holder)
        except BaseException:
            if connection is not None:
                connection.close()
            _drop_lock(lock_fd)
            raise
        return _SqliteSinkLease(
            path=self._path,
            sink_id=sink_id,
            job_id=job_id,
            fencing_token=token,
            connection=connection,
            lock_fd=lock_fd,
        )

    def __repr__(self) -> str:
        return f"SqliteCommitStateStore({str(self._path)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SqliteCommitStateStore):
            return NotImplemented
        return self._path == other._path

    def __hash__(self) -> int:
        return hash((SqliteCommitStateStore, self._path))


if TYPE_CHECKING:
    _STORE_CONFORMS: type[CommitStateStore] = SqliteCommitStateStore


@final
class _SqliteSinkLease:
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
        _check_epoch(epoch)
        with self._reading(f"read epoch {epoch}") as connection:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM pending_sink_state WHERE sink_id = ? AND epoch = ?",
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
        query = f"SELECT {_COLUMNS} FROM pending_sink_state WHERE sink_id = ?"
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
        self, epoch: int, *, explicit: bool, serializer_version: int, payload: bytes
    ) -> EpochRecord:
        """Record ``epoch`` as pending with its committables; durable on return."""
        _check_epoch(epoch)
        if not isinstance(explicit, bool):
            raise SinkConfigurationError(
                f"'explicit' must be a bool (got {describe(explicit)}); True when the user "
                "chose the checkpoint id, False when it was assigned"
            )
        if (
            not isinstance(serializer_version, int)
            or isinstance(serializer_version, bool)
            or not 0 <= serializer_version <= _MAX_INT64
        ):
            raise SinkConfigurationError(
                f"'serializer_version' must be a non-negative int (got "
                f"{describe(serializer_version)}); pass the committable serializer's "
                "get_version()"
            )
        if not isinstance(payload, bytes):
            raise SinkConfigurationError(
                f"'payload' must be bytes (got {describe(payload)}); frame the committables "
                "with SimpleVersionedSerialization first"
            )
        return self._move(
            epoch,
            EpochStatus.PENDING,
            explicit=explicit,
            serializer_version=serializer_version,
            payload=payload,
        )

    def mark_committed(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` committed; a committed one is returned unchanged."""
        _check_epoch(epoch)
        return self._move(epoch, EpochStatus.COMMITTED)

    def mark_aborted(self, epoch: int) -> EpochRecord:
        """Mark pending ``epoch`` aborted; an aborted one is returned unchanged."""
        _check_epoch(epoch)
        return self._move(epoch, EpochStatus.ABORTED)

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
                _drop_lock(self._lock_fd)

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
            holder = _describe(_Holder.load(str(row[1])))
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
    ) -> EpochRecord:
        action = f"record epoch {epoch} as {target.value}"
        with self._writing(action) as connection:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM pending_sink_state WHERE sink_id = ? AND epoch = ?",
                (self._sink_id, epoch),
            ).fetchone()
            current = None if row is None else self._record(row)
            rule = _TRANSITIONS[(None if current is None else current.status, target)]
            if isinstance(rule, str):
                raise IllegalLifecycleError(rule.format(epoch=epoch, sink=self._sink_id))
            if rule is _Move.KEEP and current is not None:  # every KEEP starts from a row
                return current
            if target is not EpochStatus.PENDING and current is not None:
                explicit = current.explicit
                serializer_version = current.serializer_version
                payload = current.payload
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
            )
            connection.execute(
                f"INSERT INTO pending_sink_state ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (sink_id, epoch) DO UPDATE SET status = excluded.status, "
                "explicit = excluded.explicit, serializer_version = excluded.serializer_version, "
                "payload = excluded.payload, fencing_token = excluded.fencing_token, "
                "job_id = excluded.job_id, updated_at = excluded.updated_at",
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
                ),
            )
            return record

    def _record(self, row: tuple[object, ...]) -> EpochRecord:
        sink_id, epoch, status, explicit, version, payload, token, job_id, updated_at = row
        try:
            return EpochRecord(
                sink_id=str(sink_id),
                epoch=_as_int(epoch),
                status=EpochStatus(status),
                explicit=bool(explicit),
                serializer_version=_as_int(version),
                payload=bytes(payload),  # type: ignore[call-overload]  # a BLOB column
                fencing_token=_as_int(token),
                job_id=str(job_id),
                updated_at=float(updated_at),  # type: ignore[arg-type]  # a REAL column
            )
        except (TypeError, ValueError) as error:
            raise CommitStateError(
                f"commit state database {str(self._path)!r} holds an unreadable row for "
                f"epoch {epoch!r} of sink {self._sink_id!r}: {error}; the file was changed by "
                "something other than this sinkv2 release"
            ) from error

    def _database_error(self, action: str, error: sqlite3.Error) -> CommitStateError:
        return CommitStateError(
            f"commit state database {str(self._path)!r}: could not {action} for sink "
            f"{self._sink_id!r}: {type(error).__name__}: {error}; any transaction was rolled "
            "back, so nothing was written by this call"
        )


def _as_int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an INTEGER column, got {describe(value)}")
    return value


@attrs.frozen
class _Holder:
    """Who holds a sink id: written to its lock file and to ``sink_fence.holder``."""

    job_id: str
    pid: int
    host: str
    since: float

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @staticmethod
    def load(text: str) -> _Holder | None:
        """The holder written as ``text``, or ``None`` if it is unreadable."""
        try:
            data = json.loads(text)
            return _Holder(
                job_id=str(data["job_id"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                since=float(data["since"]),
            )
        except Exception:  # noqa: BLE001  # unreadable details are reported as unknown
            return None

    @property
    def is_this_process(self) -> bool:
        """Whether the holder is the calling process."""
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def __str__(self) -> str:
        since = dt.datetime.fromtimestamp(self.since, tz=dt.timezone.utc)
        return (
            f"job {self.job_id!r} (pid {self.pid} on host {self.host!r}, since "
            f"{since.isoformat(timespec='seconds')})"
        )


def _check_name(name: str, value: object, hint: str) -> None:
    if isinstance(value, str) and value:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return
    raise SinkConfigurationError(
        f"{name!r} must be a non-empty str of valid unicode (got {describe(value)}); {hint}"
    )


def _check_epoch(epoch: object) -> None:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 1 <= epoch <= _MAX_INT64:
        raise SinkConfigurationError(
            f"'epoch' must be a positive int below 2**63 (got {describe(epoch)}); checkpoint "
            f"ids start at {INITIAL_CHECKPOINT_ID} (sinkv2.INITIAL_CHECKPOINT_ID)"
        )


def _lock_path(db_path: pathlib.Path, sink_id: str) -> pathlib.Path:
    digest = hashlib.sha256(sink_id.encode("utf-8")).hexdigest()[:32]
    return db_path.with_name(db_path.name + ".locks") / f"{digest}.lock"


def _take_lock(lock_path: pathlib.Path, sink_id: str, holder: _Holder) -> int:
    """Lock the sink id's file without blocking and write ``holder`` into it.

    A new open file description per call, so that two leases in one process conflict.
    """
    import fcntl  # noqa: PLC0415  # POSIX only; importing sinkv2 must work everywhere

    try:
        lock_path.parent.mkdir(exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise CommitStateError(
            f"cannot open the lock file {str(lock_path)!r} of sink {sink_id!r}: "
            f"{type(error).__name__}: {error}; the store's directory must be writable"
        ) from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _Holder.load(os.pread(fd, _MAX_HOLDER_BYTES, 0).decode("utf-8", "replace"))
            raise ConcurrentCommitError(_concurrent_message(sink_id, other, lock_path)) from None
        data = holder.to_json().encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _describe(holder: _Holder | None) -> str:
    if holder is None:
        return "an unknown holder (no readable holder details were recorded)"
    return str(holder)


def _concurrent_message(sink_id: str, holder: _Holder | None, lock_path: pathlib.Path) -> str:
    message = (
        f"sink {sink_id!r} is already held, by {_describe(holder)}. Two drivers must "
        "never commit one sink at once, so this one stops before writing anything. Wait "
        "for that job to finish, then re-run; if it is dead, its lock died with its "
        f"process and a re-run proceeds (lock file: {str(lock_path)!r})"
    )
    if holder is not None and holder.is_this_process:
        message += (
            ". The holder is this process: release its lease (or use it in a `with` block) "
            "before acquiring the sink id again"
        )
    return message


def _drop_lock(fd: int) -> None:
    import fcntl  # noqa: PLC0415  # POSIX only; see _take_lock

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _abandon(
    sink_id: str, job_id: str, pid: int, connection: sqlite3.Connection, lock_fd: int
) -> None:
    """Release a lease that was garbage-collected without `SinkLease.release`."""
    if os.getpid() != pid:
        return  # a forked child's copy; the lock belongs to the parent
    try:
        connection.close()
    finally:
        _drop_lock(lock_fd)
    warnings.warn(
        f"the lease on sink {sink_id!r} of job {job_id!r} was never released; it was "
        "released when garbage-collected. Call release() or use the lease in a `with` block",
        ResourceWarning,
        stacklevel=2,
    )


def _connect(path: pathlib.Path) -> sqlite3.Connection:
    """A connection in autocommit mode, WAL, fully synchronous, with the tables in place."""
    connection: sqlite3.Connection | None = None
    try:
        connection = sqlite3.connect(
            path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = FULL")
        _ensure_schema(connection, path)
    except BaseException as error:
        if connection is not None:
            connection.close()
        if isinstance(error, sqlite3.Error):
            raise CommitStateError(
                f"commit state database {str(path)!r} cannot be opened: "
                f"{type(error).__name__}: {error}. If the file is damaged, restore it from a "
                "backup: deleting it forgets which epochs were committed, so a re-run could "
                "commit them twice"
            ) from error
        raise
    return connection


def _user_version(connection: sqlite3.Connection) -> int:
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    return int(version)


def _ensure_schema(connection: sqlite3.Connection, path: pathlib.Path) -> None:
    """Create the tables in a new file; refuse a layout this release cannot read."""
    version = _user_version(connection)
    if version == 0:
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = _user_version(connection)  # another process may have just created it
            if version == 0:
                tables = [
                    name
                    for (name,) in connection.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                    )
                ]
                if tables:
                    raise CommitStateError(
                        f"{str(path)!r} is not a commit state database: it has tables "
                        f"{tables} but no sinkv2 layout version; point the store at a new "
                        "file, or at the one your earlier runs used"
                    )
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                version = SCHEMA_VERSION
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
    if version != SCHEMA_VERSION:
        newer = version > SCHEMA_VERSION
        raise CommitStateError(
            f"commit state database {str(path)!r} has layout version {version}, but this "
            f"sinkv2 release reads layout {SCHEMA_VERSION} only; "
            + (
                "it was written by a newer sinkv2: upgrade sinkv2 to read it, and never point "
                "an older release at it"
                if newer
                else "the file was changed by something other than sinkv2"
            )
        )


def _advance_fence(
    connection: sqlite3.Connection, path: pathlib.Path, sink_id: str, holder: _Holder
) -> int:
    """Increment the sink id's fencing token and record the holder, in one transaction."""
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            row = connection.execute(
                "SELECT fencing_token FROM sink_fence WHERE sink_id = ?", (sink_id,)
            ).fetchone()
            token = (0 if row is None else int(row[0])) + 1
            connection.execute(
                "INSERT INTO sink_fence (sink_id, fencing_token, holder) VALUES (?, ?, ?) "
                "ON CONFLICT (sink_id) DO UPDATE SET fencing_token = excluded.fencing_token, "
                "holder = excluded.holder",
                (sink_id, token, holder.to_json()),
            )
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
    except sqlite3.Error as error:
        raise CommitStateError(
            f"commit state database {str(path)!r}: could not take sink {sink_id!r}: "
            f"{type(error).__name__}: {error}; nothing was written"
        ) from error
    return token
