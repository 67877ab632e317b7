"""IcebergSource on Spark: what IcebergSink wrote, read back through FLIP-27; a stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.iceberg import IcebergSink, IcebergSource
from sinkv2.runtime import CommitStatus
from sinkv2_spark import from_source, register

pytestmark = pytest.mark.spark

N = 1000


def frame(spark: Any) -> Any:
    """Many types; nulls in nested values: a null list of structs, a null struct in a list."""
    return spark.range(N).selectExpr(
        "id",
        "case when id % 11 = 0 then null else concat('k', cast(id % 5 as string)) end as key",
        "cast(id as double) / 3 as value",
        "cast(id as decimal(18, 3)) / 7 as amount",
        "date_add(date'2024-01-01', cast(id % 400 as int)) as day",
        "timestamp_micros(1700000000000000 + id * 1000003) as at",
        "case when id % 6 = 0 then null else array(named_struct('x', id, 'y', "
        "case when id % 3 = 0 then null else 'y' end), null) end as items",
        "case when id % 4 = 0 then null else map('k', case when id % 2 = 0 then null "
        "else id end) end as props",
    )


def comparable(df: Any) -> Any:
    from pyspark.sql import functions as F  # Spark's usual alias

    maps = [f.name for f in df.schema.fields if f.dataType.typeName() == "map"]
    return df.select(*[F.to_json(c).alias(c) if c in maps else F.col(c) for c in df.columns])


def test_from_source_reads_what_iceberg_sink_wrote_and_a_stream_reads_each_append_once(
    spark: Any, translator: Any, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    df = frame(spark)
    sink = IcebergSink.local(warehouse, "db.events", schema=pa.schema([f for f in _arrow(df)]))
    result = translator.apply(df.repartition(3), sink, sink_id="events")
    assert result.status is CommitStatus.COMMITTED

    # bounded: every row, as Spark holds them (a null list<struct> stays null)
    ours = from_source(spark, IcebergSource.local(warehouse, "db.events"), parallelism=2)
    assert [f.name for f in ours.schema.fields] == df.columns
    expected = sorted(comparable(df).collect())
    got = sorted(comparable(ours.select(*df.columns)).collect())
    assert len(got) == N
    assert got == expected
    assert sum(row["items"] is None for row in got) == N // 6 + 1  # null lists stay null

    # a stream: readStream.format("sinkv2") (short name "iceberg") into a FileSink,
    # with appends between micro-batches; every row once
    register(spark)
    table = sink.load_table()
    state, out = tmp_path / "state.sqlite", tmp_path / "out"
    rows = 0
    for round_ in range(2):
        if round_:
            extra = df.where(f"id < {100 * round_}").selectExpr(
                f"id + {N * round_} as id", *df.columns[1:]
            )
            table = sink.load_table()
            table.append(
                pa.Table.from_pylist(
                    [r.asDict(recursive=True) for r in extra.collect()],
                    schema=table.schema().as_arrow(),
                )
            )
        rows = N + sum(100 * r for r in range(1, round_ + 1))
        query = (
            spark.readStream.format("sinkv2")
            .option("source", "iceberg")
            .option("warehouse", str(warehouse))
            .option("table", "db.events")
            .option("monitor_interval", "0.1")
            .option("selected_fields", "id,key")
            .option("source_id", "events-stream")
            .option("state_store", str(state))
            .load()
            .writeStream.format("sinkv2")
            .option("sink", "files")
            .option("path", str(out))
            .option("sink_id", "events-copy")
            .option("state_store", str(state))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180)
        finally:
            if query.isActive:
                query.stop()
        copied = spark.read.parquet(str(out)).select("id").collect()
        assert len(copied) == rows
    assert sorted(r.id for r in copied) == sorted(list(range(N)) + [i + N for i in range(100)])


def _arrow(df: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema, timezone="UTC")
