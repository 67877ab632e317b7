"""The same checkpoint from two working directories: two default stores, one destination.

Each run uses ``SinkTopologyTranslator()`` with its default commit state store,
``./.sinkv2/commit_state.sqlite`` under the driver's working directory - what a
scheduler that changes directories gives. The second run's store has never heard of
the sink id, so only the destination can tell that checkpoint 1 is in it already
(`SupportsCommittedCheckpoints`): every exactly-once reference sink must find each
row once afterwards, and the run must say why it wrote nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sinkv2.runtime import CommitStatus
from sinkv2_spark import SinkTopologyTranslator

pytestmark = pytest.mark.spark

ROWS = 1_000


def frame(spark: Any, start: int = 0) -> Any:
    return spark.range(start, start + ROWS, numPartitions=3).selectExpr(
        "id", "concat('n', cast(id as string)) as name", "id / 2 as score"
    )


def file_sink(tmp_path: Path, _url: str | None) -> tuple[Any, Callable[[Any], list[int]]]:
    from reference_sinks.files import FileSink

    out = tmp_path / "files"
    sink = FileSink(out)

    def ids(spark: Any) -> list[int]:
        return sorted(row.id for row in spark.read.parquet(str(out)).select("id").collect())

    return sink, ids


def file_sink_python(tmp_path: Path, _url: str | None) -> tuple[Any, Callable[[Any], list[int]]]:
    from reference_sinks.files import FileSink

    out = tmp_path / "files-python"
    sink = FileSink(out, "jsonl", native_write=False)

    def ids(spark: Any) -> list[int]:
        return sorted(row.id for row in spark.read.json(str(out)).select("id").collect())

    return sink, ids


def iceberg_sink(tmp_path: Path, _url: str | None) -> tuple[Any, Callable[[Any], list[int]]]:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    from reference_sinks.iceberg import IcebergSink

    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "name", StringType()),
        NestedField(3, "score", DoubleType()),
    )
    sink = IcebergSink.local(tmp_path / "warehouse", "ns.events", schema=schema)

    def ids(_spark: Any) -> list[int]:
        return sorted(sink.load_table().scan().to_arrow().column("id").to_pylist())

    return sink, ids


def postgres_sink(_tmp_path: Path, url: str | None) -> tuple[Any, Callable[[Any], list[int]]]:
    from reference_sinks.postgres import PostgresSink
    from tests.reference_sinks.postgres.helpers import EVENTS_DDL, create_table, read_rows

    assert url is not None
    create_table(url, EVENTS_DDL)
    sink = PostgresSink(url, "events")

    def ids(_spark: Any) -> list[int]:
        return [row["id"] for row in read_rows(url)]

    return sink, ids


SINKS = {
    "files": file_sink,
    "files-python": file_sink_python,
    "iceberg": iceberg_sink,
    "postgres": postgres_sink,
}


@pytest.mark.parametrize("kind", list(SINKS))
def test_a_checkpoint_rerun_from_another_directory_is_not_written_twice(
    spark, tmp_path, monkeypatch, caplog, *, request, kind
):
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else None
    sink, ids = SINKS[kind](tmp_path, url)
    monkeypatch.delenv("SINKV2_STATE_DIR", raising=False)
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()

    monkeypatch.chdir(first_dir)
    first = SinkTopologyTranslator().apply(frame(spark), sink, sink_id="orders", checkpoint_id=1)
    assert first.status is CommitStatus.COMMITTED
    assert first.store_warning is not None  # a new store: said, with its path
    assert str(first_dir / ".sinkv2" / "commit_state.sqlite") in first.store_warning

    monkeypatch.chdir(second_dir)
    caplog.set_level(logging.WARNING, logger="sinkv2.coordinator")
    translator = SinkTopologyTranslator()
    assert str(second_dir) in repr(translator.state_store)
    again = translator.apply(frame(spark), sink, sink_id="orders", checkpoint_id=1)
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert again.records_written == 0
    assert again.store_warning is not None
    assert "the destination already holds checkpoint 1 of sink id 'orders'" in again.store_warning
    assert str(second_dir / ".sinkv2" / "commit_state.sqlite") in again.store_warning
    assert any("already holds checkpoint 1" in r.getMessage() for r in caplog.records)
    assert ids(spark) == list(range(ROWS))  # each row once

    # The second store has learnt it: no warning, no question to the destination.
    caplog.clear()
    quiet = translator.apply(frame(spark), sink, sink_id="orders", checkpoint_id=1)
    assert quiet.status is CommitStatus.ALREADY_COMMITTED
    assert quiet.store_warning is None
    # A new checkpoint from either directory is written as usual.
    later = translator.apply(frame(spark, ROWS), sink, sink_id="orders", checkpoint_id=2)
    assert later.status is CommitStatus.COMMITTED
    assert later.store_warning is None
    assert ids(spark) == list(range(2 * ROWS))
