"""Column names Spark's own writers take reach every reference sink unchanged.

PySpark's ``mapInArrow`` looks each column up by name, which parses dots and
backticks: a column ``a.b`` failed every sink with Spark's UNRESOLVED_COLUMN (issue
14). The writer stage now renames such columns by position for ``mapInArrow`` and
gives writers the original names back. Names with dots, backticks, spaces,
punctuation and non-ASCII letters, and (with ``spark.sql.caseSensitive``) names
that differ only in case, are written by FileSink (Parquet, JSON lines,
partitioned by such a column), IcebergSink, RedisSink and HttpSink. Duplicate names
(and, without case sensitivity, names that differ only in case) are refused before
any job runs, as Spark's own writers refuse them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.files import FileSink
from reference_sinks.http import HttpSink
from reference_sinks.iceberg import IcebergSink
from reference_sinks.redis import RedisSink, SetMode
from sinkv2.errors import SinkConfigurationError
from tests.servers.http_server import LocalServer
from tests.servers.redis_server import LocalRedisServer

pytestmark = pytest.mark.spark

NAMES = ["id", "a.b", "c d", "x`y", "ünï ñame", "semi;colon,{}()=\t", "A.B.C"]
SCHEMA = T.StructType(
    [T.StructField("id", T.LongType(), nullable=False)]
    + [T.StructField(name, T.StringType()) for name in NAMES[1:]]
)
ROWS = [(i, *(f"{name}-{i}" for name in NAMES[1:])) for i in range(5)]
EXPECTED = [dict(zip(NAMES, row, strict=True)) for row in ROWS]


@contextlib.contextmanager
def case_sensitive(spark) -> Iterator[None]:  # type: ignore[no-untyped-def]
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


@pytest.fixture(scope="module")
def redis_server():
    try:
        server = LocalRedisServer.start()
    except RuntimeError as error:
        pytest.fail(f"these tests need a redis-server: {error}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http_server():
    server = LocalServer.start()
    yield server
    server.stop()


def frame(spark, schema=SCHEMA, rows=ROWS):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(rows, schema).repartition(2)


def by_id(rows):  # type: ignore[no-untyped-def]
    return sorted(rows, key=lambda row: row["id"])


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_file_sink_writes_every_name(spark, translator, tmp_path, fmt):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    translator.apply(frame(spark), FileSink(out, fmt, native_write=False), sink_id=f"names-{fmt}")
    reader = spark.read.schema(SCHEMA)
    df = reader.parquet(out) if fmt == "parquet" else reader.json(out)
    assert by_id(df.toArrow().to_pylist()) == EXPECTED


def test_file_sink_partitions_by_a_dotted_column(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    translator.apply(
        frame(spark), FileSink(out, partition_by=["a.b"], native_write=False), sink_id="names-part"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if "=" in p.name) == [
        f"a.b=a.b-{i}" for i in range(5)
    ]
    found = spark.read.parquet(out).toArrow().to_pylist()
    assert by_id(found) == EXPECTED  # (dict equality ignores the partition column's place)


def test_iceberg_sink_writes_every_name(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    schema = to_arrow_schema(SCHEMA, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "warehouse", "ns.names", schema=schema)
    translator.apply(frame(spark), sink, sink_id="names-iceberg")
    assert by_id(sink.load_table().scan().to_arrow().to_pylist()) == EXPECTED


def test_redis_sink_writes_every_name(spark, translator, redis_server):  # type: ignore[no-untyped-def]
    translator.apply(
        frame(spark), RedisSink(redis_server.url, SetMode(key="n:{id}")), sink_id="names-redis"
    )
    with redis_server.client() as client:
        stored = [json.loads(client.get(f"n:{i}")) for i in range(5)]
    assert stored == EXPECTED


def test_http_sink_sends_every_name(spark, translator, http_server):  # type: ignore[no-untyped-def]
    http_server.reset()
    translator.apply(frame(spark), HttpSink(http_server.ingest_url), sink_id="names-http")
    assert by_id(http_server.records()) == EXPECTED


CASES = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("a", T.StringType()),
        T.StructField("A", T.StringType()),
    ]
)
CASE_ROWS = [(i, f"lower-{i}", f"upper-{i}") for i in range(3)]
CASE_EXPECTED = [{"id": i, "a": f"lower-{i}", "A": f"upper-{i}"} for i in range(3)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_names_that_differ_in_case_are_kept_when_spark_is_case_sensitive(  # type: ignore[no-untyped-def]
    spark, translator, tmp_path, fmt
):
    out = str(tmp_path / "out")
    with case_sensitive(spark):
        translator.apply(
            frame(spark, CASES, CASE_ROWS),
            FileSink(out, fmt, native_write=False),
            sink_id=f"case-{fmt}",
        )
        reader = spark.read.schema(CASES)
        df = reader.parquet(out) if fmt == "parquet" else reader.json(out)
        assert by_id(df.toArrow().to_pylist()) == CASE_EXPECTED


def test_names_that_differ_in_case_reach_row_writers(spark, translator, http_server):  # type: ignore[no-untyped-def]
    http_server.reset()
    with case_sensitive(spark):
        df = frame(spark, CASES, CASE_ROWS)
        translator.apply(df, HttpSink(http_server.ingest_url), sink_id="case-http")
    assert by_id(http_server.records()) == CASE_EXPECTED


def test_names_that_differ_in_case_are_refused_when_spark_is_not(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    df = frame(spark, CASES, CASE_ROWS)
    with pytest.raises(SinkConfigurationError, match=r"'a' and 'A'.*spark\.sql\.caseSensitive"):
        translator.apply(
            df, FileSink(str(tmp_path / "out"), native_write=False), sink_id="case-off"
        )
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_a_duplicate_name_is_refused_before_any_job(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    left = spark.createDataFrame([(1, "x")], "id long, v string")
    right = spark.createDataFrame([(1, "y")], "id long, v string")
    df = left.join(right, "id")  # two columns named v
    with pytest.raises(SinkConfigurationError, match=r"named 'v' twice"):
        translator.apply(df, FileSink(str(tmp_path / "out"), native_write=False), sink_id="dup")
    with case_sensitive(spark), pytest.raises(SinkConfigurationError, match=r"named 'v' twice"):
        translator.apply(df, FileSink(str(tmp_path / "out"), native_write=False), sink_id="dup")
