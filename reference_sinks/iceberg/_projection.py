"""Batches projected onto the table's file schema, keeping every null.

The writer hands each batch to pyiceberg's own projection (``ArrowProjectionVisitor``,
what ``table.append`` uses), so field ids and type promotions are pyiceberg's. In
pyiceberg 0.12 that projection rebuilds a list whose elements are structs, and a map
whose values are structs, from the offsets and the child values only: the validity
bitmap is dropped, and a null ``array<struct<...>>`` or ``map<..., struct<...>>``
reads back as an empty one (``table.append`` does the same). `project` runs the same
visitor with those two steps putting the nulls back.

A null struct whose fields are required (Spark's ``named_struct('a', 1)`` in an array
or a map, a variant) arrives with nulls in those fields at the struct's null rows.
Arrow's casts and its Parquet writer check a non-nullable field's own nulls, not its
parent's, and refuse them; `project` first puts a placeholder there (zero, empty, or a
struct of placeholders) that no reader sees, since the struct above is null.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyiceberg.io.fileformat import FileFormatModel
    from pyiceberg.schema import Schema

__all__ = ["fill_hidden_nulls", "project"]


def _placeholder(kind: pa.DataType) -> pa.Scalar:
    """A valid value of ``kind``: zero, empty, false, the epoch, or a struct of those."""
    if pa.types.is_struct(kind):
        return pa.scalar({field.name: _placeholder(field.type).as_py() for field in kind}, kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return pa.scalar([], kind)
    # pa.nulls allocates zeroed value buffers: dropping the validity bitmap leaves
    # the type's zero (0, "", b"\x00...", False, 1970-01-01), whatever the type.
    nulls = pa.nulls(1, kind)
    return pa.Array.from_buffers(kind, 1, [None, *nulls.buffers()[1:]])[0]


def _filled_struct(array: pa.StructArray) -> pa.Array | None:
    """``array`` with its required fields' nulls under its own null rows made placeholders."""
    hidden = array.is_null()
    children, changed = [], False
    for index, field in enumerate(array.type):
        child = array.field(index)
        filled = _filled(child)
        if filled is not None:
            child, changed = filled, True
        if not field.nullable and child.null_count:
            child = pc.if_else(pc.and_(hidden, child.is_null()), _placeholder(field.type), child)
            changed = True
        children.append(child)
    if not changed:
        return None
    mask = hidden if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(array.type), mask=mask)


def _filled(array: pa.Array) -> pa.Array | None:
    """`fill_hidden_nulls` of ``array``, or ``None`` if nothing in it needs a placeholder."""
    if isinstance(array, pa.StructArray):
        return _filled_struct(array)
    if isinstance(array, pa.MapArray):
        keys, items = _filled(array.keys), _filled(array.items)
        if keys is None and items is None:
            return None
        mask = array.is_null() if array.null_count else None
        return pa.MapArray.from_arrays(
            array.offsets,
            array.keys if keys is None else keys,
            array.items if items is None else items,
            type=array.type,
            mask=mask,
        )
    if isinstance(array, pa.ListArray | pa.LargeListArray):
        values = _filled(array.values)
        if values is None:
            return None
        mask = array.is_null() if array.null_count else None
        return type(array).from_arrays(array.offsets, values, type=array.type, mask=mask)
    return None


def fill_hidden_nulls(array: pa.Array) -> pa.Array:
    """``array`` with no null in a required struct field where the struct itself is null.

    Lists, maps and structs at any depth are rebuilt only if something below them
    changes; every null that a reader can see stays null.
    """
    filled = _filled(array)
    return array if filled is None else filled


def _with_nulls_of(result: pa.Array | None, original: pa.Array | None) -> pa.Array | None:
    """``result`` with ``original``'s nulls, if the projection lost them (same length)."""
    if result is None or original is None or original.null_count == result.null_count:
        return result
    mask = original.is_null()
    if isinstance(result, pa.MapArray):
        return pa.MapArray.from_arrays(
            result.offsets, result.keys, result.items, type=result.type, mask=mask
        )
    if isinstance(result, pa.ListArray | pa.LargeListArray):
        return type(result).from_arrays(result.offsets, result.values, type=result.type, mask=mask)
    return result  # pragma: no cover - only lists and maps lose nulls


@functools.cache
def _visitor_class() -> type[Any]:
    from pyiceberg.io.pyarrow import ArrowProjectionVisitor  # noqa: PLC0415  # optional extra

    class _NullKeepingProjection(ArrowProjectionVisitor):
        """pyiceberg's projection; lists and maps keep their nulls."""

        def list(self, list_type: Any, list_array: Any, value_array: Any) -> pa.Array | None:
            return _with_nulls_of(super().list(list_type, list_array, value_array), list_array)

        def map(
            self, map_type: Any, map_array: Any, key_result: Any, value_result: Any
        ) -> pa.Array | None:
            return _with_nulls_of(
                super().map(map_type, map_array, key_result, value_result), map_array
            )

    return _NullKeepingProjection


def project(
    batch: pa.RecordBatch,
    *,
    requested_schema: Schema,
    file_schema: Schema,
    format_model: FileFormatModel,
) -> pa.RecordBatch:
    """``batch`` (of ``file_schema``) as the table writes it: ``requested_schema`` with field ids.

    The same as pyiceberg's ``_to_requested_schema(..., downcast_ns_timestamp_to_us=True,
    include_field_ids=True)``, except that null lists and maps of structs stay null, and
    required fields of null structs hold placeholders (`fill_hidden_nulls`).
    """
    from pyiceberg.io.pyarrow import ArrowAccessor  # noqa: PLC0415  # optional extra
    from pyiceberg.schema import visit_with_partner  # noqa: PLC0415  # optional extra

    visitor = _visitor_class()(
        file_schema,
        downcast_ns_timestamp_to_us=True,
        include_field_ids=True,
        format_model=format_model,
    )
    columns = [fill_hidden_nulls(column) for column in batch.columns]
    batch = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
    struct_array = visit_with_partner(requested_schema, batch, visitor, ArrowAccessor(file_schema))
    return pa.RecordBatch.from_struct_array(struct_array)
