"""Moving a committed staging table's rows into the target: the second half of a staged commit.

Where the target has a unique index (or the sink upserts), writers do not load the
target itself: a retried or speculative attempt inserting the same keys would wait,
forever, on the row locks of an earlier attempt's prepared transaction, which only
the driver's clean-up after the stage releases. So each attempt loads a staging
table of its own, created inside its prepared transaction and touching nothing
else. The committer commits the prepared transaction, then in one more transaction
inserts (or upserts) the staging table's rows into the target, drops the staging
table and writes the marker: a crash between the two leaves a committed staging
table and no marker, and the replay finishes the move.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reference_sinks.postgres._model import key_of
from reference_sinks.postgres._table import TableName

if TYPE_CHECKING:
    import psycopg

__all__ = ["merge_statement", "staging_name", "table_exists"]


def staging_name(sink_id: str, attempt_token: str, sequence: int) -> str:
    """The staging table of one attempt's ``sequence``-th transaction (under 63 bytes)."""
    return f"sinkv2_stage_{key_of(sink_id)[:8]}_{key_of(attempt_token)}_{sequence}"


def table_exists(connection: psycopg.Connection[Any], table: TableName) -> bool:
    """Whether ``table`` exists (and is visible)."""
    quoted = table.sql().as_string(connection)
    row = connection.execute("SELECT to_regclass(%s)", (quoted,)).fetchone()
    return bool(row and row[0] is not None)


def merge_statement(
    target: TableName,
    staging: TableName,
    columns: Sequence[str],
    upsert_key: Sequence[str] | None,
) -> Any:
    """``INSERT INTO target ... SELECT ... FROM staging``; with a key, an upsert.

    Upserts keep the last row of each key: a freshly loaded heap is in ``COPY``
    order, so ``ctid`` orders a key's rows as they came.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    names = sql.SQL(", ").join(sql.Identifier(name) for name in columns)
    if upsert_key is None:
        return sql.SQL("INSERT INTO {target} ({names}) SELECT {names} FROM {staging}").format(
            target=target.sql(), names=names, staging=staging.sql()
        )
    keys = sql.SQL(", ").join(sql.Identifier(name) for name in upsert_key)
    updates = [
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(name), sql.Identifier(name))
        for name in columns
        if name not in upsert_key
    ]
    action = (
        sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates))
        if updates
        else sql.SQL("DO NOTHING")
    )
    return sql.SQL(
        "INSERT INTO {target} ({names}) SELECT DISTINCT ON ({keys}) {names} FROM {staging} "
        "ORDER BY {keys}, ctid DESC ON CONFLICT ({keys}) {action}"
    ).format(target=target.sql(), names=names, keys=keys, staging=staging.sql(), action=action)
