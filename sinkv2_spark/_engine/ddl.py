"""Spark DDL derived from an Arrow schema, so that a schema is spelled once (in Arrow).

``mapInArrow`` takes its output schema as Spark DDL; sinkv2's own tables (the writer
output, the committable stream) are defined as Arrow schemas. This derives the one
from the other for the few types those tables use, and refuses any other type
clearly rather than guessing.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["ddl_of"]

_NAMES: Final = {
    pa.string(): "string",
    pa.int64(): "long",
    pa.int32(): "int",
    pa.binary(): "binary",
}


def _type_name(arrow_type: pa.DataType) -> str:
    if pa.types.is_list(arrow_type):
        return f"array<{_type_name(arrow_type.value_type)}>"
    name = _NAMES.get(arrow_type)
    if name is None:
        raise TypeError(f"no Spark DDL name for Arrow type {arrow_type} (known: {list(_NAMES)})")
    return name


def ddl_of(schema: pa.Schema) -> str:
    """``schema`` as Spark DDL (``"a long, b array<string>"``); nullability is Spark's own."""
    return ", ".join(f"{field.name} {_type_name(field.type)}" for field in schema)
