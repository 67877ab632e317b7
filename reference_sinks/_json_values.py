"""Spark values as JSON, the way Spark's JSON writer spells them, compiled from the Arrow schema.

Writers get Spark rows as dicts of Python values (Arrow's ``to_pylist``), which lose
some of the Spark type: a map arrives as a list of ``(key, value)`` tuples (an empty
map as ``[]``, like an empty array), a ``float`` column as the float32's exact double.
The writer's input schema (``WriterInitContext.get_input_schema()``) has the types, so
`column_encoders` compiles, once per writer, one function per column that needs one:

============================  =====================================================
Spark type                    JSON value
============================  =====================================================
byte, short, int, long        number
float, double                 number (float: the float32's shortest digits, as
                              Spark); NaN, Infinity, -Infinity as the strings
                              ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (as Spark)
decimal(p, s)                 string of its exact digits (Spark writes a number;
                              most JSON readers parse numbers as doubles)
string, boolean, null         string, true/false, null
binary                        base64 string (as Spark)
date                          ``"2024-03-30"`` (as Spark)
timestamp                     ISO 8601 with the offset, microseconds kept
                              (Spark's default cuts to milliseconds)
timestamp_ntz                 ISO 8601 without offset, microseconds kept
time                          ``"12:34:56.123456"``
array, struct                 array, object (a null field is ``null``; Spark
                              leaves it out)
map                           object; keys as JSON text (``1`` -> ``"1"``)
variant                       the variant's JSON value, inline (as Spark)
============================  =====================================================

Types without a JSON spelling that reads back as the same value (day-time
intervals) are refused when the writer is made, naming the column and its type.
"""

from __future__ import annotations

import base64
import decimal
import functools
import json
import math
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

import pyarrow as pa

from sinkv2.errors import SinkConfigurationError

__all__ = [
    "Encoder",
    "column_encoders",
    "field_encoder",
    "is_variant",
    "json_float",
    "shortest_float32",
    "variant_json",
    "variant_text",
]

Encoder = Callable[[Any], Any]
"""A function of a non-null value of one type -> its JSON-safe value."""

_NON_FINITE: Final = {math.inf: "Infinity", -math.inf: "-Infinity"}
_FLOAT32: Final = struct.Struct("<f")
_VARIANT_DIGITS: Final = 80  # more than a variant decimal's 38 digits and scale 38


def json_float(value: float) -> float | str:
    """``value``, or ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"`` as Spark writes them."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else _NON_FINITE[value]


def shortest_float32(value: float) -> float | str:
    """A float32 (as its exact double) as the double of its shortest decimal digits.

    ``0.10000000149011612`` (float32 0.1) -> ``0.1``: the number Spark writes, and
    the same float32 when read back.
    """
    if not math.isfinite(value):
        return json_float(value)
    for digits in range(6, 10):
        short = float(f"{value:.{digits}g}")
        if _FLOAT32.unpack(_FLOAT32.pack(short))[0] == value:
            return short
    return value  # pragma: no cover - 9 significant digits always round-trip a float32


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _iso(value: Any) -> str:
    text: str = value.isoformat()
    return text


def _key_text(value: Any) -> str:
    """A map key as an object key: strings as they are, anything else as its JSON text."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _list(item: Encoder | None) -> Encoder:
    if item is None:
        return list
    return lambda value: [None if element is None else item(element) for element in value]


def _map(key: Encoder | None, item: Encoder | None) -> Encoder:
    def encode(value: list[tuple[Any, Any]]) -> dict[str, Any]:
        return {
            _key_text(k if key is None else key(k)): v if v is None or item is None else item(v)
            for k, v in value
        }

    return encode


def _struct(fields: dict[str, Encoder | None]) -> Encoder:
    def encode(value: Mapping[str, Any]) -> dict[str, Any]:
        converted = dict(value)
        for name, field in fields.items():
            found = converted.get(name)
            if field is not None and found is not None:
                converted[name] = field(found)
        return converted

    return encode


def is_variant(field: pa.Field) -> bool:
    """Whether ``field`` is a Spark variant, in PySpark's Arrow form.

    That is a struct of ``value`` and ``metadata`` whose ``metadata`` field is
    tagged ``variant: true``; only the field, not its type, tells it from a struct.
    """
    kind = field.type
    if not pa.types.is_struct(kind):
        return False
    children = {kind.field(i).name: kind.field(i) for i in range(kind.num_fields)}
    tag = children["metadata"].metadata if "metadata" in children else None
    return "value" in children and tag is not None and tag.get(b"variant") == b"true"


def _variant_to_json(value: Mapping[str, Any]) -> str:
    """PySpark's JSON text of a variant, its decimals with every digit.

    PySpark computes a decimal as ``unscaled * 10 ** -scale`` in the current decimal
    context, whose default 28 digits would round a variant decimal's 38.
    """
    from pyspark.sql.types import VariantVal  # noqa: PLC0415  # only variant columns need pyspark

    with decimal.localcontext(prec=_VARIANT_DIGITS):
        text: str = VariantVal(value["value"], value["metadata"]).toJson()
    if "nan" in text or "inf" in text:
        text = _NON_FINITE_TOKEN.sub(_spelled_non_finite, text)
    return text


# A JSON string (kept as it is), or PySpark's bare nan / inf / -inf for a double.
_NON_FINITE_TOKEN: Final = re.compile(r'("(?:[^"\\]|\\.)*")|(-?inf|nan)')
_SPARK_SPELLING: Final = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _spelled_non_finite(found: re.Match[str]) -> str:
    """A non-finite double as Spark's JSON writer spells it (a string); a string unchanged."""
    return found.group(1) or _SPARK_SPELLING[found.group(2)]


def variant_json(value: Mapping[str, Any]) -> Any:
    """A variant's value (its ``value`` and ``metadata`` bytes) as the JSON value it holds.

    Numbers with a fraction or exponent become floats: for writers whose JSON
    encoder cannot write more digits (`variant_text` keeps them all).
    """
    return json.loads(_variant_to_json(value))


class _Number:
    """A JSON number token, written as it is by `_dump`."""

    __slots__ = ("text",)

    def __init__(self, token: str) -> None:
        # PySpark writes a decimal as str(Decimal), "1E-10" for 0.0000000001 (a float as
        # repr, with a lower-case "e"); Spark reads an exponent as a double, writes plain
        self.text = f"{decimal.Decimal(token):f}" if "E" in token else token


def _dump(value: Any) -> str:
    """``value`` (from ``json.loads`` with `_Number` for its fractions) as compact JSON."""
    if isinstance(value, _Number):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(item) for item in value) + "]"
    return json.dumps(value)


def variant_text(value: Mapping[str, Any]) -> str:
    """A variant's value as its JSON text, as Spark writes it: decimals with every digit.

    A decimal is a plain number (``0.0000000001``, not ``1E-10``, which Spark's
    JSON reader would take as a double), so that Spark reads the same decimal back.
    """
    text = _variant_to_json(value)
    if "E" not in text:  # no decimal in exponent form (nor a string with an "E")
        return text
    return _dump(json.loads(text, parse_float=_Number))


def field_encoder(field: pa.Field, where: Callable[[], str]) -> Encoder | None:
    """The encoder of ``field``'s non-null values; ``None`` if a value is already JSON.

    Like `value_encoder`, and a variant field (nested ones too) as its JSON value.
    """
    if is_variant(field):
        return variant_json
    return value_encoder(field.type, where)


def value_encoder(kind: pa.DataType, where: Callable[[], str]) -> Encoder | None:  # noqa: PLR0911 - one return per kind of type reads best
    """The encoder of ``kind``'s non-null values; ``None`` if a value is already JSON.

    Raises:
        SinkConfigurationError: ``kind`` has no JSON spelling; ``where()`` names it.
    """
    if (
        pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
    ):
        return None
    if pa.types.is_float32(kind):
        return shortest_float32
    if pa.types.is_floating(kind):
        return json_float
    if pa.types.is_decimal(kind):
        return str
    if (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_binary_view(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        return _base64
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind) or pa.types.is_time(kind):
        return _iso
    if pa.types.is_map(kind):
        return _map(field_encoder(kind.key_field, where), field_encoder(kind.item_field, where))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _list(field_encoder(kind.value_field, where))
    if pa.types.is_struct(kind):
        fields = {field.name: field_encoder(field, where) for field in kind}
        return _struct({name: f for name, f in fields.items() if f is not None})
    raise SinkConfigurationError(
        f"{where()} holds {kind} values, which have no JSON value that reads back the same; "
        "cast it first (e.g. to string, or a day-time interval to a long of microseconds)"
    )


def _column_where(sink: str, field: pa.Field) -> str:
    return f"{sink}: column {field.name!r} of type {field.type}"


def column_encoders(schema: pa.Schema, sink: str) -> dict[str, Encoder]:
    """The columns of ``schema`` whose values need converting, each with its encoder.

    Raises:
        SinkConfigurationError: a column has a type without a JSON spelling; the
            message names the sink, the column and the type.
    """
    encoders: dict[str, Encoder] = {}
    for field in schema:
        encoder = field_encoder(field, functools.partial(_column_where, sink, field))
        if encoder is not None:
            encoders[field.name] = encoder
    return encoders
