"""Arrow batch -> request entries, column by column: keys, JSON values and fields per column.

`batch_entries` builds the entries of a whole ``pyarrow.RecordBatch`` the way the
modes' ``to_entry`` builds one element's, byte for byte, without a dict per row:

- a key template's columns are spelled per column (integers and strings cast
  by Arrow, other types by ``key_part``, as a hash field stores them), then
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

import functools
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
    PackedEntry,
    RedisMode,
    SetMode,
    StreamMode,
    encode_value,
    json_text,
    key_part,
    key_template,
    packed_entry,
)
from sinkv2.errors import SinkConfigurationError

__all__ = ["Unvectorised", "batch_entries"]

_FLOAT_JSON: Final = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}
_FLOAT_FIELD: Final = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_CONTROL: Final = "[\\x00-\\x1f]"


class Unvectorised(Exception):
    """The batch has a row the column-wise path cannot convert: convert it row by row."""


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _arrow_text(kind: pa.DataType) -> bool:
    """Whether Arrow's cast to string spells values as ``str()`` does."""
    return bool(pa.types.is_integer(kind)) or _is_text(kind)


def _binary(array: pa.Array) -> pa.Array:
    """A string array as binary (the same bytes)."""
    if pa.types.is_large_string(array.type):
        array = array.cast(pa.string())
    return array.cast(pa.binary())


def _bulk(array: pa.Array) -> pa.Array:
    """Each value as a RESP bulk string: ``$<length>``, CRLF, the bytes, CRLF (null stays null)."""
    length = pc.binary_length(array).cast(pa.string()).cast(pa.binary())
    return pc.binary_join_element_wise(b"$", length, b"\r\n", array, b"\r\n", b"")


def _template_keys(template: str, batch: pa.RecordBatch) -> pa.Array:
    """The keys of ``template`` (bare column names in braces) for every row, as binary."""
    names = batch.schema.names
    parts: list[Any] = []
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
            parts.append(_binary(column.cast(pa.string())))
        else:
            try:
                spelled = [key_part(value, template, name) for value in column.to_pylist()]
            except SinkConfigurationError:
                raise Unvectorised from None  # the row path names the row
            parts.append(pa.array(spelled, pa.binary()))
    if not any(isinstance(part, pa.Array) for part in parts):
        return pa.array([template.format().encode()] * batch.num_rows, pa.binary())
    return pc.binary_join_element_wise(
        *(part.encode() if isinstance(part, str) else part for part in parts), b""
    )


def _double_texts(column: pa.Array, spelling: Mapping[str, str]) -> pa.Array:
    """A double column as ``repr`` spells its values, non-finite ones as ``spelling`` says.

    Arrow's cast spells the shortest round-trip digits as ``repr`` does; where it
    writes no exponent and ``repr`` would not either (0, and 1e-4 <= |x| < 1e16),
    the two differ only in ``repr``'s ``.0`` on integral values. Other values (and
    NaN, the infinities) are spelled in Python. Nulls stay null.
    """
    text = column.cast(pa.string())
    magnitude = pc.abs(column)
    in_range = pc.or_(
        pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e16)),
        pc.equal(magnitude, 0),
    )
    fast = pc.fill_null(pc.and_(in_range, pc.invert(pc.match_substring(text, "e"))), False)
    fixed = pc.if_else(
        pc.match_substring(text, "."), text, pc.binary_join_element_wise(text, ".0", "")
    )
    slow = pc.and_(pc.invert(fast), pc.is_valid(column))
    if not pc.any(slow).as_py():
        return fixed
    spelled = [
        spelling.get(shown, shown) for shown in map(repr, pc.filter(column, slow).to_pylist())
    ]
    return pc.replace_with_mask(fixed, slow, pa.array(spelled, pa.string()))


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
            return pc.fill_null(_double_texts(column, _FLOAT_JSON), "null")
    values = column.to_pylist()
    if encoder is not None:
        values = [None if value is None else encoder(value) for value in values]
    try:
        return [json_text(value) for value in values]
    except Exception as error:
        raise Unvectorised from error


def _set_values(batch: pa.RecordBatch, encoders: Mapping[str, Encoder]) -> pa.Array:
    """Every row of ``batch`` as compact JSON, as `SetMode`'s default value, as binary."""
    if not batch.num_columns:
        return pa.array([b"{}"] * batch.num_rows, pa.binary())
    parts: list[Any] = []
    for index, name in enumerate(batch.schema.names):
        prefix = "{" if index == 0 else ","
        parts.append(prefix + json.dumps(name, ensure_ascii=False) + ":")
        texts = _json_column(batch.column(index), encoders.get(name))
        parts.append(pa.array(texts, pa.string()) if isinstance(texts, list) else texts)
    parts.append("}")
    return _binary(pc.binary_join_element_wise(*parts, ""))


def _field_column(column: pa.Array, encoder: Encoder | None, where: Callable[[], str]) -> pa.Array:
    """Each value of ``column`` as the bytes of a hash or stream field (null for nulls)."""
    kind = column.type
    if encoder is None:
        if _arrow_text(kind):
            return _binary(column.cast(pa.string()))
        if pa.types.is_binary(kind):
            return column
        if pa.types.is_boolean(kind):
            return pc.if_else(column, b"true", b"false")
        if pa.types.is_float64(kind):
            return _binary(_double_texts(column, _FLOAT_FIELD))
    values = column.to_pylist()
    if encoder is not None:
        values = [None if value is None else encoder(value) for value in values]
    try:
        texts = [None if value is None else encode_value(value, where) for value in values]
    except Exception as error:
        raise Unvectorised from error
    return pa.array(texts, pa.binary())


def _flat_fields(names: list[bytes], columns: list[pa.Array], rows: int) -> list[list[bytes]]:
    """Every row's non-null fields as ``[field, value, ...]``."""
    if not columns:
        return [[] for _ in range(rows)]
    interleaved: list[Any] = []
    for name, column in zip(names, columns, strict=True):
        interleaved.append(itertools.repeat(name))
        interleaved.append(column.to_pylist())
    if not any(column.null_count for column in columns):
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


def _set_entries(mode: SetMode, keys: pa.Array, values: pa.Array) -> list[PackedEntry]:
    """``[key, value]`` entries, each with its ``SET`` packed and its size."""
    head = b"*3\r\n$3\r\nSET\r\n" if mode.ttl_ms is None else b"*5\r\n$3\r\nSET\r\n"
    tail = b"" if mode.ttl_ms is None else _pack_bulks(b"PX", b"%d" % mode.ttl_ms)
    packed = pc.binary_join_element_wise(head, _bulk(keys), _bulk(values), tail, b"")
    sizes = pc.add(pc.binary_length(keys), pc.binary_length(values))
    return [
        packed_entry([key, value], commands, size)
        for key, value, commands, size in zip(
            keys.to_pylist(), values.to_pylist(), packed.to_pylist(), sizes.to_pylist(), strict=True
        )
    ]


def _hash_entries(
    mode: HashMode, keys: pa.Array, names: list[bytes], columns: list[pa.Array]
) -> list[PackedEntry]:
    """``[key, [field, value, ...]]`` entries, each with its ``HSET`` (and ``PEXPIRE``) packed."""
    fields = _flat_fields(names, columns, len(keys))
    present = [pc.cast(pc.is_valid(column), pa.int64()) for column in columns]
    count = functools.reduce(pc.add, present, pa.scalar(0, pa.int64()))
    head = pc.binary_join_element_wise(
        b"*", pc.add(pc.multiply(count, 2), 2).cast(pa.string()).cast(pa.binary()), b"\r\n", b""
    )
    pairs = [
        pc.fill_null(pc.binary_join_element_wise(_pack_bulks(name), _bulk(column), b""), b"")
        for name, column in zip(names, columns, strict=True)
    ]
    bulk_key = _bulk(keys)
    parts = [head, b"$4\r\nHSET\r\n", bulk_key, *pairs]
    if mode.ttl_ms is not None:
        parts += [b"*3\r\n$7\r\nPEXPIRE\r\n", bulk_key, _pack_bulks(b"%d" % mode.ttl_ms)]
    packed = pc.if_else(pc.equal(count, 0), b"", pc.binary_join_element_wise(*parts, b""))
    lengths = [
        pc.fill_null(pc.add(pc.binary_length(column), len(name)), 0)
        for name, column in zip(names, columns, strict=True)
    ]
    sizes = functools.reduce(pc.add, lengths, pc.binary_length(keys))
    return [
        packed_entry([key, flat], commands, size)
        for key, flat, commands, size in zip(
            keys.to_pylist(), fields, packed.to_pylist(), sizes.to_pylist(), strict=True
        )
    ]


def _pack_bulks(*values: bytes) -> bytes:
    return b"".join(b"$%d\r\n%b\r\n" % (len(value), value) for value in values)


def batch_entries(
    mode: RedisMode, batch: pa.RecordBatch, encoders: Mapping[str, Encoder]
) -> list[list[Any]] | None:
    """The entries of every row of ``batch``, as ``mode.to_entry`` makes them one by one.

    ``encoders`` spell the columns (`column_encoders` of the batch's schema).
    ``SET`` and ``HSET`` entries come packed (`PackedEntry`: their commands in
    RESP, and their size), so neither is computed again per entry.
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
        return _set_entries(mode, keys, _set_values(batch, encoders))  # type: ignore[return-value]  # a list subclass
    if mode.fields is not None or (isinstance(mode, StreamMode) and mode.id is not None):
        return None
    keys = _template_keys(template, batch)
    names = [name.encode() for name in batch.schema.names]
    columns = [
        _field_column(batch.column(index), encoders.get(name), lambda: "a field")
        for index, name in enumerate(batch.schema.names)
    ]
    if isinstance(mode, HashMode):
        return _hash_entries(mode, keys, names, columns)  # type: ignore[return-value]  # a list subclass
    fields = _flat_fields(names, columns, batch.num_rows)
    if not all(fields):
        raise Unvectorised  # a stream entry needs a field: the row path says which row
    return [[key, flat, None] for key, flat in zip(keys.to_pylist(), fields, strict=True)]
