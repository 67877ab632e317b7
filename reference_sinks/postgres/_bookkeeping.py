"""The sink's two bookkeeping tables, beside the target table, and what it does with them.

``sinkv2_pg_markers``: one row per prepared transaction, inserted by that
transaction itself. When ``COMMIT PREPARED`` finds no such gid, the marker says
what happened to it: present, it was committed (a replay); absent, it was rolled
back, and its rows were never written.

``sinkv2_pg_cleanups``: one row per attempt clean-up, naming the attempts it kept.
A speculative copy of a task that Spark kills may still reach ``PREPARE
TRANSACTION`` after the driver cleaned up its stage, and its prepared transaction
would hold locks with no one left to roll it back. So a writer, before it
prepares, looks for a clean-up of its run that started after the writer did and
did not keep its attempt, and rolls back instead. A session-level advisory lock per
run orders the two: writers hold it shared from that check to ``PREPARE``, a
clean-up takes it exclusively after recording itself and before listing the
prepared transactions, so either the writer sees the clean-up or the clean-up sees
the writer's prepared transaction.

``sinkv2_pg_checkpoints``: one row per committed checkpoint of a batch sink id
(`SupportsCommittedCheckpoints`), written by the driver after the commit and before
the commit state store records it. A batch run of a checkpoint its store does not
know (a new or lost store) finds it here and writes nothing again. Kept (a row per
checkpoint id a job chose, not per micro-batch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Final

from reference_sinks.postgres._model import PostgresTransaction, key_of, parse_gid
from reference_sinks.postgres._table import TableName

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CHECKPOINTS",
    "CLEANUPS",
    "MARKERS",
    "RETENTION",
    "checkpoint_marked",
    "clean_up_job",
    "cleanup_watermark",
    "ensure_tables",
    "guard_lock_key",
    "insert_marker",
    "insert_marker_for",
    "is_marked",
    "lost_to_cleanup",
    "mark_checkpoint",
    "prepared_gids",
    "rollback_prepared",
]

MARKERS: Final = "sinkv2_pg_markers"
CLEANUPS: Final = "sinkv2_pg_cleanups"
CHECKPOINTS: Final = "sinkv2_pg_checkpoints"
RETENTION: Final = "7 days"
"""Markers and clean-up records older than this are deleted.

No task attempt runs that long, and a committable replayed later than that (its
marker gone) is reported rolled back, failing the job, never counted committed.
"""

_DDL: Final = """
CREATE TABLE IF NOT EXISTS {markers} (
    gid text PRIMARY KEY,
    sink_key text NOT NULL,
    job_key text NOT NULL,
    attempt_key text NOT NULL,
    target text NOT NULL,
    rows bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {markers_index} ON {markers} (sink_key, job_key);
CREATE TABLE IF NOT EXISTS {cleanups} (
    id bigserial PRIMARY KEY,
    sink_key text NOT NULL,
    job_key text NOT NULL,
    kept text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {cleanups_index} ON {cleanups} (sink_key, job_key, id);
CREATE TABLE IF NOT EXISTS {checkpoints} (
    sink_key text NOT NULL,
    checkpoint_id bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink_key, checkpoint_id)
);
"""
_DDL_LOCK: Final = int.from_bytes(
    hashlib.sha256(b"sinkv2-postgres-ddl").digest()[:8], "big", signed=True
)


def guard_lock_key(sink_id: str, job_id: str) -> int:
    """The advisory lock that orders one run's prepares against its clean-ups."""
    digest = hashlib.sha256(f"sinkv2-guard:{key_of(sink_id)}:{key_of(job_id)}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _names(table: TableName) -> dict[str, Any]:
    from psycopg import sql  # noqa: PLC0415  # optional extra

    return {
        "markers": table.sibling(MARKERS).sql(),
        "cleanups": table.sibling(CLEANUPS).sql(),
        "checkpoints": table.sibling(CHECKPOINTS).sql(),
        "markers_index": sql.Identifier(f"{MARKERS}_job"),
        "cleanups_index": sql.Identifier(f"{CLEANUPS}_job"),
    }


def ensure_tables(connection: psycopg.Connection[Any], table: TableName) -> None:
    """Create the bookkeeping tables beside ``table`` if they are missing (autocommit).

    ``CREATE TABLE IF NOT EXISTS`` is not safe against itself run concurrently, so
    creators take a transaction-level advisory lock first.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    names = _names(table)
    quoted = [table.sibling(name).sql().as_string(connection) for name in _TABLES]
    found = connection.execute(
        "SELECT bool_and(to_regclass(name) IS NOT NULL) FROM unnest(%s::text[]) AS name",
        (quoted,),
    ).fetchone()
    if found and found[0]:
        return
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
        connection.execute(sql.SQL(_DDL).format(**names))


_TABLES: Final = (MARKERS, CLEANUPS, CHECKPOINTS)


def checkpoint_marked(
    connection: psycopg.Connection[Any], table: TableName, sink_id: str, checkpoint_id: int
) -> bool:
    """Whether checkpoint ``checkpoint_id`` of ``sink_id`` is recorded committed."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    row = connection.execute(
        sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE sink_key = %s AND checkpoint_id = %s)"
        ).format(table.sibling(CHECKPOINTS).sql()),
        (key_of(sink_id), checkpoint_id),
    ).fetchone()
    return bool(row and row[0])


def mark_checkpoint(
    connection: psycopg.Connection[Any], table: TableName, sink_id: str, checkpoint_id: int
) -> None:
    """Record checkpoint ``checkpoint_id`` of ``sink_id`` committed (idempotent)."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    connection.execute(
        sql.SQL(
            "INSERT INTO {} (sink_key, checkpoint_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
        ).format(table.sibling(CHECKPOINTS).sql()),
        (key_of(sink_id), checkpoint_id),
    )


def cleanup_watermark(
    connection: psycopg.Connection[Any], table: TableName, sink_id: str, job_id: str
) -> int:
    """The id of the run's latest clean-up so far (0 if none): a writer's starting point."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    row = connection.execute(
        sql.SQL("SELECT coalesce(max(id), 0) FROM {} WHERE sink_key = %s AND job_key = %s").format(
            table.sibling(CLEANUPS).sql()
        ),
        (key_of(sink_id), key_of(job_id)),
    ).fetchone()
    return int(row[0]) if row else 0


def lost_to_cleanup(
    connection: psycopg.Connection[Any],
    table: TableName,
    *,
    sink_id: str,
    job_id: str,
    attempt_token: str,
    since: int,
) -> bool:
    """Whether a clean-up of the run after ``since`` did not keep this attempt."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    row = connection.execute(
        sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE sink_key = %s AND job_key = %s AND id > %s "
            "AND NOT (%s = ANY(kept)))"
        ).format(table.sibling(CLEANUPS).sql()),
        (key_of(sink_id), key_of(job_id), since, key_of(attempt_token)),
    ).fetchone()
    return bool(row and row[0])


def insert_marker(
    connection: psycopg.Connection[Any],
    table: TableName,
    *,
    gid: str,
    sink_id: str,
    job_id: str,
    attempt_token: str,
    rows: int,
) -> None:
    """Record, inside the transaction about to be prepared, that it exists."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    connection.execute(
        sql.SQL(
            "INSERT INTO {} (gid, sink_key, job_key, attempt_key, target, rows) "
            "VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(table.sibling(MARKERS).sql()),
        (gid, key_of(sink_id), key_of(job_id), key_of(attempt_token), str(table), rows),
    )


def insert_marker_for(
    connection: psycopg.Connection[Any], table: TableName, transaction: PostgresTransaction
) -> None:
    """Mark a staged transaction committed, in the transaction that moved its rows."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    parsed = parse_gid(transaction.gid)
    connection.execute(
        sql.SQL(
            "INSERT INTO {} (gid, sink_key, job_key, attempt_key, target, rows) "
            "VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(table.sibling(MARKERS).sql()),
        (
            transaction.gid,
            parsed.sink_key if parsed else "",
            parsed.job_key if parsed else "",
            parsed.attempt_key if parsed else "",
            str(table),
            transaction.rows,
        ),
    )


def is_marked(connection: psycopg.Connection[Any], table: TableName, gid: str) -> bool:
    """Whether the transaction ``gid`` was committed (its marker is visible)."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    row = connection.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE gid = %s)").format(
            table.sibling(MARKERS).sql()
        ),
        (gid,),
    ).fetchone()
    return bool(row and row[0])


def prepared_gids(connection: psycopg.Connection[Any], prefix: str) -> list[str]:
    """The prepared transactions of this database whose gid starts with ``prefix``."""
    rows = connection.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
        "AND starts_with(gid, %s) ORDER BY gid",
        (prefix,),
    ).fetchall()
    return [row[0] for row in rows]


def rollback_prepared(connection: psycopg.Connection[Any], gid: str) -> bool:
    """``ROLLBACK PREPARED`` (autocommit); False if the gid was already gone."""
    import psycopg  # noqa: PLC0415  # optional extra
    from psycopg import sql  # noqa: PLC0415

    try:
        connection.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    except psycopg.errors.UndefinedObject:
        return False
    return True


def clean_up_job(
    connection: psycopg.Connection[Any],
    table: TableName,
    *,
    sink_id: str,
    job_id: str,
    kept_attempt_tokens: Collection[str],
    prefix: str,
) -> list[str]:
    """Roll back every prepared transaction of the run but the kept attempts'; return their gids.

    Records the clean-up first, then waits for writers between their check and
    their ``PREPARE`` (the run's advisory lock, exclusively), then lists. Markers of
    the sink older than `RETENTION` are deleted, and so are clean-up records: a
    committable may be committed again (a replay) at any time before that.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    kept = sorted({key_of(token) for token in kept_attempt_tokens})
    cleanups = table.sibling(CLEANUPS).sql()
    sink_key, job_key = key_of(sink_id), key_of(job_id)
    connection.execute(
        sql.SQL("INSERT INTO {} (sink_key, job_key, kept) VALUES (%s, %s, %s)").format(cleanups),
        (sink_key, job_key, kept),
    )
    lock = guard_lock_key(sink_id, job_id)
    connection.execute("SELECT pg_advisory_lock(%s)", (lock,))
    connection.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    rolled_back = []
    for gid in prepared_gids(connection, prefix):
        parsed = parse_gid(gid)
        if (
            parsed is not None
            and parsed.attempt_key not in kept
            and rollback_prepared(connection, gid)
        ):
            rolled_back.append(gid)
    connection.execute(
        sql.SQL("DELETE FROM {} WHERE sink_key = %s AND created_at < now() - %s::interval").format(
            table.sibling(MARKERS).sql()
        ),
        (sink_key, RETENTION),
    )
    connection.execute(
        sql.SQL("DELETE FROM {} WHERE created_at < now() - %s::interval").format(cleanups),
        (RETENTION,),
    )
    return rolled_back
