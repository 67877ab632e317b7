"""Rows of an Arrow batch as JSON lines that Spark's JSON reader reads back as the same values.

Compiled once per Arrow schema (`JsonLinesEncoder`), then one ``json`` encode per
row, as before: plain columns (integers, floats, strings, booleans) get no per-value
Python. Only what JSON has no value for is converted:

============================  =====================================================
Spark type                    JSON value (read back with the DataFrame's schema)
============================  =====================================================
byte, short, int, long        number
float, double                 number; NaN, Infinity, -Infinity as the strings
                              ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, as
                              Spark's JSON writer writes them (strict JSON has no
                              NaN; the row is re-encoded only when one occurs)
decimal(p, s)                 string of its exact digits (Spark writes a number;
                              Spark reads both, a string loses no digits elsewhere)
string, boolean               string, true/false
binary                        base64 string (as Spark)
date                          ``"2024-03-30"`` (as Spark)
timestamp                     ISO 8601 in UTC with ``+00:00``, microseconds kept
                              (Spark's default format cuts them to milliseconds)
timestamp_ntz                 ISO 8601 without offset, microseconds kept
                              (dates and timestamps outside years 1..9999, in
                              UTC: ``"+10000-01-01"``, ``"0000-12-31"``,
                              ``"-0001-12-31"``, the proleptic Gregorian years
                              Spark writes and reads back)
array, struct                 array, object (a null field is ``null``; Spark
                              leaves it out: both read back as null; a null
                              variant is left out, as JSON null is the variant's
                              own null)
map                           object; keys as text (``1`` -> ``"1"``), as Spark
                              (whose reader takes string keys only); an array
                              or struct key as its compact JSON (``"[1,2]"``)
variant                       the variant's JSON, inline (as Spark), decimals as
                              plain numbers with every digit
void                          null
============================  =====================================================

Day-time intervals and times have no JSON value Spark's reader takes back for every
interval type; `unsupported` names them so the sink refuses them before writing.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import secrets
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa

from reference_sinks._arrow_types import rebuild_type
from reference_sinks._json_values import is_variant, variant_text

__all__ = ["JsonLinesEncoder", "is_variant", "unsupported"]

_Convert = Callable[[Any], Any]

_NON_FINITE: Final = {math.inf: "Infinity", -math.inf: "-Infinity"}
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()
_CYCLE_DAYS: Final = 146_097  # days in 400 Gregorian years: the calendar repeats
_SECONDS_PER_DAY: Final = 86_400
_PER_SECOND: Final = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _default(value: object) -> object:
    """What ``json`` cannot write itself, at any depth (its ``default`` hook)."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} {value!r} has no JSON form")


class _Raw:
    """JSON text to write as it is (a variant's: its decimals keep every digit)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _variant(value: dict[str, Any]) -> _Raw:
    """A variant's value as its JSON text, written into the line as it is."""
    return _Raw(variant_text(value))


def _spell_non_finite(value: Any) -> Any:
    """``value`` with NaN and the infinities as Spark's JSON writer spells them, at any depth."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else _NON_FINITE[value]
    if isinstance(value, dict):
        return {key: _spell_non_finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_spell_non_finite(item) for item in value]
    return value


def _year_text(year: int) -> str:
    """A proleptic Gregorian year as Spark writes it: ``0005``, ``+10000``, ``-0001``."""
    if year > 9999:
        return f"+{year}"
    if year < 0:
        return f"-{-year:04d}"
    return f"{year:04d}"


def _date_text(days: int) -> str:
    """Days since 1970-01-01 as ``"2024-03-30"``, for any year (Python's dates end at 9999).

    The Gregorian calendar repeats every 400 years, so Python dates the day in the
    400 years from 1970 and the year is moved back by the whole cycles.
    """
    cycles, rest = divmod(days, _CYCLE_DAYS)
    day = dt.date.fromordinal(_EPOCH_ORDINAL + rest)
    return f"{_year_text(day.year + 400 * cycles)}-{day.month:02d}-{day.day:02d}"


def _timestamp_text(value: int, unit: str, offset: str) -> str:
    """A timestamp's integer ``value`` in ``unit`` since the epoch, as ``datetime.isoformat``.

    For any year: ``"+10000-01-01T04:59:59.999999+00:00"``; fractions as
    microseconds (nanoseconds when ``unit`` is ``ns``), left out when zero.
    """
    per_second = _PER_SECOND[unit]
    days, rest = divmod(value, _SECONDS_PER_DAY * per_second)
    seconds, fraction = divmod(rest, per_second)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{_date_text(days)}T{hours:02d}:{minutes:02d}:{seconds:02d}"
    if fraction:
        digits = 9 if unit == "ns" else 6
        text += f".{fraction * 10**digits // per_second:0{digits}d}"
    return text + offset


def _temporal_text(kind: pa.DataType) -> _Convert | None:
    """Turns a date's or timestamp's integer (its Arrow storage) into its text; else ``None``."""
    if pa.types.is_timestamp(kind):
        offset = "" if kind.tz is None else "+00:00"
        return lambda value: _timestamp_text(value, kind.unit, offset)
    if pa.types.is_date32(kind):
        return _date_text
    if pa.types.is_date64(kind):
        return lambda value: _date_text(value // (_SECONDS_PER_DAY * 1000))
    return None


def unsupported(field: pa.Field) -> pa.DataType | None:
    """The type inside ``field`` that JSON lines cannot hold, or ``None``."""
    kind = field.type
    if pa.types.is_duration(kind) or pa.types.is_time(kind) or pa.types.is_interval(kind):
        return kind
    if is_variant(field):
        return None
    if pa.types.is_struct(kind):
        children = [kind.field(i) for i in range(kind.num_fields)]
    elif pa.types.is_map(kind):
        children = [kind.key_field, kind.item_field]
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        children = [kind.value_field]
    else:
        return None
    for child in children:
        found = unsupported(child)
        if found is not None:
            return found
    return None


def _key_text(key: Any) -> str:
    """A map key as an object key: its text (an array or struct key: its compact JSON)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    converted = _spell_non_finite(key)
    if isinstance(converted, str):
        return converted
    if isinstance(converted, list | dict):
        return json.dumps(converted, separators=(",", ":"), ensure_ascii=False, default=_default)
    text = _default(converted) if not isinstance(converted, int | float) else converted
    return text if isinstance(text, str) else json.dumps(text)


def _converter(field: pa.Field, *, raw: bool = False) -> _Convert | None:  # noqa: PLR0911 - one return per kind of type
    """Turns a non-null value of ``field`` (from ``to_pylist``) into JSON; ``None``: as it is.

    With ``raw``, dates and timestamps arrive as their integers (a batch cast to
    `_raw`, for years Python's ``datetime`` cannot hold) and become their text.
    """
    kind = field.type
    if is_variant(field):
        return _variant
    if raw and (temporal := _temporal_text(kind)) is not None:
        return temporal
    if pa.types.is_map(kind):
        key = _converter(kind.key_field, raw=raw)
        item = _converter(kind.item_field, raw=raw)

        def encode_map(value: list[tuple[Any, Any]]) -> dict[str, Any]:
            return {
                _key_text(k if key is None else key(k)): v if v is None or item is None else item(v)
                for k, v in value
            }

        return encode_map
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = _converter(kind.value_field, raw=raw)
        if element is None:
            return None
        return lambda value: [None if item is None else element(item) for item in value]
    if pa.types.is_struct(kind):
        children = [kind.field(i) for i in range(kind.num_fields)]
        converters = {
            child.name: converter
            for child in children
            if (converter := _converter(child, raw=raw)) is not None
        }
        if not converters:
            return None
        variants = {child.name for child in children if is_variant(child)}

        def encode_struct(value: dict[str, Any]) -> dict[str, Any]:
            converted = dict(value)
            for name, convert in converters.items():
                found = converted.get(name)
                if found is not None:
                    converted[name] = convert(found)
                elif name in variants:  # JSON null is a variant's null: leave it out
                    converted.pop(name, None)
            return converted

        return encode_struct
    return None


def _utc(kind: pa.DataType) -> pa.DataType:
    """A zoned timestamp type in UTC (a cast of metadata only); other types as they are."""
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz != "UTC":
        return pa.timestamp(kind.unit, tz="UTC")
    return kind


def _raw(kind: pa.DataType) -> pa.DataType:
    """A date or timestamp type as its integer storage (a cast of metadata only)."""
    if pa.types.is_timestamp(kind) or pa.types.is_date64(kind):
        return pa.int64()
    if pa.types.is_date32(kind):
        return pa.int32()
    return kind


class JsonLinesEncoder:
    """Encodes batches of one Arrow schema as UTF-8 JSON lines.

    Args:
        schema: The batches' schema.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        utc = pa.schema([field.with_type(rebuild_type(field.type, _utc)) for field in schema])
        self._cast = None if utc.equals(schema) else utc
        self._converters = {
            field.name: converter
            for field in schema
            if (converter := _converter(field)) is not None
        }
        self._raw_schema = pa.schema(
            [field.with_type(rebuild_type(field.type, _raw)) for field in schema]
        )
        self._raw_converters = {
            field.name: converter
            for field in schema
            if (converter := _converter(field, raw=True)) is not None
        }
        self._variants = frozenset(field.name for field in schema if is_variant(field))
        # a variant's text goes into the line as a placeholder string, then replaces it
        self._placeholder = f"\x00{secrets.token_hex(16)}\x00"
        self._quoted = json.dumps(self._placeholder)
        self._raw_texts: list[str] = []
        self._encode_row = json.JSONEncoder(
            ensure_ascii=False, allow_nan=False, default=self._default
        ).encode

    def encode(self, batch: pa.RecordBatch) -> bytes:
        """The rows of ``batch`` (of this encoder's schema), one JSON object per line."""
        rows, converters = self._rows(batch)
        if converters:
            variants = self._variants
            for row in rows:
                for name, convert in converters.items():
                    value = row[name]
                    if value is not None:
                        row[name] = convert(value)
                    elif name in variants:  # JSON null is a variant's null: leave it out
                        del row[name]
        encode = self._encode
        lines = []
        for row in rows:
            try:
                lines.append(encode(row))
            except ValueError:  # NaN or an infinity: rare, so not looked for in every row
                lines.append(encode(_spell_non_finite(row)))
        lines.append("")
        return "\n".join(lines).encode("utf-8")

    def _default(self, value: object) -> object:
        """`_default`, and a `_Raw` text as the placeholder `_encode` replaces."""
        if isinstance(value, _Raw):
            self._raw_texts.append(value.text)
            return self._placeholder
        return _default(value)

    def _encode(self, row: Any) -> str:
        """``row`` as one JSON line, any `_Raw` text written as it is."""
        texts = self._raw_texts
        texts.clear()
        line = self._encode_row(row)
        if not texts:
            return line
        pieces = line.split(self._quoted)
        if len(pieces) != len(texts) + 1:  # pragma: no cover - a 128-bit random placeholder
            raise RuntimeError("a string value equals the JSON lines writer's placeholder")
        spliced = [pieces[0]]
        for text, piece in zip(texts, pieces[1:], strict=True):
            spliced += (text, piece)
        return "".join(spliced)

    def _rows(self, batch: pa.RecordBatch) -> tuple[list[dict[str, Any]], dict[str, _Convert]]:
        """``batch`` as Python rows, with the converters that turn their values into JSON.

        Dates and timestamps become ``datetime`` values, unless one lies outside
        years 1..9999 (in UTC), which Python cannot hold: then that batch's dates
        and timestamps are read as their integers and turned into text directly.
        """
        try:
            utc = batch if self._cast is None else batch.cast(self._cast)
            return utc.to_pylist(), self._converters
        except (OverflowError, ValueError):  # a year Python's datetime cannot hold
            return batch.cast(self._raw_schema).to_pylist(), self._raw_converters
