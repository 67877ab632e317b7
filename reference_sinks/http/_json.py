"""Rows as JSON: the HttpSink's default element converter.

Spark hands a writer each row as a dict of column -> Python value: ints, floats,
strings, but also ``datetime``, ``date``, ``Decimal``, ``bytearray``, maps as lists
of ``(key, value)`` tuples. The converter maps every value to one JSON can carry,
once, when the row enters the writer; the entry it makes is also what the writer
state stores (as that JSON). With the writer's input schema (on Spark) the conversion is
compiled from the column types and spells each value as Spark's JSON writer does
(`reference_sinks._json_values`); without one, values are converted by their Python
type (`to_json_safe`).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

from reference_sinks._json_values import Encoder, column_encoders, json_float
from sinkv2 import SinkWriter

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JsonSafeConverter", "to_json_safe"]

_PLAIN = (str, int, bool, type(None))


def to_json_safe(value: Any) -> Any:  # noqa: PLR0911 - one return per kind of value reads best
    """``value`` as something JSON writes, losing as little as possible.

    - dicts (and ``Row``-like objects with ``asDict``) -> dicts with str keys;
      lists, tuples and sets -> lists;
    - ``datetime`` / ``date`` / ``time`` -> ISO 8601 strings; ``timedelta`` -> seconds (float);
    - ``Decimal`` -> its exact string (a float would round); ``UUID`` -> str;
    - ``bytes`` / ``bytearray`` / ``memoryview`` -> base64 strings;
    - NaN and infinities -> ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, as Spark's
      JSON writer spells them: JSON has no such numbers, and strict parsers reject
      the ``NaN`` that ``json.dumps`` would write.

    Raises:
        TypeError: a value of another type; convert it in your own converter.
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else json_float(value)
    if isinstance(value, Mapping):
        return {str(key): to_json_safe(item) for key, item in value.items()}
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return to_json_safe(as_dict())
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json_safe(item) for item in value]
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(
        f"HttpSink cannot turn a {type(value).__name__} into JSON (got {value!r:.100}); "
        "pass HttpSink(converter=...) a function that maps it to str, numbers, lists or dicts"
    )


@final
class JsonSafeConverter:
    """The default element converter: a row dict -> a JSON-safe dict.

    Without a schema, values are converted by their Python type (`to_json_safe`).
    `for_schema` gives the converter of rows of one Arrow schema (what `HttpSink`
    uses when Spark hands its writers their input schema): each column is spelled
    as Spark's JSON writer spells its type (``docs/sinks/http.md``), a map as an
    object even when empty, a float column with the float32's digits.

    An element that is not a mapping becomes ``{"value": ...}``, so every record
    in a request body is a JSON object.
    """

    def __init__(self) -> None:
        self._encoders: dict[str, Encoder] | None = None

    def for_schema(self, schema: pa.Schema) -> JsonSafeConverter:
        """A converter of rows of ``schema``, compiled from its column types.

        Raises:
            SinkConfigurationError: a column's type has no JSON spelling (a day-time
                interval); the message names the column and its type.
        """
        converter = JsonSafeConverter()
        converter._encoders = column_encoders(schema, "HttpSink")
        return converter

    def apply(self, element: Any, context: SinkWriter.Context) -> dict[str, Any]:
        """The element's JSON-safe dict."""
        encoders = self._encoders
        if encoders is not None and type(element) is dict:
            if not encoders:
                return element
            converted = dict(element)
            for name, encode in encoders.items():
                value = converted.get(name)
                if value is not None:
                    converted[name] = encode(value)
            return converted
        if isinstance(element, Mapping) or callable(getattr(element, "asDict", None)):
            safe: dict[str, Any] = to_json_safe(element)
            return safe
        return {"value": to_json_safe(element)}

    def __repr__(self) -> str:
        return "JsonSafeConverter()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonSafeConverter)

    def __hash__(self) -> int:
        return hash(JsonSafeConverter)
