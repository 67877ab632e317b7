"""Every reference sink from string options, with injected task failures: ``"module:callable"``
factories for ``df.write.format("sinkv2")`` on Spark Connect (``test_connect.py``).

The server's planner and executor workers import this module by name, as they would
a user's factory. ``failures`` is JSON ``[[subtask, attempt, element], ...]``: that
attempt's writer raises before that element (past the end: at ``flush(True)``).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sinkv2_spark.testing import with_task_failures

__all__ = ["ARROW_SCHEMA", "files", "files_native", "http", "iceberg", "postgres", "redis"]

ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("value", pa.float64())])
"""The rows every test writes: ``id`` (unique), ``key``, ``value``."""


def _failing(sink: Any, failures: str) -> Any:
    schedule = {(s, a): at for s, a, at in json.loads(failures)}
    return with_task_failures(sink, schedule) if schedule else sink


def files(*, path: str, format: str = "parquet", failures: str = "[]") -> Any:
    from reference_sinks.files import FileSink, RollingPolicy

    fmt = "parquet" if format == "parquet" else "jsonl"
    policy = RollingPolicy(max_rows=60)
    return _failing(FileSink(path, fmt, rolling_policy=policy, native_write=False), failures)


def files_native(*, path: str, failures: str = "[]") -> Any:
    """FileSink with Spark's own Parquet writer writing the files (``native_write=True``)."""
    from reference_sinks.files import FileSink, RollingPolicy

    policy = RollingPolicy(max_rows=60, max_bytes=None)
    return _failing(FileSink(path, "parquet", rolling_policy=policy, native_write=True), failures)


def iceberg(*, warehouse: str, table: str, failures: str = "[]") -> Any:
    from reference_sinks.iceberg import IcebergSink

    return _failing(IcebergSink.local(warehouse, table, schema=ARROW_SCHEMA), failures)


def postgres(*, connection: str, table: str, failures: str = "[]") -> Any:
    from reference_sinks.postgres import PostgresSink

    return _failing(PostgresSink(connection, table), failures)


def redis(*, url: str, failures: str = "[]") -> Any:
    from reference_sinks.redis import HashMode, RedisSink

    return _failing(RedisSink(url, HashMode(key="row:{id}")), failures)


def http(*, url: str, failures: str = "[]") -> Any:
    from reference_sinks.http import HttpSink

    return _failing(HttpSink(url), failures)
