"""How ``sinkv2 state`` prints: plain aligned text, as `SinkResult.summary` does, or JSON.

No table library: the output is a few columns, read by people in a terminal and
by scripts through ``--json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sinkv2 import END_OF_INPUT

__all__ = [
    "Report",
    "checkpoint_text",
    "fields",
    "iso",
    "iso_json",
    "key_values",
    "table",
    "to_json",
]


@attrs.frozen
class Report:
    """What a command prints: ``text`` for people, ``data`` for ``--json``."""

    text: str
    data: Mapping[str, Any]


def iso(timestamp: float | None) -> str:
    """Unix seconds as an ISO 8601 UTC time to the second; ``-`` for ``None``."""
    if timestamp is None:
        return "-"
    moment = dt.datetime.fromtimestamp(timestamp, tz=dt.UTC)
    return moment.isoformat(timespec="seconds")


def iso_json(timestamp: float | None) -> str | None:
    """Unix seconds as an ISO 8601 UTC time, to the microsecond; ``None`` stays ``None``."""
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).isoformat()


def checkpoint_text(checkpoint_id: int) -> str:
    """A checkpoint id, with ``END_OF_INPUT`` spelled out."""
    return "end of input" if checkpoint_id == END_OF_INPUT else str(checkpoint_id)


def key_values(rows: Sequence[tuple[str, str]]) -> str:
    """Name-value lines, the names padded to one width (`SinkResult.summary`'s layout)."""
    if not rows:
        return ""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [f"{cell!s:<{widths[i]}}" for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def fields(value: object) -> Any:
    """``value`` as JSON-able data: attrs classes and dataclasses by field, else its repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [fields(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): fields(item) for key, item in value.items()}
    cls: Any = type(value)
    if attrs.has(cls):
        return {a.name: fields(getattr(value, a.name)) for a in attrs.fields(cls)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: fields(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


def to_json(data: Mapping[str, Any]) -> str:
    """``data`` as indented JSON."""
    return json.dumps(data, indent=2, sort_keys=False, default=repr)
