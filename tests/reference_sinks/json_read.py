"""Reading Spark values back from JSON and text, by their Spark type, to compare them.

`from_json` is what a user's reader does with a record and the schema it expects
(Spark's JSON reader, a typed client): a missing field is null, ``"NaN"`` and
``"Infinity"`` are floats, a decimal may be a number or a string of digits, a
binary value is base64, a float is rounded to float32. `from_text` reads a Redis
hash field (Spark's ``CAST(... AS STRING)`` spelling, nested values as JSON).
`from_arrow` puts Spark's own values (``toArrow().to_pylist()``) in the same shape.
All three return values for `tests.reference_sinks.spark_values.comparable`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import struct
from typing import Any

from pyspark.sql import types as T

__all__ = ["from_arrow", "from_json", "from_text", "spark_json_lines"]

_F32 = struct.Struct("<f")


def _float32(value: float) -> float:
    return float(_F32.unpack(_F32.pack(value))[0])


def _key(text: str, kind: T.DataType) -> Any:
    return from_json(json.loads(text), kind) if not isinstance(kind, T.StringType) else text


def from_json(value: Any, kind: T.DataType) -> Any:  # noqa: PLR0911 - one branch per type
    """A value parsed from JSON (``parse_float=Decimal``) as a Python value of ``kind``."""
    if value is None:
        return None
    if isinstance(kind, T.StructType):
        return {f.name: from_json(value.get(f.name), f.dataType) for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        return [from_json(item, kind.elementType) for item in value]
    if isinstance(kind, T.MapType):
        return {
            _key(key, kind.keyType): from_json(item, kind.valueType) for key, item in value.items()
        }
    if isinstance(kind, T.FloatType):
        return _float32(float(value))
    if isinstance(kind, T.DoubleType):
        return float(value)
    if isinstance(kind, T.DecimalType):
        return decimal.Decimal(str(value))
    if isinstance(kind, T.BinaryType):
        return base64.b64decode(value)
    if isinstance(kind, T.DateType):
        return dt.date.fromisoformat(value)
    if isinstance(kind, T.TimestampType | T.TimestampNTZType):
        return dt.datetime.fromisoformat(value)
    return value


def from_text(raw: bytes, kind: T.DataType) -> Any:
    """A Redis hash field's bytes as a Python value of ``kind``."""
    if isinstance(kind, T.BinaryType):
        return raw
    text = raw.decode()
    if isinstance(kind, T.StructType | T.ArrayType | T.MapType):
        return from_json(json.loads(text, parse_float=decimal.Decimal), kind)
    if isinstance(kind, T.BooleanType):
        return {"true": True, "false": False}[text]
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return int(text)
    return from_json(text, kind)


def from_arrow(value: Any, kind: T.DataType) -> Any:
    """A value of Spark's ``toArrow().to_pylist()`` in `from_json`'s shape."""
    if value is None:
        return None
    if isinstance(kind, T.StructType):
        return {f.name: from_arrow(value[f.name], f.dataType) for f in kind.fields}
    if isinstance(kind, T.ArrayType):
        return [from_arrow(item, kind.elementType) for item in value]
    if isinstance(kind, T.MapType):
        return {from_arrow(k, kind.keyType): from_arrow(v, kind.valueType) for k, v in value}
    return value


def spark_json_lines(spark, df, path: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """``df`` as Spark's own JSON writer writes it (microsecond timestamps), by id."""
    (
        df.write.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")
        .option("timestampNTZFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
        .json(path)
    )
    lines = spark.read.text(path).collect()
    records = [json.loads(line.value, parse_float=decimal.Decimal) for line in lines]
    return sorted(records, key=lambda record: record["id"])
