"""The target table as PostgreSQL describes it, and whether a DataFrame's columns fit it.

Checked on the driver before any Spark job, and again by each writer before its
first row (a writer needs the column types to encode its rows anyway): a column the
table does not have, a type no value of the column's type could become, a NOT NULL
column the DataFrame leaves out, or an upsert key without a unique index is refused
before any data moves, naming the column and both types.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa

from reference_sinks.postgres._types import postgres_type
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import psycopg

__all__ = ["Column", "Encoding", "TableName", "TargetTable", "check_fit", "describe_table"]


@final
@attrs.frozen
class TableName:
    """A table name and its schema (``None``: the connection's search path)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, table: object) -> TableName:
        """``"table"`` or ``"schema.table"`` (names as stored: case matters, no quotes).

        Raises:
            SinkConfigurationError: ``table`` is not such a str.
        """
        if isinstance(table, str) and table.strip() and not table.startswith("."):
            schema, dot, name = table.partition(".")
            if not dot:
                return cls(None, schema)
            if name and "." not in name:
                return cls(schema, name)
        raise SinkConfigurationError(
            f"table must be 'table' or 'schema.table', names as stored in PostgreSQL "
            f"(got {table!r} of type {type(table).__name__}); e.g. PostgresSink(url, "
            "'public.events')"
        )

    def sql(self) -> Any:
        """The quoted identifier (a ``psycopg.sql.Composable``)."""
        from psycopg import sql  # noqa: PLC0415  # optional extra

        if self.schema is None:
            return sql.Identifier(self.name)
        return sql.Identifier(self.schema, self.name)

    def sibling(self, name: str) -> TableName:
        """Another table in the same schema."""
        return TableName(self.schema, name)

    def __str__(self) -> str:
        return self.name if self.schema is None else f"{self.schema}.{self.name}"


class Encoding(enum.Enum):
    """How a column's values are written into ``COPY ... (FORMAT csv)``."""

    NATIVE = "native"
    """pyarrow's CSV writer writes text PostgreSQL reads as the column's type."""
    BYTEA = "bytea"
    """Bytes as bytea's hex form, ``\\x0a1b``."""
    ARRAY = "array"
    """A list as an array literal, ``{1,2,NULL}``."""
    JSON = "json"
    """Any value as JSON text, for a json or jsonb column."""
    INTERVAL = "interval"
    """A duration as ``<n> microseconds``."""
    INSTANT = "instant"
    """A zoned timestamp as its UTC time, for a timestamptz column (pyarrow's CSV writer
    drops the seconds of an offset such as +00:19:32, local mean time before ~1900)."""


@final
@attrs.frozen
class Column:
    """One column of the target table."""

    name: str
    type_name: str
    """As ``format_type`` prints it, e.g. ``character varying(20)``, ``integer[]``."""
    category: str
    """``pg_type.typcategory``: B boolean, N numeric, S string, D date/time, A array, ..."""
    base_type: str
    """``pg_type.typname``, e.g. ``int4``, ``jsonb``, ``_int8`` for an array."""
    element_category: str | None
    not_null: bool
    has_default: bool


@final
@attrs.frozen
class TargetTable:
    """The target table's columns, in table order, and its unique column sets.

    ``unique_keys`` are the column sets of plain unique indexes (what ``ON CONFLICT``
    can name); ``exclusive`` tells whether any unique index (partial and expression
    ones too) or exclusion constraint can make one transaction's insert wait on
    another's row locks.
    """

    name: TableName
    columns: tuple[Column, ...]
    unique_keys: tuple[frozenset[str], ...]
    exclusive: bool = False

    def column(self, name: str) -> Column | None:
        """The column named ``name`` exactly, if there is one."""
        for column in self.columns:
            if column.name == name:
                return column
        return None


_COLUMNS: Final = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, t.typname,
       e.typcategory, a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_UNIQUE: Final = """
SELECT array_agg(a.attname)
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid
"""
_EXCLUSIVE: Final = """
SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = %(oid)s AND indisunique)
    OR EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = %(oid)s AND contype = 'x')
"""


def describe_table(connection: psycopg.Connection[Any], table: TableName) -> TargetTable:
    """Read the table's columns and unique indexes from the catalog.

    Raises:
        SinkConfigurationError: The table does not exist (or is not visible).
    """
    from psycopg import sql  # noqa: PLC0415  # optional extra

    quoted = table.sql().as_string(connection)
    row = connection.execute("SELECT to_regclass(%s)::oid", (quoted,)).fetchone()
    if row is None or row[0] is None:
        raise SinkConfigurationError(
            f"PostgreSQL table {str(table)!r} does not exist in database "
            f"{connection.info.dbname!r} (looked up as {quoted}); create it first, e.g. "
            f"CREATE TABLE {quoted} (...)"
        )
    oid = row[0]
    columns = tuple(
        Column(
            name=name,
            type_name=type_name,
            category=category,
            base_type=base_type,
            element_category=element_category,
            not_null=not_null,
            has_default=has_default,
        )
        for (name, type_name, category, base_type, element_category, not_null, has_default) in (
            connection.execute(sql.SQL(_COLUMNS), (oid,)).fetchall()
        )
    )
    unique = tuple(
        frozenset(names) for (names,) in connection.execute(sql.SQL(_UNIQUE), (oid,)).fetchall()
    )
    exclusive = connection.execute(sql.SQL(_EXCLUSIVE), {"oid": oid}).fetchone()
    return TargetTable(table, columns, unique, exclusive=bool(exclusive and exclusive[0]))


_JSON_TYPES: Final = frozenset({"json", "jsonb"})


def _holds_duration(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a duration or has one inside."""
    if pa.types.is_duration(kind):
        return True
    return any(_holds_duration(kind.field(i).type) for i in range(kind.num_fields))


def _encoding(field: pa.Field, column: Column) -> Encoding | None:  # noqa: PLR0911  # one answer per type family
    """How ``field`` is written into ``column``, or ``None`` if it cannot be."""
    kind = field.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    category = column.category
    if column.base_type in _JSON_TYPES:
        # Spark's JSON spells a day-time interval by its fields ('INTERVAL '1' DAY'),
        # which Arrow's duration does not carry.
        return None if _holds_duration(kind) else Encoding.JSON
    if pa.types.is_null(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return Encoding.NATIVE  # PostgreSQL parses text into any type, row by row
    if pa.types.is_boolean(kind):
        return Encoding.NATIVE if category in ("B", "S") else None
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return Encoding.NATIVE if category in ("N", "S") else None
    if pa.types.is_timestamp(kind) and kind.tz is not None and column.base_type == "timestamptz":
        return Encoding.INSTANT
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return Encoding.NATIVE if category in ("D", "S") else None
    if pa.types.is_duration(kind):
        return Encoding.INTERVAL if column.base_type == "interval" else None
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return Encoding.BYTEA if column.base_type == "bytea" else None
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if category != "A":
            return None
        element = pa.field("element", kind.value_type)
        # The element type as a column of its own: an array type's name is "_" + its
        # element's (``_bytea``: ``bytea[]``).
        inner = _encoding(
            element,
            attrs.evolve(
                column,
                category=column.element_category or "S",
                base_type=column.base_type.removeprefix("_"),
            ),
        )
        if inner in (Encoding.NATIVE, Encoding.BYTEA, Encoding.INSTANT):
            return Encoding.ARRAY
        return None
    return None


def encodings(schema: pa.Schema, table: TargetTable) -> list[Encoding]:
    """How each field of ``schema`` is written; `check_fit` must have passed."""
    found = []
    for field in schema:
        column = table.column(field.name)
        assert column is not None  # check_fit ran first
        encoding = _encoding(field, column)
        assert encoding is not None
        found.append(encoding)
    return found


def check_fit(
    schema: pa.Schema, table: TargetTable, *, upsert_key: Sequence[str] | None = None
) -> list[Encoding]:
    """Check that rows of ``schema`` can be written into ``table``; return each field's encoding.

    Raises:
        SinkConfigurationError: A column is missing from the table, of a type the
            table's column cannot take, a NOT NULL column without a default is left
            out, or the upsert key has no unique index. The message lists every
            problem and both schemas.
    """
    problems: list[str] = []
    names = list(schema.names)
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        problems.append(f"columns {duplicated} appear more than once")
    for field in schema:
        column = table.column(field.name)
        if column is None:
            near = [c.name for c in table.columns if c.name.lower() == field.name.lower()]
            hint = f" (the table has {near[0]!r}: names are case-sensitive)" if near else ""
            problems.append(f"column {field.name!r} is not in the table{hint}")
        elif _encoding(field, column) is None:
            problems.append(
                f"column {field.name!r} of type {field.type} cannot be written into "
                f"{column.type_name} (a {postgres_type(field.type)} column takes it)"
            )
    for column in table.columns:
        if column.not_null and not column.has_default and column.name not in names:
            problems.append(f"NOT NULL column {column.name!r} ({column.type_name}) is not given")
    if upsert_key is not None:
        missing = [name for name in upsert_key if name not in names]
        if missing:
            problems.append(f"upsert key columns {missing} are not in the DataFrame")
        elif frozenset(upsert_key) not in table.unique_keys:
            problems.append(
                f"upsert key {list(upsert_key)} has no unique index or primary key on exactly "
                f"these columns (ON CONFLICT needs one); create one, e.g. CREATE UNIQUE INDEX "
                f"ON {table.name} ({', '.join(upsert_key)})"
            )
    if problems:
        want = ", ".join(f"{c.name}: {c.type_name}" for c in table.columns)
        got = ", ".join(f"{f.name}: {f.type}" for f in schema)
        raise SinkConfigurationError(
            f"the DataFrame does not fit PostgreSQL table {str(table.name)!r}: "
            + "; ".join(problems)
            + f".\n  table:     [{want}]\n  DataFrame: [{got}]\nSelect, rename or cast the "
            "columns to match the table"
        )
    return encodings(schema, table)
