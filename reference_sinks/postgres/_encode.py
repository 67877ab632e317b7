"""Arrow batches as CSV text for ``COPY ... FROM STDIN (FORMAT csv)``.

pyarrow's CSV writer (C++) writes most columns: integers, floats (``nan``, ``inf``,
``-0``, all read back exactly by PostgreSQL), decimals, strings (always quoted, so
an empty string stays empty while a null is an unquoted empty field, which is how
COPY's CSV format tells them apart), booleans, dates and timestamps (zoned ones with
their UTC offset; into timestamptz, zoned in UTC first, as pyarrow cuts an offset's
seconds, e.g. Amsterdam's +00:19:32 before 1937). Only what it cannot write, or
PostgreSQL would read differently, goes through Python first, value by value: bytes
(bytea's hex form), lists (array literals), anything into a json or jsonb column,
and durations (intervals).

Zoned timestamps inside those (an array of timestamps, a struct in jsonb) are read
in UTC and shown in their own zone, as Spark writes them; one whose wall time in
that zone is off Python's calendar (year 1 in a zone west of UTC, 9999 east of it:
both valid Spark values) is spelled by hand, as year 0 or 10000 in JSON and with
``BC`` in an array literal, which PostgreSQL reads as the same instant.

Timestamps zoned in UTC (so every zoned one bound for timestamptz, and, into a
timestamp column, Spark's in a UTC session) are made text by pyarrow's compute
functions first, as the wall time in UTC with a ``Z``: the CSV writer formats zoned
values through a time zone lookup per value, about ten times slower than naive
ones, and UTC needs none. PostgreSQL reads the same values either way.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from reference_sinks._arrow_types import rebuild_type
from reference_sinks._json_values import is_variant, shortest_float32
from reference_sinks.postgres._table import Encoding

__all__ = ["encode_csv", "json_text"]

_OPTIONS: Final = pacsv.WriteOptions(include_header=False, batch_size=8192)
_UTC_ZONES: Final = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "+00:00"})
_GREGORIAN_CYCLE: Final = datetime.timedelta(days=146_097)
"""400 years: the calendar (weekdays, leap years) repeats after it."""
_GREGORIAN_CYCLE_MICROS: Final = _GREGORIAN_CYCLE // datetime.timedelta(microseconds=1)
_MICROS_PER: Final = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0}  # 0: divide by 1000
_EPOCH: Final = datetime.datetime(1970, 1, 1)  # naive on purpose: timestamp_ntz
_EPOCH_UTC: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DATE: Final = datetime.date(1970, 1, 1)
_VARIANT_DECIMAL_DIGITS: Final = 80  # a variant's decimals have at most 38
_YEAR_1_UTC: Final = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _array_element(value: Any) -> str:
    r"""One element of an array literal; strings quoted, ``"`` and ``\\`` escaped."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, list):
        return _array_literal(value)
    if isinstance(value, bytes):
        text = "\\x" + value.hex()
    elif isinstance(value, datetime.datetime | datetime.date):
        text = value.isoformat()
    else:
        text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array_literal(values: list[Any]) -> str:
    return "{" + ",".join(_array_element(value) for value in values) + "}"


def json_text(value: Any) -> str:  # noqa: PLR0911 - one return per kind of value reads best
    """``value`` as JSON text, the way Spark's JSON writer writes it.

    Decimals digit for digit (a float would round), bytes as base64, dicts as
    objects (keys as text: `_key_text`), dates and timestamps as ISO 8601, and the
    floats JSON has no number for quoted (``"NaN"``, ``"Infinity"``), as Jackson
    writes them under Spark's ``to_json``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'"{_float_text(value)}"'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{json.dumps(_key_text(key), ensure_ascii=False)}:{json_text(item)}"
                for key, item in value.items()
            )
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(json_text(item) for item in value) + "]"
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return f'"{value.isoformat()}"'
    if isinstance(value, datetime.timedelta):
        return repr(value.total_seconds())
    if isinstance(value, bytes):
        return f'"{base64.b64encode(value).decode("ascii")}"'
    return json.dumps(str(value), ensure_ascii=False)


def _key_text(key: Any) -> str:
    """A map key as an object key: a string as it is, anything else its JSON value's text.

    So a key reads as the same value does (``true``, ``1.5``, ISO 8601 dates and
    timestamps, base64 bytes, ``[1,2]``). Spark's ``to_json`` writes a date or
    timestamp key as its internal number (days, microseconds) and a binary one as
    a JVM object's name, which no reader could use.
    """
    if isinstance(key, str):
        return key
    text = json_text(key)
    if text.startswith('"'):
        found: str = json.loads(text)
        return found
    return text


def _variant_value(value: dict[str, Any]) -> Any:
    """A variant (its value and metadata bytes) as the JSON value it holds, digits kept."""
    from pyspark.sql.types import VariantVal  # noqa: PLC0415  # only variant columns need it

    # pyspark makes a variant's decimal by Decimal arithmetic: in the default context
    # (28 digits) a decimal(38, s) would be rounded.
    with decimal.localcontext(prec=_VARIANT_DECIMAL_DIGITS):
        text = VariantVal(value["value"], value["metadata"]).toJson()
    return json.loads(text, parse_float=decimal.Decimal)


def _zone_of(kind: pa.TimestampType) -> datetime.tzinfo:
    """The tzinfo pyarrow gives ``kind``'s values (it knows every spelling Spark uses)."""
    zone: datetime.tzinfo | None = pa.scalar(0, type=kind).as_py().tzinfo
    assert zone is not None  # only zoned types get here
    return zone


def _off_calendar(local: datetime.date, year: int, *, array: bool) -> str:
    """``local`` (400 years nearer) spelled with its real ``year``: ``BC`` in an array literal."""
    if isinstance(local, datetime.datetime):
        rest = local.isoformat(sep=" " if array else "T")[4:]
    else:
        rest = local.isoformat()[4:]
    if array and year < 1:
        return f"{1 - year:04d}{rest} BC"
    return f"{year:04d}{rest}" if year >= 0 else f"-{-year:04d}{rest}"


def _cycles_to_calendar(value: int, cycle: int) -> int:
    """How many 400-year cycles bring ``value`` onto Python's calendar (negative: after 9999).

    ``value`` counts days or microseconds (``cycle`` in the same unit) since 1970.

    One cycle is enough for Spark's years 1 and 9999 seen from another zone; Arrow holds
    values thousands of years further out (PostgreSQL takes them back to 4713 BC).
    """
    if value < 0:
        year_2 = -(1968 * cycle // 400)  # 1968 years before 1970
        return (year_2 - value) // cycle + 1
    year_9998 = 8028 * cycle // 400
    return -((value - year_9998) // cycle + 1)


def _timestamp_shown(kind: pa.TimestampType, *, array: bool) -> Callable[[int], Any]:
    """A timestamp's raw value (its int64) as a datetime, in its zone if it has one.

    Made from the number, not by pyarrow: an instant whose wall time (in UTC or in
    its zone) is off Python's calendar, as Spark's year 1 west of UTC or 9999 east
    of it, or year 10000 made by ``timestamp_micros``, cannot be a datetime. It is
    then text: the wall time of the instant 400 years nearer (the calendar repeats)
    with the year put back, ``0000-12-31T16:07:02-07:52:58`` (ISO 8601's year 0)
    for JSON, ``0001-12-31 16:07:02-07:52:58 BC`` for an array literal
    (PostgreSQL's spelling).
    """
    zone = None if kind.tz is None else _zone_of(kind)
    scale = _MICROS_PER[kind.unit]

    def at(micros: int) -> datetime.datetime:
        if zone is None:
            return _EPOCH + datetime.timedelta(microseconds=micros)
        return (_EPOCH_UTC + datetime.timedelta(microseconds=micros)).astimezone(zone)

    def shown(raw: int) -> Any:
        micros = raw * scale if scale else raw // 1000
        try:
            return at(micros)
        except OverflowError:
            cycles = _cycles_to_calendar(micros, _GREGORIAN_CYCLE_MICROS)
            local = at(micros + cycles * _GREGORIAN_CYCLE_MICROS)
            return _off_calendar(local, local.year - 400 * cycles, array=array)

    return shown


def _date_shown(*, array: bool) -> Callable[[int], Any]:
    """A date's raw value (days since 1970) as a date; as text if off Python's calendar."""

    def shown(days: int) -> Any:
        try:
            return _EPOCH_DATE + datetime.timedelta(days=days)
        except OverflowError:
            cycles = _cycles_to_calendar(days, _GREGORIAN_CYCLE.days)
            local = _EPOCH_DATE + datetime.timedelta(days=days + cycles * _GREGORIAN_CYCLE.days)
            return _off_calendar(local, local.year - 400 * cycles, array=array)

    return shown


def _raw_time(kind: pa.DataType) -> pa.DataType:
    """Timestamps and dates as their raw integers (the same values, read without datetime)."""
    if pa.types.is_timestamp(kind):
        return pa.int64()
    if pa.types.is_date32(kind):
        return pa.int32()
    return kind


def _time_shown(kind: pa.DataType, *, array: bool) -> Callable[[int], Any] | None:
    """What shows a timestamp's or date's raw integer, or None for other types."""
    if pa.types.is_timestamp(kind):
        return _timestamp_shown(kind, array=array)
    if pa.types.is_date32(kind):
        return _date_shown(array=array)
    return None


def _array_ready(kind: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns an array's timestamps and dates (read as integers) into values, if any."""
    shown = _time_shown(kind, array=True)
    if shown is not None:
        return shown
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = _array_ready(kind.value_type)
        if element is None:
            return None
        return lambda value: [None if item is None else element(item) for item in value]
    return None


def _json_ready(field: pa.Field) -> Callable[[Any], Any] | None:  # noqa: PLR0911 - one return per kind of type
    """What turns a Python value of ``field`` into `json_text`'s input, if anything must.

    A map arrives as its (key, value) pairs and becomes a dict keyed by text. What
    only the type tells: a float32 arrives as its exact double
    (``1.100000023841858``) and is written with its own shortest digits (``1.1``), as
    Spark does; a variant arrives as its bytes and is written as its JSON value; a
    timestamp or date arrives as its integer and is shown (in its zone).
    """
    kind = field.type
    if is_variant(field):
        return _variant_value
    if pa.types.is_float32(kind):
        return shortest_float32
    shown = _time_shown(kind, array=False)
    if shown is not None:
        return shown
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        element = _json_ready(kind.value_field)
        if element is None:
            return None
        return lambda value: [None if item is None else element(item) for item in value]
    if pa.types.is_map(kind):  # (key, value) pairs: a key may be a list or a dict
        key, item = _json_ready(kind.key_field), _json_ready(kind.item_field)
        return lambda value: {
            _key_text(k if key is None else key(k)): v if v is None or item is None else item(v)
            for k, v in value
        }
    if pa.types.is_struct(kind):
        fields = {f.name: ready for f in kind if (ready := _json_ready(f)) is not None}
        if not fields:
            return None
        return lambda value: {
            name: found if found is None or name not in fields else fields[name](found)
            for name, found in value.items()
        }
    return None


def _json_converter(kind: pa.DataType) -> Callable[[Any], str]:
    ready = _json_ready(pa.field("value", kind))
    if ready is None:
        return json_text
    return lambda value: json_text(ready(value))


def _converted(column: pa.Array, encoding: Encoding) -> pa.Array:
    convert: Callable[[Any], str]
    if encoding is Encoding.INTERVAL:
        micros = pc.cast(column.cast(pa.duration("us")), pa.int64())
        return pc.binary_join_element_wise(pc.cast(micros, pa.string()), " microseconds", "")
    if encoding is Encoding.BYTEA:

        def convert(value: Any) -> str:
            return "\\x" + bytes(value).hex()

    elif encoding is Encoding.ARRAY:
        ready = _array_ready(column.type)
        convert = _array_literal if ready is None else lambda value: _array_literal(ready(value))
    else:
        convert = _json_converter(column.type)
    # Timestamps and dates read as integers: no value is off the calendar yet.
    raw = rebuild_type(column.type, _raw_time)
    if raw != column.type:
        column = column.cast(raw)
    return pa.array(
        [None if value is None else convert(value) for value in column.to_pylist()],
        type=pa.string(),
    )


def _utc_timestamp_text(column: pa.Array) -> pa.Array:
    """A timestamp column zoned in UTC as ``2024-02-29 23:59:59.999999Z`` (nulls stay null).

    An instant before year 1 in UTC (Spark's year 1 in a zone east of UTC) would be
    year 0 here, which PostgreSQL refuses: those few are spelled with ``BC``.
    """
    naive = column.cast(pa.timestamp(column.type.unit))  # the same values: UTC wall time
    text = pc.binary_join_element_wise(pc.cast(naive, pa.string()), "Z", "")
    if column.type.unit == "ns":  # nanoseconds reach back to 1677 only
        return text
    before_year_1 = pc.less(column, pa.scalar(_YEAR_1_UTC, column.type))
    if not pc.any(before_year_1).as_py():
        return text
    shown = _timestamp_shown(column.type, array=True)
    raw = column.cast(pa.int64()).to_pylist()
    spelled = pa.array(
        [
            shown(value) if early else None
            for value, early in zip(raw, before_year_1.to_pylist(), strict=True)
        ],
        pa.string(),
    )
    return pc.if_else(pc.fill_null(before_year_1, False), spelled, text)


def encode_csv(batch: pa.RecordBatch, encodings: Sequence[Encoding]) -> bytes:
    """``batch``'s rows as CSV lines, each column encoded as ``encodings`` says."""
    columns = []
    for column, encoding in zip(batch.columns, encodings, strict=True):
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()  # noqa: PLW2901  # decoded in place
        if encoding is Encoding.INSTANT:  # the same instants, zoned in UTC: no offset to cut
            column = column.cast(pa.timestamp(column.type.unit, "UTC"))  # noqa: PLW2901
            encoding = Encoding.NATIVE  # noqa: PLW2901
        if encoding is not Encoding.NATIVE:
            column = _converted(column, encoding)  # noqa: PLW2901
        elif pa.types.is_timestamp(column.type) and column.type.tz in _UTC_ZONES:
            column = _utc_timestamp_text(column)  # noqa: PLW2901
        columns.append(column)
    table = pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(columns))])
    sink = io.BytesIO()
    pacsv.write_csv(table, sink, _OPTIONS)
    return sink.getvalue()
