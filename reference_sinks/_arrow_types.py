"""Arrow types rebuilt with their nested parts changed: one walk over lists, maps and structs.

Also `check_columns_on_driver`: a writer's check of its input schema, run on the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sinkv2.errors import SinkConfigurationError

__all__ = ["arrow_of", "check_columns_on_driver", "rebuild_type"]


def arrow_of(schema: Any, *, prefers_large_types: bool = False) -> pa.Schema:
    """The Spark ``schema`` as Arrow (timestamps in UTC), for a sink's check on the driver.

    Raises:
        SinkConfigurationError: a column's type has no Arrow form (char, varchar, a
            year-month interval...); the message names the column and its type.
    """
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # pyspark on use

    try:
        return to_arrow_schema(schema, timezone="UTC", prefers_large_types=prefers_large_types)
    except Exception as error:  # pyspark raises its own error classes here
        column = ""
        for field in schema.fields:
            try:
                to_arrow_schema(type(schema)([field]), timezone="UTC")
            except Exception:  # noqa: BLE001  # the first field that fails is the one to name
                column = f"column {field.name!r} of type {field.dataType.simpleString()}: "
                break
        raise SinkConfigurationError(
            f"the DataFrame's schema cannot be written through Arrow: {column}{error}. Cast "
            "or drop that column (e.g. a char or varchar column to string)"
        ) from error


def check_columns_on_driver(input: Any, check: Callable[[pa.Schema], object]) -> None:
    """Run ``check`` on each column of the DataFrame ``input`` as writers will get it.

    For a sink whose writers refuse a column type when they are created (on Spark, in
    a task): on the driver the same refusal comes before any Spark job. A column Arrow
    cannot carry is skipped (the translator refuses it, naming it). The message names
    the column's Spark type instead of its Arrow one (``interval day to second``, not
    ``duration[us]``).

    Raises:
        SinkConfigurationError: what ``check`` raises for the first column it refuses.
    """
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # pyspark on use

    schema = input.schema
    for field in schema.fields:
        try:
            arrow = to_arrow_schema(type(schema)([field]), timezone="UTC")
        except Exception:  # noqa: BLE001  # the translator names the column Arrow cannot carry
            continue
        try:
            check(arrow)
        except SinkConfigurationError as error:
            kind = arrow.field(0).type
            message = str(error).replace(
                f"of type {kind}", f"of type {field.dataType.simpleString()}"
            )
            raise SinkConfigurationError(
                message.replace("duration[us]", "day-time interval")
            ) from error


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
