"""One type table for PostgreSQL and Arrow, both directions.

`PostgresSink` writes an Arrow type into the column type `postgres_type` names (and
into any other type whose text form that value has, see ``_table``);
`PostgresSource` reads a column as the Arrow type `arrow_type` names. The pairs:

| Arrow                           | PostgreSQL          | read back as             |
|---------------------------------|---------------------|--------------------------|
| int8, int16                     | smallint            | int16                    |
| int32                           | integer             | int32                    |
| int64                           | bigint              | int64                    |
| float32                         | real                | float32                  |
| float64                         | double precision    | float64                  |
| decimal128(p, s)                | numeric(p, s)       | decimal128(p, s)         |
| string                          | text                | string                   |
| bool                            | boolean             | bool                     |
| binary                          | bytea               | binary                   |
| date32                          | date                | date32                   |
| timestamp(unit)                 | timestamp           | timestamp(us)            |
| timestamp(unit, zone)           | timestamptz         | timestamp(us, UTC)       |
| duration(unit)                  | interval            | duration(us)             |
| list of one of the above        | its array type      | list of its read type    |
| anything nested deeper          | jsonb               | string (the JSON text)   |

Read only: ``varchar``, ``char``, ``name``, ``citext``, ``uuid``, ``json``, ``xml``,
``inet``, ``cidr``, ``macaddr`` and enum types are read as their text (a string, which
the sink writes back into the same types); ``numeric`` without a precision as
decimal128(38, 18), as Spark's JDBC reader does (more than 18 decimals are rounded,
more than 20 integer digits fail). An interval with months or years is read as
PostgreSQL's ``extract(epoch ...)`` counts it (a month 30 days, a year 365.25).
Every other type (``time``, ``money``, ranges, geometric and composite types,
numeric wider than 38 digits, arrays of those) has no mapping: `arrow_type` raises,
naming the column and its type, and a query can cast it (``SELECT id, t::text ...``).
"""

from __future__ import annotations

import re
from typing import Final, Protocol

import pyarrow as pa

from sinkv2.errors import SinkConfigurationError


class Column(Protocol):
    """What the type table reads of a column (``_table.Column`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def type_name(self) -> str: ...

    @property
    def category(self) -> str: ...

    @property
    def base_type(self) -> str: ...

    @property
    def element_category(self) -> str | None: ...


__all__ = ["UNCONSTRAINED_NUMERIC", "arrow_type", "postgres_type"]

UNCONSTRAINED_NUMERIC: Final = pa.decimal128(38, 18)
"""``numeric`` without a precision is read as this (Spark's JDBC reader's choice)."""

_READ: Final[dict[str, pa.DataType]] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", "UTC"),
    "interval": pa.duration("us"),
    **{
        name: pa.string()
        for name in (
            "text",
            "varchar",
            "bpchar",
            "name",
            "citext",
            "uuid",
            "json",
            "jsonb",
            "xml",
            "inet",
            "cidr",
            "macaddr",
            "macaddr8",
        )
    },
}
"""``pg_type.typname`` -> the Arrow type a column of it is read as (numeric: see `arrow_type`)."""

_NUMERIC: Final = re.compile(r"numeric\((\d+),(\d+)\)")
_MAX_DECIMAL128: Final = 38


def _leaf(typname: str, type_name: str, category: str) -> pa.DataType | None:
    if typname == "numeric":
        found = _NUMERIC.search(type_name.replace(" ", ""))
        if found is None:
            return UNCONSTRAINED_NUMERIC
        precision, scale = int(found[1]), int(found[2])
        if precision > _MAX_DECIMAL128 or scale > precision or scale < 0:
            return None
        return pa.decimal128(precision, scale)
    if category == "E":  # an enum type: its labels
        return pa.string()
    return _READ.get(typname)


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a column is read as (the module docstring has the table).

    Raises:
        SinkConfigurationError: The column's type has no Arrow mapping; the message
            names the column and its type, and how to read it anyway.
    """
    if column.category == "A":
        element = _leaf(
            column.base_type.removeprefix("_"),
            column.type_name.removesuffix("[]"),
            column.element_category or "",
        )
        found = None if element is None else pa.list_(element)
    else:
        found = _leaf(column.base_type, column.type_name, column.category)
    if found is None:
        raise SinkConfigurationError(
            f"column {column.name!r} has PostgreSQL type {column.type_name}, which has no Arrow "
            "mapping; read it through a query that casts it, e.g. query='SELECT id, "
            f'"{column.name}"::text AS "{column.name}" FROM ...\', or leave it out with '
            "columns=[...]"
        )
    return found


def postgres_type(kind: pa.DataType) -> str:
    """The PostgreSQL column type an Arrow type is written into naturally (the table's left)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = _leaf_postgres_type(kind.value_type)
        return "jsonb" if element is None else f"{element}[]"
    return _leaf_postgres_type(kind) or "jsonb"


def _leaf_postgres_type(kind: pa.DataType) -> str | None:  # noqa: PLR0911  # one answer per type
    if pa.types.is_int8(kind) or pa.types.is_int16(kind):
        return "smallint"
    if pa.types.is_int32(kind):
        return "integer"
    if pa.types.is_int64(kind):
        return "bigint"
    if pa.types.is_float32(kind):
        return "real"
    if pa.types.is_float64(kind):
        return "double precision"
    if pa.types.is_decimal(kind):
        return f"numeric({kind.precision}, {kind.scale})"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "bytea"
    if pa.types.is_date32(kind):
        return "date"
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is None else "timestamptz"
    if pa.types.is_duration(kind):
        return "interval"
    return None
