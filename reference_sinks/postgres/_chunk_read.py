"""One key-range chunk of a table or query read as Arrow record batches (`read_chunk`).

Reading is one ``SELECT`` run by the ADBC PostgreSQL driver (`connect_reader`), which
fetches it as ``COPY (SELECT ...) TO STDOUT (FORMAT binary)`` and decodes the rows
into Arrow in C++: no Python call per row or per value. Each column is selected in a
form whose binary value the driver decodes exactly (`read_expression`) and finished
into the type table's Arrow type with a vectorised cast (`_finish`):

- integers, floats, booleans, ``bytea``, ``date``, ``timestamp`` and ``timestamptz``
  as they are (the driver's Arrow types are the type table's);
- every type read as a string cast to ``text`` on the server (``uuid``, ``json``, enums ...);
- ``numeric`` cast to the field's ``numeric(p, s)`` on the server (which rounds as the
  type table says), then to its unscaled ``int8`` when ``p <= 18`` (viewed as
  ``decimal128(p, s)`` without arithmetic), else to its text (cast to ``decimal128``);
- ``interval`` as ``extract(epoch ...)`` microseconds (``int8``);
- arrays the same per element (a multi-dimensional array as its elements in order, as
  ``unnest`` gives them), and arrays read as they are cast to their element's built-in
  array type (``integer[]`` ...: an array of a domain has a type of its own).

So every column of the result has a built-in type (the server sends a domain's base
type), which is what lets a process keep the driver's database object, and the type
catalog the driver reads when it is made, for every later connection to the same
server (`connect_reader`).

Values Arrow cannot hold fail the read with `UnreadableValueError` naming the column:
infinite dates and timestamps (which the driver would otherwise shift past Arrow's
range), and numeric ``NaN`` and infinities (for ``p <= 18`` the server refuses the cast to ``int8``,
and the error names the column).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from reference_sinks.postgres._chunks import ALIAS, KeyRange, Relation
from reference_sinks.postgres._types import postgres_type
from sinkv2.errors import SinkConfigurationError, SinkV2Error

if TYPE_CHECKING:
    from adbc_driver_manager import dbapi
    from psycopg import sql as psql

__all__ = [
    "READER_SETTINGS",
    "UnreadableValueError",
    "adbc_error",
    "connect_reader",
    "read_chunk",
    "read_expression",
    "reader_conninfo",
]

READER_SETTINGS: Final = (
    ("DateStyle", "ISO"),
    ("extra_float_digits", "1"),
    ("TimeZone", "UTC"),
    ("default_transaction_read_only", "on"),
    ("default_transaction_isolation", "repeatable read"),
)
"""The reading session's settings: `_chunks.SESSION_OPTIONS` (so a bound's text reads as
the value it was planned from), and each statement a read-only repeatable-read transaction."""

_MIN_TIMESTAMP_US: Final = -210_866_803_200_000_000
"""PostgreSQL's earliest timestamp (4714-11-24 BC) in microseconds since 1970; the driver
shifts +-infinity (and values past year 294,246) below it."""
_INT8_DIGITS: Final = 18
"""A ``numeric(p, s)`` with ``p`` up to this is read as its unscaled ``int8`` (the cheapest
form to decode); wider ones as their text."""
_MAX_DECIMAL_DIGITS: Final = 38
_MIN_DATE_DAYS: Final = -2_440_588
"""PostgreSQL's earliest date (4714-11-24 BC) in days since 1970; +-infinity lands below it."""


class UnreadableValueError(SinkV2Error, ValueError):
    """A value of a column has no Arrow value (an infinite timestamp, numeric NaN, ...)."""


_DATABASES: Final[dict[str, Any]] = {}
"""The driver's database objects of this process, by connection string (`connect_reader`)."""
_DATABASES_LOCK: Final = threading.Lock()


def reader_conninfo(url: str, application_name: str) -> str:
    """``url`` as a libpq connection string that sets `READER_SETTINGS` at connection start.

    The settings go in the startup packet's ``options`` (after any the URL gives, so
    they win), with ``application_name``: no statement runs to set them.

    Raises:
        psycopg.ProgrammingError: ``url`` is not a libpq URL or connection string.
    """
    from psycopg import conninfo  # noqa: PLC0415  # optional extra

    params = conninfo.conninfo_to_dict(url)
    settings = " ".join(
        f"-c {name}={value.replace(' ', chr(92) + ' ')}" for name, value in READER_SETTINGS
    )
    given = params.get("options")
    params["options"] = f"{given} {settings}" if given else settings
    params["application_name"] = application_name
    return conninfo.make_conninfo("", **params)


def connect_reader(url: str, application_name: str) -> dbapi.Connection:
    """An ADBC connection to ``url`` set up for `read_chunk` (`READER_SETTINGS`, autocommit).

    Each `read_chunk` is then one statement: its own read-only repeatable-read
    transaction, one snapshot. The driver's database object (which reads the server's
    type catalog when made, some 0.1 s) is made once per connection string and kept
    for the process: a Spark Python worker reused by later tasks connects in one round
    trip. It holds no server connection; what it caches of the catalog is only used
    for built-in types (module docstring), which a server never changes.

    Raises:
        adbc_driver_manager.Error: The server cannot be reached.
        psycopg.ProgrammingError: ``url`` is not a libpq URL or connection string.
    """
    adbc_error()  # the driver is there, or a clear install line
    import adbc_driver_manager  # noqa: PLC0415  # optional extra
    import adbc_driver_postgresql  # type: ignore[import-untyped]  # noqa: PLC0415
    from adbc_driver_manager import dbapi  # noqa: PLC0415  # optional extra

    target = reader_conninfo(url, application_name)
    # adbc-driver-manager 1.x shares a database object between connections with this
    # private class (its own ``adbc_clone`` does); where it is not as expected, each
    # connection makes its own database, as the public ``connect`` does.
    shared_type = getattr(dbapi, "_SharedDatabase", None)
    if shared_type is not None:
        with _DATABASES_LOCK:
            shared = _DATABASES.get(target)
            if shared is None:
                shared = _DATABASES[target] = shared_type(adbc_driver_postgresql.connect(target))
        database = getattr(shared, "_db", None)
        if isinstance(database, adbc_driver_manager.AdbcDatabase):
            # The connection holds its own reference to the database; closing it leaves ours.
            return dbapi.Connection(
                shared, adbc_driver_manager.AdbcConnection(database), autocommit=True
            )
    import adbc_driver_postgresql.dbapi  # type: ignore[import-untyped]  # noqa: PLC0415

    connection: dbapi.Connection = adbc_driver_postgresql.dbapi.connect(target, autocommit=True)
    return connection


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _check_readable(kind: pa.DataType) -> None:
    if not (
        pa.types.is_date32(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_duration(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
    ):
        raise SinkConfigurationError(f"Arrow type {kind} cannot be read from PostgreSQL")


def _epoch_us(value: psql.Composable) -> psql.Composable:
    from psycopg import sql  # noqa: PLC0415  # optional extra

    return sql.SQL("(extract(epoch FROM {}) * 1000000)::int8").format(value)


def read_expression(  # noqa: PLR0911  # one form per kind of type
    column: str, kind: pa.DataType
) -> psql.Composable:
    """How column ``column`` is selected to be read as Arrow type ``kind`` (module docstring).

    Raises:
        SinkConfigurationError: ``kind`` is not a type a PostgreSQL column is read as.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    ident = sql.Identifier(column)
    leaf = kind.value_type if _is_list(kind) else kind
    _check_readable(leaf)
    brackets = "[]" if _is_list(kind) else ""
    if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
        return sql.SQL("{}::text" + brackets).format(ident)
    if pa.types.is_decimal(leaf):
        rounded = sql.SQL("{}::numeric({}, {})").format(
            ident, sql.Literal(leaf.precision), sql.Literal(leaf.scale)
        )
        if not brackets and leaf.precision <= _INT8_DIGITS:  # its unscaled value fits int8
            return sql.SQL("({} * {})::int8").format(rounded, sql.Literal(10**leaf.scale))
        return sql.SQL("{}::text" + brackets).format(rounded + sql.SQL(brackets))
    if pa.types.is_duration(leaf):
        if not brackets:
            return _epoch_us(ident)
        # Each element in order (NULL stays null), flattened as unnest gives them.
        return sql.SQL(
            "CASE WHEN {c} IS NULL THEN NULL ELSE ARRAY(SELECT {e} "
            "FROM unnest({c}) WITH ORDINALITY AS u(x, n) ORDER BY n) END"
        ).format(c=ident, e=_epoch_us(sql.SQL("x")))
    if brackets:  # its built-in array type (an array of a domain has a type of its own)
        return sql.SQL("{}::" + postgres_type(kind)).format(ident)
    return ident


def _unreadable(column: str, what: str) -> UnreadableValueError:
    return UnreadableValueError(
        f"column {column!r} holds {what}, which Arrow cannot hold; filter or cast such "
        "values in query='SELECT ...'"
    )


def _any_below(values: pa.Array, storage: pa.DataType, least: int) -> bool:
    return bool(pc.any(pc.less(values.view(storage), least)).as_py())


def _finish_leaf(values: pa.Array, kind: pa.DataType, column: str) -> pa.Array:
    """The driver's values of one leaf column (or a list's elements) as Arrow type ``kind``."""
    if isinstance(values, pa.ExtensionArray):  # numeric: its text (opaque extension)
        values = values.storage
    if pa.types.is_decimal(kind) and pa.types.is_int64(values.type):  # unscaled
        return values.cast(pa.decimal128(_MAX_DECIMAL_DIGITS, 0)).view(kind)
    if pa.types.is_decimal(kind):
        try:
            return values.cast(kind)
        except pa.ArrowInvalid:
            raise _unreadable(column, "numeric NaN or infinity") from None
    if pa.types.is_timestamp(values.type) and _any_below(values, pa.int64(), _MIN_TIMESTAMP_US):
        raise _unreadable(column, "an infinite timestamp or one beyond year 294,246")
    if pa.types.is_date32(values.type) and _any_below(values, pa.int32(), _MIN_DATE_DAYS):
        raise _unreadable(column, "an infinite date")
    if values.type != kind:
        return values.cast(kind)
    return values


def _finish(column: pa.Array, kind: pa.DataType, name: str) -> pa.Array:
    """A column as the driver read it (`read_expression`'s form) as Arrow type ``kind``."""
    if not _is_list(kind):
        return _finish_leaf(column, kind, name)
    values = _finish_leaf(column.values, kind.value_type, name)
    offsets = column.offsets
    return type(pa.array([], kind)).from_arrays(offsets, values, type=kind, mask=column.is_null())


def _query(  # noqa: PLR0917  # read_chunk's arguments
    relation: Relation,
    columns: Sequence[str],
    key: str | None,
    chunk: KeyRange,
    schema: pa.Schema,
    order_by: Sequence[str] | None,
    skip: int,
    not_null: Collection[str],
) -> str:
    from psycopg import sql  # noqa: PLC0415  # optional extra

    # Aliased out of the way: ORDER BY names then mean the relation's columns.
    selected = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(
            read_expression(name, field.type), sql.Identifier(f"{ALIAS}_{index}")
        )
        for index, (name, field) in enumerate(zip(columns, schema, strict=True))
    )
    order = list(order_by) if order_by is not None else ([key] if key is not None else [])
    if key is not None and key in not_null and chunk.nulls:
        chunk = attrs.evolve(chunk, nulls=False)  # no NULL keys to take
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        selected, relation.from_item(), chunk.where(key)
    )
    if order:
        # NULLs first; a NOT NULL column's plain ascending order is the same order, and the
        # one a default btree index gives without a sort.
        query = sql.SQL("{} ORDER BY {}").format(
            query,
            sql.SQL(", ").join(
                sql.SQL("{}" if o in not_null else "{} NULLS FIRST").format(sql.Identifier(o))
                for o in order
            ),
        )
    if skip:
        query = sql.SQL("{} OFFSET {}").format(query, sql.Literal(int(skip)))
    return query.as_string(None)


def read_chunk(  # noqa: PLR0917  # the interface of _chunks' docstring
    conn: dbapi.Connection,
    relation: Relation,
    columns: Sequence[str],
    key: str | None,
    chunk: KeyRange,
    schema: pa.Schema,
    *,
    order_by: Sequence[str] | None = None,
    skip: int = 0,
    batch_rows: int = 65_536,
    not_null: Collection[str] = (),
) -> Iterator[pa.RecordBatch]:
    """The rows of ``chunk`` as record batches of ``schema`` (one field per column).

    Rows come in ``order_by`` order (default: ``key``, NULLs first; nothing when both
    are ``None``), the first ``skip`` of them left out. Columns in ``not_null`` are
    declared NOT NULL: ordered and filtered without NULL handling (the same rows in
    the same order, but an index on them can serve the read). Runs one statement on ``conn``
    (a `connect_reader` connection: the statement is its own read-only repeatable-read
    transaction). Leave ``conn`` alone until the iterator is exhausted or closed;
    closing it early cancels the statement (the connection stays usable).

    Raises:
        SinkConfigurationError: A field's type is not one a column is read as.
        UnreadableValueError: A value has no Arrow value (named column).
        adbc_driver_manager.Error, pyarrow.ArrowIOError: The query failed.
    """
    if len(columns) != len(schema):
        raise SinkConfigurationError(
            f"read_chunk got {len(columns)} columns but a schema of {len(schema)} fields"
        )
    statement = _query(relation, columns, key, chunk, schema, order_by, skip, not_null)
    cursor = conn.cursor()
    batches: pa.RecordBatchReader | None = None
    done = False
    try:
        cursor.execute(statement)
        batches = cursor.fetch_record_batch()
        for batch in batches:
            arrays = [
                _finish(batch.column(i), field.type, field.name) for i, field in enumerate(schema)
            ]
            finished = pa.RecordBatch.from_arrays(arrays, schema=schema)
            for start in range(0, finished.num_rows, batch_rows):
                yield finished.slice(start, batch_rows)
        done = True
    except (OSError, pa.ArrowException, adbc_error()) as error:
        if "cannot convert" not in str(error) or not (narrow := _int8_decimals(columns, schema)):
            raise
        raise _unreadable(  # the server's cast to int8 of a narrow numeric refused it
            narrow[0] if len(narrow) == 1 else f"one of {narrow}", "numeric NaN or infinity"
        ) from error
    finally:
        if not done:  # failed or closed early: stop the server's COPY rather than drain it
            _cancel(cursor)
        try:
            if batches is not None:
                batches.close()
            cursor.close()
        except (OSError, pa.ArrowException, adbc_error()):
            if done:
                raise
            # else: closing what was cancelled or failed; the first error is the one raised


def _int8_decimals(columns: Sequence[str], schema: pa.Schema) -> list[str]:
    """The columns read as their unscaled int8 (see `read_expression`)."""
    return [
        column
        for column, field in zip(columns, schema, strict=True)
        if pa.types.is_decimal(field.type) and field.type.precision <= _INT8_DIGITS
    ]


def adbc_error() -> type[Exception]:
    """ADBC's error class; without the driver installed, an ImportError saying what to install.

    The driver is in the ``postgres`` extra with psycopg; an environment that has only
    psycopg (enough for `PostgresSink`) gets the install line, not a bare module error.
    """
    try:
        import adbc_driver_manager  # noqa: PLC0415  # optional extra
        import adbc_driver_postgresql  # noqa: F401, PLC0415
    except ImportError as error:
        raise ImportError(
            "PostgresSource reads with ADBC's PostgreSQL driver; install it with: "
            "pip install 'sinkv2[postgres]' (or adbc-driver-postgresql)"
        ) from error
    return adbc_driver_manager.Error


def _cancel(cursor: Any) -> None:
    try:
        cursor.adbc_cancel()
    except adbc_error():
        pass  # nothing running any more
