"""The snapshot a CDC source starts with: the table as of its slot's consistent point.

Flink CDC's incremental snapshot reads each chunk of the live table between a low and a
high watermark of the log, and its readers report each chunk's high watermark to the
enumerator so that the stream skips what the chunk already holds. Neither works on
Spark: a task cannot report back to the driver, and a replayed micro-batch must read
the same rows, which a second ``SELECT`` of a live table does not give.

The equivalent here is exact by construction. The slot is created over a replication
connection with ``SNAPSHOT 'export'``: PostgreSQL hands out the snapshot of the slot's
consistent point, in which every transaction committed before the point is visible
and none after it. Inside that snapshot the table is copied once into a (logged)
table with a row number (``sinkv2_row``); chunks are ranges of row numbers of the copy,
so a replayed chunk reads the same rows. Every change the slot then decodes committed
after the point: each row is in the snapshot or in the stream, never both, never
neither. The copy is dropped once the epochs that read it are acknowledged (and, if a
crash left it, when the query starts again).

The copy is a logged table, committed with ``synchronous_commit = on`` before the first
epoch is recorded: it survives a server crash as the slot does. An UNLOGGED copy would
be emptied by crash recovery, and the snapshot could not be taken again - the slot's
consistent point is the only snapshot whose changes the slot follows, and it is gone
once the slot was created. The price is the copy's WAL: written once, and decoded by
the slot (a transaction after its consistent point, with no change of the table) on
the first stream micro-batches until the slot has advanced past it. `read_chunk` still
counts the rows of each range and refuses to go on with fewer (a copy changed by hand).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reference_sinks.postgres._cdc_server import PLUGIN, parse_lsn
from sinkv2.errors import CommitStateError, SinkConfigurationError

if TYPE_CHECKING:
    import psycopg

__all__ = ["copy_name", "drop_copy", "read_chunk", "row_filter", "snapshot_into_copy"]

_NAME_LIMIT = 63  # PostgreSQL's NAMEDATALEN - 1


def copy_name(slot: str) -> str:
    """The copy of the snapshot of ``slot``: a table name of at most 63 bytes.

    A slot name is itself up to 63 bytes; past 51 the name keeps the slot's first 42
    characters and a hash of the whole, so two slots sharing a long prefix never share
    (and drop) one copy.
    """
    name = f"sinkv2_snap_{slot}"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(slot.encode()).hexdigest()[:8]
    return f"{name[: _NAME_LIMIT - len(digest) - 1]}_{digest}"


def row_filter(
    connection: psycopg.Connection[Any], publication: str, schema: str, table: str
) -> str | None:
    """The publication's row filter of the table (``FOR TABLE t WHERE (...)``), if any.

    Its changes are those of the rows the filter keeps (an update that moves a row out
    of it is sent as a delete, into it as an insert), so the snapshot holds those rows.
    """
    if connection.info.server_version < 150000:  # row filters came with PostgreSQL 15
        return None
    row = connection.execute(
        "SELECT rowfilter FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
        "AND tablename = %s",
        (publication, schema, table),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def snapshot_into_copy(
    conninfo: str, slot: str, schema: str, table: str, *, where: str | None = None
) -> tuple[int, int]:
    """Create ``slot`` exporting its snapshot, and copy the table in that snapshot.

    ``where``: the publication's row filter (`row_filter`): only the rows it keeps.

    Returns:
        The slot's consistent point, and how many rows the copy holds.

    Raises:
        SinkConfigurationError: The server refused to create the slot, or the copy
            could not be made (the role cannot create a table in its current schema,
            or cannot read the table, ...): then the slot is dropped again, so that
            nothing is left behind holding WAL.
    """
    import psycopg  # noqa: PLC0415  # optional extra
    from psycopg import pq, sql  # noqa: PLC0415

    copy = copy_name(slot)
    with psycopg.connect(conninfo, application_name="sinkv2-cdc") as connection:
        _check_can_copy(connection, copy, f"{schema}.{table}")
        connection.rollback()
        with psycopg.connect(
            conninfo, autocommit=True, replication="database", application_name="sinkv2-cdc"
        ) as replication:
            command = f"CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL {PLUGIN} (SNAPSHOT 'export')"
            result = replication.pgconn.exec_(command.encode())
            if result.status != pq.ExecStatus.TUPLES_OK:
                message = (result.error_message or b"").decode(errors="replace").strip()
                raise SinkConfigurationError(
                    f"creating replication slot {slot!r} failed: {message}. Free a slot "
                    "(max_replication_slots) or name another one"
                )
            point, snapshot = result.get_value(0, 1), result.get_value(0, 2)
            assert point is not None
            assert snapshot is not None
            # the snapshot lives while the replication connection stays idle: copy now
            try:
                connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                connection.execute(
                    sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot.decode()))
                )
                # durable before the enumerator hands out a chunk: a crash keeps it
                connection.execute("SET LOCAL synchronous_commit = on")
                filtered = sql.SQL("") if where is None else sql.SQL(" WHERE " + where)
                connection.execute(
                    sql.SQL(
                        "CREATE TABLE {} AS SELECT row_number() OVER () AS sinkv2_row, t.* "
                        "FROM {} t{}"
                    ).format(sql.Identifier(copy), sql.Identifier(schema, table), filtered)
                )
                row = connection.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(copy))
                ).fetchone()
                connection.commit()
            except psycopg.Error as error:
                connection.rollback()
                dropped = replication.pgconn.exec_(f'DROP_REPLICATION_SLOT "{slot}"'.encode())
                left = (
                    "The slot was dropped again"
                    if dropped.status == pq.ExecStatus.COMMAND_OK
                    else f"Drop the slot (SELECT pg_drop_replication_slot('{slot}'))"
                )
                raise SinkConfigurationError(
                    f"snapshot=True copies table {schema}.{table} into a table {copy!r} in "
                    f"the connection's current schema, as of slot {slot!r}'s snapshot, and "
                    f"that failed: {str(error).strip()}. {left}; fix the cause and start "
                    "the query again"
                ) from error
    return parse_lsn(point.decode()), int(row[0] if row else 0)


def _check_can_copy(connection: psycopg.Connection[Any], copy: str, table: str) -> None:
    """The role can create the copy in its current schema: else a clear error, before a slot.

    Raises:
        SinkConfigurationError: There is no current schema, or the role may not
            create tables in it.
    """
    row = connection.execute(
        "SELECT current_schema(), current_user, has_schema_privilege(current_schema(), 'CREATE')"
    ).fetchone()
    assert row is not None
    schema, role, allowed = row
    if schema is None:
        raise SinkConfigurationError(
            f"snapshot=True copies table {table} into a table {copy!r} in the connection's "
            "current schema, but its search_path names no schema that exists; set one "
            "(ALTER ROLE ... SET search_path = ...) or read without a snapshot"
        )
    if not allowed:
        raise SinkConfigurationError(
            f"snapshot=True copies table {table} into a table {copy!r} in the connection's "
            f"current schema {schema!r}, where role {role!r} may not create tables; grant it "
            f'(GRANT CREATE ON SCHEMA "{schema}" TO "{role}"), set a search_path whose first '
            "schema it may create in, or read without a snapshot"
        )


def read_chunk(
    connection: psycopg.Connection[Any],
    slot: str,
    names: Sequence[str],
    low: int,
    high: int,
    *,
    oids: Sequence[int] = (),
) -> list[tuple[int, tuple[bytes | None, ...]]]:
    """Rows ``(low, high]`` of the copy: ``(row number, each column's text)``.

    Each value is its type's output text, as pgoutput writes the stream's (a cast to
    ``text`` is not always that: ``char(n)`` loses its padding, ``inet`` gains a
    ``/32``); ``oids`` are the types the columns come as (any other is read as
    psycopg loads it, then as its ``str``). The copy's rows are numbered 1..N
    without gaps, so the range holds exactly ``high - low`` rows; fewer means the copy
    lost rows.

    Raises:
        SinkConfigurationError: The copy is gone (dropped by hand before its epochs
            were acknowledged).
        CommitStateError: The copy holds fewer rows than the range: it was changed
            by hand (or an older version's UNLOGGED copy was emptied by a crash).
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra
    from psycopg.adapt import Loader  # noqa: PLC0415

    class _Text(Loader):
        def load(self, data: Any) -> bytes:
            return bytes(data)

    columns = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    query = sql.SQL(
        "SELECT sinkv2_row, {} FROM {} WHERE sinkv2_row > %s AND sinkv2_row <= %s "
        "ORDER BY sinkv2_row"
    ).format(columns, sql.Identifier(copy_name(slot)))
    cursor = connection.cursor()
    for oid in set(oids):
        cursor.adapters.register_loader(oid, _Text)
    try:
        rows = cursor.execute(query, (low, high)).fetchall()
    except Exception as error:
        if getattr(error, "sqlstate", None) == "42P01":  # undefined_table
            raise SinkConfigurationError(
                f"the snapshot copy {copy_name(slot)!r} of slot {slot!r} is gone before its "
                "rows were all read and acknowledged; start over under a new source_id"
            ) from error
        raise
    if len(rows) != high - low:
        raise CommitStateError(
            f"the snapshot copy {copy_name(slot)!r} of slot {slot!r} holds {len(rows)} of its "
            f"rows {low + 1}..{high}: rows were deleted from it by hand (or it is an UNLOGGED "
            "copy of an older version, emptied by a server crash), so the snapshot is lost. "
            "Refusing to skip the rows; start over under a new source_id and slot, and "
            "reload the target"
        )
    return [
        (
            int(row[0]),
            tuple(v if v is None or isinstance(v, bytes) else str(v).encode() for v in row[1:]),
        )
        for row in rows
    ]


def drop_copy(connection: psycopg.Connection[Any], slot: str) -> None:
    """Drop the snapshot copy of ``slot`` if it exists."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(copy_name(slot))))
