"""The PostgreSQL committer: ``COMMIT PREPARED``, idempotent through the markers.

For each committable:

- the prepared transaction exists: ``COMMIT PREPARED`` it (a staged one's rows are
  then moved into the target, see ``_merge``; a staging table still there after a
  crash is moved by the replay);
- it does not, and its marker is in the table: it was committed before (a replay
  after a driver crash): ``signal_already_committed``;
- it does not, and no marker: it was rolled back, its rows were never written:
  ``signal_failed_with_unknown_reason`` (never reported committed; the job fails
  rather than claim rows it does not have).

A lost connection is retried once on a new one, then handed back with
``retry_later``: ``COMMIT PREPARED`` either happened or did not, and the next
attempt tells which.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, final

from reference_sinks.postgres._bookkeeping import insert_marker_for, is_marked
from reference_sinks.postgres._durable import FLUSH_THIS_COMMIT
from reference_sinks.postgres._merge import merge_statement, table_exists
from reference_sinks.postgres._model import PostgresTransaction
from reference_sinks.postgres._table import TableName
from sinkv2 import Committer

if TYPE_CHECKING:
    import psycopg

    from sinkv2 import CommitRequest

__all__ = ["PostgresCommitter", "RolledBackTransactionError", "StagedRowsRefusedError"]


class RolledBackTransactionError(RuntimeError):
    """A committable's prepared transaction was rolled back: its rows were never written."""


class StagedRowsRefusedError(RuntimeError):
    """The target refused a staged transaction's rows when the committer moved them."""


@final
class PostgresCommitter(Committer[PostgresTransaction]):
    """Commits each prepared transaction exactly once."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], table: TableName) -> None:
        self._connect = connect
        self._table = table
        self._connection: psycopg.Connection[Any] | None = None

    def _open(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = self._connect()
            self._connection.autocommit = True
        return self._connection

    def commit(self, requests: Collection[CommitRequest[PostgresTransaction]]) -> None:
        """Commit every request's prepared transaction, or tell what became of it."""
        import psycopg  # noqa: PLC0415  # optional extra

        for request in requests:
            for attempt in range(2):
                try:
                    self._commit_one(request)
                    break
                except psycopg.OperationalError:
                    self.close()
                    if attempt == 1:
                        request.retry_later()

    def _commit_one(self, request: CommitRequest[PostgresTransaction]) -> None:
        import psycopg  # noqa: PLC0415  # optional extra
        from psycopg import sql  # noqa: PLC0415

        transaction = request.get_committable()
        connection = self._open()
        try:
            connection.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(transaction.gid)))
            committed_now = True
        except psycopg.errors.UndefinedObject:
            committed_now = False
        if transaction.staging is not None and self._move(connection, transaction):
            return  # the staged rows are in the target now
        if committed_now:
            return
        if is_marked(connection, self._table, transaction.gid):
            request.signal_already_committed()
            return
        request.signal_failed_with_unknown_reason(
            RolledBackTransactionError(
                f"prepared transaction {transaction.gid!r} with {transaction.rows} rows "
                f"for {transaction.table!r} no longer exists and never committed (no "
                "marker): it was rolled back, by ROLLBACK PREPARED or an operator, so its "
                "rows were never written; re-run the job from its input"
            )
        )

    def _move(self, connection: psycopg.Connection[Any], transaction: PostgresTransaction) -> bool:
        """Move a committed staging table into the target with its marker; False if it is gone.

        Raises:
            StagedRowsRefusedError: The target refused the rows (a duplicate key, a
                CHECK constraint); the staging table stays for the next attempt.
        """
        import psycopg  # noqa: PLC0415  # optional extra
        from psycopg import sql  # noqa: PLC0415

        assert transaction.staging is not None
        staging = self._table.sibling(transaction.staging)
        with connection.transaction():
            connection.execute(FLUSH_THIS_COMMIT)  # a plain transaction, reported committed
            if not table_exists(connection, staging):
                return False
            # Two committers of one transaction: the second waits here while the first
            # moves the rows and drops the table, then finds it gone.
            try:
                with connection.transaction():
                    connection.execute(
                        sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(staging.sql())
                    )
            except psycopg.errors.UndefinedTable:
                return False
            statement = merge_statement(
                self._table, staging, transaction.columns, transaction.upsert_key
            )
            try:
                with connection.transaction():
                    connection.execute(statement)
            except psycopg.errors.IntegrityError as error:
                raise StagedRowsRefusedError(
                    f"PostgreSQL refused the {transaction.rows} staged rows of {transaction.gid!r} "
                    f"for {transaction.table!r}: {error.diag.message_primary or error}"
                    + (f" ({error.diag.message_detail})" if error.diag.message_detail else "")
                    + ". They stay staged in "
                    f"{str(staging)!r}; the epoch stays pending. Use upsert_key for rows that "
                    "may repeat a key, or abort the epoch (sinkv2 state abort) and re-run"
                ) from error
            connection.execute(sql.SQL("DROP TABLE {}").format(staging.sql()))
            insert_marker_for(connection, self._table, transaction)
        return True

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
