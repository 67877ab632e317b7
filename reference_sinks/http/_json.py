"""Rows as JSON: the HttpSink's default element converter.

Spark hands a writer each row as a dict of column -> Python value: ints, floats,
strings, but also ``datetime``, ``date``, ``Decimal``, ``bytearray`` and nested
``Row`` objects that ``json.dumps`` refuses. The converter maps every value to
one JSON can carry, once, when the row enters the writer; the entry it makes is
also what msgpack stores in the writer state.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
import uuid
from collections.abc import Mapping
from typing import Any, final

from sinkv2 import SinkWriter

__all__ = ["JsonSafeConverter", "to_json_safe"]

_PLAIN = (str, int, bool, type(None))


def to_json_safe(value: Any) -> Any:  # noqa: PLR0911 - one return per kind of value reads best
    """``value`` as something JSON writes and msgpack stores, losing as little as possible.

    - dicts (and ``Row``-like objects with ``asDict``) -> dicts with str keys;
      lists, tuples and sets -> lists;
    - ``datetime`` / ``date`` / ``time`` -> ISO 8601 strings; ``timedelta`` -> seconds (float);
    - ``Decimal`` -> its exact string (a float would round); ``UUID`` -> str;
    - ``bytes`` / ``bytearray`` / ``memoryview`` -> base64 strings;
    - NaN and infinities -> ``None``: JSON has no such numbers, and strict parsers
      reject the ``NaN`` that ``json.dumps`` would write.

    Raises:
        TypeError: a value of another type; convert it in your own converter.
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
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
    """The default element converter: a row dict -> a JSON-safe dict (see `to_json_safe`).

    An element that is not a mapping becomes ``{"value": ...}``, so every record
    in a request body is a JSON object.
    """

    def apply(self, element: Any, context: SinkWriter.Context) -> dict[str, Any]:
        """The element's JSON-safe dict."""
        if isinstance(element, Mapping) or callable(getattr(element, "asDict", None)):
            converted: dict[str, Any] = to_json_safe(element)
            return converted
        return {"value": to_json_safe(element)}

    def __repr__(self) -> str:
        return "JsonSafeConverter()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonSafeConverter)

    def __hash__(self) -> int:
        return hash(JsonSafeConverter)
