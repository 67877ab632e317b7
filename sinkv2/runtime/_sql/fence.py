"""A fenced lease on one id, in either database: its lifecycle and its transactions.

`FencedLease` is what every lease of the SQL stores shares, whatever its id names
(a sink, or a source and its epochs, see ``_sql``): the
connection and lock that keep the id (`Hold`), the checks that the lease is still
held by this process, and the two ways in - `FencedLease.reading` and
`FencedLease.writing`, a transaction that first checks that the lease's fencing
token is still the id's current one in the fence table of its `Keyspace`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import ClassVar, NoReturn, Self

import attrs

from sinkv2.errors import CommitStateError, IllegalLifecycleError, StaleFencingTokenError
from sinkv2.runtime._sql.dialect import Connection, Dialect, describe_error, render

__all__ = ["FencedLease", "Hold", "Holder", "Keyspace", "describe_holder"]


@attrs.frozen
class Holder:
    """Who holds an id: written to the SQLite lock file and to the fence row."""

    job_id: str
    pid: int
    host: str
    since: float

    def to_json(self) -> str:
        """The holder as the JSON the SQLite store writes."""
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @staticmethod
    def load(text: str) -> Holder | None:
        """The holder written as ``text``, or ``None`` if it is unreadable."""
        try:
            data = json.loads(text)
            return Holder(
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
        since = dt.datetime.fromtimestamp(self.since, tz=dt.UTC)
        return (
            f"job {self.job_id!r} (pid {self.pid} on host {self.host!r}, since "
            f"{since.isoformat(timespec='seconds')})"
        )


def describe_holder(holder: Holder | None) -> str:
    """``holder`` for a message; an unknown one said so."""
    if holder is None:
        return "an unknown holder (no readable holder details were recorded)"
    return str(holder)


@attrs.frozen
class Keyspace:
    """Whose ids a kind of lease holds, and where their fence rows are.

    Attributes:
        noun: What an id names, in messages: ``sink`` (``"sink 'orders'"``).
        key: The id's column in every table of the kind: ``sink_id``.
        fence: The fence table (without schema): one row per id, with its
            ``fencing_token`` and the holder's columns (`Dialect.holder_columns`).
    """

    noun: str
    key: str
    fence: str


@attrs.frozen
class Hold:
    """What keeps an id for one lease: its connection and the lock that lives with it.

    Made by the store that acquired the id; `release` drops the lock and closes the
    connection (the lease runs it once, or its finalizer does).

    Attributes:
        connection: The lease's connection, in autocommit mode.
        release: Drops the lock and closes the connection.
        what: What a pickled lease would carry off, for the refusal's message.
        ship: What to ship to another process instead.
        shown: Extra ``name=value`` fields for the lease's repr, each with a leading space.
        connection_name: The connection, in the message of a lost one.
        lock_name: The lock, in the message of a lost connection.
    """

    connection: Connection
    release: Callable[[], None]
    what: str
    ship: str
    shown: str = ""
    connection_name: str = "the lease's connection"
    lock_name: str = "its lock"


class FencedLease:
    """A lease on one id of a `Keyspace`, over one connection, fenced by a token.

    Safe to use from several threads of the acquiring process; calls are serialised.
    Subclasses add what the lease is for, reading and writing through `reading`
    and `writing`.
    """

    lease_name: ClassVar[str] = "Lease"
    """How the repr names the lease, e.g. ``SinkLease``."""

    def __init__(
        self,
        *,
        dialect: Dialect,
        keyspace: Keyspace,
        key: str,
        job_id: str,
        fencing_token: int,
        hold: Hold,
    ) -> None:
        self._dialect = dialect
        self._keyspace = keyspace
        self._key = key
        self._job_id = job_id
        self._token = fencing_token
        self._hold = hold
        self._connection = hold.connection
        self._pid = os.getpid()
        self._released = False
        self._lost: str | None = None
        self._mutex = threading.RLock()
        self._fence_query = render(
            dialect,
            "SELECT fencing_token, {holder} FROM {schema}{fence} WHERE {key} = ?{for_share}",
            holder=dialect.holder_columns,
            fence=keyspace.fence,
            key=keyspace.key,
        )
        self._finalizer = weakref.finalize(
            self, _abandon, f"{keyspace.noun} {key!r}", job_id, self._pid, hold.release
        )
        self._finalizer.atexit = False
        self._prepare()

    def _prepare(self) -> None:
        """Render the subclass's statements in the lease's dialect; called by ``__init__``."""

    @property
    def fencing_token(self) -> int:
        """This lease's token; every acquire of the id gets a larger one."""
        return self._token

    @property
    def job_id(self) -> str:
        """The job this lease was acquired for."""
        return self._job_id

    def release(self) -> None:
        """Drop the lock and close the connection. Idempotent.

        Raises:
            IllegalLifecycleError: Called in a process other than the acquiring one.
        """
        with self._mutex:
            self._check_process("release")
            if self._released:
                return
            self._released = True
            self._finalizer.detach()
            self._hold.release()

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
            f"{self!r} cannot be pickled or copied: it holds {self._hold.what} of process "
            f"{self._pid}. Ship {self._hold.ship} instead, and acquire the "
            f"{self._keyspace.noun} id in the process that commits"
        )

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
        return (
            f"<{self.lease_name} {self._keyspace.key}={self._key!r} fencing_token={self._token} "
            f"job_id={self._job_id!r} pid={self._pid}{self._hold.shown} {state} on "
            f"{self._dialect.shown_as}>"
        )

    @contextlib.contextmanager
    def reading(self, action: str) -> Iterator[Connection]:
        """The lease's connection, for reads; driver errors become `CommitStateError`.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            CommitStateError: The database could not be read, or the connection was lost.
        """
        with self._mutex:
            self._check_usable(action)
            try:
                yield self._connection
            except self._dialect.errors as error:
                raise self._database_error(action, error) from error

    @contextlib.contextmanager
    def writing(self, action: str) -> Iterator[Connection]:
        """One transaction that starts by checking the fencing token.

        Raises:
            IllegalLifecycleError: The lease was released, or is used in another process.
            StaleFencingTokenError: A newer lease took over the id. Nothing was written.
            CommitStateError: The database refused the write. Nothing was written.
        """
        with self._mutex:
            self._check_usable(action)
            connection = self._connection
            try:
                with self._dialect.transaction(connection):
                    self._check_fence(connection, action)
                    yield connection
            except self._dialect.errors as error:
                raise self._database_error(action, error) from error

    # -- internals -------------------------------------------------------------

    def _check_process(self, action: str) -> None:
        if os.getpid() != self._pid:
            noun = self._keyspace.noun
            raise IllegalLifecycleError(
                f"cannot {action}: the lease on {noun} {self._key!r} belongs to process "
                f"{self._pid}, and this is process {os.getpid()}; its lock and database "
                f"connection do not carry over to another process. Acquire the {noun} id in "
                "this process instead"
            )

    def _check_usable(self, action: str) -> None:
        self._check_process(action)
        if self._released:
            noun = self._keyspace.noun
            raise IllegalLifecycleError(
                f"cannot {action}: the lease on {noun} {self._key!r} (fencing token "
                f"{self._token}) was released; acquire the {noun} id again to go on"
            )
        if self._lost is not None:
            raise self._lost_error(action, self._lost)

    def _lost_error(self, action: str, cause: str) -> CommitStateError:
        noun = self._keyspace.noun
        return CommitStateError(
            f"{self._dialect.where}: cannot {action} for {noun} {self._key!r}: "
            f"{self._hold.connection_name} was lost ({cause}), and {self._hold.lock_name} on "
            f"the {noun} id with it, so another driver may hold the {noun} id now. This "
            f"driver must stop without committing; re-run the job, which acquires the {noun} "
            "id again and recovers. Nothing was written by this call"
        )

    def _check_fence(self, connection: Connection, action: str) -> None:
        row = connection.execute(self._fence_query, (self._key,)).fetchone()
        if row is not None and row[0] == self._token:
            return
        noun = self._keyspace.noun
        if row is None:
            current = f"the {noun}'s fence row is gone"
        else:
            holder = self._dialect.describe_holder(row[1:])
            current = f"the {noun}'s current token is {row[0]}, held by {holder}"
        raise StaleFencingTokenError(
            f"cannot {action}: the lease on {noun} {self._key!r} of job {self._job_id!r} "
            f"has fencing token {self._token}, but {current}. A newer driver took over this "
            f"{noun} id; this one must stop without committing. Nothing was written"
        )

    def _database_error(self, action: str, error: Exception) -> CommitStateError:
        if self._dialect.is_lost(self._connection):
            self._lost = describe_error(error)
            return self._lost_error(action, self._lost)
        return CommitStateError(
            f"{self._dialect.where}: could not {action} for {self._keyspace.noun} "
            f"{self._key!r}: {describe_error(error)}; any transaction was rolled back, so "
            "nothing was written by this call"
        )


def _abandon(what: str, job_id: str, pid: int, release: Callable[[], None]) -> None:
    """Release a lease that was garbage-collected without being released."""
    if os.getpid() != pid:
        return  # a forked child's copy; the lock and the session belong to the parent
    release()
    warnings.warn(
        f"the lease on {what} of job {job_id!r} was never released; it was released when "
        "garbage-collected. Call release() or use the lease in a `with` block",
        ResourceWarning,
        stacklevel=2,
    )
