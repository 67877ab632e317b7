"""Column statistics of a written Parquet file, as pyiceberg computes them for ``table.append``.

pyiceberg reads each column's bounds from the Parquet footer as Python values; a date
or timestamp outside Python's years 1..9999 (``DATE'9999-12-31' + 1``, or
``TIMESTAMP'9999-12-31 23:59:59'`` in a zone west of UTC) raises ``OverflowError``
there, although Iceberg stores it as days or microseconds. Such a column keeps its
value, null and NaN counts in that file but no bounds: Iceberg's bounds are optional,
and a reader without them reads the file instead of skipping it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import DataFileStatistics
    from pyiceberg.schema import Schema

__all__ = ["file_statistics"]


def _bounds_overflow(column: Any) -> bool:
    """Whether Python cannot hold ``column``'s (a column chunk's) min or max."""
    if not column.is_stats_set:
        return False
    try:
        column.statistics.min  # noqa: B018  # read for its OverflowError
        column.statistics.max  # noqa: B018  # read for its OverflowError
    except OverflowError:
        return True
    return False


def _overflowing_paths(footer: pq.FileMetaData) -> set[str]:
    """The column paths of ``footer`` with a bound outside Python's dates and datetimes."""
    paths = set()
    for group in range(footer.num_row_groups):
        row_group = footer.row_group(group)
        for index in range(footer.num_columns):
            column = row_group.column(index)
            if _bounds_overflow(column):
                paths.add(column.path_in_schema)
    return paths


def file_statistics(
    footer: pq.FileMetaData, schema: Schema, properties: dict[str, str]
) -> DataFileStatistics:
    """The statistics pyiceberg gives the file with ``footer``, written with ``schema``'s field ids.

    Columns whose bounds Python cannot hold (see the module docstring) get counts only.
    """
    from pyiceberg.io.pyarrow import (  # noqa: PLC0415  # optional extra
        MetricModeTypes,
        MetricsMode,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    mapping = parquet_path_to_id_mapping(schema)
    plan = compute_statistics_plan(schema, properties)
    try:
        return data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=plan, parquet_column_mapping=mapping
        )
    except OverflowError:
        counts = MetricsMode(MetricModeTypes.COUNTS)
        for path in _overflowing_paths(footer):
            field_id = mapping[path]
            plan[field_id] = dataclasses.replace(plan[field_id], mode=counts)
        return data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=plan, parquet_column_mapping=mapping
        )
