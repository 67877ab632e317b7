"""The PostgreSQL store's tables, how a schema gets them, its locks and its connections.

The tables mirror the SQLite store's layout 3 (``_sqlite_schema``) in one
PostgreSQL schema (``sinkv2`` by default), plus ``sink_store_layout``: one row
holding the layout version, the counterpart of SQLite's ``PRAGMA user_version``.
Layouts 1 and 2 never existed in PostgreSQL; the numbers are shared so that one
number means one set of semantics in either store.

Two kinds of advisory lock keys, both 64-bit and derived with SHA-256 so that
every process computes the same ones:

- `layout_lock_key` (``"sinkv2 layout"``, schema): a transaction-level lock taken
  around creating the tables, so that concurrent first acquires do not race;
- `sink_lock_key` (``"sinkv2 sink"``, schema, sink id): the session-level lock a
  lease holds on its sink id for as long as its connection lives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from sinkv2._text import missing_extra
from sinkv2.errors import CommitStateError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "COLUMNS",
    "CONNECT_DEFAULTS",
    "LAYOUT_TABLE",
    "LAYOUT_VERSION",
    "TABLES",
    "Connection",
    "ensure_layout",
    "import_psycopg",
    "layout_lock_key",
    "lock_ids",
    "read_layout",
    "sink_lock_key",
]

LAYOUT_VERSION: Final = 3
"""The table layout this release writes and reads, kept in ``sink_store_layout``."""

LAYOUT_TABLE: Final = "sink_store_layout"

TABLES: Final = ("pending_sink_state", "sink_fence", "sink_job", "sink_origin", LAYOUT_TABLE)
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

COLUMNS: Final = (
    "sink_id, epoch, status, explicit, serializer_version, payload, fencing_token, job_id, "
    "updated_at, checkpoint_id, writer_states"
)

_DDL: Final = (
    """
    CREATE TABLE {schema}.pending_sink_state (
        sink_id TEXT NOT NULL,
        epoch BIGINT NOT NULL CHECK (epoch > 0),
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit BOOLEAN NOT NULL,
        serializer_version BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        fencing_token BIGINT NOT NULL,
        job_id TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        checkpoint_id BIGINT NOT NULL,
        writer_states BYTEA NOT NULL DEFAULT '\\x',
        PRIMARY KEY (sink_id, epoch)
    )
    """,
    """
    CREATE TABLE {schema}.sink_fence (
        sink_id TEXT PRIMARY KEY,
        fencing_token BIGINT NOT NULL,
        holder_job_id TEXT NOT NULL,
        holder_pid BIGINT NOT NULL,
        holder_host TEXT NOT NULL,
        holder_since DOUBLE PRECISION NOT NULL,
        holder_backend_pid INTEGER NOT NULL
    )
    """,
    """
    CREATE TABLE {schema}.sink_job (
        sink_id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        fencing_token BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (sink_id, job_id)
    )
    """,
    """
    CREATE TABLE {schema}.sink_origin (
        sink_id TEXT PRIMARY KEY,
        origin TEXT NOT NULL,
        bound_at DOUBLE PRECISION NOT NULL
    )
    """,
    """
    CREATE TABLE {schema}.sink_store_layout (
        singleton BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
        version INTEGER NOT NULL
    )
    """,
)

if TYPE_CHECKING:
    Connection = psycopg.Connection[tuple[Any, ...]]
else:
    Connection = Any


def import_psycopg() -> Any:
    """``psycopg``, imported now; an ImportError with the install line if it is missing."""
    try:
        import psycopg  # noqa: PLC0415  # an optional dependency, imported on use
    except ImportError as error:
        raise missing_extra("PostgresCommitStateStore", "psycopg", "postgres") from error
    return psycopg


def _key(*parts: str) -> int:
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def sink_lock_key(schema: str, sink_id: str) -> int:
    """The session-level advisory lock key of ``sink_id`` in ``schema``: a signed int64."""
    return _key("sinkv2 sink", schema, sink_id)


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


def _tables(connection: Connection, schema: str) -> set[str]:
    rows = connection.execute(
        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s", (schema,)
    ).fetchall()
    return {str(name) for (name,) in rows}


def read_layout(connection: Connection, schema: str, where: str) -> int | None:
    """The layout version of ``schema``, or ``None`` if the store has no tables there.

    Raises:
        CommitStateError: The schema holds some of the store's tables but no layout
            row, or a layout other than `LAYOUT_VERSION`.
    """
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
    psycopg = import_psycopg()
    row = connection.execute(
        psycopg.sql.SQL("SELECT version FROM {}.sink_store_layout").format(
            psycopg.sql.Identifier(schema)
        )
    ).fetchone()
    if row is None:
        raise CommitStateError(
            f"{where}: the table {schema}.{LAYOUT_TABLE} is empty, so the layout of the "
            "store is unknown; it was changed by something other than sinkv2. Restore the "
            "schema from a backup: dropping it forgets which epochs were committed, so a "
            "re-run could commit them twice"
        )
    version = int(row[0])
    if version != LAYOUT_VERSION:
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


def ensure_layout(connection: Connection, schema: str, where: str) -> None:
    """Create the schema and its tables if they are missing; refuse another layout.

    Concurrent first acquires (other processes, other hosts) are serialised by a
    transaction-level advisory lock on `layout_lock_key`: the first creates the
    tables, the others find them. ``CREATE SCHEMA`` runs only when the schema does
    not exist, so a role with CREATE on a schema an administrator made, but not on
    the database, can use it.

    Raises:
        CommitStateError: The tables are of another layout, or not the store's
            (see `read_layout`).
        psycopg.Error: The database refused a statement (e.g. no CREATE privilege).
    """
    if read_layout(connection, schema, where) is not None:
        return
    psycopg = import_psycopg()
    identifier = psycopg.sql.Identifier(schema)
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (layout_lock_key(schema),))
        if read_layout(connection, schema, where) is not None:
            return  # another process created them while this one waited
        exists = connection.execute(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
        if exists is None:
            connection.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(identifier))
        for statement in _DDL:
            connection.execute(psycopg.sql.SQL(statement).format(schema=identifier))
        connection.execute(
            psycopg.sql.SQL("INSERT INTO {}.sink_store_layout (version) VALUES (%s)").format(
                identifier
            ),
            (LAYOUT_VERSION,),
        )
