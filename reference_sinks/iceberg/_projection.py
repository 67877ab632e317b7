"""Batches projected onto the table's file schema, keeping every null.

The writer hands each batch to pyiceberg's own projection (``ArrowProjectionVisitor``,
what ``table.append`` uses), so field ids and type promotions are pyiceberg's. In
pyiceberg 0.12 that projection rebuilds a list whose elements are structs, and a map
whose values are structs, from the offsets and the child values only: the validity
bitmap is dropped, and a null ``array<struct<...>>`` or ``map<..., struct<...>>``
reads back as an empty one (``table.append`` does the same). `project` runs the same
visitor with those two steps putting the nulls back.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyiceberg.io.fileformat import FileFormatModel
    from pyiceberg.schema import Schema

__all__ = ["project"]


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
    include_field_ids=True)``, except that null lists and maps of structs stay null.
    """
    from pyiceberg.io.pyarrow import ArrowAccessor  # noqa: PLC0415  # optional extra
    from pyiceberg.schema import visit_with_partner  # noqa: PLC0415  # optional extra

    visitor = _visitor_class()(
        file_schema,
        downcast_ns_timestamp_to_us=True,
        include_field_ids=True,
        format_model=format_model,
    )
    struct_array = visit_with_partner(requested_schema, batch, visitor, ArrowAccessor(file_schema))
    return pa.RecordBatch.from_struct_array(struct_array)
