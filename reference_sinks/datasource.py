"""The reference sinks from string options, for Spark's ``sinkv2`` data source.

``df.write.format("sinkv2").option("sink", "files")`` calls `files` here with the
other options as keyword arguments (strings: Spark's option values are strings,
and their names are lower-cased). Each function parses its strings, with errors
that name the option, and returns the configured sink::

    .option("sink", "files").option("path", "/data/orders").option("format", "jsonl")
    .option("partition_by", "day,country").option("max_rows", "500000")

    .option("sink", "iceberg").option("warehouse", "/data/lake").option("table", "db.orders")

    .option("sink", "postgres").option("url", "postgresql://app@db/shop")
    .option("table", "public.orders").option("upsert_key", "id")

    .option("sink", "redis").option("url", "redis://cache:6379/0").option("mode", "hash")
    .option("key", "user:{id}").option("ttl_ms", "86400000")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_sinks.files import CompactionPolicy, FileSink, RollingPolicy
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from reference_sinks.iceberg import IcebergSink
    from reference_sinks.postgres import PostgresAtLeastOnceSink, PostgresSink
    from reference_sinks.redis import RedisSink

__all__ = ["files", "iceberg", "postgres", "redis"]

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


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


def _boolean(option: str, value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text not in _TRUE | _FALSE:
        raise SinkConfigurationError(
            f"the {option!r} option must be 'true' or 'false' (got {value!r})"
        )
    return text in _TRUE


def _required(sink: str, option: str, value: str | None, example: str) -> str:
    if value is None or not value.strip():
        found = "missing" if value is None else "empty"
        raise SinkConfigurationError(
            f"the {sink} sink needs the {option!r} option ({found}); "
            f"e.g. .option({option!r}, {example!r})"
        )
    return value


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
        format: ``"parquet"`` (default) or ``"jsonl"`` (``"json"``, Spark's name, too; in
            any case).
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
    file_format = format.strip().lower()  # Spark's format names are in any case
    file_format = "jsonl" if file_format == "json" else file_format  # Spark's name for it
    if file_format not in {"parquet", "jsonl"}:
        raise SinkConfigurationError(
            f"the files sink's 'format' option must be 'parquet' or 'jsonl' (got {format!r})"
        )
    return FileSink(
        path,
        "parquet" if file_format == "parquet" else "jsonl",
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


def postgres(
    *,
    url: str | None = None,
    table: str | None = None,
    upsert_key: str = "",
    exactly_once: str | None = None,
    sink_id: str | None = None,
) -> PostgresSink | PostgresAtLeastOnceSink:
    """A `PostgresSink` from options.

    Args:
        url: A ``postgresql://`` URL or a libpq conninfo string; required.
        table: ``"table"`` or ``"schema.table"``, names as stored; required.
        upsert_key: Comma-separated columns to upsert on (a unique index on exactly
            them must exist) instead of inserting.
        exactly_once: ``"true"`` (default: two-phase commit, the server needs
            ``max_prepared_transactions`` > 0) or ``"false"``
            (`PostgresSink.at_least_once`: plain commits).
        sink_id: The data source's ``sink_id`` (passed by the data source): it names
            the sink's prepared transactions, as the docs advise for ``apply()``.

    Raises:
        SinkConfigurationError: An option is missing or has a bad value.
    """
    from reference_sinks.postgres import PostgresSink  # noqa: PLC0415  # optional extra

    connection = _required("postgres", "url", url, "postgresql://app@db:5432/shop")
    name = _required("postgres", "table", table, "public.orders")
    key = tuple(column.strip() for column in upsert_key.split(",") if column.strip()) or None
    if _boolean("exactly_once", exactly_once) is False:
        return PostgresSink.at_least_once(connection, name, upsert_key=key, sink_id=sink_id)
    return PostgresSink(connection, name, upsert_key=key, sink_id=sink_id)


def redis(
    *,
    url: str | None = None,
    mode: str | None = None,
    key: str | None = None,
    ttl_ms: str | None = None,
    keep_key_order: str | None = None,
) -> RedisSink:
    """A `RedisSink` from options: each row ``SET`` as JSON, ``HSET`` or ``XADD`` its columns.

    The row's columns are what is stored: select the ones to store first. Values,
    fields and stream ids computed by functions need the sink built in Python.

    Args:
        url: ``redis://host:port/db``, ``rediss://`` or ``unix://path``; required.
        mode: ``"set"`` (the row as compact JSON), ``"hash"`` (its columns as the
            hash's fields) or ``"stream"`` (its columns as the entry's fields, ids
            assigned by Redis); required.
        key: A template of column names in braces, e.g. ``"user:{id}"``; required.
        ttl_ms: Expire keys this many milliseconds after each write (set and hash).
        keep_key_order: ``"true"`` or ``"false"``; default: the mode's
            (`RedisSink`).

    Raises:
        SinkConfigurationError: An option is missing or has a bad value.
    """
    from reference_sinks.redis import (  # noqa: PLC0415  # optional extra
        HashMode,
        RedisSink,
        SetMode,
        StreamMode,
    )

    address = _required("redis", "url", url, "redis://127.0.0.1:6379/0")
    template = _required("redis", "key", key, "user:{id}")
    kind = _required("redis", "mode", mode, "hash").strip().lower()
    ttl = _positive("ttl_ms", ttl_ms)
    order = _boolean("keep_key_order", keep_key_order)
    if kind == "set":
        return RedisSink(address, SetMode(key=template, ttl_ms=ttl), keep_key_order=order)
    if kind == "hash":
        return RedisSink(address, HashMode(key=template, ttl_ms=ttl), keep_key_order=order)
    if kind == "stream":
        if ttl is not None:
            raise SinkConfigurationError(
                "the redis sink's 'ttl_ms' option is for modes 'set' and 'hash'; a stream's "
                "entries do not expire one by one (got mode 'stream')"
            )
        return RedisSink(address, StreamMode(key=template), keep_key_order=order)
    raise SinkConfigurationError(
        f"the redis sink's 'mode' option must be 'set', 'hash' or 'stream' (got {mode!r})"
    )
