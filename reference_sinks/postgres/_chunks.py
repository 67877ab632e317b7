"""Key-range chunks of a table or a query (reading one chunk is ``_chunk_read``).

The snapshot half of `PostgresSource` (and of the CDC source's snapshot-then-stream
hand-over). Stable interface:

- `Relation` - what is read: ``Relation.of_table("public.orders")`` or
  ``Relation.of_query("SELECT ...")``.
- `KeyRange` - one chunk: ``lower <= key < upper`` (either bound open when ``None``),
  plus the rows whose key is NULL when ``nulls``. Bounds are the key's values as
  PostgreSQL's text, so they are exact for every type and serialize as they are
  (`KeyRange.to_json` / `KeyRange.from_json`).
- `plan_chunks(conn, relation, key, chunks) -> list[KeyRange]` - ranges that cover
  every row exactly once (NULL keys in the first), in key order.
- `reference_sinks.postgres._chunk_read.read_chunk(conn, relation, columns, key, chunk,
  schema, *, order_by=None, skip=0, not_null=()) -> Iterator[pyarrow.RecordBatch]` - the
  chunk's rows in ``order_by`` order (default: the key), the first ``skip`` left out,
  typed as ``schema`` says, on an ADBC connection from ``_chunk_read.connect_reader``.
- `SESSION_OPTIONS` - the ``options`` a connection used by both needs
  (``psycopg.connect(url, options=SESSION_OPTIONS)``, or the same settings): ISO
  dates and shortest-exact floats, so a bound's text reads back as the same value.

How chunks are planned (as Flink CDC's chunk splitter and Spark's ``partitionColumn``
do): no key, or no non-NULL key, is one chunk (and a warning in the log when more
were asked for). An integer, numeric, date or timestamp key is cut into evenly wide
ranges between its minimum and maximum - unless a sample of the keys (all of them up
to ``sample_rows``, else a repeatable ``TABLESAMPLE SYSTEM`` of a table or a random
filter of a query) shows that one range would hold more than twice its share; then,
and for every other orderable key (text, uuid, floats, ...), the boundaries are the
sample's quantiles (``percentile_disc``). A single key value is never cut: a key
with few distinct values gives fewer, uneven chunks. Coverage does not depend on the
boundaries: the first range is open below (and takes the NULLs), the last open above,
each boundary is the lower bound of one range and the upper of the one before.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from reference_sinks.postgres._table import TableName
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql as psql

__all__ = [
    "SESSION_OPTIONS",
    "KeyRange",
    "Relation",
    "plan_chunks",
    "split_key_type",
]

_log = logging.getLogger(__name__)

SESSION_OPTIONS: Final = (
    "-c DateStyle=ISO -c extra_float_digits=1 -c TimeZone=UTC -c IntervalStyle=postgres"
)
"""Server settings for a connection that plans or reads chunks (libpq ``options``)."""

_EVEN_TYPES: Final = frozenset(
    {"int2", "int4", "int8", "numeric", "date", "timestamp", "timestamptz"}
)
"""Key types cut into evenly wide ranges (arithmetic on them is exact enough)."""
_INTEGER_TYPES: Final = frozenset({"int2", "int4", "int8"})
_SKEW: Final = 2.0
"""A range holding more than this many times its share of the sample means skew."""
ALIAS: Final = "sinkv2_rows"
"""The alias a query relation is selected from (``SELECT ... FROM (query) AS ALIAS``)."""


@final
@attrs.frozen
class Relation:
    """A table or a query: what a snapshot reads."""

    table: TableName | None = None
    query: str | None = None

    @classmethod
    def of_table(cls, table: str | TableName) -> Relation:
        """A table, ``"table"`` or ``"schema.table"``.

        Raises:
            SinkConfigurationError: ``table`` is not such a name.
        """
        return cls(table=table if isinstance(table, TableName) else TableName.parse(table))

    @classmethod
    def of_query(cls, query: str) -> Relation:
        """The rows of a ``SELECT`` (no trailing semicolon).

        Raises:
            SinkConfigurationError: ``query`` is not a non-empty str.
        """
        if not isinstance(query, str) or not query.strip():
            raise SinkConfigurationError(
                f"query must be a non-empty SELECT statement (got {query!r} of type "
                f"{type(query).__name__}); e.g. query='SELECT id, total FROM orders WHERE paid'"
            )
        return cls(query=query.strip().rstrip(";"))

    def from_item(self) -> psql.Composable:
        """The relation as a ``FROM`` item (a query becomes an aliased subquery)."""
        from psycopg import sql  # noqa: PLC0415  # optional extra

        if self.table is not None:
            composed: psql.Composable = self.table.sql()
            return composed
        assert self.query is not None
        # The newline ends a trailing -- comment of the query.
        return sql.SQL("({}\n) AS {}").format(sql.SQL(self.query), sql.Identifier(ALIAS))

    def identity(self, connection: psycopg.Connection[Any]) -> str:
        """The relation as a checkpoint names it: a table by its schema-qualified name."""
        if self.table is None:
            return str(self)
        row = connection.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (self.table.sql().as_string(connection),),
        ).fetchone()
        return str(self) if row is None else f"table {row[0]}.{row[1]}"

    def __str__(self) -> str:
        return f"table {str(self.table)!r}" if self.table is not None else f"query {self.query!r}"


@final
@attrs.frozen
class KeyRange:
    """One chunk: ``lower <= key < upper``, and NULL keys when ``nulls``.

    ``None`` bounds are open. Bounds are PostgreSQL's text of the key's values.
    """

    lower: str | None = None
    upper: str | None = None
    nulls: bool = True

    @classmethod
    def everything(cls) -> KeyRange:
        """Every row (the one chunk of a relation read without a key)."""
        return cls(None, None, nulls=True)

    def where(self, key: str | None) -> psql.Composable:
        """The SQL condition selecting this range's rows of column ``key``."""
        from psycopg import sql  # noqa: PLC0415  # optional extra

        if key is None:
            if self.lower is not None or self.upper is not None or not self.nulls:
                raise SinkConfigurationError(
                    f"key range {self} needs a split key, and none was given"
                )
            return sql.SQL("TRUE")
        column = sql.Identifier(key)
        parts: list[psql.Composable] = []
        if self.lower is not None:
            parts.append(sql.SQL("{} >= {}").format(column, sql.Literal(self.lower)))
        if self.upper is not None:
            parts.append(sql.SQL("{} < {}").format(column, sql.Literal(self.upper)))
        bounded = (
            sql.SQL(" AND ").join(parts) if parts else sql.SQL("{} IS NOT NULL").format(column)
        )
        if self.nulls:
            return sql.SQL("({} IS NULL OR ({}))").format(column, bounded)
        return sql.SQL("({})").format(bounded)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (`from_json` reads it back)."""
        return {"lower": self.lower, "upper": self.upper, "nulls": self.nulls}

    @classmethod
    def from_json(cls, data: Any) -> KeyRange:
        """The range `to_json` wrote.

        Raises:
            ValueError: ``data`` is not such a dict.
        """
        if not isinstance(data, dict) or set(data) != {"lower", "upper", "nulls"}:
            raise ValueError(f"not a key range: {data!r}")
        lower, upper, nulls = data["lower"], data["upper"], data["nulls"]
        if not all(v is None or isinstance(v, str) for v in (lower, upper)) or not isinstance(
            nulls, bool
        ):
            raise ValueError(f"not a key range: {data!r}")
        return cls(lower, upper, nulls=nulls)

    def __str__(self) -> str:
        low = "(-inf" if self.lower is None else f"[{self.lower}"
        high = "+inf)" if self.upper is None else f"{self.upper})"
        return f"{low}, {high}" + (" + NULL" if self.nulls else "")


def split_key_type(conn: psycopg.Connection[Any], relation: Relation, key: str) -> str:
    """The ``pg_type.typname`` of ``relation``'s column ``key``, checked to be orderable.

    Raises:
        SinkConfigurationError: The relation has no column ``key`` (the message lists
            its columns), or the key's type has no default btree ordering (json,
            xml, point, ...), so it cannot be cut into ranges.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    with conn.cursor() as cursor:
        cursor.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(relation.from_item()))
        described = cursor.description or []
    names = [column.name for column in described]
    if key not in names:
        near = [name for name in names if name.lower() == key.lower()]
        hint = f" (it has {near[0]!r}: names are case-sensitive)" if near else ""
        raise SinkConfigurationError(
            f"split key {key!r} is not a column of {relation}{hint}; its columns are "
            f"{names}. Name one of them as split_key, or split_key=None to read in one split"
        )
    oid = described[names.index(key)].type_code
    row = conn.execute(
        "SELECT t.typname, format_type(t.oid, NULL), EXISTS (SELECT 1 FROM pg_opclass o "
        "JOIN pg_am a ON a.oid = o.opcmethod WHERE a.amname = 'btree' AND o.opcdefault "
        "AND o.opcintype = t.oid) FROM pg_type t WHERE t.oid = %s",
        (oid,),
    ).fetchone()
    assert row is not None
    typname, shown, orderable = row
    if not orderable:
        raise SinkConfigurationError(
            f"split key {key!r} of {relation} has type {shown}, which has no ordering "
            "(no default btree operator class), so it cannot be cut into key ranges; name an "
            "integer, numeric, date, timestamp or text column as split_key"
        )
    return str(typname)


def _sample(
    conn: psycopg.Connection[Any], relation: Relation, key: str, rows: int, sample_rows: int
) -> psql.Composable:
    """SQL of a sample of ``key``'s non-NULL values, as column ``k``."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    column = sql.Identifier(key)
    if rows <= sample_rows:
        return sql.SQL("SELECT {} AS k FROM {} WHERE {} IS NOT NULL").format(
            column, relation.from_item(), column
        )
    fraction = sample_rows / rows
    if _block_sampled(conn, relation):
        assert relation.table is not None
        return sql.SQL(
            "SELECT {} AS k FROM {} TABLESAMPLE SYSTEM ({}) REPEATABLE (0) WHERE {} IS NOT NULL"
        ).format(column, relation.table.sql(), sql.Literal(100.0 * fraction), column)
    return sql.SQL("SELECT {} AS k FROM {} WHERE {} IS NOT NULL AND random() < {}").format(
        column, relation.from_item(), column, sql.Literal(fraction)
    )


def _block_sampled(conn: psycopg.Connection[Any], relation: Relation) -> bool:
    """Whether ``TABLESAMPLE`` applies: a table, partitioned table or materialized view."""
    if relation.table is None:
        return False
    row = conn.execute(
        "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)",
        (relation.table.sql().as_string(conn),),
    ).fetchone()
    return row is not None and row[0] in ("r", "p", "m")


def _row_estimate(conn: psycopg.Connection[Any], relation: Relation) -> int:
    """About how many rows: the planner's estimate for an analyzed table, else a count."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    if relation.table is not None:
        quoted = relation.table.sql().as_string(conn)
        row = conn.execute(
            "SELECT reltuples::int8 FROM pg_class WHERE oid = to_regclass(%s)", (quoted,)
        ).fetchone()
        if row is not None and row[0] is not None and row[0] > 0:
            return int(row[0])
    counted = conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(relation.from_item())
    ).fetchone()
    assert counted is not None
    return int(counted[0])


def _even_bounds(typname: str, chunks: int) -> psql.Composable:
    """SQL of ``chunks - 1`` evenly spaced values between ``lo`` and ``hi`` of CTE ``stats``."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    if typname in _INTEGER_TYPES:
        step = "floor(lo::numeric + (hi::numeric - lo::numeric) * i / {n})"
    elif typname == "numeric":
        step = "lo + (hi - lo) * i / {n}"
    elif typname == "date":
        step = "lo + ((hi - lo)::int8 * i / {n})::int4"
    else:  # timestamp, timestamptz
        step = "lo + (hi - lo) * (i::float8 / {n})"
    return sql.SQL(
        "SELECT DISTINCT " + step + " AS b FROM stats, generate_series(1, {last}) AS i"
    ).format(n=sql.Literal(chunks), last=sql.Literal(chunks - 1))


def plan_chunks(
    conn: psycopg.Connection[Any],
    relation: Relation,
    key: str | None,
    chunks: int,
    *,
    sample_rows: int = 100_000,
) -> list[KeyRange]:
    """Cut ``relation`` into at most ``chunks`` key ranges on column ``key``.

    The ranges, in key order, cover every row exactly once, NULL keys (in the first)
    included; see the module docstring for how the boundaries are chosen. Reads the
    key's minimum and maximum and a sample of its values; changes nothing.

    Raises:
        SinkConfigurationError: ``chunks`` is not a positive int, ``key`` is not a
            column of ``relation`` or has a type that cannot be ordered (`split_key_type`),
            or the relation does not exist.
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise SinkConfigurationError(
            f"chunks must be a positive int (got {chunks!r} of type {type(chunks).__name__}); "
            "e.g. chunks=8 for eight parallel splits"
        )
    if key is None:
        if chunks > 1:
            _log.warning(
                "%s is read in one split: no split key was given (%d chunks asked for); "
                "name an integer, date, timestamp or text column as split_key to read in parallel",
                relation,
                chunks,
            )
        return [KeyRange.everything()]
    typname = split_key_type(conn, relation, key)
    if chunks == 1:
        return [KeyRange.everything()]
    column = sql.Identifier(key)
    stats = sql.SQL("SELECT min({}) AS lo, max({}) AS hi FROM {}").format(
        column, column, relation.from_item()
    )
    found = conn.execute(
        sql.SQL("SELECT lo::text, hi::text FROM ({}) AS s").format(stats)
    ).fetchone()
    assert found is not None
    low, high = found
    if low is None or low == high:
        _log.warning(
            "%s is read in one split: split key %r has %s",
            relation,
            key,
            "no non-NULL values" if low is None else f"one value only ({low})",
        )
        return [KeyRange.everything()]
    rows = _row_estimate(conn, relation)
    sample = _sample(conn, relation, key, rows, sample_rows)
    bounds: list[str] | None = None
    finite = not any(text in ("infinity", "-infinity", "NaN") for text in (low, high))
    if typname in _EVEN_TYPES and finite:
        even = [
            text
            for (text,) in conn.execute(
                sql.SQL(
                    "WITH stats AS ({stats}), bounds AS ({bounds}) "
                    "SELECT bounds.b::text AS bound FROM bounds "
                    "WHERE bounds.b > (SELECT lo FROM stats) ORDER BY bounds.b"
                ).format(stats=stats, bounds=_even_bounds(typname, chunks))
            ).fetchall()
        ]
        if even and not _skewed(conn, sample, even, chunks):
            bounds = even
        elif even:
            _log.info("%s: split key %r is skewed; chunks follow its quantiles", relation, key)
    if bounds is None:
        fractions = [i / chunks for i in range(1, chunks)]
        bounds = [
            text
            for (text,) in conn.execute(
                sql.SQL(
                    "WITH sample AS ({sample}), "
                    "q AS (SELECT DISTINCT unnest(percentile_disc({f}::float8[]) "
                    "WITHIN GROUP (ORDER BY k)) AS b FROM sample) "
                    "SELECT q.b::text AS bound FROM q WHERE q.b > (SELECT min(k) FROM sample) "
                    "ORDER BY q.b"
                ).format(sample=sample, f=sql.Literal(fractions))
            ).fetchall()
        ]
    return _ranges(bounds)


def _skewed(
    conn: psycopg.Connection[Any], sample: psql.Composable, bounds: list[str], chunks: int
) -> bool:
    """Whether one of the ranges cut at ``bounds`` holds more than its share of ``sample``."""
    counts = _bucket_counts(conn, sample, bounds)
    total = sum(counts)
    if total < chunks * 10:  # too few rows for skew to matter
        return False
    return max(counts) > _SKEW * total / chunks


def _bucket_counts(
    conn: psycopg.Connection[Any], sample: psql.Composable, bounds: list[str]
) -> list[int]:
    """How many sampled keys fall into each range cut at ``bounds``."""
    from psycopg import sql  # noqa: PLC0415  # optional extra

    # One FILTER per range: the bounds compare as the key's type (untyped literals).
    ranges = _ranges(bounds)
    filters = sql.SQL(", ").join(
        sql.SQL("count(*) FILTER (WHERE {})").format(r.where("k")) for r in ranges
    )
    row = conn.execute(
        sql.SQL("WITH sample AS ({}) SELECT {} FROM sample").format(sample, filters)
    ).fetchone()
    assert row is not None
    return [int(count) for count in row]


def _ranges(bounds: Sequence[str]) -> list[KeyRange]:
    """The ranges cut at ``bounds`` (sorted, distinct): open at both ends, NULLs in the first."""
    if not bounds:
        return [KeyRange.everything()]
    edges: list[str | None] = [None, *bounds, None]
    return [
        KeyRange(lower, upper, nulls=index == 0)
        for index, (lower, upper) in enumerate(itertools.pairwise(edges))
    ]
