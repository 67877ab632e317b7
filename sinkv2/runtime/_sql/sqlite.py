"""SQLite's dialect, how a file gets the tables, and its fencing-token counter.

Layouts are numbered in ``PRAGMA user_version``; a file of an older layout is
migrated in place when a store opens it, one of a newer layout is refused. A
write transaction is ``BEGIN IMMEDIATE``: it locks the whole file, so no row
needs ``FOR UPDATE``. The fence row keeps its holder as JSON (`Holder.to_json`).
"""

from __future__ import annotations

import contextlib
import functools
import pathlib
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Final

from sinkv2.errors import CommitStateError
from sinkv2.runtime._sql.dialect import Connection, Dialect, describe_error, render
from sinkv2.runtime._sql.fence import Hold, Holder, Keyspace, describe_holder
from sinkv2.runtime._sql.file_lock import drop_lock
from sinkv2.runtime._sql.schema import (
    EPOCH_TABLE,
    JOB_TABLE,
    ORIGIN_TABLE,
    RESULT_TABLE,
    SINKS,
    source_tables,
)

__all__ = ["BUSY_TIMEOUT_S", "SCHEMA_VERSION", "advance_fence", "connect", "hold", "sqlite_dialect"]

SCHEMA_VERSION: Final = 5
"""The table layout this release writes and reads, kept in ``PRAGMA user_version``."""

BUSY_TIMEOUT_S: Final = 30.0

_WORDS: Final[Mapping[str, str]] = {
    "schema": "",
    "for_update": "",
    "for_share": "",
    "int64": "INTEGER",
    "float64": "REAL",
    "bytes": "BLOB",
    "bool": "INTEGER",
    "empty_bytes": "x''",
    "epoch_type": "INTEGER NOT NULL",
    "checkpoint_id_type": "INTEGER",
}

_FENCE_TABLE: Final = """
    CREATE TABLE {schema}{fence} (
        {key} TEXT PRIMARY KEY NOT NULL,
        fencing_token INTEGER NOT NULL,
        holder TEXT NOT NULL
    )
    """


def sqlite_dialect(path: pathlib.Path) -> Dialect:
    """The `Dialect` of the SQLite file ``path`` (see the module docstring)."""
    return Dialect(
        where=f"commit state database {str(path)!r}",
        shown_as=repr(str(path)),
        container="the file",
        param="?",
        words=_WORDS,
        errors=(sqlite3.Error,),
        holder_columns="holder",
        describe_holder=lambda values: describe_holder(Holder.load(str(values[0]))),
        transaction=_immediate,
        is_lost=lambda _: False,  # a file does not go away under an open connection
    )


@contextlib.contextmanager
def _immediate(connection: Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ``ROLLBACK`` on an error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")
        raise


def hold(connection: sqlite3.Connection, lock_fd: int) -> Hold:
    """What keeps an id of a SQLite store: a connection and a ``flock``."""
    return Hold(
        connection=connection,
        release=functools.partial(_close, connection, lock_fd),
        what="an OS lock and a database connection",
        ship="the SqliteCommitStateStore (a path)",
    )


def _close(connection: sqlite3.Connection, lock_fd: int) -> None:
    try:
        connection.close()
    finally:
        drop_lock(lock_fd)


def _tables(dialect: Dialect) -> tuple[str, ...]:
    fence = render(dialect, _FENCE_TABLE, fence=SINKS.fence, key=SINKS.key)
    return (
        render(dialect, EPOCH_TABLE),
        fence,
        render(dialect, JOB_TABLE),
        render(dialect, ORIGIN_TABLE),
        *source_tables(dialect, _FENCE_TABLE),
        render(dialect, RESULT_TABLE),
    )


def _migrations(dialect: Dialect) -> Mapping[int, tuple[str, ...]]:
    """Statements that take layout N to N + 1, run in one transaction when a store opens.

    Layout 1 rows get ``checkpoint_id`` NULL, read as `default_checkpoint_id`; layout 2
    rows get empty ``writer_states``; layout 3 gets the sources' tables, empty;
    layout 4 gets the doors' results table, empty.
    """
    return {
        1: (
            "ALTER TABLE pending_sink_state ADD COLUMN checkpoint_id INTEGER",
            render(dialect, JOB_TABLE),
        ),
        2: (
            "ALTER TABLE pending_sink_state ADD COLUMN writer_states BLOB NOT NULL DEFAULT x''",
            render(dialect, ORIGIN_TABLE),
        ),
        3: source_tables(dialect, _FENCE_TABLE),
        4: (render(dialect, RESULT_TABLE),),
    }


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


def _create(connection: sqlite3.Connection, path: pathlib.Path, dialect: Dialect) -> None:
    tables = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )
    ]
    if tables:
        raise CommitStateError(
            f"{str(path)!r} is not a commit state database: it has tables {tables} but "
            "no sinkv2 layout version; point the store at a new file, or at the one your "
            "earlier runs used"
        )
    for statement in _tables(dialect):
        connection.execute(statement)


def _ensure_schema(connection: sqlite3.Connection, path: pathlib.Path) -> None:
    """Create the tables in a new file, migrate an older layout; refuse a newer one."""
    dialect = sqlite_dialect(path)
    version = _user_version(connection)
    if 0 <= version < SCHEMA_VERSION:
        with dialect.transaction(connection):
            version = _user_version(connection)  # another process may have just done it
            if version == 0:
                _create(connection, path, dialect)
                version = SCHEMA_VERSION
            while 0 < version < SCHEMA_VERSION:
                for statement in _migrations(dialect)[version]:
                    connection.execute(statement)
                version += 1
            connection.execute(f"PRAGMA user_version = {version}")
        version = _user_version(connection)
    if version != SCHEMA_VERSION:
        newer = version > SCHEMA_VERSION
        raise CommitStateError(
            f"{dialect.where} has layout version {version}, but this "
            f"sinkv2 release reads layout {SCHEMA_VERSION} only; "
            + (
                "it was written by a newer sinkv2: upgrade sinkv2 to read it, and never point "
                "an older release at it"
                if newer
                else "the file was changed by something other than sinkv2"
            )
        )


def advance_fence(
    connection: sqlite3.Connection,
    dialect: Dialect,
    keyspace: Keyspace,
    key: str,
    holder: Holder,
) -> int:
    """Increment the id's fencing token and record the holder, in one transaction."""
    try:
        with dialect.transaction(connection):
            row = connection.execute(
                render(
                    dialect,
                    "SELECT fencing_token FROM {fence} WHERE {key} = ?",
                    fence=keyspace.fence,
                    key=keyspace.key,
                ),
                (key,),
            ).fetchone()
            token = (0 if row is None else int(row[0])) + 1
            connection.execute(
                render(
                    dialect,
                    "INSERT INTO {fence} ({key}, fencing_token, holder) VALUES (?, ?, ?) "
                    "ON CONFLICT ({key}) DO UPDATE SET fencing_token = excluded.fencing_token, "
                    "holder = excluded.holder",
                    fence=keyspace.fence,
                    key=keyspace.key,
                ),
                (key, token, holder.to_json()),
            )
    except sqlite3.Error as error:
        raise CommitStateError(
            f"{dialect.where}: could not take {keyspace.noun} {key!r}: "
            f"{describe_error(error)}; nothing was written"
        ) from error
    return token
