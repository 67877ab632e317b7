"""Helpers for the reference sinks' Structured Streaming tests.

Input is either Spark's ``rate`` source (a row per tick, numbered by ``value``) or
JSON-lines files written here, one file per micro-batch (``maxFilesPerTrigger=1``),
each file's modification time set so that Spark's file source takes them in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sinkv2_spark import SinkStreamingQuery

_BASE_MTIME = 1_600_000_000


def write_json_file(directory: Path, index: int, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as file number ``index`` (atomically; ordered by its mtime)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{index:04d}.json"
    temporary = directory / f".part-{index:04d}.json.tmp"
    temporary.write_text("".join(json.dumps(dict(row)) + "\n" for row in rows))
    os.replace(temporary, path)
    os.utime(path, (_BASE_MTIME + 10 * index, _BASE_MTIME + 10 * index))
    return path


def json_stream(spark: Any, directory: Path, schema: str) -> Any:
    """A streaming DataFrame over ``directory``'s JSON files, one file per micro-batch."""
    directory.mkdir(parents=True, exist_ok=True)
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))


def rate_stream(spark: Any, rows_per_second: int = 200, partitions: int = 2) -> Any:
    """Spark's ``rate`` source: columns ``timestamp`` and ``value`` (0, 1, 2, ...)."""
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", partitions)
        .load()
    )


def replay_last_batch(checkpoint_location: Path) -> int:
    """Forget Spark's commit of the last micro-batch, so a restart runs it again.

    This is what Spark finds after a driver died inside ``foreachBatch``: the
    batch's offsets are logged, its commit is not. Returns the batch id.
    """
    commits = checkpoint_location / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    with contextlib.suppress(FileNotFoundError):
        (commits / f".{last}.crc").unlink()
    return last


@contextlib.contextmanager
def stopped_at_exit(query: SinkStreamingQuery) -> Iterator[SinkStreamingQuery]:
    """Yield ``query``; stop it if the block raises, so no query outlives a failed test."""
    try:
        yield query
    except BaseException:
        with contextlib.suppress(Exception):
            query.stop()
        raise


def run_batches(query: SinkStreamingQuery, count: int, timeout_s: float = 180.0) -> None:
    """Wait until ``query`` has reported ``count`` micro-batch results.

    ``timeout_s`` is generous: Spark on a loaded 2-core machine is slow, not broken.
    """
    deadline = time.monotonic() + timeout_s
    while len(query.recent_results) < count:
        error = query.exception()
        if error is not None:
            raise AssertionError(f"the query failed: {error!r}") from error
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(query.recent_results)} of {count} micro-batches in {timeout_s} s"
            )
        time.sleep(0.05)


KEYED_SCHEMA = "id long, key string"
ROWS_PER_FILE = 10
KEYS = 3


def keyed_rows(index: int) -> list[dict[str, Any]]:
    """File ``index``'s rows: ids ``index * 100 + j``, keys ``k0``..``k2`` in turn."""
    return [{"id": index * 100 + j, "key": f"k{j % KEYS}"} for j in range(ROWS_PER_FILE)]


def ids_by_key(files: range) -> dict[str, list[int]]:
    """The ids of ``files``' rows per key, in input order."""
    by_key: dict[str, list[int]] = {}
    for index in files:
        for row in keyed_rows(index):
            by_key.setdefault(row["key"], []).append(row["id"])
    return by_key
