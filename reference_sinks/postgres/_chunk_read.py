"""One key-range chunk of a table or query read as Arrow record batches (`read_chunk`).

Reading is ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` parsed by pyarrow's CSV reader
in blocks of whole rows, gathered by a thread while the block before is parsed; each
column is selected in a form that parser reads exactly (`read_expression`): dates as
days and timestamps and intervals as microseconds since 1970 (``extract(epoch ...)``,
exact since PostgreSQL 14), bytea as hex, arrays as JSON lists of their elements' text.
"""

from __future__ import annotations

import contextlib
import io
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from reference_sinks.postgres._chunks import ALIAS, KeyRange, Relation
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql as psql

__all__ = ["read_chunk", "read_expression"]

_BLOCK_BYTES: Final = 4 << 20
"""COPY output gathered into one block for the parser (whole rows, about this many bytes)."""


def _parse_type(kind: pa.DataType) -> pa.DataType:
    """The type pyarrow's parser reads a scalar of Arrow type ``kind`` as (`_leaf_read`)."""
    if pa.types.is_date32(kind):
        return pa.int32()
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        return pa.int64()
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return pa.string()
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.string()
    if (
        pa.types.is_decimal(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
    ):
        return kind
    raise SinkConfigurationError(f"Arrow type {kind} cannot be read from PostgreSQL")


def _leaf_read(value: psql.Composable, kind: pa.DataType) -> tuple[psql.Composable, pa.DataType]:
    """How a scalar of Arrow type ``kind`` is selected, and the type the parser reads it as."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    parsed = _parse_type(kind)
    if pa.types.is_date32(kind):
        return sql.SQL("({} - DATE '1970-01-01')").format(value), parsed
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        return sql.SQL("(extract(epoch FROM {}) * 1000000)::int8").format(value), parsed
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return sql.SQL("encode({}, 'hex')").format(value), parsed
    if pa.types.is_decimal(kind):
        return (
            sql.SQL("{}::numeric({}, {})").format(
                value, sql.Literal(kind.precision), sql.Literal(kind.scale)
            ),
            parsed,
        )
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return sql.SQL("{}::text").format(value), parsed
    return value, parsed


def read_expression(column: str, kind: pa.DataType) -> tuple[psql.Composable, pa.DataType]:
    """How column ``column`` is selected to be read as Arrow type ``kind``.

    Returns the SQL expression and the type pyarrow's CSV parser reads its text as
    (`read_chunk` casts that to ``kind``).

    Raises:
        SinkConfigurationError: ``kind`` is not a type a PostgreSQL column is read as.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    ident = sql.Identifier(column)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element, _ = _leaf_read(sql.SQL("x"), kind.value_type)
        # Each element as its text in a JSON list, in order (NULL stays null).
        return (
            sql.SQL(
                "CASE WHEN {c} IS NULL THEN NULL ELSE array_to_json(ARRAY(SELECT ({e})::text "
                "FROM unnest({c}) WITH ORDINALITY AS u(x, n) ORDER BY n))::text END"
            ).format(c=ident, e=element),
            pa.string(),
        )
    return _leaf_read(ident, kind)


def _hex_to_binary(column: pa.Array, kind: pa.DataType) -> pa.Array:
    return pa.array(
        [None if text is None else bytes.fromhex(text) for text in column.to_pylist()], kind
    )


def _finish_leaf(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """A parsed column (as `_leaf_read`'s parse type) as Arrow type ``kind``."""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _hex_to_binary(column, kind)
    if column.type != kind:
        return column.cast(kind)
    return column


def _finish(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """A parsed column (as `read_expression`'s parse type) as Arrow type ``kind``."""
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return _finish_leaf(column, kind)
    lines = pc.binary_join_element_wise('{"v":', pc.fill_null(column, "null"), "}", "")
    text = "\n".join(lines.to_pylist()).encode()
    read = pajson.read_json(
        io.BytesIO(text),
        parse_options=pajson.ParseOptions(
            explicit_schema=pa.schema([("v", pa.list_(pa.string()))])
        ),
    ).column("v")
    as_text = read.combine_chunks() if read.num_chunks != 1 else read.chunk(0)
    parsed = _parse_type(kind.value_type)
    values = as_text.values
    if pa.types.is_boolean(parsed):
        values = pc.equal(values, "true")  # a boolean's text (::text) is true or false
        values = pc.if_else(pc.is_null(as_text.values), pa.scalar(None, pa.bool_()), values)
    finished = _finish_leaf(values.cast(parsed), kind.value_type)
    return type(as_text).from_arrays(as_text.offsets, finished, type=kind, mask=as_text.is_null())


def _copy_rows(conn: psycopg.Connection[Any], copy: psycopg.Copy) -> Iterator[bytes]:
    """The rows of the ``COPY ... TO STDOUT`` that ``copy`` runs on ``conn``, one by one.

    The rows libpq already holds are taken straight from it (``PQgetCopyData`` without
    waiting, about a third of the time of psycopg's `Copy.read`, which runs its wait
    loop for every row); only when libpq has none does `Copy.read` wait for the server.
    When libpq reports the end itself, the COPY's final result is fetched here, as
    `Copy.read` would (an error the server sent after the last row is raised).
    """
    from psycopg import errors, generators, pq  # noqa: PLC0415  # optional extra

    get = conn.pgconn.get_copy_data
    while True:
        nbytes, data = get(1)  # 1: do not wait; raises on a failed read
        if nbytes > 0:
            yield bytes(data)
        elif nbytes == 0:  # nothing held: wait for the server
            if not (waited := copy.read()):
                return
            yield bytes(waited)
        else:  # -1: the server ended the COPY; take its final result
            results = conn.wait(generators.fetch_many(conn.pgconn))
            for result in results:
                if result.status != pq.ExecStatus.COMMAND_OK:
                    raise errors.error_from_result(result, encoding=conn.info.encoding)
            return


class _Stopped(Exception):  # a signal, not an error
    """The consumer of `_copy_blocks` went away: stop the COPY."""


_END: Final = object()


def _copy_blocks(conn: psycopg.Connection[Any], statement: psql.Composed) -> Iterator[bytes]:
    """The output of a ``COPY ... TO STDOUT`` in blocks of whole rows, read by a thread.

    PostgreSQL sends each row as one message, handed over one at a time (`_copy_rows`);
    a thread gathers them into blocks of about ``_BLOCK_BYTES`` while the caller parses
    the block before (pyarrow's parser releases the GIL), so the server, the row loop
    and the parser run at once. Closing the iterator early cancels the COPY (psycopg
    cancels and drains it; the transaction is then aborted).
    """
    handoff: queue.Queue[object] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def drain() -> None:
        try:
            with conn.cursor() as cursor, cursor.copy(statement) as copy:
                parts: list[bytes] = []
                size = 0
                for data in _copy_rows(conn, copy):
                    parts.append(data)
                    size += len(data)
                    if size >= _BLOCK_BYTES:
                        handoff.put(b"".join(parts))
                        parts, size = [], 0
                        if stop.is_set():
                            raise _Stopped
                if parts:
                    handoff.put(b"".join(parts))
            handoff.put(_END)
        except BaseException as error:  # noqa: BLE001  # handed to the consumer
            handoff.put(error)

    thread = threading.Thread(target=drain, name="sinkv2-postgres-copy", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a put until the thread has ended
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.05)
        thread.join()


def read_chunk(  # noqa: PLR0917  # the interface the CDC source shares
    conn: psycopg.Connection[Any],
    relation: Relation,
    columns: Sequence[str],
    key: str | None,
    chunk: KeyRange,
    schema: pa.Schema,
    *,
    order_by: Sequence[str] | None = None,
    skip: int = 0,
    batch_rows: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``chunk`` as record batches of ``schema`` (one field per column).

    Rows come in ``order_by`` order (default: ``key``, NULLs first; nothing when both
    are ``None``), the first ``skip`` of them left out. Runs one ``COPY ... TO
    STDOUT`` on ``conn`` (in its current transaction: a repeatable-read one makes
    every chunk read the same snapshot), from a thread of its own: leave ``conn``
    alone until the iterator is exhausted or closed (closing it early cancels the
    COPY, which aborts the transaction).

    Raises:
        SinkConfigurationError: A field's type is not one a column is read as.
        psycopg.Error: The query failed (the connection's transaction is then aborted).
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    if len(columns) != len(schema):
        raise SinkConfigurationError(
            f"read_chunk got {len(columns)} columns but a schema of {len(schema)} fields"
        )
    reads = [read_expression(name, field.type) for name, field in zip(columns, schema, strict=True)]
    # Aliased out of the way: ORDER BY names then mean the relation's columns.
    selected = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(expression, sql.Identifier(f"{ALIAS}_{index}"))
        for index, (expression, _) in enumerate(reads)
    )
    order = list(order_by) if order_by is not None else ([key] if key is not None else [])
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        selected, relation.from_item(), chunk.where(key)
    )
    if order:
        query = sql.SQL("{} ORDER BY {}").format(
            query,
            sql.SQL(", ").join(sql.SQL("{} NULLS FIRST").format(sql.Identifier(o)) for o in order),
        )
    if skip:
        query = sql.SQL("{} OFFSET {}").format(query, sql.Literal(int(skip)))
    names = [f"c{i}" for i in range(len(reads))]
    convert = pacsv.ConvertOptions(
        column_types=dict(zip(names, (parsed for _, parsed in reads), strict=True)),
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        true_values=["t"],
        false_values=["f"],
    )
    read_options = pacsv.ReadOptions(column_names=names, block_size=_BLOCK_BYTES + (1 << 20))
    parse = pacsv.ParseOptions(newlines_in_values=True)

    def parsed(block: bytes | bytearray) -> Iterator[pa.RecordBatch]:
        table = pacsv.read_csv(
            io.BytesIO(block),
            read_options=read_options,
            parse_options=parse,
            convert_options=convert,
        )
        arrays = [
            _finish(table.column(i).combine_chunks(), field.type) for i, field in enumerate(schema)
        ]
        yield from pa.Table.from_arrays(arrays, schema=schema).to_batches(batch_rows)

    statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(query)
    for block in _copy_blocks(conn, statement):
        yield from parsed(block)
