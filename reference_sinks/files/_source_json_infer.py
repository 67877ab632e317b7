"""Inferring a JSON lines directory's schema as Spark's JSON reader does: from every file.

Spark infers the schema of ``spark.read.json(dir)`` from all its records (the default
``samplingRatio`` is 1.0) and merges what each record says (its ``JsonInferSchema``):
a field missing in one record and present in another is kept; ``long`` and ``double``
give ``double``; two structs give the union of their fields, two arrays the merge of
their elements; any other disagreement gives ``string``; a field that is null
everywhere is a ``string``. Struct fields, the top level's included, are sorted by
name. Taking the first file's schema instead would drop a column that only later
files hold, silently, and fail on a later ``1.5`` where the first file had ``1``.

Here each file's types come from pyarrow's JSON inference over its first block (8 MiB;
a field first seen after it fails the read of that file, naming it), with dates and
timestamps kept as strings (Spark's ``inferTimestamp`` is off); when the records of
one file disagree (pyarrow's inference refuses a field that is a number in one line
and a boolean in the next), the block is inferred record by record instead. The
files' schemas are then merged by Spark's rules.

A ``string`` column whose values are not all strings (the result of such a
disagreement) is read as Spark reads it: a number, boolean, object or array there is
its JSON text (`stringify_non_strings`), a number exactly as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

__all__ = [
    "PAST_LONG",
    "infer_records",
    "spark_json_schema",
    "spark_json_types",
    "stringify_non_strings",
]

_LONG = range(-(2**63), 2**63)
_MAX_DIGITS = 38
PAST_LONG = re.compile(rb"[0-9]{19,}")
"""An integer that may not fit a long, which pyarrow's inference reads as a double."""


class _Number(str):
    """A JSON number kept as written: its text, for a string column, or re-written as is."""

    __slots__ = ()


def _loads(line: bytes) -> Any:
    return json.loads(line, parse_int=_Number, parse_float=_Number, parse_constant=_Number)


def infer_records(data: bytes) -> pa.Schema:
    """The merged types of the JSON records (one a line) in ``data``, as Spark infers them.

    A line that does not parse, or is not an object, is left out: the read sets it
    aside in the dead-letter directory, or fails naming its line.

    Raises:
        ValueError: No line is a JSON object, and some line is not one.
    """
    merged: pa.DataType = pa.struct([])
    bad = None
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            kind = _type_of(_loads(line))
        except ValueError as error:  # not JSON (or not UTF-8)
            bad = bad or ValueError(f"a JSON lines record does not parse ({error}): {line[:80]!r}")
            continue
        if not pa.types.is_struct(kind):
            bad = bad or ValueError(f"a JSON lines record is not an object: {line[:80]!r}")
            continue
        merged = _merge(merged, kind)
    if bad is not None and not list(merged):
        raise bad
    return pa.schema(list(merged))


def _type_of(value: Any) -> pa.DataType:
    if isinstance(value, _Number):
        try:
            number = int(value)
        except ValueError:  # a fraction, an exponent, NaN
            return pa.float64()
        return pa.int64() if number in _LONG else _decimal(len(str(abs(number))))
    if isinstance(value, list):
        element: pa.DataType = pa.null()
        for item in value:
            element = _merge(element, _type_of(item))
        return pa.list_(element)
    if isinstance(value, dict):
        return pa.struct([pa.field(k, _type_of(v)) for k, v in value.items()])
    if value is None:
        return pa.null()
    return pa.bool_() if isinstance(value, bool) else pa.string()


def stringify_non_strings(data: bytes, schema: pa.Schema) -> bytes:
    """``data`` with every non-string value of a string column as a string of its text.

    The text is the value's as written in the line (Spark's reader keeps it: spaces,
    ``2.50``); the rest of each line is kept as it is.

    Raises:
        ValueError: A line is not a JSON object.
    """
    kind = pa.struct(list(schema))
    lines = []
    for raw in data.splitlines():
        line = raw.decode()
        if line.strip():
            text, end = _rewritten(line, _skip(line, 0), kind)
            if line[end:].strip():
                raise ValueError(f"extra data after a JSON record: {line[:80]!r}")
            lines.append(text)
    return ("\n".join(lines) + "\n").encode()


_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


def _skip(line: str, at: int) -> int:
    while at < len(line) and line[at] in _SPACE:
        at += 1
    return at


def _value(line: str, at: int) -> int:
    """Where the JSON value at ``at`` ends."""
    try:
        return int(_DECODER.raw_decode(line, at)[1])
    except json.JSONDecodeError as error:
        raise ValueError(str(error)) from None


def _rewritten(line: str, at: int, kind: pa.DataType) -> tuple[str, int]:
    """The value at ``at`` as ``kind`` wants it, and where it ends in ``line``."""
    opening = line[at : at + 1]
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        end = _value(line, at)
        text = line[at:end]
        return (text if opening == '"' or text == "null" else json.dumps(text)), end
    if pa.types.is_struct(kind) and opening == "{":
        fields = {field.name: field.type for field in kind}
        return _members(line, at, "}", fields.get)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and opening == "[":
        return _members(line, at, "]", lambda _: kind.value_type)
    end = _value(line, at)
    return line[at:end], end


def _members(
    line: str, at: int, closing: str, kind_of: Callable[[str | None], pa.DataType | None]
) -> tuple[str, int]:
    """An object's members or an array's items, each rewritten as its type wants."""
    parts = []
    at = _skip(line, at + 1)
    while line[at : at + 1] != closing:
        key, prefix = None, ""
        if closing == "}":
            end = _value(line, at)
            key = json.loads(line[at:end])
            at = _skip(line, end)
            if line[at : at + 1] != ":":
                raise ValueError(f"':' expected in a JSON record: {line[:80]!r}")
            prefix = json.dumps(key) + ":"
            at = _skip(line, at + 1)
        member_kind = kind_of(key)
        if member_kind is None:
            end = _value(line, at)
            text = line[at:end]
        else:
            text, end = _rewritten(line, at, member_kind)
        parts.append(prefix + text)
        at = _skip(line, end)
        if line[at : at + 1] == ",":
            at = _skip(line, at + 1)
        elif line[at : at + 1] != closing:
            raise ValueError(f"',' or {closing!r} expected in a JSON record: {line[:80]!r}")
    opening = "{" if closing == "}" else "["
    return opening + ",".join(parts) + closing, at + 1


def spark_json_types(kind: pa.DataType) -> pa.DataType:
    """One file's inferred type with dates and timestamps as strings (nulls kept to merge)."""
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(spark_json_types(f.type)) for f in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(spark_json_types(kind.value_type)))
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return pa.string()
    return kind


def spark_json_schema(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """The files' schemas merged by Spark's rules, fields sorted by name, nulls as strings."""
    merged: pa.DataType = pa.struct([])
    for schema in schemas:
        merged = _merge(merged, pa.struct(list(schema)))
    return pa.schema(list(_final(merged)))


def _decimal(digits: int) -> pa.DataType:
    """Spark's type for an integer of ``digits`` digits past a long: ``decimal(digits, 0)``.

    Past 38 digits (no decimal holds them) a ``double``, as in Spark.
    """
    return pa.decimal128(digits, 0) if digits <= _MAX_DIGITS else pa.float64()


def _merge_numbers(left: pa.DataType, right: pa.DataType) -> pa.DataType | None:
    """Spark's wider type of two numbers (``long``, ``double``, ``decimal(p, 0)``), else None.

    A ``long`` and a ``double`` give a ``double``; a ``long`` beside a decimal is a
    ``decimal(20, 0)``; a ``double`` beside a decimal gives a ``double``.
    """
    digits = []
    for kind in (left, right):
        if kind == pa.float64():
            digits.append(0)
        elif kind == pa.int64():
            digits.append(20)
        elif pa.types.is_decimal(kind):
            digits.append(kind.precision)
        else:
            return None
    if pa.float64() in (left, right) or (left, right) == (pa.int64(), pa.int64()):
        return pa.float64() if pa.float64() in (left, right) else pa.int64()
    return _decimal(max(digits))


def _merge(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    if left.equals(right) or pa.types.is_null(right):
        return left
    if pa.types.is_null(left):
        return right
    number = _merge_numbers(left, right)
    if number is not None:
        return number
    if pa.types.is_struct(left) and pa.types.is_struct(right):
        fields = {field.name: field.type for field in left}
        for field in right:
            fields[field.name] = (
                _merge(fields[field.name], field.type) if field.name in fields else field.type
            )
        return pa.struct([pa.field(name, kind) for name, kind in fields.items()])
    if pa.types.is_list(left) and pa.types.is_list(right):
        return pa.list_(_merge(left.value_type, right.value_type))
    return pa.string()


def _final(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(kind):
        fields = sorted(kind, key=lambda field: field.name)
        return pa.struct([pa.field(f.name, _final(f.type)) for f in fields])
    if pa.types.is_list(kind):
        return pa.list_(_final(kind.value_type))
    if pa.types.is_null(kind):
        return pa.string()
    return kind
