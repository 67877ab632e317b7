"""`PostgresSource`: a PostgreSQL table or query as a bounded FLIP-27 source, read in parallel.

The snapshot is cut into key ranges on a split key (``_chunks``), each range a split
read by one ``COPY``; columns are read as the type table says (``_types``). The
source is configured and checked on construction (the relation, its columns, their
types and the split key), where a bad one fails before any job runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import pyarrow as pa

from reference_sinks.postgres._chunk_read import (
    UnreadableValueError,
    adbc_error,
    connect_reader,
    read_chunk,
)
from reference_sinks.postgres._chunks import (
    SESSION_OPTIONS,
    Relation,
    plan_chunks,
    split_key_type,
)
from reference_sinks.postgres._source_reader import PostgresSourceReader, PostgresSplitEnumerator
from reference_sinks.postgres._source_split import (
    PostgresEnumeratorState,
    PostgresSourceSplit,
    enumerator_state_serializer,
    split_serializer,
)
from reference_sinks.postgres._table import Column, describe_table
from reference_sinks.postgres._types import arrow_type
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError, SinkV2Error
from sinkv2.source import Boundedness, SourceReaderContext, SplitEnumeratorContext
from sinkv2.text import describe

if TYPE_CHECKING:
    import psycopg
    from adbc_driver_manager import dbapi

__all__ = ["PostgresReadError", "PostgresSource"]

_APPLICATION: Final = "sinkv2-source"
_PG_TYPE: Final = """
SELECT t.oid, t.typname, t.typcategory, e.typcategory,
       EXISTS (SELECT 1 FROM pg_opclass o JOIN pg_am a ON a.oid = o.opcmethod
               WHERE a.amname = 'btree' AND o.opcdefault
                 AND o.opcintype = CASE WHEN t.typcategory = 'A' THEN 'anyarray'::regtype
                                        ELSE t.oid END)
FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = ANY(%s)
"""


class PostgresReadError(SinkV2Error, RuntimeError):
    """A split of `PostgresSource` or `PostgresCdcSource` could not be read; the message says why.

    It names the split, its range and the relation (and the column of a value Arrow
    cannot hold).

    The server's error is chained as ``__cause__``. The task fails rather than skip rows.

    Attributes:
        split_id: The split that failed.
    """

    def __init__(self, message: str, *, split_id: str) -> None:
        super().__init__(message)
        self.split_id = split_id


_PRIMARY_KEY: Final = """
SELECT a.attname
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = to_regclass(%s) AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)
"""


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SinkConfigurationError(
            f"PostgresSource {name} must be a positive int (got {describe(value)}); "
            "set it to at least 1"
        )
    return value


def _connect(url: str) -> psycopg.Connection[Any]:
    """A connection for planning or reading (ISO dates, exact floats: see ``_chunks``)."""
    import psycopg  # noqa: PLC0415  # optional extra

    try:
        return psycopg.connect(url, options=SESSION_OPTIONS, application_name=_APPLICATION)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as error:  # down; malformed
        raise SinkConfigurationError(
            f"PostgresSource could not connect to PostgreSQL: {str(error).strip()}; check the "
            "url ('postgresql://user@host:5432/db') and that the server is up"
        ) from error


@final
class _Described:
    """The relation's columns (all of them) and which of them order ties."""

    def __init__(
        self,
        columns: list[Column],
        orderable: dict[str, bool],
        unique: list[list[str]],
        primary_key: list[str],
    ) -> None:
        self.columns = columns
        self.orderable = orderable
        self.unique = unique  # column sets of unique indexes whose columns are all NOT NULL
        self.primary_key = primary_key  # in index order


def _describe(connection: psycopg.Connection[Any], relation: Relation) -> _Described:
    """Columns, types, NOT NULL and unique keys of a table; columns and types of a query.

    Raises:
        SinkConfigurationError: The table does not exist; the query does not run.
    """
    import psycopg  # noqa: PLC0415  # optional extra
    from psycopg import sql  # noqa: PLC0415  # optional extra

    if relation.table is not None:
        quoted = relation.table.sql().as_string(connection)
        found = connection.execute("SELECT to_regclass(%s)", (quoted,)).fetchone()
        if found is None or found[0] is None:
            raise SinkConfigurationError(
                f"PostgresSource: table {str(relation.table)!r} does not exist in database "
                f"{connection.info.dbname!r} (looked up as {quoted}, names as stored: case "
                "matters); name an existing table or view, or pass query='SELECT ...'"
            )
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(relation.from_item()))
            result = cursor.pgresult
            assert result is not None
            shape = [
                (
                    (result.fname(i) or b"").decode(),
                    result.ftype(i),
                    result.fmod(i),
                )
                for i in range(result.nfields)
            ]
    except psycopg.Error as error:
        connection.rollback()
        raise SinkConfigurationError(
            f"PostgresSource could not read {relation}: {str(error).strip()}"
        ) from error
    names_seen = [name for name, _, _ in shape]
    twice = sorted({name for name in names_seen if names_seen.count(name) > 1})
    if twice:
        raise SinkConfigurationError(
            f"PostgresSource: {relation} has more than one column named {twice}; give each "
            "column its own name (SELECT a.id AS a_id, b.id AS b_id ...)"
        )
    oids = sorted({oid for _, oid, _ in shape})
    kinds = {row[0]: row[1:] for row in connection.execute(_PG_TYPE, (oids,)).fetchall()}
    names = connection.execute(
        "SELECT format_type(o, m) FROM unnest(%s::oid[], %s::int4[]) AS u(o, m)",
        ([oid for _, oid, _ in shape], [mod for _, _, mod in shape]),
    ).fetchall()
    not_null: set[str] = set()
    unique: list[list[str]] = []
    primary_key: list[str] = []
    if relation.table is not None:
        table = describe_table(connection, relation.table)
        not_null = {column.name for column in table.columns if column.not_null}
        unique = sorted(
            sorted(key) for key in table.unique_keys if all(name in not_null for name in key)
        )
        primary_key = [
            name
            for (name,) in connection.execute(
                _PRIMARY_KEY, (relation.table.sql().as_string(connection),)
            ).fetchall()
        ]
    columns = [
        Column(
            name=name,
            type_name=type_name,
            category=kinds[oid][1],
            base_type=kinds[oid][0],
            element_category=kinds[oid][2],
            not_null=name in not_null,
            has_default=False,
        )
        for (name, oid, _), (type_name,) in zip(shape, names, strict=True)
    ]
    orderable = {name: bool(kinds[oid][3]) for name, oid, _ in shape}
    return _Described(columns, orderable, unique, primary_key)


@final
class PostgresSource:
    """A PostgreSQL table or query as a bounded FLIP-27 source, read in parallel by key ranges.

    Flink's JDBC source and Flink CDC's snapshot phase, as Spark's JDBC reader's
    ``partitionColumn``: the rows are cut into ``chunks`` key ranges on ``split_key``
    (even ranges between its minimum and maximum for integer, numeric, date and
    timestamp keys, quantiles of a sample when those would be skewed and for other
    keys), each range a split read with one ``COPY`` in its own read-only
    repeatable-read transaction. The split key defaults to a table's primary key's
    first column; without one the rows are one split (a warning in the log says so
    when more chunks were asked for).

    A split's position is the number of its rows emitted, in a fixed order (the split
    key, then a unique NOT NULL key of the table, else every orderable column), so a
    restored reader skips exactly those rows. Each chunk reads its own snapshot, as
    Spark's JDBC partitions do: rows changed while the source reads may be seen in one
    chunk and not another (for a consistent read of a changing table, see
    ``PostgresCdcSource``).

    Records are Arrow batches of `get_produced_type`: the columns in ``columns`` order
    (default: the relation's), typed by the type table (``docs/sinks/postgres-source.md``),
    NOT NULL columns of a table non-nullable.

    Args:
        url: A libpq URL or conninfo string (``postgresql://user@host:5432/db``).
        table: ``"table"`` or ``"schema.table"`` (names as stored), or a view.
        query: Instead of ``table``: a ``SELECT`` whose rows are read.
        split_key: The column to cut ranges on; ``None``: a table's primary key's first
            column (as Flink CDC chooses), and one split for a table without a primary
            key or for a query.
        chunks: How many key ranges to cut, at most (a key with few distinct values
            gives fewer).
        columns: The columns to read, in this order; default all.
        batch_rows: Rows per emitted Arrow batch, at most.
        sample_rows: Keys sampled, at most, to find quantile boundaries.

    Raises:
        SinkConfigurationError: A bad argument, named; the server cannot be reached;
            the table does not exist or the query fails; a column is unknown or of a
            type with no Arrow mapping (named, with its type); the split key is unknown
            or cannot be ordered.
    """

    def __init__(
        self,
        url: str,
        table: str | None = None,
        *,
        query: str | None = None,
        split_key: str | None = None,
        chunks: int = 4,
        columns: Sequence[str] | None = None,
        batch_rows: int = 65_536,
        sample_rows: int = 100_000,
    ) -> None:
        if not isinstance(url, str) or not url.strip():
            raise SinkConfigurationError(
                f"PostgresSource url must be a non-empty conninfo string or URL (got "
                f"{describe(url)}); e.g. 'postgresql://app@db:5432/shop'"
            )
        if (table is None) == (query is None):
            raise SinkConfigurationError(
                "PostgresSource needs exactly one of table='schema.table' or query='SELECT ...' "
                f"(got table={table!r}, query={query!r})"
            )
        self.url = url
        self.relation = (
            Relation.of_table(table) if table is not None else Relation.of_query(query or "")
        )
        if split_key is not None and (not isinstance(split_key, str) or not split_key):
            raise SinkConfigurationError(
                "PostgresSource split_key must be a column name or None (got "
                f"{describe(split_key)})"
            )
        self.chunks = _positive_int("chunks", chunks)
        self.batch_rows = _positive_int("batch_rows", batch_rows)
        self.sample_rows = _positive_int("sample_rows", sample_rows)
        if columns is not None and (
            isinstance(columns, str)
            or not isinstance(columns, Sequence)
            or not columns
            or not all(isinstance(name, str) and name for name in columns)
        ):
            raise SinkConfigurationError(
                f"PostgresSource columns must be a non-empty list of column names or None (got "
                f"{describe(columns)}); e.g. columns=['id', 'total']"
            )
        with _connect(url) as connection:
            described = _describe(connection, self.relation)
            self.columns, self._produced = self._select(described, columns)
            if split_key is None and described.primary_key:
                first = described.primary_key[0]
                split_key = first if described.orderable.get(first) else None
            if split_key is not None:
                split_key_type(connection, self.relation, split_key)
            self.split_key = split_key
            self.reads = f"{self.relation.identity(connection)}, split on {split_key!r}"
            connection.rollback()
        self.order_by = self._order(described)
        # Declared NOT NULL: read without NULLS FIRST and NULL tests, so an index can serve them.
        self.not_null = frozenset(
            c.name
            for c in described.columns
            if c.not_null and (c.name in self.order_by or c.name == split_key)
        )

    def _select(
        self, described: _Described, wanted: Sequence[str] | None
    ) -> tuple[tuple[str, ...], pa.Schema]:
        by_name = {column.name: column for column in described.columns}
        names = list(wanted) if wanted is not None else list(by_name)
        unknown = [name for name in names if name not in by_name]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if unknown or duplicated:
            problem = f"{unknown} are not columns" if unknown else f"{duplicated} appear twice"
            raise SinkConfigurationError(
                f"PostgresSource columns: {problem} of {self.relation}; its columns are "
                f"{list(by_name)}"
            )
        fields = [
            pa.field(name, arrow_type(by_name[name]), nullable=not by_name[name].not_null)
            for name in names
        ]
        return tuple(names), pa.schema(fields)

    def _order(self, described: _Described) -> tuple[str, ...]:
        """The split key, then columns that make the order total (see the class docstring)."""
        first = [] if self.split_key is None else [self.split_key]
        if self.split_key is not None and [self.split_key] in described.unique:
            return tuple(first)
        if described.unique:
            rest = described.unique[0]
        else:
            rest = [c.name for c in described.columns if described.orderable[c.name]]
        return tuple(first + [name for name in rest if name not in first])

    def __repr__(self) -> str:
        key = "" if self.split_key is None else f", split_key={self.split_key!r}"
        return f"PostgresSource(<url>, {self.relation}{key}, chunks={self.chunks})"

    # --- FLIP-27 -----------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """``BOUNDED``: the rows there are when each chunk is read."""
        return Boundedness.BOUNDED

    def get_produced_type(self) -> pa.Schema:
        """The columns read, typed by the type table; a table's NOT NULL columns non-nullable."""
        return self._produced

    def plan(self) -> list[PostgresSourceSplit]:
        """The splits: the chunks of the relation on the split key, in key order.

        Raises:
            SinkConfigurationError: The server cannot be reached, or the split key no
                longer fits.
        """
        with _connect(self.url) as connection:
            chunks = plan_chunks(
                connection,
                self.relation,
                self.split_key,
                self.chunks,
                sample_rows=self.sample_rows,
            )
            connection.rollback()
        return [PostgresSourceSplit.of(index, chunk) for index, chunk in enumerate(chunks)]

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[PostgresSourceSplit]
    ) -> PostgresSplitEnumerator:
        """Plan the chunks now and hand them out on request."""
        return self.restore_enumerator(
            enum_context, PostgresEnumeratorState(remaining=tuple(self.plan()), reads=self.reads)
        )

    def restore_enumerator(
        self,
        enum_context: SplitEnumeratorContext[PostgresSourceSplit],
        checkpoint: PostgresEnumeratorState,
    ) -> PostgresSplitEnumerator:
        """Go on handing out the chunks ``checkpoint`` had not assigned (if it is ours)."""
        return PostgresSplitEnumerator(enum_context, checkpoint, self.reads)

    def create_reader(self, reader_context: SourceReaderContext) -> PostgresSourceReader:
        """A reader that reads one chunk after another on its own connection."""
        return PostgresSourceReader(reader_context, self._reader_connection, self._read)

    def _reader_connection(self) -> dbapi.Connection:
        """The reader's connection: ADBC's PostgreSQL driver (see ``_chunk_read``)."""
        import psycopg  # noqa: PLC0415  # optional extra

        connection_error = adbc_error()
        try:
            return connect_reader(self.url, _APPLICATION)
        except (connection_error, psycopg.ProgrammingError) as error:
            raise SinkConfigurationError(
                f"PostgresSource could not connect to PostgreSQL: {str(error).strip()}; check "
                "the url ('postgresql://user@host:5432/db') and that the server is up"
            ) from error

    def _read(
        self, connection: dbapi.Connection, split: PostgresSourceSplit
    ) -> Iterator[pa.RecordBatch]:
        import adbc_driver_manager  # noqa: PLC0415  # optional extra

        try:
            yield from read_chunk(
                connection,
                self.relation,
                self.columns,
                self.split_key,
                split.key_range(),
                self._produced,
                order_by=self.order_by,
                skip=split.records_read,
                batch_rows=self.batch_rows,
                not_null=self.not_null,
            )
        except (adbc_driver_manager.Error, pa.ArrowIOError, UnreadableValueError) as error:
            hint = (
                ""  # it names the column and what to do
                if isinstance(error, UnreadableValueError)
                else ". Values Arrow cannot hold (infinite dates or timestamps, numeric NaN or "
                "digits beyond the column's decimal type) fail the read: filter or cast them "
                "in query='SELECT ...'"
            )
            raise PostgresReadError(
                f"PostgresSource could not read split {split.id} {split.key_range()} of "
                f"{self.relation}: {str(error).strip()}{hint}",
                split_id=split.id,
            ) from error

    def get_split_serializer(self) -> AttrsMsgpackSerializer[PostgresSourceSplit]:
        """Splits, positions included, as msgpack (version 1)."""
        return split_serializer()

    def get_enumerator_checkpoint_serializer(
        self,
    ) -> AttrsMsgpackSerializer[PostgresEnumeratorState]:
        """The enumerator's checkpoint as msgpack (version 1)."""
        return enumerator_state_serializer()
