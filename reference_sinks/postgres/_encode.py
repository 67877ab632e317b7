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

    return json.loads(
        VariantVal(value["value"], value["metadata"]).toJson(), parse_float=decimal.Decimal
    )


def _zone_of(kind: pa.TimestampType) -> datetime.tzinfo:
    """The tzinfo pyarrow gives ``kind``'s values (it knows every spelling Spark uses)."""
    zone: datetime.tzinfo | None = pa.scalar(0, type=kind).as_py().tzinfo
    assert zone is not None  # only zoned types get here
    return zone


def _in_zone(zone: datetime.tzinfo, *, array: bool) -> Callable[[datetime.datetime], Any]:
    """A UTC datetime shown in ``zone``; as text if its wall time there is off the calendar.

    The text is the wall time of the instant 400 years nearer, with the year put
    back: ``0000-12-31T16:07:02-07:52:58`` (ISO 8601's year 0) for JSON,
    ``0001-12-31 16:07:02-07:52:58 BC`` for an array literal (PostgreSQL's spelling).
    """

    def shown(value: datetime.datetime) -> Any:
        try:
            return value.astimezone(zone)
        except OverflowError:
            shift = _GREGORIAN_CYCLE if value.year < 5000 else -_GREGORIAN_CYCLE
            local = (value + shift).astimezone(zone)
            year = local.year - (400 if value.year < 5000 else -400)
            rest = local.isoformat(sep=" " if array else "T")[4:]
            if array and year < 1:
                return f"{1 - year:04d}{rest} BC"
            return f"{year:04d}{rest}"

    return shown


def _in_utc(kind: pa.DataType) -> pa.DataType:
    """A zoned timestamp type zoned in UTC (the same instants); other types as they are."""
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pa.timestamp(kind.unit, "UTC")
    return kind


def _array_ready(kind: pa.DataType) -> Callable[[Any], Any] | None:
    """What shows an array's zoned timestamps (read in UTC) in their zone, if it has any."""
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz not in _UTC_ZONES:
        return _in_zone(_zone_of(kind), array=True)
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
    zoned timestamp arrives in UTC and is shown in its zone.
    """
    kind = field.type
    if is_variant(field):
        return _variant_value
    if pa.types.is_float32(kind):
        return shortest_float32
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz not in _UTC_ZONES:
        return _in_zone(_zone_of(kind), array=False)
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
    # Read in UTC: no value's wall time is off the calendar.
    in_utc = rebuild_type(column.type, _in_utc)
    if in_utc != column.type:
        column = column.cast(in_utc)
    return pa.array(
        [None if value is None else convert(value) for value in column.to_pylist()],
        type=pa.string(),
    )


def _utc_timestamp_text(column: pa.Array) -> pa.Array:
    """A timestamp column zoned in UTC as ``2024-02-29 23:59:59.999999Z`` (nulls stay null)."""
    naive = column.cast(pa.timestamp(column.type.unit))  # the same values: UTC wall time
    return pc.binary_join_element_wise(pc.cast(naive, pa.string()), "Z", "")


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
