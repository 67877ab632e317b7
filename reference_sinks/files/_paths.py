"""Hive-style partition directories, escaped the way Spark escapes them.

Spark writes a partition value ``v`` of column ``c`` as the directory ``c=v``,
with characters that would break a path or a URI percent-escaped
(``ExternalCatalogUtils.escapePathName``) and a null or empty value written as
``__HIVE_DEFAULT_PARTITION__``. Readers (Spark, pyarrow's ``hive`` partitioning)
undo both, so a column read back holds the value written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Final

__all__ = ["HIVE_DEFAULT_PARTITION", "escape_path_name", "partition_path", "partition_value"]

HIVE_DEFAULT_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"

# Spark's ExternalCatalogUtils.charToEscape (the non-Windows set).
_ESCAPED: Final = frozenset(
    [chr(code) for code in range(0x01, 0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)


def escape_path_name(text: str) -> str:
    """``text`` with every character Spark escapes written as ``%XX`` (upper-case hex)."""
    return "".join(f"%{ord(char):02X}" if char in _ESCAPED else char for char in text)


def partition_value(value: object) -> str:
    """A partition value as Spark writes it in a directory name (before escaping).

    Raises:
        TypeError: ``value`` is of a type Spark does not partition by here (floats
            and binaries have no stable directory form).
    """
    if value is None:
        return HIVE_DEFAULT_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value or HIVE_DEFAULT_PARTITION
    if isinstance(value, dt.datetime):
        raise TypeError("timestamp partition values are not supported; partition by a date")
    if isinstance(value, dt.date):
        return value.isoformat()
    raise TypeError(
        f"cannot partition by a value of type {type(value).__name__} ({value!r}); "
        "partition by string, integer, boolean or date columns"
    )


def partition_path(columns: Sequence[str], values: Sequence[object]) -> str:
    """The relative directory ``c1=v1/c2=v2`` for one partition ("" when unpartitioned)."""
    parts = []
    for column, value in zip(columns, values, strict=True):
        text = partition_value(value)
        if text != HIVE_DEFAULT_PARTITION:
            text = escape_path_name(text)
        parts.append(f"{escape_path_name(column)}={text}")
    return "/".join(parts)
