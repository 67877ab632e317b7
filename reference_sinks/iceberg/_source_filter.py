"""Row filters pyiceberg would bind to another filter than the one written: found, to be named.

pyiceberg converts a literal to its column's type when it binds a filter, and for an
``int`` or ``long`` column it rounds a fractional number (``id >= 2.5`` binds as
``id >= 2``, keeping id 2; ``id in (2.5, 3.5)`` as ``id in (2, 4)``). Iceberg's Java
library refuses that conversion (a decimal or double literal has no ``long`` value),
and `IcebergSource` refuses it too, when made, rather than read other rows than asked.
"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

__all__ = ["inexact_literal"]


def inexact_literal(  # noqa: PLR0911  # one answer per kind of expression
    expression: BooleanExpression, schema: Schema, *, case_sensitive: bool
) -> tuple[str, object, str] | None:
    """A (column, literal, column type) whose literal the column's type cannot hold exactly.

    ``None``: every literal of ``expression`` compared with an integer column is whole.
    """
    from pyiceberg.expressions import And, LiteralPredicate, Not, Or, SetPredicate  # noqa: PLC0415
    from pyiceberg.types import IntegerType, LongType  # noqa: PLC0415  # optional extra

    if isinstance(expression, And | Or):
        return inexact_literal(
            expression.left, schema, case_sensitive=case_sensitive
        ) or inexact_literal(expression.right, schema, case_sensitive=case_sensitive)
    if isinstance(expression, Not):
        return inexact_literal(expression.child, schema, case_sensitive=case_sensitive)
    if isinstance(expression, LiteralPredicate):
        literals = [expression.literal]
    elif isinstance(expression, SetPredicate):
        literals = sorted(expression.literals, key=lambda literal: str(literal.value))
    else:
        return None
    name = getattr(expression.term, "name", None)
    if not isinstance(name, str):
        return None
    try:
        field = schema.find_field(name, case_sensitive)
    except ValueError:
        return None  # binding names the missing column
    if not isinstance(field.field_type, IntegerType | LongType):
        return None
    for literal in literals:
        value = literal.value
        if isinstance(value, float | decimal.Decimal) and value != int(value):
            return schema.find_column_name(field.field_id) or name, value, str(field.field_type)
    return None
