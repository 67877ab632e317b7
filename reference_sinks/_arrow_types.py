"""Arrow types rebuilt with their nested parts changed: one walk over lists, maps and structs."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

__all__ = ["rebuild_type"]


def _same_type(kind: pa.DataType) -> pa.DataType:
    return kind


def _same_field(field: pa.Field) -> pa.Field:
    return field


def rebuild_type(
    kind: pa.DataType,
    leaf: Callable[[pa.DataType], pa.DataType] = _same_type,
    *,
    struct_field: Callable[[pa.Field], pa.Field] = _same_field,
) -> pa.DataType:
    """``kind`` with ``leaf`` applied to every type that is not a list, map or struct.

    Lists, large lists, maps (keeping ``keys_sorted``) and structs are rebuilt around
    their rebuilt children, each struct field also passed through ``struct_field``.
    """

    def rebuilt(field: pa.Field) -> pa.Field:
        return field.with_type(rebuild_type(field.type, leaf, struct_field=struct_field))

    if pa.types.is_struct(kind):
        return pa.struct([struct_field(rebuilt(field)) for field in kind])
    if pa.types.is_list(kind):
        return pa.list_(rebuilt(kind.value_field))
    if pa.types.is_large_list(kind):
        return pa.large_list(rebuilt(kind.value_field))
    if pa.types.is_map(kind):
        return pa.map_(
            rebuilt(kind.key_field), rebuilt(kind.item_field), keys_sorted=kind.keys_sorted
        )
    return leaf(kind)
