"""NaN and the infinities in JSON lines, as Spark's writer and `FileSink` spell them: strings.

JSON has no NaN or infinity, so Spark's JSON writer (and `FileSink`, which writes what
Spark writes) puts a non-finite ``float`` or ``double`` as the string ``"NaN"``,
``"Infinity"`` or ``"-Infinity"``; Spark's reader takes those strings back in a
``float``/``double`` place (also ``"+NaN"``, ``"-NaN"``, ``"INF"``, ``"+INF"``,
``"-INF"``, ``"+Infinity"``), and only those. pyarrow's JSON reader refuses a string
where its schema says number, so a file that holds one is read again with every
floating place of the schema as a string (`text_schema`): each line's numbers there
become their own text (`floats_as_text`), and the strings are cast back to the
floating types. Another string in a floating place is written as an object there, so
its line still fails to parse, naming its line and column (Spark's reader refuses it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

import pyarrow as pa

from reference_sinks._arrow_types import rebuild_type

__all__ = ["NON_FINITE_MARK", "cast_back", "floats_as_text", "has_floats", "text_schema"]

NON_FINITE_MARK: Final = re.compile(rb'"[+-]?(?:NaN|INF|Infinity)"')
"""A spelling of a non-finite number somewhere in a file (a cheap test before the work)."""

_SPELLINGS: Final = {
    "NaN": "nan",
    "+NaN": "nan",
    "-NaN": "nan",
    "Infinity": "inf",
    "+Infinity": "inf",
    "INF": "inf",
    "+INF": "inf",
    "-Infinity": "-inf",
    "-INF": "-inf",
}
"""Spark's reader's spellings (``JacksonParser``), as pyarrow's cast reads them."""


class _Number(str):
    """A JSON number's text, kept as written (no float rounding of a decimal's digits)."""

    __slots__ = ()


def _is_float(kind: pa.DataType) -> bool:
    return bool(pa.types.is_floating(kind))


def has_floats(schema: pa.Schema) -> bool:
    """Whether ``schema`` has a ``float`` or ``double`` anywhere (nested too)."""
    found = False

    def leaf(kind: pa.DataType) -> pa.DataType:
        nonlocal found
        found = found or _is_float(kind)
        return kind

    for field in schema:
        rebuild_type(field.type, leaf)
    return found


def text_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every floating type (at any depth) a string."""

    def leaf(kind: pa.DataType) -> pa.DataType:
        return pa.string() if _is_float(kind) else kind

    return pa.schema([field.with_type(rebuild_type(field.type, leaf)) for field in schema])


def floats_as_text(data: bytes, schema: pa.Schema) -> bytes:
    """``data`` (JSON lines) with every value in a floating place of ``schema`` a string.

    Numbers become their text, Spark's non-finite spellings pyarrow's, another string
    an object (which pyarrow refuses there, naming the column); lines that are not
    JSON are kept as they are (pyarrow says where).
    """
    top = pa.struct(list(schema))
    lines = data.split(b"\n")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            value = json.loads(line, parse_float=_Number, parse_int=_Number)
            lines[index] = _dump(_text_floats(value, top)).encode()
        except (ValueError, RecursionError):  # not JSON: pyarrow's read says where
            continue
    return b"\n".join(lines)


def _float_text(value: object) -> object:
    """A value in a floating place as text; another string an object (refused by the read)."""
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, str) and value in _SPELLINGS:
        return _SPELLINGS[value]
    return {"": value}  # Spark's reader refuses it too


def _text_floats(value: object, kind: pa.DataType) -> object:
    if value is None:
        return None
    if _is_float(kind):
        return _float_text(value)
    if pa.types.is_struct(kind) and isinstance(value, dict):
        names = {field.name: field.type for field in kind}
        return {
            key: _text_floats(item, names[key]) if key in names else item
            for key, item in value.items()
        }
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and isinstance(value, list):
        return [_text_floats(item, kind.value_type) for item in value]
    return value


def _dump(value: object) -> str:
    """JSON text of ``value``: `_Number` as written, every other string quoted."""
    if isinstance(value, _Number):
        return str.__str__(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def cast_back(
    table: pa.Table, schema: pa.Schema, column_error: Callable[[str, Exception], Exception]
) -> pa.Table:
    """``table`` (read with `text_schema`) with its columns cast to ``schema``'s types."""
    columns = []
    for field in schema:
        column = table.column(field.name)
        if not column.type.equals(field.type):
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise column_error(field.name, error) from error
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)
