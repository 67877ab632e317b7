"""Arrow batch -> request entries, column by column: keys, JSON values and fields per column.

`batch_entries` builds the entries of a whole ``pyarrow.RecordBatch`` the way the
modes' ``to_entry`` builds one element's, byte for byte, without a dict per row:

- a key template's columns are formatted per column (integers and strings cast
  by Arrow, other types with Python's ``format`` as ``str.format`` does), then
  joined with the template's literal text;
- `SetMode`'s default value (the row as compact JSON) is joined from per-column
  JSON texts: integers, booleans and strings without control characters spelled
  by Arrow compute kernels, doubles by ``repr``, other types by their encoder and
  the JSON encoder, one column at a time;
- `HashMode` and `StreamMode`'s default fields are per-column bytes, zipped into
  ``[field, value, ...]`` lists with the nulls left out.

What it cannot build column-wise (a key, value, fields or id function, repeated
column names) it leaves to the caller (``None``), and what fails (a missing or
null key column, a value without a spelling) it reports as `Unvectorised`: the
caller then converts the batch row by row, which raises the row's own error.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Callable, Mapping
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from reference_sinks._json_values import Encoder
from reference_sinks.redis._modes import (
    HashMode,
    RedisMode,
    SetMode,
    StreamMode,
    encode_value,
    json_text,
    key_template,
)

__all__ = ["Unvectorised", "batch_entries"]

_FLOAT_JSON: Final = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"', "None": "null"}
_FLOAT_FIELD: Final = {"nan": b"NaN", "inf": b"Infinity", "-inf": b"-Infinity"}
_CONTROL: Final = "[\\x00-\\x1f]"


class Unvectorised(Exception):
    """The batch has a row the column-wise path cannot convert: convert it row by row."""


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _arrow_text(kind: pa.DataType) -> bool:
    """Whether Arrow's cast to string spells values as ``str()`` does."""
    return bool(pa.types.is_integer(kind)) or _is_text(kind)


def _as_bytes(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A string array's values as bytes (None for nulls), without a str per value."""
    kind = pa.large_binary() if pa.types.is_large_string(array.type) else pa.binary()
    values: list[Any] = array.cast(kind).to_pylist()
    return values


def _template_keys(template: str, batch: pa.RecordBatch) -> list[bytes]:
    """The keys of ``template`` (bare column names in braces) for every row of ``batch``."""
    names = batch.schema.names
    parts: list[Any] = []
    arrow_only = True
    for literal, name, _, _ in string.Formatter().parse(template):
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if name not in names:
            raise Unvectorised
        column = batch.column(name)
        if column.null_count:
            raise Unvectorised
        if _arrow_text(column.type):
            parts.append(column.cast(pa.string()))
        else:
            arrow_only = False
            parts.append(list(map(format, column.to_pylist())))
    if not any(isinstance(part, list | pa.Array) for part in parts):
        return [template.format().encode()] * batch.num_rows
    if arrow_only:
        return _as_bytes(pc.binary_join_element_wise(*parts, ""))
    columns = [
        part if isinstance(part, list) else part.to_pylist()
        for part in parts
        if not isinstance(part, str)
    ]
    pattern = "".join(part.replace("%", "%%") if isinstance(part, str) else "%s" for part in parts)
    return [(pattern % row).encode() for row in zip(*columns, strict=True)]


def _json_column(column: pa.Array, encoder: Encoder | None) -> pa.Array | list[str]:
    """Each value of ``column`` as JSON text (``null`` for nulls), as `element_as_json` does."""
    kind = column.type
    if encoder is None:
        if pa.types.is_integer(kind):
            return pc.fill_null(column.cast(pa.string()), "null")
        if pa.types.is_boolean(kind):
            return pc.fill_null(pc.if_else(column, "true", "false"), "null")
        if pa.types.is_null(kind):
            return pa.array(["null"] * len(column), pa.string())
        if _is_text(kind) and not pc.any(pc.match_substring_regex(column, _CONTROL)).as_py():
            escaped = pc.replace_substring(column.cast(pa.string()), "\\", "\\\\")
            escaped = pc.replace_substring(escaped, '"', '\\"')
            return pc.fill_null(pc.binary_join_element_wise('"', escaped, '"', ""), "null")
        if pa.types.is_float64(kind):
            return [_FLOAT_JSON.get(text, text) for text in map(repr, column.to_pylist())]
    values = column.to_pylist()
    if encoder is not None:
        values = [None if value is None else encoder(value) for value in values]
    try:
        return [json_text(value) for value in values]
    except Exception as error:
        raise Unvectorised from error


def _set_values(batch: pa.RecordBatch, encoders: Mapping[str, Encoder]) -> list[bytes]:
    """Every row of ``batch`` as compact JSON, as `SetMode`'s default value."""
    if not batch.num_columns:
        return [b"{}"] * batch.num_rows
    parts: list[Any] = []
    for index, name in enumerate(batch.schema.names):
        prefix = "{" if index == 0 else ","
        parts.append(prefix + json.dumps(name, ensure_ascii=False) + ":")
        texts = _json_column(batch.column(index), encoders.get(name))
        parts.append(pa.array(texts, pa.string()) if isinstance(texts, list) else texts)
    parts.append("}")
    return _as_bytes(pc.binary_join_element_wise(*parts, ""))


def _field_column(column: pa.Array, encoder: Encoder | None, where: Callable[[], str]) -> list[Any]:
    """Each value of ``column`` as the bytes of a hash or stream field (None for nulls)."""
    kind = column.type
    if encoder is None:
        if _arrow_text(kind):
            return _as_bytes(column.cast(pa.string()))
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return column.to_pylist()  # type: ignore[no-any-return]
        if pa.types.is_boolean(kind):
            return [
                None if value is None else b"true" if value else b"false"
                for value in column.to_pylist()
            ]
        if pa.types.is_float64(kind):
            return [
                None if value is None else _FLOAT_FIELD.get(text := repr(value)) or text.encode()
                for value in column.to_pylist()
            ]
    values = column.to_pylist()
    if encoder is not None:
        values = [None if value is None else encoder(value) for value in values]
    try:
        return [None if value is None else encode_value(value, where) for value in values]
    except Exception as error:
        raise Unvectorised from error


def _flat_fields(batch: pa.RecordBatch, encoders: Mapping[str, Encoder]) -> list[list[bytes]]:
    """Every row's non-null columns as ``[field, value, ...]``."""
    interleaved: list[Any] = []
    for index, name in enumerate(batch.schema.names):
        interleaved.append(itertools.repeat(name.encode()))
        interleaved.append(
            _field_column(batch.column(index), encoders.get(name), lambda: "a field")
        )
    if not interleaved:
        return [[] for _ in range(batch.num_rows)]
    if not any(batch.column(index).null_count for index in range(batch.num_columns)):
        return [list(row) for row in zip(*interleaved, strict=False)]
    return [
        list(row) if None not in row else _without_nulls(row)
        for row in zip(*interleaved, strict=False)
    ]


def _without_nulls(row: tuple[Any, ...]) -> list[Any]:
    flat: list[Any] = []
    for index in range(0, len(row), 2):
        if row[index + 1] is not None:
            flat.append(row[index])
            flat.append(row[index + 1])
    return flat


def batch_entries(
    mode: RedisMode, batch: pa.RecordBatch, encoders: Mapping[str, Encoder]
) -> list[list[Any]] | None:
    """The entries of every row of ``batch``, as ``mode.to_entry`` makes them one by one.

    ``encoders`` spell the columns (`column_encoders` of the batch's schema).
    ``None`` when ``mode`` has a function (key, value, fields or id) or the batch
    repeats a column name: convert such batches row by row.

    Raises:
        Unvectorised: a row cannot be converted column-wise (a null or missing
            key column, a value without a spelling): convert the batch row by row,
            which raises that row's error.
    """
    template = key_template(mode)
    if template is None or len(set(batch.schema.names)) != batch.num_columns:
        return None
    if isinstance(mode, SetMode):
        if mode.value is not None:
            return None
        keys = _template_keys(template, batch)
        return [list(pair) for pair in zip(keys, _set_values(batch, encoders), strict=True)]
    if mode.fields is not None or (isinstance(mode, StreamMode) and mode.id is not None):
        return None
    keys = _template_keys(template, batch)
    fields = _flat_fields(batch, encoders)
    if isinstance(mode, HashMode):
        return [[key, flat] for key, flat in zip(keys, fields, strict=True)]
    if not all(fields):
        raise Unvectorised  # a stream entry needs a field: the row path says which row
    return [[key, flat, None] for key, flat in zip(keys, fields, strict=True)]
