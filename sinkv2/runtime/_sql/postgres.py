"""PostgreSQL's dialect, how a schema gets the tables, its locks and its connections.

The tables are the SQLite store's layout 5 (``schema``) in one PostgreSQL schema
(``sinkv2`` by default), plus ``sink_store_layout``: one row holding the layout
version, the counterpart of SQLite's ``PRAGMA user_version``. Layouts 1 and 2
never existed in PostgreSQL; the numbers are shared so that one number means one
set of semantics in either store. A schema of layout 3 (no sources' tables) or
4 (no results table) is migrated in place when a store opens it.

A write transaction is psycopg's ``transaction()``; it reads the fence row ``FOR
SHARE`` (a takeover, which increments the token, waits for it to end) and the
epoch's row ``FOR UPDATE``. The fence row keeps its holder in columns, with the
backend pid of the holder's session.

Two kinds of advisory lock keys, both 64-bit and derived with SHA-256 so that
every process computes the same ones:

- `layout_lock_key` (``"sinkv2 layout"``, schema): a transaction-level lock taken
  around creating the tables, so that concurrent first acquires do not race;
- `sink_lock_key` (``"sinkv2 sink"``, schema, sink id) and `source_lock_key`
  (``"sinkv2 source"``, schema, source id): the session-level lock a lease holds
  on its id for as long as its connection lives; a sink id and a source id of the
  same name have different keys.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast, final

from sinkv2._text import missing_extra
from sinkv2.errors import CommitStateError
from sinkv2.runtime._sql.dialect import Connection, Dialect, render
from sinkv2.runtime._sql.fence import Hold, Holder, Keyspace
from sinkv2.runtime._sql.lease import SqlSinkLease
from sinkv2.runtime._sql.schema import (
    EPOCH_TABLE,
    JOB_TABLE,
    ORIGIN_TABLE,
    RESULT_TABLE,
    SINKS,
    source_tables,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CONNECT_DEFAULTS",
    "DURABLE_COMMITS",
    "LAYOUT_TABLE",
    "LAYOUT_VERSION",
    "TABLES",
    "PgConnection",
    "PostgresSinkLease",
    "advance_fence",
    "ensure_layout",
    "import_psycopg",
    "layout_lock_key",
    "lock_ids",
    "pg_hold",
    "postgres_dialect",
    "quote_identifier",
    "read_layout",
    "sink_lock_key",
    "source_lock_key",
]

LAYOUT_VERSION: Final = 5
"""The table layout this release writes and reads, kept in ``sink_store_layout``."""

FIRST_LAYOUT: Final = 3
"""The oldest layout a PostgreSQL store was ever written in; migrated on open."""

LAYOUT_TABLE: Final = "sink_store_layout"

TABLES: Final = (
    "pending_sink_state",
    "sink_fence",
    "sink_job",
    "sink_origin",
    LAYOUT_TABLE,
    "source_epoch_state",
    "source_fence",
    "sink_result",
)
"""Every table the store owns in its schema."""

CONNECT_DEFAULTS: Final[Mapping[str, str]] = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}
"""libpq parameters a connection gets unless the conninfo sets them: a dead server
or network is noticed within about a minute, instead of a write hanging on it."""

DURABLE_COMMITS: Final = (
    "SELECT set_config('synchronous_commit', 'local', false) "
    "WHERE current_setting('synchronous_commit') = 'off'"
)
"""Run on each store connection: a commit it makes is on the server's disk when it returns.

A store's record is what a restart after a crash trusts (a lease's fence, an epoch's
plan or committables), so it must survive a server crash that follows the commit. With
``synchronous_commit = off`` (the server's or the role's setting) PostgreSQL may lose
the last commits in a crash; ``local`` waits for the local flush only, and any stronger
setting a user chose (``on``, ``remote_write``, ``remote_apply``) is kept.
"""

_FENCE_TABLE: Final = """
    CREATE TABLE {schema}{fence} (
        {key} TEXT PRIMARY KEY,
        fencing_token BIGINT NOT NULL,
        holder_job_id TEXT NOT NULL,
        holder_pid BIGINT NOT NULL,
        holder_host TEXT NOT NULL,
        holder_since DOUBLE PRECISION NOT NULL,
        holder_backend_pid INTEGER NOT NULL
    )
    """

_LAYOUT_TABLE: Final = """
    CREATE TABLE {schema}sink_store_layout (
        singleton BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
        version INTEGER NOT NULL
    )
    """

if TYPE_CHECKING:
    PgConnection = psycopg.Connection[tuple[Any, ...]]
else:
    PgConnection = Any


def import_psycopg() -> Any:
    """``psycopg``, imported now; an ImportError with the install line if it is missing."""
    try:
        import psycopg  # noqa: PLC0415  # an optional dependency, imported on use
    except ImportError as error:
        raise missing_extra("PostgresCommitStateStore", "psycopg", "postgres") from error
    return psycopg


def quote_identifier(name: str) -> str:
    """``name`` as a PostgreSQL identifier in a psycopg statement with parameters.

    Double-quoted, its quotes doubled, and its ``%`` written ``%%``.
    """
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'


def postgres_dialect(schema: str, where: str) -> Dialect:
    """The `Dialect` of ``schema`` of the database ``where`` names (see the module docstring).

    Statements run with parameters (an empty tuple if they have none), so that
    psycopg reads a ``%`` in the schema's name, written ``%%`` (`quote_identifier`),
    as itself.
    """
    return Dialect(
        where=where,
        shown_as=where,
        container="the table",
        param="%s",
        words={
            "schema": quote_identifier(schema) + ".",
            "for_update": " FOR UPDATE",
            "for_share": " FOR SHARE",
            "int64": "BIGINT",
            "float64": "DOUBLE PRECISION",
            "bytes": "BYTEA",
            "bool": "BOOLEAN",
            "empty_bytes": "'\\x'",
            "epoch_type": "BIGINT NOT NULL CHECK (epoch > 0)",
            "checkpoint_id_type": "BIGINT NOT NULL",
        },
        errors=(import_psycopg().Error,),
        holder_columns="holder_job_id, holder_pid, holder_host, holder_since",
        describe_holder=lambda values: str(Holder(*values)),
        transaction=lambda connection: cast("PgConnection", connection).transaction(),
        is_lost=_is_lost,
    )


def _is_lost(connection: Connection) -> bool:
    pg = cast("PgConnection", connection)
    return bool(pg.closed or pg.broken)


@final
class PostgresSinkLease(SqlSinkLease):
    """The `SqlSinkLease` of a connection holding an advisory lock on the sink id.

    The lock lives exactly as long as the connection, so a driver that dies (or
    whose connection is cut) lets go of the sink id. A lease whose connection is
    lost (the server restarted, the backend was terminated, the network failed)
    no longer holds the lock, and another driver may take the sink id over at
    once; the lease never reconnects. Its calls raise `CommitStateError` from then
    on; the driver must stop and be re-run.
    """

    def _prepare(self) -> None:
        self._backend_pid = int(cast("PgConnection", self._connection).info.backend_pid)

    @property
    def backend_pid(self) -> int:
        """The PostgreSQL backend process of this lease's connection (``pg_backend_pid()``)."""
        return self._backend_pid


def pg_hold(connection: PgConnection, lock_key: int) -> Hold:
    """What keeps an id of a PostgreSQL store: a connection holding an advisory lock."""
    backend_pid = int(connection.info.backend_pid)
    return Hold(
        connection=connection,
        release=functools.partial(_unlock_and_close, connection, lock_key),
        what="an advisory lock through a database connection",
        ship="the PostgresCommitStateStore (its settings)",
        shown=f" backend_pid={backend_pid}",
        connection_name=f"the lease's connection (backend pid {backend_pid})",
        lock_name="its advisory lock",
    )


def _unlock_and_close(connection: PgConnection, lock_key: int) -> None:
    """Unlock the sink id, then close the connection; never raises.

    The advisory lock is released explicitly before the connection closes: a
    closed connection's backend lets go of its locks only when it exits, a moment
    later, and an acquire in that moment would be refused.
    """
    # A lost connection holds nothing any more: errors here change nothing.
    with contextlib.suppress(Exception):
        if not connection.closed and not connection.broken:
            connection.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))
    with contextlib.suppress(Exception):
        connection.close()


def advance_fence(
    connection: PgConnection, dialect: Dialect, keyspace: Keyspace, key: str, job_id: str
) -> int:
    """Increment the id's fencing token and record this driver and session as its holder.

    One statement; the caller holds the id's advisory lock.

    Raises:
        psycopg.Error: The database refused it.
    """
    row = connection.execute(
        render(
            dialect,
            "INSERT INTO {schema}{fence} ({key}, fencing_token, holder_job_id, "
            "holder_pid, holder_host, holder_since, holder_backend_pid) "
            "VALUES (?, 1, ?, ?, ?, ?, pg_backend_pid()) "
            "ON CONFLICT ({key}) DO UPDATE SET "
            "fencing_token = {fence}.fencing_token + 1, "
            "holder_job_id = excluded.holder_job_id, "
            "holder_pid = excluded.holder_pid, holder_host = excluded.holder_host, "
            "holder_since = excluded.holder_since, "
            "holder_backend_pid = excluded.holder_backend_pid "
            "RETURNING fencing_token",
            fence=keyspace.fence,
            key=keyspace.key,
        ),
        (key, job_id, os.getpid(), socket.gethostname(), time.time()),
    ).fetchone()
    assert row is not None  # RETURNING always returns the row
    return int(row[0])


def _key(*parts: str) -> int:
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def sink_lock_key(schema: str, sink_id: str) -> int:
    """The session-level advisory lock key of ``sink_id`` in ``schema``: a signed int64."""
    return _key("sinkv2 sink", schema, sink_id)


def source_lock_key(schema: str, source_id: str) -> int:
    """The session-level advisory lock key of ``source_id`` in ``schema``: a signed int64."""
    return _key("sinkv2 source", schema, source_id)


def layout_lock_key(schema: str) -> int:
    """The transaction-level advisory lock key taken around creating ``schema``'s tables."""
    return _key("sinkv2 layout", schema)


def lock_ids(key: int) -> tuple[int, int]:
    """``(classid, objid)`` under which ``pg_locks`` shows the advisory lock on ``key``.

    A one-argument advisory lock on a bigint appears with its high 32 bits as
    ``classid``, its low 32 bits as ``objid``, and ``objsubid`` 1.
    """
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def _tables(connection: PgConnection, schema: str) -> set[str]:
    """Which of `TABLES` exist in ``schema``.

    Looked up by name: an index scan of ``pg_class``, however many other tables the
    database has (``schemaname`` alone has no index, and scans every relation).
    """
    rows = connection.execute(
        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
        (schema, list(TABLES)),
    ).fetchall()
    return {str(name) for (name,) in rows}


def read_layout(connection: PgConnection, dialect: Dialect, schema: str) -> int | None:
    """The layout version of ``schema``, or ``None`` if the store has no tables there.

    Raises:
        CommitStateError: The schema holds some of the store's tables but no layout
            row, or a layout this release neither reads nor migrates (newer than
            `LAYOUT_VERSION`, or older than `FIRST_LAYOUT`).
    """
    where = dialect.where
    tables = _tables(connection, schema)
    if LAYOUT_TABLE not in tables:
        ours = sorted(tables.intersection(TABLES))
        if ours:
            raise CommitStateError(
                f"{where} is not a commit state store: schema {schema!r} has the tables "
                f"{ours} but no {LAYOUT_TABLE!r} table with a sinkv2 layout version; point "
                "the store at another schema, or at the one your earlier runs used"
            )
        return None
    row = connection.execute(
        render(dialect, "SELECT version FROM {schema}sink_store_layout"), ()
    ).fetchone()
    if row is None:
        raise CommitStateError(
            f"{where}: the table {schema}.{LAYOUT_TABLE} is empty, so the layout of the "
            "store is unknown; it was changed by something other than sinkv2. Restore the "
            "schema from a backup: dropping it forgets which epochs were committed, so a "
            "re-run could commit them twice"
        )
    version = int(row[0])
    if not FIRST_LAYOUT <= version <= LAYOUT_VERSION:
        newer = version > LAYOUT_VERSION
        raise CommitStateError(
            f"{where} has layout version {version}, but this sinkv2 release reads layout "
            f"{LAYOUT_VERSION} only; "
            + (
                "it was written by a newer sinkv2: upgrade sinkv2 to read it, and never point "
                "an older release at it"
                if newer
                else "the schema was changed by something other than sinkv2"
            )
        )
    return version


def ensure_layout(connection: PgConnection, dialect: Dialect, schema: str) -> None:
    """Create the schema and its tables if missing, migrate an older layout; refuse a newer one.

    Concurrent first acquires (other processes, other hosts) are serialised by a
    transaction-level advisory lock on `layout_lock_key`: the first creates (or
    migrates) the tables, the others find them. ``CREATE SCHEMA`` runs only when the schema does
    not exist, so a role with CREATE on a schema an administrator made, but not on
    the database, can use it.

    Raises:
        CommitStateError: The tables are of another layout, or not the store's
            (see `read_layout`).
        psycopg.Error: The database refused a statement (e.g. no CREATE privilege).
    """
    if read_layout(connection, dialect, schema) == LAYOUT_VERSION:
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (layout_lock_key(schema),))
        version = read_layout(connection, dialect, schema)
        if version == LAYOUT_VERSION:
            return  # another process created or migrated them while this one waited
        if version is not None:
            _migrate(connection, dialect, version)
            return
        exists = connection.execute(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
        if exists is None:
            connection.execute("CREATE SCHEMA " + quote_identifier(schema), ())
        for statement in _tables_of(dialect):
            connection.execute(statement, ())
        connection.execute(
            render(dialect, "INSERT INTO {schema}sink_store_layout (version) VALUES (?)"),
            (LAYOUT_VERSION,),
        )


def _migrate(connection: PgConnection, dialect: Dialect, version: int) -> None:
    """Take the tables from layout ``version`` to `LAYOUT_VERSION`, in the caller's transaction.

    Layout 3 gets the sources' tables (layout 4), layout 4 the doors' results table
    (layout 5), empty; the sinks' rows are untouched.
    """
    steps = {3: source_tables(dialect, _FENCE_TABLE), 4: (render(dialect, RESULT_TABLE),)}
    for step in range(version, LAYOUT_VERSION):
        for statement in steps[step]:
            connection.execute(statement, ())
    connection.execute(
        render(dialect, "UPDATE {schema}sink_store_layout SET version = ?"), (LAYOUT_VERSION,)
    )


def _tables_of(dialect: Dialect) -> tuple[str, ...]:
    fence = render(dialect, _FENCE_TABLE, fence=SINKS.fence, key=SINKS.key)
    tables = (JOB_TABLE, ORIGIN_TABLE, _LAYOUT_TABLE)
    sinks = (render(dialect, EPOCH_TABLE), fence, *(render(dialect, table) for table in tables))
    return (*sinks, *source_tables(dialect, _FENCE_TABLE), render(dialect, RESULT_TABLE))
