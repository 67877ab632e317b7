"""The reference sinks from string options, for Spark's ``sinkv2`` data source.

``df.write.format("sinkv2").option("sink", "files")`` calls `files` here with the
other options as keyword arguments (strings: Spark's option values are strings,
and their names are lower-cased). Each function parses its strings, with errors
that name the option, and returns the configured sink::

    .option("sink", "files").option("path", "/data/orders").option("format", "jsonl")
    .option("partition_by", "day,country").option("max_rows", "500000")

    .option("sink", "iceberg").option("warehouse", "/data/lake").option("table", "db.orders")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_sinks.files import CompactionPolicy, FileSink, RollingPolicy
from sinkv2 import SinkConfigurationError

if TYPE_CHECKING:
    from reference_sinks.iceberg import IcebergSink

__all__ = ["files", "iceberg"]


def _positive(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise SinkConfigurationError(
            f"the {option!r} option must be a positive integer (got {value!r}); e.g. "
            f".option({option!r}, '1000000')"
        )
    return int(text)


def files(
    *,
    path: str | None = None,
    format: str = "parquet",  # the option's name (Spark's)
    partition_by: str = "",
    max_rows: str | None = None,
    max_bytes: str | None = None,
    compaction_min_files: str | None = None,
    compaction_target_bytes: str | None = None,
) -> FileSink:
    """A `FileSink` from options.

    Args:
        path: The output directory or URI (also ``.save(path)``); required.
        format: ``"parquet"`` (default) or ``"jsonl"``.
        partition_by: Comma-separated partition columns.
        max_rows: Rows per part file at most (`RollingPolicy`).
        max_bytes: Bytes per part file, about (`RollingPolicy`).
        compaction_min_files: Merge small files before commit when a partition has
            this many in one checkpoint (`CompactionPolicy`); with
            ``compaction_target_bytes``, either turns compaction on.
        compaction_target_bytes: The size below which a file is small.

    Raises:
        SinkConfigurationError: An option is missing or has a bad value.
    """
    if path is None:
        raise SinkConfigurationError(
            "the files sink needs the 'path' option: the output directory or URI, e.g. "
            ".option('path', '/data/orders') or .save('/data/orders')"
        )
    columns = tuple(c.strip() for c in partition_by.split(",") if c.strip())
    rolling = RollingPolicy()
    rows, size = _positive("max_rows", max_rows), _positive("max_bytes", max_bytes)
    if rows is not None or size is not None:
        rolling = RollingPolicy(
            max_rows=rows if rows is not None else rolling.max_rows,
            max_bytes=size if size is not None else rolling.max_bytes,
        )
    compaction = None
    min_files = _positive("compaction_min_files", compaction_min_files)
    target = _positive("compaction_target_bytes", compaction_target_bytes)
    if min_files is not None or target is not None:
        default = CompactionPolicy()
        compaction = CompactionPolicy(
            min_files=min_files if min_files is not None else default.min_files,
            target_bytes=target if target is not None else default.target_bytes,
        )
    if format not in {"parquet", "jsonl"}:
        raise SinkConfigurationError(
            f"the files sink's 'format' option must be 'parquet' or 'jsonl' (got {format!r})"
        )
    return FileSink(
        path,
        "parquet" if format == "parquet" else "jsonl",
        partition_by=columns,
        rolling_policy=rolling,
        compaction=compaction,
    )


def iceberg(
    *,
    table: str | None = None,
    warehouse: str | None = None,
    commit_attempts: str | None = None,
    **catalog_options: str,
) -> IcebergSink:
    """An `IcebergSink` from options.

    Args:
        table: ``"namespace.table"``; it must exist. Required.
        warehouse: The embedded default catalog's warehouse directory
            (`IcebergSink.local`). Without it, ``catalog.name`` and the other
            ``catalog.*`` options load a pyiceberg catalog
            (``pyiceberg.catalog.load_catalog(name, **properties)``).
        commit_attempts: Commit attempts per committable on conflicts.
        **catalog_options: ``catalog.name`` and ``catalog.<property>`` options.

    Raises:
        SinkConfigurationError: An option is missing, unknown, or has a bad value;
            the table does not exist.
    """
    from reference_sinks.iceberg import IcebergSink  # noqa: PLC0415  # optional extra

    if table is None:
        raise SinkConfigurationError(
            "the iceberg sink needs the 'table' option: 'namespace.table', e.g. "
            ".option('table', 'analytics.events')"
        )
    unknown = sorted(k for k in catalog_options if not k.startswith("catalog."))
    if unknown:
        raise SinkConfigurationError(
            f"the iceberg sink does not take the options {unknown}; it takes table, "
            "warehouse, commit_attempts, catalog.name and catalog.<property>"
        )
    attempts = _positive("commit_attempts", commit_attempts) or 8  # IcebergSink's default
    if warehouse is not None:
        if catalog_options:
            raise SinkConfigurationError(
                "the iceberg sink takes either 'warehouse' (the embedded catalog) or "
                f"catalog.* options, not both (got warehouse and {sorted(catalog_options)})"
            )
        return IcebergSink.local(warehouse, table, commit_attempts=attempts)
    properties = {k.removeprefix("catalog."): v for k, v in catalog_options.items()}
    name = properties.pop("name", None)
    if name is None:
        raise SinkConfigurationError(
            "the iceberg sink needs 'warehouse' (the embedded SQLite catalog) or "
            "'catalog.name' with the catalog's catalog.<property> options, e.g. "
            ".option('catalog.name', 'prod').option('catalog.uri', 'http://rest:8181')"
        )
    from pyiceberg.catalog import load_catalog  # noqa: PLC0415  # optional extra

    return IcebergSink(load_catalog(name, **properties), table, commit_attempts=attempts)
