"""Inferring a CSV directory's column types as Spark's CSV reader does: from every file.

``spark.read.option("inferSchema", True).csv(dir)`` infers from every row of every
file (its ``CSVInferSchema``). Each value is tried, from the column's type so far, as
an ``int`` (32 bits), a ``long``, a ``decimal`` (an integer too long for a ``long``,
or one written ``1.``: no digit after the point), a ``double`` (Java's syntax: ``1e5``,
``.5``, ``1d``, `` 1`` with spaces, ``NaN``, ``Inf``, ``Infinity``), a ``date``
(``yyyy-MM-dd`` exactly: Spark's ``prefersDate`` is on), a ``timestamp`` (Spark's
lenient form: ``2024-01``, ``2024-1-2``, ``2024-01-01 10:00``, ``T``, a fraction, a
``Z`` or ``+02:00`` offset), a ``boolean`` (``true`` or ``false`` in any case), else a
``string``; the column takes the type both its old type and the value's fit:
``int`` and ``long`` give ``long``, an integer and a ``double`` a ``double``, a
``date`` and a ``timestamp`` a ``timestamp``, anything else that differs a
``string``. An empty field changes nothing; a column empty everywhere is a string.
The files' types are merged by the same rule, column by column.

Here each file is inferred from its first block (8 MiB, whole lines); a later value
of another type fails the read of that file, naming its line and column. The
columns are the first file's, by header name (``_c0``, ``_c1``, ... without one).
Unlike Spark: a timestamp without an offset is in UTC (Spark: the session's time
zone), and time zone names (``Europe/Paris``) or a time without a date are strings.

`spark_values` reads a string column as the type inferred, Spark's spellings
included (pyarrow's CSV parser refuses ``+5``, ``1d``, ``2024-01``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Iterable
from typing import Final

import pyarrow as pa

__all__ = ["infer_strings", "spark_csv_schema", "spark_value", "spark_values"]

_INT: Final = range(-(2**31), 2**31)
_LONG: Final = range(-(2**63), 2**63)
_MAX_PRECISION: Final = 38
_TIMESTAMP: Final = pa.timestamp("us", "UTC")

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_DECIMAL: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_DOUBLE: Final = re.compile(
    r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)"
)
_SPARK_NON_FINITE: Final = {"NaN": "nan", "Inf": "inf", "-Inf": "-inf"}
_DATE: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_STAMP: Final = re.compile(
    r"\s*([+-]?[0-9]{4,6})(?:-([0-9]{1,2})(?:-([0-9]{1,2})"
    r"(?:[ T]([0-9]{1,2})(?::([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]+))?)?)?"
    r"\s*(Z|(?:UTC|GMT|UT)?[+-][0-9]{1,2}(?::?[0-9]{2})?|UTC|GMT)?)?)?)?\s*"
)


def _integer(text: str) -> int | None:
    return int(text) if _INTEGER.fullmatch(text) else None


def _decimal_type(text: str) -> pa.DataType | None:
    """Spark's ``decimal`` for ``text``: its digits, when no digit follows the point."""
    if not _DECIMAL.fullmatch(text):
        return None
    _, digits, exponent = decimal.Decimal(text).as_tuple()
    if exponent != 0 or len(digits) > _MAX_PRECISION:
        return None  # a fraction (Spark: double), an exponent (1e5), too long
    return pa.decimal128(len(digits), 0)


def _double(text: str) -> float | None:
    if text in _SPARK_NON_FINITE:
        return float(_SPARK_NON_FINITE[text])
    stripped = text.strip(_JAVA_SPACE)
    if not _DOUBLE.fullmatch(stripped):
        return None
    return float(stripped.rstrip("fFdD") if stripped[-1:] in "fFdD" else stripped)


_JAVA_SPACE: Final = "".join(map(chr, range(33)))


def _date(text: str) -> dt.date | None:
    found = _DATE.fullmatch(text)
    if found is None:
        return None
    try:
        return dt.date(*map(int, found.groups()))
    except ValueError:
        return None


def _timestamp(text: str) -> dt.datetime | None:
    found = _STAMP.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    try:
        value = dt.datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=_zone(zone),
        )
    except ValueError:
        return None
    return value.astimezone(dt.UTC)


def _zone(zone: str | None) -> dt.tzinfo:
    offset = (zone or "").lstrip("UTGMZ")
    if not offset:
        return dt.UTC
    sign = -1 if offset[0] == "-" else 1
    digits = offset[1:].replace(":", "")
    hours, minutes = (digits, "0") if len(digits) <= 2 else (digits[:-2], digits[-2:])
    return dt.timezone(sign * dt.timedelta(hours=int(hours), minutes=int(minutes)))


def _boolean(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered == "true" else False if lowered == "false" else None


_PARSERS: Final = {pa.float64(): _double, pa.date32(): _date, _TIMESTAMP: _timestamp}


def _fits(kind: pa.DataType, text: str) -> bool:
    if kind == pa.int32() or kind == pa.int64():
        number = _integer(text)
        return number is not None and number in (_INT if kind == pa.int32() else _LONG)
    if pa.types.is_decimal(kind):
        return _decimal_type(text) is not None
    return _PARSERS.get(kind, _boolean)(text) is not None


# Spark's chain: each value is tried as these in turn, from the column's type so far on
_CHAIN: Final = (
    pa.int32(),
    pa.int64(),
    pa.decimal128(_MAX_PRECISION, 0),
    pa.float64(),
    pa.date32(),
    _TIMESTAMP,
    pa.bool_(),
)


def _value_type(text: str, start: int) -> pa.DataType:
    """The type of ``text`` tried from step ``start`` of Spark's chain on."""
    for kind in _CHAIN[start:]:
        if _fits(kind, text):
            return _decimal_type(text) if pa.types.is_decimal(kind) else kind
    return pa.string()


def _start(kind: pa.DataType) -> int:
    """Where Spark starts trying a value in a column of type ``kind`` so far."""
    if pa.types.is_null(kind) or kind == pa.int32():
        return 0
    steps = {pa.int64(): 1, pa.float64(): 3, pa.date32(): 4, _TIMESTAMP: 5, pa.bool_(): 6}
    if pa.types.is_decimal(kind):
        return 2
    return steps.get(kind, 7)


def _integral_decimal(kind: pa.DataType) -> pa.DataType:
    return pa.decimal128(10 if kind == pa.int32() else 20, 0)


def merge(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    """The type of a column with values of ``left`` and ``right`` (Spark's ``compatibleType``)."""
    if left.equals(right) or pa.types.is_null(right):
        return left
    if pa.types.is_null(left):
        return right
    numbers = (pa.int32(), pa.int64(), pa.float64())
    if (left in numbers or pa.types.is_decimal(left)) and (
        right in numbers or pa.types.is_decimal(right)
    ):
        return _merge_numbers(left, right)
    if {str(left), str(right)} == {str(pa.date32()), str(_TIMESTAMP)}:
        return _TIMESTAMP
    return pa.string()


def _merge_numbers(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    if pa.float64() in (left, right):
        return pa.float64()
    integral = (pa.int32(), pa.int64())
    if left in integral and right in integral:
        return pa.int64()
    left = _integral_decimal(left) if left in integral else left
    right = _integral_decimal(right) if right in integral else right
    scale = max(left.scale, right.scale)
    whole = max(left.precision - left.scale, right.precision - right.scale)
    if whole + scale > _MAX_PRECISION:
        return pa.float64()
    return pa.decimal128(whole + scale, scale)


def infer_strings(column: pa.ChunkedArray | pa.Array) -> pa.DataType:
    """The type Spark infers for a column of CSV fields (nulls: empty fields); null if none.

    Each distinct value counts once, in the order it first appears.
    """
    kind: pa.DataType = pa.null()
    for text in column.unique().to_pylist():
        if text is None or text == "":
            continue
        kind = merge(kind, _value_type(text, _start(kind)))
        if pa.types.is_string(kind):
            break
    return kind


def spark_csv_schema(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """The first file's columns, each of the type every file's same column merges to."""
    names: list[str] | None = None
    kinds: dict[str, pa.DataType] = {}
    for schema in schemas:
        if names is None:
            names = list(schema.names)
            kinds = dict.fromkeys(names, pa.null())
        for field in schema:
            if field.name in kinds:
                kinds[field.name] = merge(kinds[field.name], field.type)
    return pa.schema(
        [
            (name, pa.string() if pa.types.is_null(kinds[name]) else kinds[name])
            for name in names or []
        ]
    )


def spark_value(text: str, kind: pa.DataType) -> object:
    """``text`` as a ``kind`` value, pyarrow's spellings or Spark's.

    Raises:
        pa.ArrowInvalid: It is neither.
    """
    try:
        return pa.scalar(text).cast(kind).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    value: object = None
    if pa.types.is_integer(kind):
        value = _integer(text)
    elif pa.types.is_floating(kind):
        value = _double(text)
    elif pa.types.is_decimal(kind) and _DECIMAL.fullmatch(text):
        value = decimal.Decimal(text)
    elif pa.types.is_boolean(kind):
        value = _boolean(text)
    elif pa.types.is_date(kind):
        value = _date(text)
    elif pa.types.is_timestamp(kind):
        value = _timestamp(text)
        if value is not None and kind.tz is None:
            value = value.replace(tzinfo=None)
    try:
        if value is not None:
            return pa.scalar(value, kind).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError, TypeError):
        pass
    raise pa.ArrowInvalid(f"{text!r} is not a {kind}")


def spark_values(column: pa.ChunkedArray | pa.Array, kind: pa.DataType) -> pa.Array:
    """A string column as ``kind``, pyarrow's spellings or Spark's.

    Raises:
        pa.ArrowInvalid: A value is neither, named.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    try:
        return column.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        try:  # no offsets written: in UTC
            return column.cast(pa.timestamp(kind.unit)).cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    values = [None if text is None else spark_value(text, kind) for text in column.to_pylist()]
    return pa.array(values, kind)
