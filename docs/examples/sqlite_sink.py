"""A database sink: rows into a SQLite table, exactly once (staging tables, idempotent commit).

The example of the how-to "Write a database sink". Each writer attempt loads its rows
into a staging table of its own, named with its attempt token, in the target's
database: readers of the target never see them. The committable names the staging
table. The committer moves its rows into the target, records the move in the table
``sinkv2_committed`` and drops the staging table, all in one transaction, so a commit
happens entirely or not at all, and a replay finds the record and does nothing.
The clean-up and abort hooks drop staging tables that will never be committed.

SQLite is a file on one machine: this runs on local Spark (or any cluster whose
executors share that file system). A server database works the same way, with its
own connections instead of ``sqlite3.connect``.
"""

# --8<-- [start:values]
from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import sqlite3
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from sinkv2 import (
    AttrsMsgpackSerializer,
    CommitRequest,
    Committer,
    CommitterInitContext,
    CommittingSinkWriter,
    Sink,
    SinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    WriterInitContext,
)

Row = dict[str, Any]


def to_sqlite(value: Any) -> Any:
    """A Python value as the writer gets it from Spark, in a form ``sqlite3`` stores.

    ``sqlite3`` takes None, int (bool is one), float, str and bytes. Spark's decimals
    arrive as `decimal.Decimal` (a literal ``0.5`` is a ``decimal(1,1)``), which it
    refuses: store the exact digits as text. Dates and datetimes go as ISO text, a
    day-time interval as seconds, arrays, maps and structs as JSON.
    """
    if value is None or isinstance(value, int | float | str | bytes):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):  # datetime is a date too
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, list | dict):
        return json.dumps(value, default=str, sort_keys=True)
    raise TypeError(f"no SQLite form for {value!r} of type {type(value).__name__}")


# --8<-- [end:values]


@contextlib.contextmanager
def connect(database: str) -> Iterator[sqlite3.Connection]:
    """A connection that waits for other writers' transactions instead of failing.

    Autocommit: each transaction is an explicit ``BEGIN IMMEDIATE`` ... ``COMMIT``,
    rolled back if anything in it raises.
    """
    connection = sqlite3.connect(database, timeout=60, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")  # readers do not block writers
        yield connection
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        connection.close()


def quoted(name: str) -> str:
    """``name`` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


# --8<-- [start:sink]
@attrs.frozen
class StagingTable:
    """The committable: a staging table holding one writer attempt's rows."""

    name: str
    rows: int


COMMITTED = "sinkv2_committed"  # one row per staging table moved into the target


class SqliteWriter(CommittingSinkWriter[Row, StagingTable]):
    """Buffers rows; loads them into ``stage_<attempt token>_<n>`` on prepare_commit."""

    def __init__(self, sink: SqliteSink, context: WriterInitContext) -> None:
        self._sink = sink
        self._token = context.get_attempt_token()
        self._rows: list[Row] = []
        self._sequence = 0

    def write(self, element: Row, context: SinkWriter.Context) -> None:
        """Keep ``element`` for the next staging table."""
        self._rows.append(element)

    def flush(self, end_of_input: bool) -> None:
        """Nothing to do: rows are loaded in one transaction by prepare_commit."""

    def prepare_commit(self) -> Collection[StagingTable]:
        """Load the buffered rows into a new staging table; it is the committable."""
        if not self._rows:
            return []
        name = f"stage_{self._token}_{self._sequence}"
        columns = list(self._rows[0])
        with connect(self._sink.database) as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                f"CREATE TABLE {quoted(name)} AS SELECT * FROM {quoted(self._sink.table)} "
                "WHERE 0"  # the target's columns, no rows
            )
            connection.executemany(
                f"INSERT INTO {quoted(name)} ({', '.join(map(quoted, columns))}) "
                f"VALUES ({', '.join('?' * len(columns))})",
                ([to_sqlite(row[c]) for c in columns] for row in self._rows),
            )
            connection.execute("COMMIT")
        staged = StagingTable(name=name, rows=len(self._rows))
        self._rows, self._sequence = [], self._sequence + 1
        return [staged]

    def close(self) -> None:
        """Nothing open between calls."""


class SqliteCommitter(Committer[StagingTable]):
    """Moves each staging table into the target in one transaction; a replay is a no-op."""

    def __init__(self, sink: SqliteSink) -> None:
        self._sink = sink

    def commit(self, requests: Collection[CommitRequest[StagingTable]]) -> None:
        """Move every staging table's rows, or recognise it as moved before."""
        target = quoted(self._sink.table)
        with connect(self._sink.database) as connection:
            for request in requests:
                stage = request.get_committable().name
                connection.execute("BEGIN IMMEDIATE")
                done = connection.execute(
                    f"SELECT 1 FROM {COMMITTED} WHERE stage = ?", (stage,)
                ).fetchone()
                exists = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (stage,)
                ).fetchone()
                if done:
                    connection.execute("ROLLBACK")
                    request.signal_already_committed()  # a replay after a failure
                elif not exists:
                    connection.execute("ROLLBACK")
                    request.signal_failed_with_unknown_reason(
                        LookupError(f"staging table {stage} is gone and was never committed")
                    )
                else:
                    connection.execute(f"INSERT INTO {target} SELECT * FROM {quoted(stage)}")
                    connection.execute(f"INSERT INTO {COMMITTED} (stage) VALUES (?)", (stage,))
                    connection.execute(f"DROP TABLE {quoted(stage)}")
                    connection.execute("COMMIT")

    def close(self) -> None:
        """Nothing to release."""


class SqliteSink(
    Sink[Row],
    SupportsCommitter[StagingTable],
    SupportsAttemptCleanup,
    SupportsAbort[StagingTable],
):
    """Rows into ``table`` of the SQLite file ``database``, exactly once."""

    def __init__(self, database: str | Path, table: str) -> None:
        self.database = str(Path(database).resolve())
        self.table = table
        with connect(self.database) as connection:
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {COMMITTED} (stage TEXT PRIMARY KEY)"
            )

    def create_writer(self, context: WriterInitContext) -> SqliteWriter:
        """A writer for one attempt of one subtask."""
        return SqliteWriter(self, context)

    def create_committer(self, context: CommitterInitContext) -> SqliteCommitter:
        """The committer that moves staging tables into the target."""
        return SqliteCommitter(self)

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[StagingTable]:
        """Committables travel and are stored as msgpack, version 1."""
        return AttrsMsgpackSerializer(StagingTable, version=1)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Drop the staging tables of ``job_id``'s attempts, except the kept ones'."""
        kept = tuple(f"stage_{token}_" for token in kept_attempt_tokens)
        self._drop(
            name
            for name in self._staging_tables(f"stage_{job_id}-")
            if not name.startswith(kept)
        )

    def abort(self, committables: Collection[StagingTable]) -> None:
        """Drop the staging tables of an epoch never to be committed (moved ones are gone)."""
        self._drop(committable.name for committable in committables)

    def _staging_tables(self, prefix: str) -> list[str]:
        with connect(self.database) as connection:
            rows = connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ?",
                (len(prefix), prefix),
            ).fetchall()
        return [name for (name,) in rows]

    def _drop(self, names: Iterable[str]) -> None:
        with connect(self.database) as connection:
            for name in names:
                connection.execute(f"DROP TABLE IF EXISTS {quoted(name)}")


# --8<-- [end:sink]
