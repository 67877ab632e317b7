"""PostgresSource on the shared local Spark: from_source and the read door, and Flink's suite.

Two tests (Spark time is scarce). The first: the rows of a DataFrame of the common
types go into PostgreSQL (by psycopg's COPY: the sink's own round trip is
`test_source_types`, without Spark), come back through `from_source` (four chunks on
the primary key, two reader subtasks) and through
``spark.read.format("sinkv2").option("source", "postgres")`` (a query split on a date
key), and equal the DataFrame: the same rows, the same Spark types, the primary key
non-nullable. The second runs Flink's ``SourceTestSuiteBase`` cases (see its
docstring), as ``tests/spark/test_source_stream.py`` does for the log source.
"""

import collections
import random
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import types as T

from reference_sinks.postgres import PostgresSource
from sinkv2_spark import from_source, register
from tests.spark.stream_reading import TIMEOUT_S, Collector, input_rows, start

pytestmark = pytest.mark.spark

DDL = (
    "CREATE TABLE typed (id bigint PRIMARY KEY, small integer, name text, "
    "amount numeric(12, 2), at timestamptz, day date, pair bigint[], ok boolean)"
)


def test_a_table_reads_back_through_from_source_and_the_read_door_as_its_dataframe(
    spark, postgres_url
):
    frame = spark.range(600).selectExpr(
        "id",
        "cast(id % 7 as int) as small",
        "if(id % 9 = 0, null, concat('n', cast(id as string))) as name",
        "if(id % 5 = 0, null, cast(id * 1.25 as decimal(12, 2))) as amount",
        "timestamp_seconds(id * 3600 - 100000000) as at",
        "date_add(date'1999-12-01', cast(id as int)) as day",
        "array(id, null) as pair",
        "id % 2 = 0 as ok",
    )
    want = sorted(frame.collect())
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(DDL)
        with connection.cursor() as cursor, cursor.copy("COPY typed FROM STDIN") as copy:
            for row in want:
                copy.write_row(tuple(row))

    source = PostgresSource(postgres_url, "typed", chunks=4)
    assert len(source.plan()) == 4
    ours = from_source(spark, source, parallelism=2)
    assert [(f.name, f.dataType) for f in ours.schema] == [
        (f.name, f.dataType) for f in frame.schema
    ]
    assert ours.schema["id"].nullable is False
    assert ours.schema["name"].nullable is True
    assert sorted(ours.collect()) == want

    register(spark)
    door = (
        spark.read.format("sinkv2")
        .option("source", "postgres")
        .option("url", postgres_url)
        .option("query", "SELECT id, day, name FROM typed")
        .option("split_key", "day")
        .option("chunks", "3")
        .option("parallelism", "3")
        .load()
    )
    assert door.schema["day"].dataType == T.DateType()
    assert sorted(door.collect()) == sorted(frame.select("id", "day", "name").collect())


def _split_of(splits: list[Any], key: int) -> str:
    """The id of the split whose key range holds integer ``key``."""
    for split in splits:
        if (split.lower is None or int(split.lower) <= key) and (
            split.upper is None or key < int(split.upper)
        ):
            return str(split.id)
    raise AssertionError(f"no split holds key {key}: {splits}")


def _each_split_in_order(ids: list[int], splits: list[Any], want: list[int]) -> None:
    """Flink's CollectIteratorAssert: every row once, each split's rows in key order."""
    assert sorted(ids) == want, f"{len(ids)} rows, {len(set(ids))} distinct, want {len(want)}"
    by_split: dict[str, list[int]] = collections.defaultdict(list)
    for key in ids:
        by_split[_split_of(splits, key)].append(key)
    assert all(got == sorted(got) for got in by_split.values())


def _stream_run(
    spark: Any, source: PostgresSource, tmp_path: Path, parallelism: int, fail_batch: int | None
) -> tuple[Any, Collector]:
    """One run of the stream (three splits a micro-batch) into a collector; ends by itself
    (availableNow), or dies in batch ``fail_batch`` after keeping its rows (a crash)."""
    df = from_source(
        spark,
        source,
        source_id="suite",
        streaming=True,
        state_store=str(tmp_path / "state.sqlite"),
        parallelism=parallelism,
        max_splits_per_trigger=3,
    )
    collector = Collector(fail_batch=fail_batch)
    query = start(df, tmp_path / "checkpoint", collector, availableNow=True)
    try:
        if fail_batch is None:
            assert query.awaitTermination(TIMEOUT_S), "the availableNow run did not end"
            assert query.exception() is None
        else:
            with pytest.raises(StreamingQueryException, match="fails on purpose"):
                query.awaitTermination(TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    return query, collector


def test_source_test_suite_cases_on_spark(spark, postgres_url, tmp_path):
    """Flink's SourceTestSuiteBase cases for the bounded PostgresSource, on Spark.

    The rows go in shuffled (the heap is not in key order). Batch reads:
    testSourceSingleSplit (one chunk, one subtask: the rows in key order) and
    testMultipleSplits + testIdleReader (four chunks, five subtasks: each chunk in key
    order, at most four partitions). A stream of twelve chunks, three a micro-batch,
    read by four subtasks, dies in its second micro-batch and restarts with two
    (testSavepoint, testScaleDown): every row once, each chunk in order, the replayed
    micro-batch reads what its first attempt read, and the runs' numInputRows add up
    to the rows (testSourceMetrics).
    """
    keys = list(range(0, 3600, 3))
    random.Random(25).shuffle(keys)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE suite (id bigint PRIMARY KEY, name text, grp int)")
        with connection.cursor() as cursor, cursor.copy("COPY suite FROM STDIN") as copy:
            for key in keys:
                copy.write_row((key, f"n{key}", key % 7))
    want = sorted(keys)

    one = PostgresSource(postgres_url, "suite", chunks=1)
    assert len(one.plan()) == 1
    assert [row.id for row in from_source(spark, one, parallelism=1).collect()] == want

    four = PostgresSource(postgres_url, "suite", chunks=4)
    splits = four.plan()
    assert len(splits) == 4
    df = from_source(spark, four, parallelism=5)
    assert df.rdd.getNumPartitions() <= 4
    _each_split_in_order([row.id for row in df.collect()], splits, want)

    twelve = PostgresSource(postgres_url, "suite", chunks=12)
    splits = twelve.plan()
    assert len(splits) == 12
    runs = [
        _stream_run(spark, twelve, tmp_path, parallelism, fail)
        for parallelism, fail in ((4, 1), (2, None))
    ]
    (_, first), (_, second) = runs
    assert min(second.batches) == max(first.batches) == 1  # the batch that died is read again
    assert second.batches[1] == first.batches[1]  # ... identically
    batches = {**first.batches, **second.batches}  # the replay replaces the first attempt
    _each_split_in_order(
        [row["id"] for batch in sorted(batches) for row in batches[batch]], splits, want
    )
    assert sorted(batches) == [0, 1, 2, 3]  # twelve chunks, three a micro-batch
    assert first.partitions[0] == 3  # planned with four subtasks: one per chunk
    assert second.partitions[1] == 3  # the replay reads as planned
    assert max(second.partitions[2], second.partitions[3]) <= 2  # planned with two
    assert sum(sum(input_rows(query)) for query, _ in runs) == len(want)
