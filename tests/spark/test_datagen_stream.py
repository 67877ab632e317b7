"""An endless `DataGeneratorSource` streams on Spark at its rate, as Spark's rate source.

Each micro-batch reads what ``records_per_second`` made due since the query started,
every split a prefix of its indices: nothing twice, nothing skipped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sinkv2.source.lib import DataGeneratorSource
from sinkv2_spark import from_source

pytestmark = pytest.mark.spark


def row(index: int) -> dict[str, Any]:
    return {"id": index, "doubled": 2 * index}


def test_an_endless_generator_streams_at_its_rate_every_index_once(spark: Any, tmp_path: Path):
    schema = pa.schema([("id", pa.int64()), ("doubled", pa.int64())])
    source = DataGeneratorSource(row, None, schema, records_per_second=2_000, num_splits=3)
    df = from_source(
        spark,
        source,
        source_id="datagen",
        streaming=True,
        parallelism=2,
        state_store=str(tmp_path / "state.sqlite"),
    )
    batches: list[list[Any]] = []
    query = (
        df.writeStream.foreachBatch(lambda batch, _: batches.append(batch.collect()))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 240
        while sum(map(len, batches)) < 300:
            assert query.isActive, f"the query died: {query.exception()}"
            assert time.monotonic() < deadline, "timed out waiting for the stream"
            time.sleep(0.1)
    finally:
        query.stop()
    rows = [r for batch in batches for r in batch]
    assert all(r.doubled == 2 * r.id for r in rows)
    ids = sorted(r.id for r in rows)
    assert len(ids) == len(set(ids))
    for split in range(3):
        mine = [i for i in ids if i % 3 == split]
        assert mine == list(range(split, split + 3 * len(mine), 3)), f"split {split}"
