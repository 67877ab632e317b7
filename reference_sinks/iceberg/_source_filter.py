"""Row filters pyiceberg would bind to another filter than the one written: named, or mended.

pyiceberg converts a literal to its column's type when it binds a filter, and for an
``int`` or ``long`` column it rounds a fractional number (``id >= 2.5`` binds as
``id >= 2``, keeping id 2; ``id in (2.5, 3.5)`` as ``id in (2, 4)``). Iceberg's Java
library refuses that conversion (a decimal or double literal has no ``long`` value),
and `IcebergSource` refuses it too, when made, rather than read other rows than asked.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.schema import Schema

__all__ = ["as_iceberg_reads", "inexact_literal", "references", "with_names"]


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


def _float32(value: object) -> object:
    """``value`` rounded to a 32-bit float, as Iceberg's Java library converts a literal."""
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        return value
    if not abs(float(value)) <= float(np.finfo(np.float32).max):
        return value  # past a float's range (or NaN): pyiceberg's own bounds apply
    return float(np.float32(float(value)))


def as_iceberg_reads(
    expression: BooleanExpression, schema: Schema, *, case_sensitive: bool
) -> BooleanExpression:
    """``expression`` rewritten so pyiceberg plans and applies it as Iceberg's Java library does.

    - A literal compared with a ``float`` column is rounded to a 32-bit float (Java's
      ``DoubleLiteral.to(FloatType)``): pyiceberg keeps the double, so ``f = 0.1``
      finds no row holding the float ``0.1`` and prunes the files whose bounds are it.
    - A comparison pyiceberg binds to "always true" (``i < 3000000000`` for an ``int``
      column, past its range) is true for every value but not for null: it becomes
      ``i is not null``, as ``i < 5`` leaves out nulls too. ``not`` is pushed into the
      comparisons first (``not (i > 3000000000)`` is ``i <= 3000000000``).
    """
    from pyiceberg.expressions import (  # noqa: PLC0415  # optional extra
        AlwaysTrue,
        And,
        LiteralPredicate,
        NotNull,
        Or,
        SetPredicate,
    )
    from pyiceberg.expressions.visitors import bind, rewrite_not  # noqa: PLC0415
    from pyiceberg.types import FloatType  # noqa: PLC0415  # optional extra

    def rewrite(node: BooleanExpression) -> BooleanExpression:  # noqa: PLR0911  # per kind
        if isinstance(node, And):
            return And(rewrite(node.left), rewrite(node.right))
        if isinstance(node, Or):
            return Or(rewrite(node.left), rewrite(node.right))
        if not isinstance(node, LiteralPredicate | SetPredicate):
            return node
        name = getattr(node.term, "name", None)
        try:
            field = schema.find_field(name, case_sensitive) if isinstance(name, str) else None
        except ValueError:
            return node  # binding names the missing column
        if field is None:
            return node
        if isinstance(field.field_type, FloatType):
            if isinstance(node, LiteralPredicate):
                node = type(node)(node.term, _float32(node.literal.value))
            else:
                node = type(node)(node.term, {_float32(lit.value) for lit in node.literals})
        try:
            alone = bind(schema, node, case_sensitive=case_sensitive)
        except (ValueError, TypeError):
            return node  # binding the whole filter names the problem
        if alone == AlwaysTrue():
            return NotNull(term=node.term)
        return node

    return rewrite(rewrite_not(expression))


def references(expression: BooleanExpression) -> set[str]:
    """The column names ``expression`` (without ``not``: see `as_iceberg_reads`) refers to."""
    from pyiceberg.expressions import And, Or, UnboundPredicate  # noqa: PLC0415

    if isinstance(expression, And | Or):
        return references(expression.left) | references(expression.right)
    if isinstance(expression, UnboundPredicate):
        name = getattr(expression.term, "name", None)
        return {name} if isinstance(name, str) else set()
    return set()


def with_names(  # noqa: PLR0911  # one answer per kind of expression
    expression: BooleanExpression, names: Mapping[str, str]
) -> BooleanExpression:
    """``expression`` with its columns renamed by ``names`` (a column renamed since it was made)."""
    from pyiceberg.expressions import (  # noqa: PLC0415  # optional extra
        And,
        LiteralPredicate,
        Or,
        Reference,
        SetPredicate,
        UnaryPredicate,
    )

    if isinstance(expression, And):
        return And(with_names(expression.left, names), with_names(expression.right, names))
    if isinstance(expression, Or):
        return Or(with_names(expression.left, names), with_names(expression.right, names))
    name = getattr(getattr(expression, "term", None), "name", None)
    if not isinstance(name, str) or names.get(name, name) == name:
        return expression
    term = Reference(names[name])
    if isinstance(expression, LiteralPredicate):
        return type(expression)(term, expression.literal)
    if isinstance(expression, SetPredicate):
        return type(expression)(term, expression.literals)
    if isinstance(expression, UnaryPredicate):
        return type(expression)(term)
    return expression
