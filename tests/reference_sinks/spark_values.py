"""Hypothesis strategies for Spark SQL types and their values, nulls at every level.

`schemas()` draws a struct of columns (an ``id`` long first, so rows can be sorted),
each a leaf type or an array, map or struct nested up to two levels deep; `rows(schema)`
draws Python rows for ``spark.createDataFrame(rows, schema)``. `ALL_TYPES` and
`ALL_TYPES_ROWS` are a fixed matrix of every type with its edge values (NaN, the
infinities, -0.0, the widest decimal, the first and last dates).

Timestamps are aware (UTC) datetimes: Spark reads a naive one in the Python process's
local zone. Years stay in 1900..2100 where a session zone could shift them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from hypothesis import strategies as st
from pyspark.sql import types as T

__all__ = ["ALL_TYPES", "ALL_TYPES_ROWS", "comparable", "rows", "schemas"]

_DEC_38 = T.DecimalType(38, 10)
_DEC_SMALL = T.DecimalType(9, 2)


def _decimals(kind: T.DecimalType) -> st.SearchStrategy[decimal.Decimal]:
    # Exact text and copy_negate: arithmetic, even unary minus, rounds to the default
    # context's 28 digits, and a 38-digit bound would become 1E28, out of Spark's range.
    high = decimal.Decimal("9" * (kind.precision - kind.scale) + "." + "9" * kind.scale)
    low = high.copy_negate()
    # Comparisons are exact; hypothesis may still round a draw past the bound.
    return st.decimals(
        min_value=low, max_value=high, places=kind.scale, allow_nan=False, allow_infinity=False
    ).filter(lambda value: low <= value <= high)


_UTC_TIMES = st.datetimes(
    min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2100, 1, 1), timezones=st.just(dt.UTC)
)
LEAVES: dict[str, tuple[T.DataType, st.SearchStrategy[Any]]] = {
    "byte": (T.ByteType(), st.integers(-(2**7), 2**7 - 1)),
    "short": (T.ShortType(), st.integers(-(2**15), 2**15 - 1)),
    "int": (T.IntegerType(), st.integers(-(2**31), 2**31 - 1)),
    "long": (T.LongType(), st.integers(-(2**63), 2**63 - 1)),
    "float": (T.FloatType(), st.floats(width=32)),
    "double": (T.DoubleType(), st.floats()),
    "decimal38": (_DEC_38, _decimals(_DEC_38)),
    "decimal9": (_DEC_SMALL, _decimals(_DEC_SMALL)),
    "string": (T.StringType(), st.text(max_size=8)),
    "binary": (T.BinaryType(), st.binary(max_size=8).map(bytearray)),
    "boolean": (T.BooleanType(), st.booleans()),
    "date": (T.DateType(), st.dates()),
    "timestamp": (T.TimestampType(), _UTC_TIMES),
    "timestamp_ntz": (T.TimestampNTZType(), st.datetimes(min_value=dt.datetime(1, 1, 1))),
}
_KEYS = [T.StringType(), T.IntegerType()]


def _types(depth: int) -> st.SearchStrategy[T.DataType]:
    leaves = st.sampled_from([kind for kind, _ in LEAVES.values()])
    if depth == 0:
        return leaves
    inner = _types(depth - 1)
    return st.one_of(
        leaves,
        st.builds(T.ArrayType, inner, st.booleans()),
        st.builds(T.MapType, st.sampled_from(_KEYS), inner, st.booleans()),
        st.lists(inner, min_size=1, max_size=3).map(
            lambda kinds: T.StructType(
                [T.StructField(f"f{i}", kind) for i, kind in enumerate(kinds)]
            )
        ),
    )


def schemas(max_columns: int = 4) -> st.SearchStrategy[T.StructType]:
    """A struct of ``id`` (long, not null) and 1..max_columns nullable columns ``c0``..."""
    return st.lists(_types(2), min_size=1, max_size=max_columns).map(
        lambda kinds: T.StructType(
            [T.StructField("id", T.LongType(), nullable=False)]
            + [T.StructField(f"c{i}", kind) for i, kind in enumerate(kinds)]
        )
    )


def values(kind: T.DataType, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Python values Spark accepts for ``kind``; null with some probability if ``nullable``."""
    strategy: st.SearchStrategy[Any]
    if isinstance(kind, T.ArrayType):
        strategy = st.lists(values(kind.elementType, kind.containsNull), max_size=3)
    elif isinstance(kind, T.MapType):
        strategy = st.dictionaries(
            values(kind.keyType, False), values(kind.valueType, kind.valueContainsNull), max_size=3
        )
    elif isinstance(kind, T.StructType):
        strategy = st.tuples(*(values(field.dataType, field.nullable) for field in kind.fields))
    else:
        strategy = next(leaf for leaf_kind, leaf in LEAVES.values() if leaf_kind == kind)
    return st.none() | strategy if nullable else strategy


def rows(schema: T.StructType, max_rows: int = 6) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Rows of ``schema`` with distinct ids 0, 1, 2..."""
    rest = st.tuples(*(values(field.dataType) for field in schema.fields[1:]))
    return st.lists(rest, min_size=1, max_size=max_rows).map(
        lambda found: [(i, *row) for i, row in enumerate(found)]
    )


_STRUCT = T.StructType([T.StructField("x", T.IntegerType()), T.StructField("y", T.StringType())])
ALL_TYPES = T.StructType(
    [T.StructField("id", T.LongType(), nullable=False)]
    + [T.StructField(name, kind) for name, (kind, _) in LEAVES.items()]
    + [
        T.StructField("array_struct", T.ArrayType(_STRUCT)),
        T.StructField("map_struct", T.MapType(T.StringType(), _STRUCT)),
        T.StructField("array_array", T.ArrayType(T.ArrayType(T.LongType()))),
        T.StructField("map_int", T.MapType(T.IntegerType(), T.DoubleType())),
        T.StructField("struct", _STRUCT),
        T.StructField("struct_array", T.StructType([T.StructField("a", T.ArrayType(_STRUCT))])),
    ]
)
_NAN, _INF = float("nan"), float("inf")
_T0 = dt.datetime(2024, 3, 30, 12, 34, 56, 123456, tzinfo=dt.UTC)
ALL_TYPES_ROWS: list[tuple[Any, ...]] = [
    (0, *([None] * (len(ALL_TYPES.fields) - 1))),
    (
        1, -128, -32768, -(2**31), -(2**63), _NAN, _NAN,
        decimal.Decimal("-" + "9" * 28 + "." + "9" * 10), decimal.Decimal("-9999999.99"),
        "", bytearray(), False, dt.date(1, 1, 1), _T0, dt.datetime(1, 1, 1),
        [], {}, [], {}, (None, None), (None,),
    ),
    (
        2, 127, 32767, 2**31 - 1, 2**63 - 1, _INF, -_INF,
        decimal.Decimal("9" * 28 + "." + "9" * 10), decimal.Decimal("0.01"),
        "ünïcødé \u2603 \"quoted\"\n", bytearray(b"\x00\xff\x80"), True, dt.date(9999, 12, 31),
        dt.datetime(1900, 1, 1, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        [None, (None, None), (1, "a")], {"k": None, "l": (None, "b")}, [None, [None, 1], []],
        {1: _NAN, 2: None, 3: -0.0}, (7, None), ([None, (None, "z")],),
    ),
    (
        3, 0, 0, 0, 0, -0.0, -0.0, decimal.Decimal("0E-10"), decimal.Decimal("0.00"),
        "x" * 1000, bytearray(range(256)), None, dt.date(1970, 1, 1),
        dt.datetime(2100, 1, 1, tzinfo=dt.UTC), dt.datetime(1970, 1, 1),
        None, None, None, None, None, (None,),
    ),
    (
        4, 1, 1, 1, 1, 3.4028234663852886e38, 5e-324,
        decimal.Decimal("1E-10"), decimal.Decimal("1.50"), "0.1", bytearray(b"{}"), True,
        dt.date(2000, 2, 29), _T0 - dt.timedelta(days=40000), dt.datetime(2000, 2, 29, 1, 2, 3),
        [(None, None)], {"": (0, "")}, [[]], {0: 0.1}, (0, ""), ([],),
    ),
]  # fmt: skip


def comparable(value: Any) -> Any:  # noqa: PLR0911 - one return per kind of value
    """``value`` with NaN, -0.0 and aware datetimes made comparable with ``==``.

    NaN becomes the string ``"NaN"`` and -0.0 ``"-0.0"`` (so 0.0 != -0.0); aware
    datetimes become UTC; bytearrays bytes; tuples lists; dicts keep their keys.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value == 0 and math.copysign(1, value) < 0:
            return "-0.0"
        return value
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [comparable(item) for item in value]
    return value
