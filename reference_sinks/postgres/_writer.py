"""The PostgreSQL writer: rows loaded by ``COPY`` inside one transaction per checkpoint.

Over 450 lines because the writer's one transaction per checkpoint - COPY streaming,
staging tables, prepare and at-least-once flushes - is one state machine whose steps
must be read together.

Exactly once, the transaction is prepared (``PREPARE TRANSACTION``) at
``prepare_commit`` and its gid is the committable; the committer commits it. At
least once, it is committed at every ``flush``. Rows travel as CSV made by pyarrow
(see ``_encode``), each batch sent as soon as it is encoded, through one ``COPY``
statement that stays open until the transaction is prepared or committed: the
server reads and inserts while the writer encodes the next batch.

Into a target with a unique index or an exclusion constraint, and for upserts, the
transaction loads a staging table of its own instead (the written columns with the
target's types and NOT NULL constraints, so column lengths and nulls are checked
as each row arrives; not the target's defaults or identities, which the move
leaves to the target), which the committer moves into the target (see
``_merge``): an attempt never waits on another attempt's prepared row locks.
PostgreSQL cannot prepare a transaction that touched a temporary table, hence a
regular one that only this transaction sees until it is committed. At least once,
upserts load a temporary staging table and move its rows at each ``flush``, in
the same transaction.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from reference_sinks.postgres._bookkeeping import (
    cleanup_watermark,
    ensure_tables,
    guard_lock_key,
    insert_marker,
    lost_to_cleanup,
)
from reference_sinks.postgres._durable import FLUSH_THIS_COMMIT
from reference_sinks.postgres._encode import encode_csv
from reference_sinks.postgres._fit_values import (
    RoundedValue,
    first_null_key,
    first_rounded,
    whole_decimals,
)
from reference_sinks.postgres._merge import merge_statement, staging_name
from reference_sinks.postgres._model import PostgresTransaction, gid_of
from reference_sinks.postgres._table import (
    Encoding,
    TableName,
    TargetTable,
    check_fit,
    describe_table,
)
from sinkv2 import CommittingSinkWriter, SinkWriter, WriterInitContext
from sinkv2.errors import FatalDestinationError
from sinkv2.runtime import BasicSinkWriterContext

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresWriter", "WriterOptions"]

_ROWS_PER_BATCH: Final = 8192
_PREPARED_ADVICE: Final = (
    "Every writer task of a stage keeps one prepared transaction until the stage's "
    "commit: set max_prepared_transactions in postgresql.conf to at least the number of "
    "partitions written at once (of every exactly-once sink on the server) and restart it"
)
# COPY's own context line; a JSON value's error has its own "line 1" before it.
_LINE: Final = re.compile(r"^COPY .*?, line (\d+)", re.MULTILINE)
_COLUMN: Final = re.compile(r"^COPY .*?, line \d+, column ([^:]+):", re.MULTILINE)


class WriterOptions:
    """What every writer of one sink needs (picklable; built by the sink)."""

    def __init__(
        self,
        *,
        connect: Callable[[], psycopg.Connection[Any]],
        table: TableName,
        sink_id: str,
        upsert_key: Sequence[str] | None,
        exactly_once: bool,
    ) -> None:
        self.connect = connect
        self.table = table
        self.sink_id = sink_id
        self.upsert_key = None if upsert_key is None else tuple(upsert_key)
        self.exactly_once = exactly_once


def _first_nul(data: bytes, names: Sequence[str]) -> tuple[int, str] | None:
    """The record (from 0) and column of the first value holding a NUL in CSV ``data``.

    Only text can carry a NUL byte into the CSV (every other value is written as
    ASCII, JSON escapes it), and PostgreSQL text cannot hold one: the server
    would refuse the record, naming no column.
    """
    import pyarrow.csv as pacsv  # noqa: PLC0415  # only for this error

    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(
                column_names=list(names), block_size=len(data) + 1, use_threads=False
            ),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())),
        )
    except pa.ArrowInvalid:
        return None
    found = [
        (index, name)
        for name in names
        if (index := pc.index(pc.match_substring(table[name], "\x00"), True).as_py()) >= 0
    ]
    return min(found) if found else None


class PostgresWriter(CommittingSinkWriter[dict[str, Any], PostgresTransaction]):
    """Loads one subtask attempt's rows into the target table, in one transaction per checkpoint.

    Lifecycle: ``write`` / ``write_arrow_batch`` any number of times, ``flush``,
    ``prepare_commit`` (exactly once: prepares the transaction and returns its
    gid; at least once: nothing, ``flush`` committed), ``close`` (rolls back a
    transaction not prepared).
    """

    def __init__(self, options: WriterOptions, context: WriterInitContext) -> None:
        self._options = options
        self._subtask = context.get_subtask_id()
        self._job_id = context.get_job_id()
        self._token = context.get_attempt_token()
        self._metrics = context.metric_group()
        self._connection = options.connect()
        try:
            self._open(options, context)
        except BaseException:
            self._connection.close()
            raise
        self._rows: list[dict[str, Any]] = []
        self._copy: psycopg.Copy | None = None  # the open COPY statement
        self._copy_exit: contextlib.ExitStack | None = None  # ends it
        self._rows_in_copy = 0  # rows sent through the open COPY statement
        self._copied_rows = 0  # rows of the open transaction's finished COPY statements
        self._seen_rows = 0  # rows of this attempt's input before the open transaction
        self._in_transaction = False
        self._sequence = 0
        self._staging: TableName | None = None

    def _open(self, options: WriterOptions, context: WriterInitContext) -> None:
        """Describe the table and check the input against it (the connection is open)."""
        self._connection.autocommit = True  # transactions are begun and prepared by hand
        self._table: TargetTable = describe_table(self._connection, options.table)
        # At least once, plain commits hold no locks past a checkpoint: staging only
        # for upserts (ON CONFLICT needs the rows in a table).
        self._staged = options.upsert_key is not None or (
            options.exactly_once and self._table.exclusive
        )
        self._schema: pa.Schema | None = None
        self._encodings: list[Encoding] = []
        self._input_schema = context.get_input_schema()
        if self._input_schema is not None:
            self._fit(self._input_schema)
        self._since = 0
        if options.exactly_once:
            ensure_tables(self._connection, options.table)
            # Read now, at task start, before the stage can have been cleaned up.
            self._since = cleanup_watermark(
                self._connection, options.table, options.sink_id, self._job_id
            )

    # --- input ---------------------------------------------------------------------------

    def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
        """Buffer one row (a dict keyed by column name)."""
        self._rows.append(element)
        if len(self._rows) >= _ROWS_PER_BATCH:
            self._drain_rows()

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        """Encode ``batch`` for ``COPY`` and send it."""
        if batch.num_rows == 0:
            return
        if self._schema is None or batch.schema != self._schema:
            self._end_copy()  # the next COPY names the new batch's columns
            self._fit(batch.schema)
        rounded = first_rounded(batch, self._table)
        if rounded is not None:
            raise self._rounded_error(rounded)
        if self._options.upsert_key is not None:
            null_key = first_null_key(batch, self._options.upsert_key)
            if null_key is not None:
                raise self._null_key_error(*null_key)
        data = encode_csv(whole_decimals(batch, self._table), self._encodings)
        if b"\x00" in data:
            raise self._nul_error(data)
        self._send(data)
        self._rows_in_copy += batch.num_rows
        self._metrics.get_num_records_send_counter().inc(batch.num_rows)
        self._metrics.get_num_bytes_send_counter().inc(len(data))

    def _fit(self, schema: pa.Schema) -> None:
        self._encodings = check_fit(schema, self._table, upsert_key=self._options.upsert_key)
        self._schema = schema

    def _drain_rows(self) -> None:
        if not self._rows:
            return
        schema = self._input_schema
        if schema is None:
            batch = pa.RecordBatch.from_pylist(self._rows)
        else:
            batch = pa.RecordBatch.from_pylist(self._rows, schema=schema)
        self._rows = []
        self.write_arrow_batch(batch, BasicSinkWriterContext())

    # --- the transaction ----------------------------------------------------------------

    def _begin(self) -> None:
        from psycopg import sql  # noqa: PLC0415  # optional extra

        self._connection.execute("BEGIN")
        self._in_transaction = True
        if not self._options.exactly_once:  # plain commits (PREPARE is always flushed)
            self._connection.execute(FLUSH_THIS_COMMIT)
        if not self._staged:
            return
        assert self._schema is not None  # rows came, so a schema did
        options = self._options
        name = staging_name(options.sink_id, self._token, self._sequence)
        names = self._schema.names
        columns = sql.SQL(", ").join(sql.Identifier(column) for column in names)
        if options.exactly_once:
            # Logged: an unlogged table would come back empty after a server crash.
            self._staging = options.table.sibling(name)
            create = "CREATE TABLE {staging} AS SELECT {columns} FROM {target} WITH NO DATA"
        else:
            self._staging = TableName("pg_temp", name)
            create = (
                "CREATE TEMPORARY TABLE {staging} ON COMMIT DROP AS "
                "SELECT {columns} FROM {target} WITH NO DATA"
            )
        self._connection.execute(
            sql.SQL(create).format(
                staging=self._staging.sql(), columns=columns, target=options.table.sql()
            )
        )
        required = [
            sql.SQL("ALTER COLUMN {} SET NOT NULL").format(sql.Identifier(column.name))
            for column in self._table.columns
            if column.not_null and column.name in names
        ]
        if required:
            self._connection.execute(
                sql.SQL("ALTER TABLE {} {}").format(
                    self._staging.sql(), sql.SQL(", ").join(required)
                )
            )

    def _send(self, data: bytes) -> None:
        """Write CSV into the open ``COPY`` statement (opening one, and the transaction)."""
        from psycopg import sql  # noqa: PLC0415  # optional extra

        if self._copy is None:
            if not self._in_transaction:
                self._begin()
            assert self._schema is not None  # set with the first batch
            target = self._staging or self._options.table
            statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                target.sql(),
                sql.SQL(", ").join(sql.Identifier(name) for name in self._schema.names),
            )
            with contextlib.ExitStack() as opening:
                self._copy = opening.enter_context(self._connection.cursor().copy(statement))
                self._copy_exit = opening.pop_all()
        assert self._copy is not None
        try:
            self._copy.write(data)
        except Exception as error:
            raise self._row_error(self._abort_copy(error)) from error

    def _end_copy(self) -> None:
        """End the open ``COPY`` statement: the server has every row of it, or refuses one."""
        if self._copy_exit is None:
            return
        ending, self._copy, self._copy_exit = self._copy_exit, None, None
        try:
            ending.close()
        except Exception as error:
            raise self._row_error(error) from error
        self._copied_rows += self._rows_in_copy
        self._rows_in_copy = 0

    def _abort_copy(self, error: Exception) -> Exception:
        """End the open ``COPY`` statement as failed (the transaction is lost); ``error``."""
        ending, self._copy, self._copy_exit = self._copy_exit, None, None
        if ending is not None:
            with contextlib.suppress(Exception):  # the server's reason is in ``error``
                ending.__exit__(type(error), error, error.__traceback__)
        return error

    def _nul_error(self, data: bytes) -> Exception:
        """The row and column of a value holding a NUL, which PostgreSQL text cannot hold.

        Found before sending: the server would refuse the record while reading it,
        before it splits it into columns, naming none.
        """
        assert self._schema is not None
        found = _first_nul(data, self._schema.names)
        where = ""
        if found is not None:
            record, column = found
            row = self._seen_rows + self._copied_rows + self._rows_in_copy + record
            where = f" row {row} of subtask {self._subtask}'s input, column {column!r}"
        return FatalDestinationError(
            f"PostgreSQL cannot take{where} for table {str(self._options.table)!r}: the value "
            "holds a NUL character (\\x00), which PostgreSQL text cannot. Nothing of this "
            "attempt is visible; fix or filter the row and re-run"
        )

    def _rounded_error(self, rounded: RoundedValue) -> Exception:
        """A value PostgreSQL would round to its column's scale, silently changing it."""
        row = self._seen_rows + self._copied_rows + self._rows_in_copy + rounded.row
        return FatalDestinationError(
            f"PostgreSQL cannot take row {row} of subtask {self._subtask}'s input, column "
            f"{rounded.column!r} for table {str(self._options.table)!r} as it is: "
            f"{rounded.column_type} would round {rounded.value} to {rounded.stored}. Nothing "
            "of this attempt is visible; round the values first (e.g. Spark's round(col, "
            "scale)) or widen the column, and re-run"
        )

    def _null_key_error(self, index: int, column: str) -> Exception:
        """A null in an upsert key column: ON CONFLICT cannot match it."""
        row = self._seen_rows + self._copied_rows + self._rows_in_copy + index
        return FatalDestinationError(
            f"PostgreSQL cannot upsert row {row} of subtask {self._subtask}'s input into "
            f"{str(self._options.table)!r}: upsert key column {column!r} is null, and ON "
            "CONFLICT never matches a null key (the row would be inserted again at every "
            "load). Nothing of this attempt is visible; filter or fill null keys and re-run"
        )

    def _row_error(self, error: Exception) -> Exception:
        """A clear error for a row PostgreSQL refused: which row, which column, why."""
        import psycopg  # noqa: PLC0415  # optional extra

        if not isinstance(error, psycopg.Error) or isinstance(error, psycopg.OperationalError):
            return error
        diag = error.diag
        context = diag.context or ""
        line = _LINE.search(context)
        column = diag.column_name or (_COLUMN.search(context) or [None, None])[1]
        where = ""
        if line is not None:
            row = self._seen_rows + self._copied_rows + int(line.group(1)) - 1
            where = f" row {row} of subtask {self._subtask}'s input"
        if column:
            where += f", column {column!r}"
        detail = (diag.message_primary or str(error)).strip()
        if self._staging is not None:
            detail = detail.replace(self._staging.name, self._options.table.name)
            context = context.replace(self._staging.name, self._options.table.name)
        return FatalDestinationError(
            f"PostgreSQL refused{where} for table {str(self._options.table)!r}: {detail}"
            + (f" ({context.strip()})" if context else "")
            + ". Nothing of this attempt is visible; fix or filter the row and re-run"
        )

    def _finish_transaction(self) -> int:
        """Everything buffered sent; the rows of the open transaction."""
        self._drain_rows()
        self._end_copy()
        return self._copied_rows

    def _reset(self) -> None:
        self._in_transaction = False
        self._staging = None
        self._seen_rows += self._copied_rows
        self._copied_rows = 0
        self._sequence += 1

    # --- checkpoint ----------------------------------------------------------------------

    def flush(self, end_of_input: bool) -> None:
        """Send every buffered row; at least once, also commit them."""
        self._drain_rows()
        self._end_copy()
        if not self._options.exactly_once and self._in_transaction:
            self._finish_transaction()
            if self._staging is not None:
                self._move_staged_rows()
            self._connection.execute("COMMIT")
            self._reset()

    def _move_staged_rows(self) -> None:
        """At least once: upsert the temporary staging table's rows into the target."""
        import psycopg  # noqa: PLC0415  # optional extra

        assert self._staging is not None
        assert self._schema is not None
        statement = merge_statement(
            self._options.table, self._staging, self._schema.names, self._options.upsert_key
        )
        try:
            self._connection.execute(statement)
        except psycopg.Error as error:
            if isinstance(error, psycopg.OperationalError):
                raise
            raise FatalDestinationError(
                f"PostgreSQL refused the upsert of subtask {self._subtask}'s rows into "
                f"{str(self._options.table)!r}: {error.diag.message_primary or error}"
                + (f" ({error.diag.message_detail})" if error.diag.message_detail else "")
                + ". Nothing of this flush is visible; fix the rows or the table and re-run"
            ) from error

    def prepare_commit(self) -> list[PostgresTransaction]:
        """Prepare the open transaction and hand over its gid (nothing if no row came)."""
        if not self._options.exactly_once:
            self.flush(False)
            return []
        if not self._in_transaction and not self._rows:
            return []
        rows = self._finish_transaction()
        options = self._options
        gid = gid_of(options.sink_id, self._job_id, self._token, self._sequence)
        staging = self._staging
        if staging is None:  # loaded the target: the transaction marks itself
            insert_marker(
                self._connection,
                options.table,
                gid=gid,
                sink_id=options.sink_id,
                job_id=self._job_id,
                attempt_token=self._token,
                rows=rows,
            )
        self._prepare(gid)
        self._reset()
        if staging is None:
            return [PostgresTransaction(gid=gid, table=str(options.table), rows=rows)]
        assert self._schema is not None  # rows came, so a schema did
        return [
            PostgresTransaction(
                gid=gid,
                table=str(options.table),
                rows=rows,
                staging=staging.name,
                columns=tuple(self._schema.names),
                upsert_key=options.upsert_key,
            )
        ]

    def _prepare(self, gid: str) -> None:
        """``PREPARE TRANSACTION`` unless a clean-up of this run already gave this attempt up."""
        import psycopg  # noqa: PLC0415  # optional extra
        from psycopg import sql  # noqa: PLC0415

        options = self._options
        lock = guard_lock_key(options.sink_id, self._job_id)
        self._connection.execute("SELECT pg_advisory_lock_shared(%s)", (lock,))
        try:
            if lost_to_cleanup(
                self._connection,
                options.table,
                sink_id=options.sink_id,
                job_id=self._job_id,
                attempt_token=self._token,
                since=self._since,
            ):
                self._connection.execute("ROLLBACK")
                self._in_transaction = False
                raise FatalDestinationError(
                    f"attempt {self._token} of subtask {self._subtask} lost: the driver already "
                    "cleaned up this stage without it (a speculative copy Spark was killing); "
                    "its rows were rolled back"
                )
            try:
                self._connection.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            except psycopg.errors.ObjectNotInPrerequisiteState as error:
                self._in_transaction = False
                raise FatalDestinationError(
                    "PostgreSQL refuses PREPARE TRANSACTION: max_prepared_transactions is 0 on "
                    f"this server. {_PREPARED_ADVICE}, or use PostgresSink.at_least_once(...)"
                ) from error
            except psycopg.errors.OutOfMemory as error:  # "maximum number ... reached"
                self._in_transaction = False
                raise FatalDestinationError(
                    f"PostgreSQL refuses PREPARE TRANSACTION: {error.diag.message_primary}. "
                    f"{_PREPARED_ADVICE}"
                ) from error
        finally:
            self._connection.execute("SELECT pg_advisory_unlock_shared(%s)", (lock,))

    def close(self) -> None:
        """Roll back a transaction not prepared (its rows were never visible); disconnect."""
        try:
            if self._copy_exit is not None:
                self._abort_copy(RuntimeError("the writer was closed"))
            if self._in_transaction and not self._connection.closed:
                self._connection.execute("ROLLBACK")
        except Exception:  # noqa: BLE001  # the connection may be dead: nothing to roll back then
            pass
        finally:
            self._in_transaction = False
            self._connection.close()
