"""`PostgresSink`: exactly-once loads into a PostgreSQL table by two-phase commit.

The pattern of Flink's JDBC exactly-once sink, on PostgreSQL's own transactions:
writers ``COPY`` their rows into the target inside one transaction per subtask
attempt and checkpoint, then ``PREPARE TRANSACTION``; the committable is the
prepared transaction's gid, and the committer runs ``COMMIT PREPARED``. Until then
no reader sees a row. See ``docs/sinks/postgres.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs
import pyarrow as pa

from reference_sinks._arrow_types import arrow_of
from reference_sinks.postgres._bookkeeping import (
    checkpoint_marked,
    clean_up_job,
    ensure_tables,
    is_marked,
    mark_checkpoint,
    prepared_gids,
    rollback_prepared,
)
from reference_sinks.postgres._committer import PostgresCommitter
from reference_sinks.postgres._model import (
    PostgresTransaction,
    committable_serializer,
    job_prefix,
)
from reference_sinks.postgres._table import TableName, check_fit, describe_table
from reference_sinks.postgres._writer import PostgresWriter, WriterOptions
from sinkv2 import (
    AttrsMsgpackSerializer,
    CommitterInitContext,
    Sink,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommittedCheckpoints,
    SupportsPreWriteTopology,
    WriterInitContext,
)
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame

__all__ = ["Connect", "PostgresAtLeastOnceSink", "PostgresSink"]


@final
@attrs.frozen
class Connect:
    """Opens a psycopg connection from a conninfo string or URL (picklable)."""

    conninfo: str

    def __call__(self) -> psycopg.Connection[Any]:
        import psycopg  # noqa: PLC0415  # optional extra

        return psycopg.connect(self.conninfo, autocommit=True, application_name="sinkv2")

    def __repr__(self) -> str:
        return "Connect(<conninfo>)"  # it may carry a password


def _connector(connection: object) -> Callable[[], psycopg.Connection[Any]]:
    if isinstance(connection, str) and connection.strip():
        return Connect(connection)
    if callable(connection):
        return connection  # a connection factory
    raise SinkConfigurationError(
        f"connection must be a conninfo string or URL ('postgresql://user@host:5432/db') or a "
        f"function returning a psycopg connection (got {connection!r:.80} of type "
        f"{type(connection).__name__})"
    )


def _upsert_key(upsert_key: object) -> tuple[str, ...] | None:
    if upsert_key is None:
        return None
    names = (upsert_key,) if isinstance(upsert_key, str) else upsert_key
    if (
        isinstance(names, Sequence)
        and names
        and all(isinstance(name, str) and name for name in names)
    ):
        return tuple(names)
    raise SinkConfigurationError(
        f"upsert_key must be a column name or a non-empty list of column names (got "
        f"{upsert_key!r} of type {type(upsert_key).__name__}); e.g. upsert_key=['id']"
    )


class _PostgresSinkBase(Sink[dict[str, Any]], SupportsPreWriteTopology[dict[str, Any]]):
    """What both guarantees share: configuration, pre-flight checks, writers."""

    exactly_once: bool

    def __init__(
        self,
        connection: str | Callable[[], psycopg.Connection[Any]],
        table: str,
        *,
        upsert_key: str | Sequence[str] | None = None,
        sink_id: str | None = None,
    ) -> None:
        self.connect = _connector(connection)
        self.table = TableName.parse(table)
        self.upsert_key = _upsert_key(upsert_key)
        if sink_id is not None and (not isinstance(sink_id, str) or not sink_id.strip()):
            raise SinkConfigurationError(
                f"sink_id must be a non-empty str (got {sink_id!r} of type "
                f"{type(sink_id).__name__}); name the pipeline, e.g. 'orders-ingest'"
            )
        self.sink_id = sink_id or str(self.table)

    def _options(self) -> WriterOptions:
        return WriterOptions(
            connect=self.connect,
            table=self.table,
            sink_id=self.sink_id,
            upsert_key=self.upsert_key,
            exactly_once=self.exactly_once,
        )

    def check(self, schema: pa.Schema | None = None) -> None:
        """Check the server and the table before any data moves.

        Exactly once, the server must allow prepared transactions; the bookkeeping
        tables are created beside the target if missing. With ``schema``, the
        columns must fit the table (see `check_fit`).

        Raises:
            SinkConfigurationError: The table is missing, the columns do not fit, or
                ``max_prepared_transactions`` is 0 on an exactly-once sink.
        """
        with self.connect() as connection:
            connection.autocommit = True
            table = describe_table(connection, self.table)
            if schema is not None:
                check_fit(schema, table, upsert_key=self.upsert_key)
            if self.exactly_once:
                row = connection.execute("SHOW max_prepared_transactions").fetchone()
                if row is None or int(row[0]) == 0:
                    raise SinkConfigurationError(
                        f"PostgresSink needs prepared transactions for exactly-once, but "
                        f"max_prepared_transactions is 0 on the server of database "
                        f"{connection.info.dbname!r}. Set max_prepared_transactions (at least "
                        "the number of partitions written at once: each keeps a prepared "
                        "transaction until the stage's commit) in postgresql.conf and restart "
                        "the server; or, where you cannot, use "
                        "PostgresSink.at_least_once(...) (plain commits; duplicates on retry "
                        "unless you upsert)"
                    )
                ensure_tables(connection, self.table)

    def add_pre_write_topology(self, input: DataFrame) -> DataFrame:
        """Check the server, the table and the DataFrame's columns; the rows pass unchanged.

        Runs on the driver before any Spark job.

        Raises:
            SinkConfigurationError: See `check`.
        """
        schema = None
        # A Spark DataFrame, or the sinkv2 data source's planned input (its schema
        # only: any other attribute is refused there); the kit's streams have none.
        spark_schema = getattr(input, "schema", None)
        if spark_schema is not None:
            schema = arrow_of(spark_schema, prefers_large_types=True)
        self.check(schema)
        return input

    def create_writer(self, context: WriterInitContext) -> PostgresWriter:
        """A writer for one subtask attempt (its own connection)."""
        return PostgresWriter(self._options(), context)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.table)!r}, sink_id={self.sink_id!r})"


@final
class PostgresSink(
    _PostgresSinkBase,
    SupportsAttemptCleanup,
    SupportsAbort[PostgresTransaction],
    SupportsCommittedCheckpoints,
):
    """Exactly-once inserts or upserts into a PostgreSQL table (two-phase commit).

    Writers load rows with ``COPY`` into the target (into a staging table merged
    with ``INSERT ... ON CONFLICT`` for upserts) inside one transaction per subtask
    attempt and checkpoint, and ``PREPARE TRANSACTION`` it; `PostgresCommitter`
    runs ``COMMIT PREPARED``. Prepared transactions of losing attempts, aborted
    epochs and crashed runs are rolled back by `clean_up_attempts` and `abort`.

    The server needs ``max_prepared_transactions`` > 0 (checked before any data
    moves). Three tables beside the target keep the sink's bookkeeping
    (``sinkv2_pg_markers``, ``sinkv2_pg_cleanups``, ``sinkv2_pg_checkpoints``); the
    sink's role needs to create them once, or an administrator does. The last one
    records each committed checkpoint of a batch sink id, so a re-run of one is not
    written again even with another commit state store.

    Args:
        connection: A conninfo string or URL, or a function returning a new psycopg
            connection (it must pickle: Spark ships it to every task).
        table: ``"table"`` or ``"schema.table"``, names as stored (case-sensitive).
        upsert_key: Upsert on these columns (a unique index on exactly them must
            exist) instead of inserting. Within one partition the last row of a key
            wins; between partitions of one checkpoint the order is Spark's, i.e.
            undefined (repartition by the key when a key may repeat).
        sink_id: Names the sink's prepared transactions; defaults to ``table``.

    Raises:
        SinkConfigurationError: An option is invalid.
    """

    exactly_once = True

    @classmethod
    def at_least_once(
        cls,
        connection: str | Callable[[], psycopg.Connection[Any]],
        table: str,
        *,
        upsert_key: str | Sequence[str] | None = None,
        sink_id: str | None = None,
    ) -> PostgresAtLeastOnceSink:
        """The same loads with plain commits, for servers without prepared transactions.

        Each writer commits at every checkpoint (and at the end of input); a retried
        task loads its rows again, so inserts may be duplicated where upserts
        (``upsert_key``) are not.
        """
        return PostgresAtLeastOnceSink(connection, table, upsert_key=upsert_key, sink_id=sink_id)

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[PostgresTransaction]:
        """Committables (gids) travel and are stored as msgpack, version 1."""
        return committable_serializer()

    def create_committer(self, context: CommitterInitContext) -> PostgresCommitter:
        """The committer: ``COMMIT PREPARED`` per committable."""
        return PostgresCommitter(self.connect, self.table)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Roll back the prepared transactions of ``job_id``'s attempts other than the kept ones.

        Also stops a late writer of the job (a speculative copy being killed) from
        preparing afterwards: see ``_bookkeeping``. Idempotent; never touches a
        committed transaction (it is no longer prepared).
        """
        with self.connect() as connection:
            connection.autocommit = True
            ensure_tables(connection, self.table)
            clean_up_job(
                connection,
                self.table,
                sink_id=self.sink_id,
                job_id=job_id,
                kept_attempt_tokens=kept_attempt_tokens,
                prefix=job_prefix(self.sink_id, job_id),
            )

    def abort(self, committables: Collection[PostgresTransaction]) -> None:
        """Roll back the prepared transactions of committables that will never be committed.

        One already committed (its gid gone, its marker present) is left alone; a
        staged one whose staging table was committed but never moved into the
        target loses its staging table. Idempotent.
        """
        if not committables:
            return
        from psycopg import sql  # noqa: PLC0415  # optional extra

        with self.connect() as connection:
            connection.autocommit = True
            for committable in committables:
                if is_marked(connection, self.table, committable.gid):
                    continue
                rollback_prepared(connection, committable.gid)
                if committable.staging is not None:  # committed, never moved: drop it
                    staging = self.table.sibling(committable.staging)
                    connection.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(staging.sql()))

    def is_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> bool:
        """Whether ``sinkv2_pg_checkpoints`` records ``checkpoint_id`` of ``sink_id``."""
        with self.connect() as connection:
            connection.autocommit = True
            ensure_tables(connection, self.table)
            return checkpoint_marked(connection, self.table, sink_id, checkpoint_id)

    def mark_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> None:
        """Record ``checkpoint_id`` of ``sink_id`` in ``sinkv2_pg_checkpoints`` (idempotent)."""
        with self.connect() as connection:
            connection.autocommit = True
            ensure_tables(connection, self.table)
            mark_checkpoint(connection, self.table, sink_id, checkpoint_id)

    def prepared_transactions(self) -> list[str]:
        """The gids of this sink's transactions prepared and not yet committed or rolled back."""
        from reference_sinks.postgres._model import sink_prefix  # noqa: PLC0415

        with self.connect() as connection:
            return prepared_gids(connection, sink_prefix(self.sink_id))


@final
class PostgresAtLeastOnceSink(_PostgresSinkBase):
    """`PostgresSink`'s loads with plain commits at every checkpoint: at least once.

    Build it with `PostgresSink.at_least_once`. No prepared transactions, no
    committer: for servers where ``max_prepared_transactions`` cannot be set.
    """

    exactly_once = False
