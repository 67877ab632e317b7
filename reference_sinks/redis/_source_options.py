"""`RedisStreamSource` from string options, for ``.option("source", "redis_stream")``.

Spark's option values are strings and their names lower-cased; each is parsed
here with an error that names the option::

    .option("source", "redis_stream").option("url", "redis://127.0.0.1:6379/0")
    .option("keys", "orders,payments").option("fields", "user string, amount double")
    .option("trim", "true")

``fields`` is a comma-separated list of ``name type`` pairs; the types are
Spark's SQL names (`FIELD_TYPES`), plus ``decimal(p,s)``; ``name type not null``
declares a field every entry must have.
"""

from __future__ import annotations

import re
from typing import Final

import pyarrow as pa

from reference_sinks.redis._source import RedisStreamSource
from sinkv2.errors import SinkConfigurationError

__all__ = ["FIELD_TYPES", "parse_fields", "redis_stream_source_from_options"]

FIELD_TYPES: Final = {
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
"""The type names ``fields`` knows (Spark's), and the Arrow type each declares."""

_FIELD: Final = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_.:-]*)\s+([a-z]+(?:\(\s*\d+\s*,\s*\d+\s*\))?)(\s+not\s+null)?\s*",
    re.IGNORECASE,
)
_DECIMAL: Final = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", re.IGNORECASE)
_TRUE: Final = frozenset({"true", "yes", "1"})
_FALSE: Final = frozenset({"false", "no", "0"})


def _type(name: str, spelled: str) -> pa.DataType:
    decimal = _DECIMAL.fullmatch(spelled)
    if decimal is not None:
        return pa.decimal128(int(decimal[1]), int(decimal[2]))
    known = FIELD_TYPES.get(spelled.lower())
    if known is None:
        raise SinkConfigurationError(
            f"the 'fields' option declares {name!r} as {spelled!r}, which is not a type it "
            f"knows; use one of {sorted(FIELD_TYPES)} or decimal(p,s)"
        )
    return known


def parse_fields(text: str) -> pa.Schema:
    """The schema ``"user string, amount double not null"`` declares.

    Raises:
        SinkConfigurationError: A part is not ``name type [not null]``, or a type is unknown.
    """
    fields = []
    for part in re.split(r",(?![^(]*\))", text):
        match = _FIELD.fullmatch(part)
        if match is None:
            raise SinkConfigurationError(
                f"the 'fields' option must be comma-separated 'name type' pairs, e.g. "
                f"'user string, amount double not null' (got the part {part.strip()!r} of "
                f"{text!r})"
            )
        name, spelled, not_null = match.groups()
        fields.append(pa.field(name, _type(name, spelled), nullable=not_null is None))
    return pa.schema(fields)


def _flag(option: str, value: str | None) -> bool:
    if value is None:
        return False
    text = value.strip().lower()
    if text not in _TRUE | _FALSE:
        raise SinkConfigurationError(
            f"the {option!r} option must be 'true' or 'false' (got {value!r})"
        )
    return text in _TRUE


def _count(option: str, value: str | None, default: int) -> int:
    if value is None:
        return default
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive integer (got {value!r})"
        )
    return int(text)


def redis_stream_source_from_options(
    *,
    url: str | None = None,
    fields: str | None = None,
    keys: str | None = None,
    pattern: str | None = None,
    bounded: str | None = None,
    trim: str | None = None,
    key_column: str = "stream",
    id_column: str = "id",
    batch_entries: str | None = None,
    discovery_interval_ms: str | None = None,
    poll_interval_ms: str | None = None,
) -> RedisStreamSource:
    """A `RedisStreamSource` from Spark's string options.

    ``url`` and ``fields`` are required, and ``keys`` (comma-separated) or ``pattern``.

    Raises:
        SinkConfigurationError: A missing or bad option, named.
    """
    if url is None or not url.strip():
        raise SinkConfigurationError(
            "the redis_stream source needs the 'url' option; e.g. "
            ".option('url', 'redis://127.0.0.1:6379/0')"
        )
    if fields is None or not fields.strip():
        raise SinkConfigurationError(
            "the redis_stream source needs the 'fields' option: the stream fields to read "
            "and their types, e.g. .option('fields', 'user string, amount double')"
        )
    key_list = [key.strip() for key in (keys or "").split(",") if key.strip()]
    return RedisStreamSource(
        url.strip(),
        parse_fields(fields),
        keys=key_list,
        pattern=pattern or None,
        bounded=_flag("bounded", bounded),
        trim=_flag("trim", trim),
        key_column=key_column,
        id_column=id_column,
        batch_entries=_count("batch_entries", batch_entries, 1000),
        discovery_interval_ms=_count("discovery_interval_ms", discovery_interval_ms, 1000),
        poll_interval_ms=_count("poll_interval_ms", poll_interval_ms, 100),
    )
