"""Types a reference sink refuses are refused on the driver, before any Spark job.

The per-sink type matrices (``tests/reference_sinks/*/test_type_matrix.py``) check
that what a sink writes reads back as Spark's value. Here: a type a sink cannot
write (a day-time interval in HttpSink's and RedisSink's JSON) fails the call with
`SinkConfigurationError` naming the column and its Spark type, from both doors
(``apply`` and ``df.write.format("sinkv2")``), and not as a writer failure inside a
Spark task (`SinkWriterError`, naming the Arrow type ``duration[us]``). No server
runs: a refused write never connects. Char and varchar columns (with
``spark.sql.preserveCharVarcharTypeInfo``) are refused by FileSink's native path and
IcebergSink naming the column, not with Spark's or pyspark's unnamed error; so is a
year-month interval by PostgresSink. A decimal whose type is wider than a
``numeric(P, S)`` column (``decimal(38, 18)``, what pyspark infers from Python
decimals) is written when its values fit, as Spark's JDBC writer writes it.
"""

from __future__ import annotations

import psycopg
import pyarrow as pa
import pytest

from reference_sinks.files import FileSink
from reference_sinks.http import HttpSink
from reference_sinks.iceberg import IcebergSink
from reference_sinks.postgres import PostgresSink
from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2.errors import SinkConfigurationError
from sinkv2_spark import register

pytestmark = pytest.mark.spark

_NOWHERE_HTTP = "http://127.0.0.1:9/ingest"
_NOWHERE_REDIS = "redis://127.0.0.1:9/0"
_REFUSED = r"column 'span' of type (array<)?interval (day to )?second"


@pytest.fixture
def intervals(spark):  # type: ignore[no-untyped-def]
    return spark.sql(
        "SELECT id, INTERVAL '1 02:03:04.000005' DAY TO SECOND AS span FROM range(2)"
    ), spark.sql("SELECT id, array(INTERVAL '1' SECOND) AS span FROM range(2)")


@pytest.mark.parametrize(
    "make",
    [
        lambda: HttpSink(_NOWHERE_HTTP),
        lambda: RedisSink(_NOWHERE_REDIS, SetMode(key="k:{id}")),
        lambda: RedisSink(_NOWHERE_REDIS, HashMode(key="k:{id}")),
    ],
    ids=["http", "redis-set", "redis-hash"],
)
def test_a_json_sink_refuses_intervals_on_the_driver(spark, translator, intervals, make):  # type: ignore[no-untyped-def]
    for df in intervals:
        with pytest.raises(SinkConfigurationError, match=_REFUSED) as refused:
            translator.apply(df, make(), sink_id="intervals")
        assert "duration" not in str(refused.value)  # Spark's type, not Arrow's


def test_the_data_source_door_refuses_them_too(spark, intervals, tmp_path):  # type: ignore[no-untyped-def]
    register(spark)
    with pytest.raises(Exception, match=_REFUSED) as refused:
        (
            intervals[0]
            .write.format("sinkv2")
            .option("sink", "redis")
            .option("url", _NOWHERE_REDIS)
            .option("mode", "hash")
            .option("key", "k:{id}")
            .option("sink_id", "intervals-door")
            .option("state_store", str(tmp_path / "state.sqlite"))
            .mode("append")
            .save()
        )
    assert "writer failure" not in str(refused.value)


@pytest.fixture
def chars(spark):  # type: ignore[no-untyped-def]
    """Columns of Spark's char and varchar types (kept as such, not read as string)."""
    spark.conf.set("spark.sql.preserveCharVarcharTypeInfo", "true")
    try:
        yield spark.sql(
            "SELECT id, CAST('ab' AS CHAR(5)) AS code, CAST('x' AS VARCHAR(3)) AS tag FROM range(2)"
        )
    finally:
        spark.conf.unset("spark.sql.preserveCharVarcharTypeInfo")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_file_sink_names_a_char_column_on_spark_s_writer_path(
    spark, translator, chars, tmp_path, fmt
):  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    with pytest.raises(SinkConfigurationError, match=r"column 'code' of type char\(5\).*cast"):
        translator.apply(chars, FileSink(str(out), fmt, native_write=True), sink_id="chars")
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


def test_iceberg_sink_names_a_char_column(spark, translator, chars, tmp_path):  # type: ignore[no-untyped-def]
    schema = pa.schema([("id", pa.int64()), ("code", pa.string()), ("tag", pa.string())])
    sink = IcebergSink.local(tmp_path / "warehouse", "ns.chars", schema=schema)
    with pytest.raises(SinkConfigurationError, match=r"column 'code' of type char\(5\)"):
        translator.apply(chars, sink, sink_id="chars")
    assert list(sink.load_table().scan().plan_files()) == []


def test_postgres_sink_takes_a_wider_decimal_that_fits_and_names_an_arrow_less_column(  # type: ignore[no-untyped-def]
    spark, translator, postgres_url
):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE wide (id bigint, price numeric(6, 2), free numeric); "
            "CREATE TABLE months (id bigint, span interval)"
        )
    prices = spark.sql("SELECT id, CAST(123.45 AS DECIMAL(38, 18)) AS price FROM range(2)")
    translator.apply(
        prices.withColumn("free", prices["price"]),
        PostgresSink(postgres_url, "wide"),
        sink_id="wide",
    )
    months = spark.sql("SELECT id, INTERVAL '1-2' YEAR TO MONTH AS span FROM range(2)")
    with pytest.raises(
        SinkConfigurationError, match=r"column 'span' of type interval year to month"
    ):
        translator.apply(months, PostgresSink(postgres_url, "months"), sink_id="months")
    with psycopg.connect(postgres_url) as connection:
        found = connection.execute("SELECT price::text, free::text FROM wide").fetchall()
    assert found == [("123.45", "123.450000000000000000")] * 2
