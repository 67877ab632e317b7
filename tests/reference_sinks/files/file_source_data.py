"""Files for the FileSource tests: small directories of Parquet, JSON lines and CSV."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


def rows(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "name": None if i % 7 == 3 else f"n{i % 5}", "score": i / 4}
        for i in range(first, first + count)
    ]


def write_parquet(path: Path, records: list[dict[str, Any]], row_group_size: int = 4) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, SCHEMA), path, row_group_size=row_group_size)
    return path


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["id,name,score"] + [
        f"{r['id']},{'' if r['name'] is None else r['name']},{r['score']}" for r in records
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def touch_old(path: Path, seconds_ago: float) -> None:
    """Set the file's modification time ``seconds_ago`` into the past."""
    stat = path.stat()
    when = stat.st_mtime - seconds_ago
    os.utime(path, (when, when))


def read_all(source: Any, parallelism: int = 2) -> list[dict[str, Any]]:
    """Every record of a bounded ``source`` read on the local engine, sorted by ``id``."""
    from sinkv2.testing import LocalSourceEngine

    engine = LocalSourceEngine(source, parallelism)
    engine.run()
    engine.finish()
    return sorted((record.record for record in engine.committed), key=lambda r: r["id"])
