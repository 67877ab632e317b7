"""`PostgresCommitStateStore`: the commit state store in a PostgreSQL schema.

Over 450 lines because besides acquiring, it is an operator's tool for a store on a
server - who holds an id and ending a dead holder's session - each documented for
the operator who needs it.

The contract is `sinkv2.runtime.CommitStateStore` (see ``_store``); the tables are
the SQLite store's layout 4 (see ``postgres``); the lease and the operator's
queries are the SQL stores' own (``lease``, ``store``). Two mechanisms keep two
drivers from both proceeding on one sink id, wherever they run:

- a session-level advisory lock on `PostgresCommitStateStore.lock_key` of the
  sink id, taken without waiting by `PostgresCommitStateStore.acquire` and held by
  the lease's connection: a driver that dies, or loses its connection, lets go;
- a fencing token per sink id in ``sink_fence``, incremented by every acquire and
  checked by every write in its own transaction.

Besides the contract, the store answers an operator's questions without acquiring
anything: which sink ids it knows (`PostgresCommitStateStore.sink_ids`), their
epochs, jobs and origin, who holds a sink id now (`PostgresCommitStateStore.holder`),
and it can end a holder's connection (`PostgresCommitStateStore.terminate_holder`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from sinkv2._text import describe
from sinkv2.errors import CommitStateError, ConcurrentCommitError, SinkConfigurationError
from sinkv2.runtime._source_store import SourceStateStore
from sinkv2.runtime._sql.dialect import Dialect, describe_error, render
from sinkv2.runtime._sql.fence import Hold, Holder, Keyspace
from sinkv2.runtime._sql.postgres import (
    CONNECT_DEFAULTS,
    DURABLE_COMMITS,
    LAYOUT_VERSION,
    PgConnection,
    PostgresSinkLease,
    advance_fence,
    ensure_layout,
    import_psycopg,
    lock_ids,
    pg_hold,
    postgres_dialect,
    read_layout,
    sink_lock_key,
    source_lock_key,
)
from sinkv2.runtime._sql.schema import SINKS, SOURCES
from sinkv2.runtime._sql.store import SqlCommitStateStore
from sinkv2.runtime._store import CommitStateStore, SinkLease, check_name

__all__ = ["DEFAULT_SCHEMA", "PostgresCommitStateStore", "SinkHolder"]

DEFAULT_SCHEMA: Final = "sinkv2"
"""The PostgreSQL schema `PostgresCommitStateStore` keeps its tables in by default."""

_MAX_IDENTIFIER_BYTES: Final = 63
_HIDDEN: Final = ("password", "passfile", "sslpassword", "sslkey")
_TERMINATE_WAIT_MS: Final = 5000
_PRIVILEGES: Final = (
    "nothing was written. If a privilege is missing, the role needs CREATE on the "
    "database (or CREATE and USAGE on the schema, if an administrator made it) and access "
    "to the store's tables"
)
_SIGNAL_PRIVILEGES: Final = (
    "nothing was changed. Terminating another role's backend needs the same role, "
    "membership in pg_signal_backend, or a superuser"
)


@final
@attrs.frozen
class SinkHolder:
    """Who holds a sink id of a `PostgresCommitStateStore` right now.

    Attributes:
        sink_id: The sink id.
        backend_pid: The PostgreSQL backend process whose session holds the sink id's
            advisory lock (``pg_locks.pid``); what `PostgresCommitStateStore.terminate_holder`
            ends, and what ``SELECT pg_terminate_backend(backend_pid)`` would end.
        job_id: The job of the lease, as recorded when it acquired the sink id;
            ``None`` if the record does not describe this backend (a driver that
            took the lock an instant ago and has not recorded itself yet).
        pid: The driver's process id on its host; ``None`` as for ``job_id``.
        host: The driver's host name; ``None`` as for ``job_id``.
        since: When the driver acquired the sink id, in unix seconds; ``None`` as for
            ``job_id``.
        fencing_token: The lease's fencing token; ``None`` as for ``job_id``.
    """

    sink_id: str
    backend_pid: int
    job_id: str | None
    pid: int | None
    host: str | None
    since: float | None
    fencing_token: int | None

    @property
    def is_this_process(self) -> bool:
        """Whether the holder is the calling process (a lease not released yet)."""
        return self.pid == os.getpid() and self.host == socket.gethostname()

    def __str__(self) -> str:
        backend = f"PostgreSQL backend pid {self.backend_pid}"
        if self.job_id is None or self.pid is None or self.host is None or self.since is None:
            return f"a driver whose details are not recorded yet ({backend})"
        recorded = Holder(job_id=self.job_id, pid=self.pid, host=self.host, since=self.since)
        return f"{recorded} through {backend}"


@final
class PostgresCommitStateStore(SqlCommitStateStore):
    """A `CommitStateStore` and `SourceStateStore` in a PostgreSQL schema, for any number of hosts.

    The store is only settings: it pickles, connects on `acquire` (one connection
    per lease, held until the lease is released) and for each operator query.
    psycopg is imported when the store is made, not by ``import sinkv2``.

    On first acquire the store creates its schema (if it does not exist) and its
    tables (or migrates a layout-3 schema, adding the sources' tables), under a
    transaction-level advisory lock so that concurrent first acquires from
    several hosts do not race. The role needs CREATE on the
    database when the schema does not exist yet, or CREATE and USAGE on a schema
    an administrator made; afterwards, read and write access to the tables it
    created. `terminate_holder` needs the right to signal the holder's backend
    (the same role, a member of ``pg_signal_backend``, or a superuser).

    A sink id is held through a session-level advisory lock (``pg_try_advisory_lock``)
    on `lock_key`, a 64-bit key derived from the schema and the sink id: it lives as
    long as the lease's connection. The keys are SHA-256 based; another application
    using bigint advisory locks in the same database would collide with one only by
    a 2**-64 chance, and a collision only makes an acquire wait for the other lock.
    A source id is held the same way, on `source_lock_key` (from ``"sinkv2 source"``),
    so a sink id and a source id of the same name never exclude each other.

    A lease never reconnects: a lease whose connection is lost (server restart,
    terminated backend, network failure) raises `CommitStateError` from then on,
    and its driver must stop and be re-run.

    Args:
        conninfo: A ``postgresql://`` URL or a libpq ``key=value`` connection
            string. libpq's ``connect_timeout`` and TCP keepalives get defaults
            (10 s; about a minute to notice a dead peer) unless it sets them;
            environment variables (``PGPASSWORD``, ``PGHOST``...) apply as in libpq.
        schema: The PostgreSQL schema of the tables; ``sinkv2`` by default. Several
            stores (e.g. test and production) can share a database in different
            schemas; their sink ids and locks are independent.

    Raises:
        SinkConfigurationError: ``conninfo`` is not a non-empty str libpq can parse,
            or ``schema`` not a non-empty identifier of at most 63 bytes.
        ImportError: psycopg is not installed (``pip install 'sinkv2[postgres]'``).
    """

    _sink_lease = PostgresSinkLease

    def __init__(self, conninfo: str, *, schema: str = DEFAULT_SCHEMA) -> None:
        psycopg = import_psycopg()
        if not isinstance(conninfo, str) or not conninfo.strip():
            raise SinkConfigurationError(
                f"'conninfo' must be a non-empty str (got {describe(conninfo)}); pass a "
                "PostgreSQL URL such as 'postgresql://user@db-host:5432/app', or a libpq "
                "string such as 'host=db-host dbname=app user=sinkv2'"
            )
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as error:
            raise SinkConfigurationError(
                f"'conninfo' is not a connection string libpq can parse: {error}; pass a "
                "PostgreSQL URL such as 'postgresql://user@db-host:5432/app', or a libpq "
                "string such as 'host=db-host dbname=app user=sinkv2'"
            ) from None
        check_name("schema", schema, f"name a PostgreSQL schema; the default is {DEFAULT_SCHEMA!r}")
        if len(schema.encode("utf-8")) > _MAX_IDENTIFIER_BYTES or "\0" in schema:
            raise SinkConfigurationError(
                f"'schema' must name a PostgreSQL schema, at most {_MAX_IDENTIFIER_BYTES} bytes "
                f"long and without NUL (got {describe(schema)}); the default is "
                f"{DEFAULT_SCHEMA!r}"
            )
        self._conninfo = conninfo
        self._schema = schema
        self._params: dict[str, Any] = {k: v for k, v in params.items() if v is not None}

    @property
    def conninfo(self) -> str:
        """The connection string as given (it may hold a password; do not log it)."""
        return self._conninfo

    @property
    def schema(self) -> str:
        """The PostgreSQL schema of the tables."""
        return self._schema

    @property
    def target(self) -> str:
        """Where the store is, for messages: host, port, database, user, schema; no password."""
        keys = ("host", "hostaddr", "port", "dbname", "user")
        parts = " ".join(f"{k}={self._params[k]}" for k in keys if self._params.get(k))
        return (
            f"PostgreSQL commit state store ({parts or 'libpq defaults'}, schema {self._schema!r})"
        )

    def lock_key(self, sink_id: str) -> int:
        """The bigint advisory lock key a lease on ``sink_id`` holds, a signed int64.

        The first 8 bytes, read as a big-endian signed integer, of the SHA-256 of
        ``"sinkv2 sink"``, the schema and the sink id, UTF-8, joined by NUL bytes.
        ``pg_locks`` shows the lock with ``locktype = 'advisory'``, ``classid`` its
        high and ``objid`` its low 32 bits, and ``objsubid = 1``.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        return sink_lock_key(self._schema, sink_id)

    def acquire(self, sink_id: str, *, job_id: str) -> SinkLease:
        """Take the sink id for this driver, without waiting.

        Connects, creates the tables if they are missing, takes the sink id's
        advisory lock with ``pg_try_advisory_lock``, then, in one statement,
        increments its fencing token and records this driver as the holder
        (job id, pid, host, time and backend pid).

        Raises:
            SinkConfigurationError: ``sink_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live session holds the sink id: another
                driver, or this process through a lease not released yet. The message
                names the holder and its backend pid.
            CommitStateError: The server cannot be reached or refused a statement
                (e.g. no CREATE privilege), or the schema holds another layout.
        """
        return self._acquire_sink(sink_id, job_id)

    def _take(self, keyspace: Keyspace, key: str, job_id: str) -> tuple[int, Hold]:
        """Connect, lock ``key`` and advance its fencing token; the token and the hold."""
        check_name("job_id", job_id, "pass this run's id, e.g. the Spark application id")
        dialect = self._dialect
        action = f"take {keyspace.noun} {key!r}"
        connection = self._connect(f"sinkv2 {job_id}", action)
        try:
            with self._errors(action):
                ensure_layout(connection, dialect, self._schema)
                row = connection.execute(
                    "SELECT pg_try_advisory_lock(%s)", (self._lock_key(keyspace, key),)
                ).fetchone()
                if row is None or row[0] is not True:
                    holder = self._holder(connection, key, keyspace)
                    raise ConcurrentCommitError(self._concurrent_message(key, holder, keyspace))
                token = advance_fence(connection, dialect, keyspace, key, job_id)
        except BaseException:
            connection.close()  # ends the session: the advisory lock, if taken, goes with it
            raise
        return token, pg_hold(connection, self._lock_key(keyspace, key))

    # -- what an operator needs, without a lease -----------------------------------

    def holder(self, sink_id: str) -> SinkHolder | None:
        """Who holds ``sink_id`` now, or ``None`` if no session holds its lock.

        Looks the sink id's advisory lock up in ``pg_locks`` (readable by every
        role) and the holder's details up in ``sink_fence``. A holder whose ``host``
        is this host and whose ``pid`` is not running any more died while its
        connection stayed open (rare: its kernel closes the socket when it dies; a
        host that vanished from the network keeps it until TCP keepalives end it);
        `terminate_holder` ends such a connection.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
            CommitStateError: The server cannot be reached, or the schema holds
                another layout.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        with self._session(f"find the holder of sink {sink_id!r}") as connection:
            return self._holder(connection, sink_id)

    def terminate_holder(
        self, sink_id: str, *, backend_pid: int | None = None
    ) -> SinkHolder | None:
        """End the session holding ``sink_id``, so that a re-run can acquire it.

        Runs ``pg_terminate_backend`` on the holder's backend and waits (up to 5 s)
        for it to exit; its advisory lock is gone when this returns. Only for a
        holder whose driver is dead (see `holder`): terminating a live driver's
        connection fails its next write with `CommitStateError`, and anything it
        did not record stays uncommitted until a re-run recovers it - nothing is
        committed twice, but the job fails.

        Args:
            sink_id: The sink id to free.
            backend_pid: If given, terminate only if this backend (as `holder`
                showed it) still holds the sink id, so that a driver that
                acquired it since is left alone.

        Returns:
            The holder that was terminated, or ``None`` if no session held the
            sink id (or ``backend_pid`` no longer did).

        Raises:
            SinkConfigurationError: An argument has the wrong type.
            CommitStateError: The role may not signal that backend, the backend
                did not exit within 5 s, or the server cannot be reached.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        if backend_pid is not None and (
            not isinstance(backend_pid, int) or isinstance(backend_pid, bool) or backend_pid <= 0
        ):
            raise SinkConfigurationError(
                f"'backend_pid' must be a positive int or None (got {describe(backend_pid)}); "
                "pass the backend_pid that holder() returned"
            )
        action = f"terminate the holder of sink {sink_id!r}"
        with self._session(action, _SIGNAL_PRIVILEGES) as connection:
            holder = self._holder(connection, sink_id)
            if holder is None or (backend_pid is not None and holder.backend_pid != backend_pid):
                return None
            if connection.info.server_version >= 140000:  # it waits since 14
                row = connection.execute(
                    "SELECT pg_terminate_backend(%s, %s)", (holder.backend_pid, _TERMINATE_WAIT_MS)
                ).fetchone()
            else:
                row = connection.execute(
                    "SELECT pg_terminate_backend(%s)", (holder.backend_pid,)
                ).fetchone()
            if row is None or row[0] is not True:
                raise CommitStateError(
                    f"{self.target}: could not {action}: backend {holder.backend_pid} did not "
                    f"exit within {_TERMINATE_WAIT_MS / 1000:g} s; try again, or ask the "
                    "database administrator"
                )
        return holder

    # -- internals -------------------------------------------------------------

    @property
    def _dialect(self) -> Dialect:
        return postgres_dialect(self._schema, self.target)

    def _connect(self, application: str, action: str) -> PgConnection:
        psycopg = import_psycopg()
        params = {**CONNECT_DEFAULTS, "application_name": application[:63], **self._params}
        try:
            connection: PgConnection = psycopg.connect(**params, autocommit=True)
            connection.execute(DURABLE_COMMITS)
        except psycopg.Error as error:
            raise CommitStateError(
                f"{self.target}: could not {action}: cannot connect: {describe_error(error)}; "
                "check that the server is running and reachable, and the connection string"
            ) from error
        return connection

    @contextmanager
    def _errors(self, action: str, hint: str = _PRIVILEGES) -> Iterator[None]:
        psycopg = import_psycopg()
        try:
            yield
        except psycopg.Error as error:
            raise CommitStateError(
                f"{self.target}: could not {action}: {describe_error(error)}; {hint}"
            ) from error

    @contextmanager
    def _session(self, action: str, hint: str = _PRIVILEGES) -> Iterator[PgConnection]:
        """A short-lived connection; psycopg's errors become `CommitStateError`."""
        connection = self._connect("sinkv2 state", action)
        try:
            with self._errors(action, hint):
                yield connection
        finally:
            connection.close()

    @contextmanager
    def _reading(self, action: str) -> Iterator[PgConnection | None]:
        """A short-lived connection; ``None`` if the tables do not exist.

        An older layout is migrated first, as an acquire would (as SQLite does).
        """
        with self._session(action) as connection:
            layout = read_layout(connection, self._dialect, self._schema)
            if layout is not None and layout != LAYOUT_VERSION:
                ensure_layout(connection, self._dialect, self._schema)
            yield connection if layout is not None else None

    def _lock_key(self, keyspace: Keyspace, key: str) -> int:
        lock_key = source_lock_key if keyspace == SOURCES else sink_lock_key
        return lock_key(self._schema, key)

    def _holder(
        self, connection: PgConnection, sink_id: str, keyspace: Keyspace = SINKS
    ) -> SinkHolder | None:
        """Who holds the id (``SinkHolder.sink_id`` is a source id for `SOURCES`)."""
        classid, objid = lock_ids(self._lock_key(keyspace, sink_id))
        locked = connection.execute(
            "SELECT pid FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_catalog.pg_database "
            "WHERE datname = current_database()) "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
            (classid, objid),
        ).fetchone()
        if locked is None:
            return None
        backend_pid = int(locked[0])
        fence = None
        if read_layout(connection, self._dialect, self._schema) is not None:
            fence = connection.execute(
                render(
                    self._dialect,
                    "SELECT holder_job_id, holder_pid, holder_host, holder_since, fencing_token "
                    "FROM {schema}{fence} WHERE {key} = ? AND holder_backend_pid = ?",
                    fence=keyspace.fence,
                    key=keyspace.key,
                ),
                (sink_id, backend_pid),
            ).fetchone()
        if fence is None:
            return SinkHolder(sink_id, backend_pid, None, None, None, None, None)
        job_id, pid, host, since, token = fence
        return SinkHolder(
            sink_id, backend_pid, str(job_id), int(pid), str(host), float(since), int(token)
        )

    def _concurrent_message(self, key: str, holder: SinkHolder | None, keyspace: Keyspace) -> str:
        noun = keyspace.noun
        if holder is None:
            return (
                f"{noun} {key!r} was held an instant ago, by a driver that has let go "
                "since; this one stops before writing anything. Re-run it"
            )
        terminate = (
            f"PostgresCommitStateStore.terminate_holder({key!r}) or " if keyspace == SINKS else ""
        )
        message = (
            f"{noun} {key!r} is already held, by {holder}. Two drivers must never hold one "
            f"{noun} id at once, so this one stops before writing anything. Wait for that job "
            "to finish, then re-run; if its driver died, its lock died with its database "
            "connection and a re-run proceeds. If the driver is gone but its connection "
            "lingers (a host cut off from the network), end the connection with "
            f"{terminate}SELECT pg_terminate_backend({holder.backend_pid}); store: {self.target}"
        )
        if holder.is_this_process:
            message += (
                ". The holder is this process: release its lease (or use it in a `with` "
                f"block) before acquiring the {noun} id again"
            )
        return message

    def __repr__(self) -> str:
        hidden = {k: ("***" if k in _HIDDEN else v) for k, v in self._params.items()}
        shown = " ".join(f"{k}={v}" for k, v in sorted(hidden.items()))
        return f"PostgresCommitStateStore({shown!r}, schema={self._schema!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PostgresCommitStateStore):
            return NotImplemented
        return (self._conninfo, self._schema) == (other._conninfo, other._schema)

    def __hash__(self) -> int:
        return hash((PostgresCommitStateStore, self._conninfo, self._schema))


if TYPE_CHECKING:
    _STORE_CONFORMS: type[CommitStateStore] = PostgresCommitStateStore
    _SOURCE_STORE_CONFORMS: type[SourceStateStore] = PostgresCommitStateStore
