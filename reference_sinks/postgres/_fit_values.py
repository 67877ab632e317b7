"""Values a column's type would change on the way in, and null upsert keys, found before sending.

An upsert key column that is null (a unique index on nullable columns allows it)
cannot be upserted: ``ON CONFLICT`` never matches a null, so such a row would be
inserted again at every load, while ``SELECT DISTINCT ON (key)`` would collapse
all the null-key rows of one load into one. `first_null_key` finds the first.

PostgreSQL rounds a numeric value with more decimals than its ``numeric(P, S)``
column has to ``S`` without a word (``1.005`` into ``numeric(10, 2)`` is stored as
``1.01``). pyspark infers ``decimal(38, 18)`` for Python decimals, so the type alone
cannot be refused: the writer checks the values instead, and refuses the first one
that rounding would change, naming row, column and value. A value that fits exactly
(``1.500000000000000000``) passes; one with too many digits before the point is left
to PostgreSQL ("numeric field overflow", a bad row too).
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Sequence
from typing import Final

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from reference_sinks.postgres._table import TargetTable

__all__ = ["RoundedValue", "first_null_key", "first_rounded", "whole_decimals"]

_INTEGERS: Final = frozenset({"int2", "int4", "int8"})
_NUMERIC: Final = re.compile(r"^numeric\((\d+),(\d+)\)(\[\])?$")


@attrs.frozen
class RoundedValue:
    """A value PostgreSQL would round: where it is, and what it would become."""

    row: int
    """The row's index in the batch."""
    column: str
    column_type: str
    value: decimal.Decimal
    stored: decimal.Decimal
    """What PostgreSQL would store (rounded half away from zero, as numeric does)."""


def _column_scale(type_name: str) -> tuple[int, bool] | None:
    """The scale of a ``numeric(P, S)`` column (or array of them); whether it is an array."""
    found = _NUMERIC.match(type_name.replace(" ", ""))
    if found is None:
        return None
    return int(found[2]), found[3] is not None


def _inexact(values: pa.Array, scale: int) -> pa.Array:
    """Per value: whether it has a digit beyond ``scale`` decimals (null stays null)."""
    kind = values.type
    cut_type = (pa.decimal256 if pa.types.is_decimal256(kind) else pa.decimal128)(
        kind.precision, scale
    )
    cut = values.cast(cut_type, safe=False)  # drops the decimals beyond ``scale``
    return pc.not_equal(cut.cast(kind), values)


def _rounded(value: decimal.Decimal, scale: int) -> decimal.Decimal:
    return value.quantize(
        decimal.Decimal(1).scaleb(-scale),
        rounding=decimal.ROUND_HALF_UP,
        context=decimal.Context(prec=80),
    )


def first_rounded(batch: pa.RecordBatch, table: TargetTable) -> RoundedValue | None:
    """The first value of ``batch`` (in row order) that its column would round, if any."""
    found: list[RoundedValue] = []
    for name, values in zip(batch.schema.names, batch.columns, strict=True):
        column = table.column(name)
        if column is None:
            continue
        target = _column_scale(column.type_name)
        if target is None:
            continue
        scale, array = target
        kind = values.type
        parents: pa.Array | None = None
        if array and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            parents = pc.list_parent_indices(values)
            values = pc.list_flatten(values)  # noqa: PLW2901  # the elements, row by row
            kind = values.type
        if not pa.types.is_decimal(kind) or kind.scale <= scale:
            continue
        index = pc.index(pc.fill_null(_inexact(values, scale), False), True).as_py()
        if index < 0:
            continue
        value = values[index].as_py()
        assert isinstance(value, decimal.Decimal)
        row = index if parents is None else parents[index].as_py()
        found.append(
            RoundedValue(
                row=row,
                column=name,
                column_type=column.type_name,
                value=value,
                stored=abs(rounded) if not (rounded := _rounded(value, scale)) else rounded,
            )
        )
    return min(found, key=lambda rounded: rounded.row) if found else None


def first_null_key(batch: pa.RecordBatch, upsert_key: Sequence[str]) -> tuple[int, str] | None:
    """The first row (in row order) with a null in an upsert key column, and the column."""
    found = []
    for name in upsert_key:
        index = batch.schema.get_field_index(name)
        if index < 0 or batch.column(index).null_count == 0:
            continue
        found.append((pc.index(pc.is_null(batch.column(index)), True).as_py(), name))
    return min(found) if found else None


def whole_decimals(batch: pa.RecordBatch, table: TargetTable) -> pa.RecordBatch:
    """``batch`` with decimals bound for integer columns written without a zero fraction.

    PostgreSQL's integer input refuses ``1.00``; a decimal whose fraction is zero is
    written as its integer (``1``), and one with a fraction as it is, which the
    server refuses, naming row and column.
    """
    columns = list(batch.columns)
    changed = False
    for index, (name, values) in enumerate(zip(batch.schema.names, batch.columns, strict=True)):
        column = table.column(name)
        kind = values.type
        if (
            column is None
            or column.base_type not in _INTEGERS
            or not pa.types.is_decimal(kind)
            or kind.scale <= 0
        ):
            continue
        make = pa.decimal256 if pa.types.is_decimal256(kind) else pa.decimal128
        whole = values.cast(make(kind.precision, 0), safe=False)  # the fraction dropped
        exact = pc.fill_null(pc.equal(whole.cast(kind), values), False)
        columns[index] = pc.if_else(exact, whole.cast(pa.string()), values.cast(pa.string()))
        changed = True
    if not changed:
        return batch
    return pa.RecordBatch.from_arrays(
        columns,
        schema=pa.schema(
            [
                field.with_type(column.type)
                for field, column in zip(batch.schema, columns, strict=True)
            ],
            metadata=batch.schema.metadata,
        ),
    )
