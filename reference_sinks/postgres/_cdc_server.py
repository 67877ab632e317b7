"""What change data capture asks of the server: its settings, the publication, the slot.

Every check here runs on the driver before anything is read, and each failure is a
`SinkConfigurationError` (a setting, a privilege, a publication) or a
`CommitStateError` (a slot that is gone, invalidated, or already past the position
the query must read from) naming the setting or the slot and the LSN, and what to do.
Nothing here creates or moves a slot silently: `create_slot` is called only when the
source was told to make its slot, and `advance_slot` only from the enumerator's
``notify_checkpoint_complete``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from reference_sinks.postgres._table import TableName
from sinkv2.errors import CommitStateError, SinkConfigurationError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "SlotState",
    "advance_slot",
    "check_server",
    "check_slot",
    "create_slot",
    "drop_slot",
    "flush_lsn",
    "format_lsn",
    "lock_slot",
    "parse_lsn",
    "peek_changes",
    "qualified_table",
    "slot_state",
    "unpublished_columns",
]

PLUGIN: Final = "pgoutput"
_BUSY_WAIT_S: Final = 30.0  # a slot another backend holds a moment (a peek, an advance)
_FETCH: Final = 5000  # messages fetched from the server-side cursor at a time


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` as an int."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(lsn: int) -> str:
    """An int LSN as PostgreSQL prints it, ``'16/B374D848'``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def qualified_table(connection: psycopg.Connection[Any], table: TableName) -> tuple[str, str, int]:
    """``(schema, name, oid)`` of ``table`` as the server resolves it.

    Raises:
        SinkConfigurationError: No such table.
    """
    quoted = table.sql().as_string(connection)
    row = connection.execute(
        "SELECT n.nspname, c.relname, c.oid FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
        (quoted,),
    ).fetchone()
    if row is None:
        raise SinkConfigurationError(
            f"PostgreSQL table {str(table)!r} does not exist in database "
            f"{connection.info.dbname!r} (looked up as {quoted}); name an existing table"
        )
    return str(row[0]), str(row[1]), int(row[2])


def check_server(
    connection: psycopg.Connection[Any],
    table: TableName,
    publication: str,
    *,
    create_publication: bool,
    needs_full_identity: bool,
) -> None:
    """Check ``wal_level``, the role's replication privilege and the publication.

    With ``create_publication``, a missing publication is created for the table
    alone (inserts, updates and deletes; no truncates). A publication that exists
    but does not cover the table is never altered: that is the owner's decision.

    Raises:
        SinkConfigurationError: A requirement is not met; the message names the
            setting and how to meet it.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    database = connection.info.dbname
    level = connection.execute("SHOW wal_level").fetchone()
    if level is None or level[0] != "logical":
        raise SinkConfigurationError(
            f"change data capture needs wal_level = logical, but the server of database "
            f"{database!r} has wal_level = {level[0] if level else None!r}. Set wal_level = "
            "logical in postgresql.conf (and max_replication_slots, max_wal_senders > 0) "
            "and restart the server"
        )
    slots = connection.execute("SHOW max_replication_slots").fetchone()
    if slots is None or int(slots[0]) == 0:
        raise SinkConfigurationError(
            f"change data capture needs a replication slot, but max_replication_slots is 0 "
            f"on the server of database {database!r}; set it in postgresql.conf and restart"
        )
    role = connection.execute(
        "SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if role is None or not role[1]:
        user = role[0] if role else "?"
        raise SinkConfigurationError(
            f"change data capture reads a replication slot, which needs the REPLICATION "
            f"privilege (or superuser), and role {user!r} has neither; grant it: ALTER ROLE "
            f'"{user}" WITH REPLICATION'
        )
    schema, name, oid = qualified_table(connection, table)
    if needs_full_identity:
        identity = connection.execute(
            "SELECT relreplident FROM pg_class WHERE oid = %s", (oid,)
        ).fetchone()
        if identity is None or identity[0] != "f":
            raise SinkConfigurationError(
                f"before=True needs the whole old row of every update and delete, which "
                f"PostgreSQL logs only with REPLICA IDENTITY FULL; table {schema}.{name} has "
                f"replica identity {identity[0] if identity else '?'!r} (d: primary key). Run "
                f'ALTER TABLE "{schema}"."{name}" REPLICA IDENTITY FULL, or read without before'
            )
    kind = connection.execute(
        "SELECT c.relkind, c.relreplident, EXISTS (SELECT 1 FROM pg_index i "
        "WHERE i.indrelid = c.oid AND i.indisprimary) FROM pg_class c WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    partitioned = kind is not None and kind[0] == "p"
    keyless = kind is not None and (kind[1] == "n" or (kind[1] == "d" and not kind[2]))
    no_identity = (
        f"table {schema}.{name} has no replica identity (no primary key, and REPLICA "
        f"IDENTITY {'NOTHING' if kind and kind[1] == 'n' else 'DEFAULT'}): PostgreSQL cannot "
        "log which row an update or delete changed, and refuses the table's UPDATE and "
        "DELETE statements once a publication publishes them. Give it one (a primary key, "
        f'or ALTER TABLE "{schema}"."{name}" REPLICA IDENTITY FULL or USING INDEX ...), or '
        "read its inserts only through a publication of them (CREATE PUBLICATION ... WITH "
        "(publish = 'insert'))"
    )
    # pgoutput sends a partitioned table's changes as its partitions' unless the
    # publication publishes them via the root: the source matches changes by the table.
    via_root = ", publish_via_partition_root = true" if partitioned else ""
    found = connection.execute(
        "SELECT puballtables, pubviaroot, pubupdate OR pubdelete FROM pg_publication "
        "WHERE pubname = %s",
        (publication,),
    ).fetchone()
    if found is None:
        if create_publication and keyless:
            raise SinkConfigurationError(
                f"create_publication=True would publish the updates and deletes of a table "
                f"without a replica identity: {no_identity}"
            )
        if not create_publication:
            raise SinkConfigurationError(
                f"publication {publication!r} does not exist in database {database!r}; create "
                f'it (CREATE PUBLICATION "{publication}" FOR TABLE "{schema}"."{name}"'
                f"{' WITH (publish_via_partition_root = true)' if partitioned else ''}) or pass "
                "create_publication=True to have the source create it"
            )
        connection.execute(
            sql.SQL(
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, update, delete, "
                "truncate'" + via_root + ")"
            ).format(sql.Identifier(publication), sql.Identifier(schema, name))
        )
        return
    if keyless and found[2]:
        raise SinkConfigurationError(
            f"publication {publication!r} publishes updates or deletes: {no_identity}"
        )
    if partitioned and not found[1]:
        raise SinkConfigurationError(
            f"table {schema}.{name} is partitioned, and publication {publication!r} sends its "
            "changes as changes of its partitions, which PostgresCdcSource does not read as "
            f'the table\'s; publish them via the root (ALTER PUBLICATION "{publication}" SET '
            "(publish_via_partition_root = true)) or name another publication"
        )
    covers = connection.execute(
        "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
        "AND tablename = %s",
        (publication, schema, name),
    ).fetchone()
    if covers is None:
        raise SinkConfigurationError(
            f"publication {publication!r} does not cover table {schema}.{name}; add it "
            f'(ALTER PUBLICATION "{publication}" ADD TABLE "{schema}"."{name}") or name '
            "another publication"
        )


def unpublished_columns(
    connection: psycopg.Connection[Any], oid: int, publication: str
) -> dict[str, str]:
    """The columns of table ``oid`` whose values the publication's changes do not carry.

    pgoutput leaves out generated columns (before PostgreSQL 18, and from 18 on unless
    the publication publishes them) and, from PostgreSQL 15 on, the columns outside a
    publication's column list. Returns each such column's name and why.
    """
    version = connection.info.server_version
    found: dict[str, str] = {}
    if version < 180000:  # PostgreSQL 18 may publish generated columns
        for (name,) in connection.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
            "AND NOT attisdropped AND attgenerated <> ''",
            (oid,),
        ).fetchall():
            found[name] = "a generated column, which pgoutput does not send"
    if version >= 150000:  # column lists came with PostgreSQL 15
        row = connection.execute(
            "SELECT t.attnames FROM pg_publication_tables t "
            "JOIN pg_namespace n ON n.nspname = t.schemaname "
            "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename "
            "WHERE t.pubname = %s AND c.oid = %s",
            (publication, oid),
        ).fetchone()
        if row is not None and row[0] is not None:
            sent = set(row[0])
            for (name,) in connection.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum",
                (oid,),
            ).fetchall():
                if name not in sent:
                    found.setdefault(name, "outside the publication's column list")
    return found


@final
@attrs.frozen
class SlotState:
    """A replication slot as ``pg_replication_slots`` shows it."""

    name: str
    plugin: str | None
    database: str | None
    confirmed_flush: int | None
    restart: int | None
    wal_status: str | None
    active_pid: int | None


def slot_state(connection: psycopg.Connection[Any], slot: str) -> SlotState | None:
    """The slot named ``slot``, or ``None`` if there is none."""
    row = connection.execute(
        "SELECT plugin, database, confirmed_flush_lsn::text, restart_lsn::text, wal_status, "
        "active_pid FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    plugin, database, confirmed, restart, wal_status, pid = row
    return SlotState(
        slot,
        plugin,
        database,
        None if confirmed is None else parse_lsn(confirmed),
        None if restart is None else parse_lsn(restart),
        wal_status,
        pid,
    )


def check_slot(
    connection: psycopg.Connection[Any], slot: str, position: int | None = None
) -> SlotState:
    """The slot, checked: it exists, is a valid pgoutput slot of this database.

    With ``position``, it must not have confirmed anything past ``position``.

    Raises:
        CommitStateError: The slot is missing, of another plugin or database, lost
            its WAL, or was advanced past ``position`` (changes after ``position``
            are gone from it). Never a silent restart.
    """
    state = slot_state(connection, slot)
    database = connection.info.dbname
    where = "" if position is None else f" at LSN {format_lsn(position)}"
    if state is None:
        raise CommitStateError(
            f"replication slot {slot!r} does not exist (any more) on the server of database "
            f"{database!r}, and the query must read its changes from it{where}. It was "
            "dropped: the changes since are gone for this query. Start over under a new "
            "source_id and checkpoint location (a new slot), and reload the target"
        )
    if state.plugin != PLUGIN or state.database != database:
        raise CommitStateError(
            f"replication slot {slot!r} is a slot of plugin {state.plugin!r} in database "
            f"{state.database!r}; PostgresCdcSource reads pgoutput slots of database "
            f"{database!r}. Name another slot"
        )
    if state.wal_status == "lost" or state.restart is None or state.confirmed_flush is None:
        raise CommitStateError(
            f"replication slot {slot!r} is invalidated (wal_status {state.wal_status!r}): the "
            f"server removed WAL it still needed{where} (max_slot_wal_keep_size). The changes "
            "since are gone for this query; start over under a new source_id and slot"
        )
    if position is not None and state.confirmed_flush > position:
        raise CommitStateError(
            f"replication slot {slot!r} has confirmed LSN {format_lsn(state.confirmed_flush)}, "
            f"past the position {format_lsn(position)} this query must read from: the "
            "changes between are gone from the slot (another consumer advanced it, or the "
            "query's state is older than the slot). Refusing to skip them; start over under "
            "a new source_id and slot"
        )
    return state


def lock_slot(connection: psycopg.Connection[Any], slot: str) -> None:
    """Hold a session advisory lock on ``slot`` for as long as ``connection`` lives.

    Raises:
        CommitStateError: Another query holds it.
    """
    row = connection.execute(
        "SELECT pg_try_advisory_lock(hashtextextended('sinkv2-cdc:' || %s, 0))", (slot,)
    ).fetchone()
    if row is None or not row[0]:
        raise CommitStateError(
            f"replication slot {slot!r} is read by another query (it holds the slot's lock): "
            "two queries on one slot would each acknowledge changes the other has not read. "
            "Stop the other query, or give this one its own slot"
        )


def create_slot(conninfo: str, slot: str) -> int:
    """Create the logical slot ``slot`` (pgoutput) over a replication connection.

    Returns:
        Its consistent point: every transaction that commits after it is decoded.

    Raises:
        SinkConfigurationError: The server refused (too many slots, a bad name).
    """
    import psycopg  # noqa: PLC0415  # optional extra
    from psycopg import pq  # noqa: PLC0415

    with psycopg.connect(
        conninfo, autocommit=True, replication="database", application_name="sinkv2-cdc"
    ) as connection:
        command = f"CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL {PLUGIN} (SNAPSHOT 'nothing')"
        result = connection.pgconn.exec_(command.encode())
        if result.status != pq.ExecStatus.TUPLES_OK:
            message = (result.error_message or b"").decode(errors="replace").strip()
            raise SinkConfigurationError(
                f"creating replication slot {slot!r} failed: {message}. Free a slot "
                "(max_replication_slots) or name an existing one"
            )
        point = result.get_value(0, 1)
        assert point is not None
        return parse_lsn(point.decode())


def drop_slot(connection: psycopg.Connection[Any], slot: str) -> bool:
    """Drop ``slot`` if it exists; whether it did."""
    row = connection.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return row is not None


def flush_lsn(connection: psycopg.Connection[Any]) -> int:
    """The server's WAL flush position: how far a slot can be decoded now."""
    row = connection.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(row[0])


def _busy(error: Exception) -> bool:
    return getattr(error, "sqlstate", None) == "55006"  # object_in_use: the slot is held


def advance_slot(connection: psycopg.Connection[Any], slot: str, lsn: int) -> None:
    """``pg_replication_slot_advance(slot, lsn)``, waiting while another backend holds it."""
    deadline = time.monotonic() + _BUSY_WAIT_S
    while True:
        try:
            connection.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn))
            )
            return
        except Exception as error:
            if not _busy(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def peek_changes(
    connection: psycopg.Connection[Any], slot: str, upto: int, publication: str
) -> Iterator[bytes]:
    """The slot's pgoutput messages (protocol 1) up to ``upto``, without consuming them.

    Decoding starts at the slot's confirmed position; the slot does not move. The
    messages come through a server-side cursor, ``_FETCH`` at a time.

    Raises:
        SinkConfigurationError: The publication did not exist when the slot's first
            change was made.
    """
    query = (
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
        "'proto_version', '1', 'publication_names', %s)"
    )
    # the publication name as pgoutput's ``publication_names`` list reads it
    params = (slot, format_lsn(upto), '"' + publication.replace('"', '""') + '"')
    deadline = time.monotonic() + _BUSY_WAIT_S
    while True:
        started = False
        try:
            with (
                connection.transaction(),
                connection.cursor(name="sinkv2_cdc_peek", binary=True) as cursor,
            ):
                cursor.execute(query, params)
                while rows := cursor.fetchmany(_FETCH):
                    started = True
                    for (data,) in rows:
                        yield bytes(data)
            return
        except Exception as error:
            if started:
                raise
            if getattr(error, "sqlstate", None) == "42704":  # undefined_object
                raise SinkConfigurationError(
                    f"slot {slot!r} cannot decode with publication {publication!r}: {error}. "
                    "pgoutput reads a publication as it was when each change was made, so "
                    "the publication must exist before the slot's first change; create the "
                    "publication first, then a new slot"
                ) from error
            if not _busy(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
