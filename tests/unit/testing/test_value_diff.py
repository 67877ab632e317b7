"""Multiset.describe_value_changes: a diff of missing vs unexpected, only for value changes."""

from __future__ import annotations

import re
from decimal import Decimal

from sinkv2.testing import Multiset

NAN = float("nan")


def diff(shown: list[object], expected: list[object], written: list[object] | None = None) -> str:
    return Multiset(shown).describe_value_changes(
        Multiset(expected), written=None if written is None else Multiset(written)
    )


def test_loss_duplication_and_early_output_are_not_value_changes() -> None:
    assert diff([], [{"id": 1}]) == ""  # loss
    assert diff([{"id": 1}, {"id": 1}], [{"id": 1}]) == ""  # duplication
    assert diff([{"id": 2}], [{"id": 1}], written=[{"id": 1}, {"id": 2}]) == ""  # early
    assert diff([{"id": 3}], []) == ""  # nothing missing to pair with


def test_nan_read_back_as_nan_is_no_change() -> None:
    assert diff([{"x": NAN}, NAN, [NAN]], [{"x": NAN}, NAN, [NAN]]) == ""


def test_a_changed_field_is_paired_with_its_row_and_named() -> None:
    written = [
        {"id": 1, "x": Decimal("0.10")},
        {"id": 1, "x": Decimal("0.20")},
        {"id": 2, "x": NAN},
    ]
    shown = [{"id": 1, "x": 0.2}, {"id": 2, "x": None}]
    report = diff(shown, written)
    assert report.startswith(
        "the destination shows 2 element(s) the kit never wrote, and 3 written element(s)"
    )
    assert re.search(r"\{'id': 1, 'x': Decimal\('0.20'\)\} +\|  \{'id': 1, 'x': 0.2\}", report)
    assert "field 'x': Decimal('0.20') (Decimal) -> 0.2 (float)" in report
    assert "field 'x': nan (NaN) -> None (None)" in report
    assert "missing, not paired: {'id': 1, 'x': Decimal('0.10')}" in report
    assert "field 'x' (Decimal came back as float, NaN came back as None)" in report


def test_scalars_pair_up_when_there_are_as_many_of_each() -> None:
    report = diff([0.2, 0.1], [Decimal("0.1"), Decimal("0.2")])
    assert re.search(r"Decimal\('0.1'\) +\|  0.1\n", report), report
    assert re.search(r"Decimal\('0.2'\) +\|  0.2\n", report), report
    assert "reads back values (Decimal came back as float)" in report


def test_the_diff_is_bounded() -> None:
    written = [{"id": i, "text": "x" * 500} for i in range(20)]
    shown = [{"id": i, "text": "x" * 255} for i in range(20)]
    report = diff(shown, written)
    assert "... and 15 more pair(s)" in report
    assert max(len(line) for line in report.splitlines()) < 300
    assert "field 'text' (str values change)" in report


def test_elements_of_another_shape_are_listed_unpaired() -> None:
    report = diff([(1, "a"), 7], [{"a": 1}, "x", "y"])
    assert "missing, not paired: {'a': 1}, 'x', 'y'" in report
    assert "unexpected, not paired: (1, 'a'), 7" in report
    assert "read_back returns elements of another shape" in report
