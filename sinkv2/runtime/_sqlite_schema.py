"""The SQLite store's tables, how a file gets them, and its fencing-token counter.

Layouts are numbered in ``PRAGMA user_version``; a file of an older layout is
migrated in place when a store opens it, one of a newer layout is refused.
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
from typing import Final

from sinkv2.errors import CommitStateError
from sinkv2.runtime._sink_lock import Holder

__all__ = ["BUSY_TIMEOUT_S", "COLUMNS", "SCHEMA_VERSION", "advance_fence", "connect"]

SCHEMA_VERSION: Final = 3
"""The table layout this release writes and reads, kept in ``PRAGMA user_version``."""

BUSY_TIMEOUT_S: Final = 30.0

_JOB_TABLE: Final = """
    CREATE TABLE sink_job (
        sink_id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        fencing_token INTEGER NOT NULL,
        started_at REAL NOT NULL,
        PRIMARY KEY (sink_id, job_id)
    )
    """

_ORIGIN_TABLE: Final = """
    CREATE TABLE sink_origin (
        sink_id TEXT PRIMARY KEY NOT NULL,
        origin TEXT NOT NULL,
        bound_at REAL NOT NULL
    )
    """

_MIGRATIONS: Final = {
    1: (
        "ALTER TABLE pending_sink_state ADD COLUMN checkpoint_id INTEGER",
        _JOB_TABLE,
    ),
    2: (
        "ALTER TABLE pending_sink_state ADD COLUMN writer_states BLOB NOT NULL DEFAULT x''",
        _ORIGIN_TABLE,
    ),
}
"""Statements that take layout N to N + 1, run in one transaction when a store opens.

Layout 1 rows get ``checkpoint_id`` NULL, read as `default_checkpoint_id`; layout 2
rows get empty ``writer_states``."""

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
        checkpoint_id INTEGER,
        writer_states BLOB NOT NULL DEFAULT x'',
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
    _JOB_TABLE,
    _ORIGIN_TABLE,
)

COLUMNS: Final = (
    "sink_id, epoch, status, explicit, serializer_version, payload, fencing_token, job_id, "
    "updated_at, checkpoint_id, writer_states"
)


def connect(path: pathlib.Path) -> sqlite3.Connection:
    """A connection in autocommit mode, WAL, fully synchronous, with the tables in place."""
    connection: sqlite3.Connection | None = None
    try:
        connection = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
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


def _create(connection: sqlite3.Connection, path: pathlib.Path) -> None:
    tables = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )
    ]
    if tables:
        raise CommitStateError(
            f"{str(path)!r} is not a commit state database: it has tables {tables} but no "
            "sinkv2 layout version; point the store at a new file, or at the one your "
            "earlier runs used"
        )
    for statement in _SCHEMA:
        connection.execute(statement)


def _ensure_schema(connection: sqlite3.Connection, path: pathlib.Path) -> None:
    """Create the tables in a new file, migrate an older layout; refuse a newer one."""
    version = _user_version(connection)
    if 0 <= version < SCHEMA_VERSION:
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = _user_version(connection)  # another process may have just done it
            if version == 0:
                _create(connection, path)
                version = SCHEMA_VERSION
            while 0 < version < SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    connection.execute(statement)
                version += 1
            connection.execute(f"PRAGMA user_version = {version}")
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
        version = _user_version(connection)
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


def advance_fence(
    connection: sqlite3.Connection, path: pathlib.Path, sink_id: str, holder: Holder
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
