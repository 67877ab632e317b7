"""Every Spark SQL type through HttpSink arrives as Spark's own JSON writer spells it.

Each DataFrame goes through `SinkTopologyTranslator.apply` to the local receiver,
and through ``df.write.json`` (timestamps with microseconds: Spark's default format
cuts them to milliseconds). Every request body must be strict JSON (no bare NaN),
and each record, read with the DataFrame's schema (`from_json`), must equal Spark's
record read the same way: NaN, -0.0, infinities and nulls inside nested types
included. By design the sink writes decimals as strings of their digits and nulls
as ``null`` (Spark: numbers, and null fields left out); a typed reader sees the same.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import types as T

from reference_sinks.http import HttpSink
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.json_read import from_arrow, from_json, spark_json_lines
from tests.reference_sinks.spark_values import (
    ALL_TYPES,
    ALL_TYPES_ROWS,
    comparable,
    rows,
    schemas,
)

pytestmark = pytest.mark.spark

_RUNS = itertools.count()


def _strict(constant: str) -> None:
    raise AssertionError(f"the body has the non-JSON number {constant}")


def check_same(spark, translator, server, tmp_path, *, schema: T.StructType, data) -> None:  # type: ignore[no-untyped-def]
    server.reset()
    df = spark.createDataFrame(data, schema).repartition(2)
    translator.apply(df, HttpSink(server.ingest_url), sink_id=f"http-matrix-{next(_RUNS)}")
    records = sorted(server.records(), key=lambda record: record["id"])
    json.loads(json.dumps(records), parse_constant=_strict)
    spark_records = spark_json_lines(spark, df, str(tmp_path / f"json-{next(_RUNS)}"))
    spark_values = sorted(df.toArrow().to_pylist(), key=lambda row: row["id"])

    def typed(record):  # type: ignore[no-untyped-def]
        return comparable(from_json(record, schema))

    assert [typed(r) for r in records] == [typed(r) for r in spark_records]
    assert [typed(r) for r in records] == [comparable(from_arrow(r, schema)) for r in spark_values]


def test_every_type_with_its_edge_values(spark, translator, server, tmp_path):  # type: ignore[no-untyped-def]
    check_same(spark, translator, server, tmp_path, schema=ALL_TYPES, data=ALL_TYPES_ROWS)


def test_spellings_follow_spark(spark, translator, server):  # type: ignore[no-untyped-def]
    """The defects of issue 14: NaN became null, a map a list of pairs, a float its double."""
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("nan", T.DoubleType()),
            T.StructField("inf", T.DoubleType()),
            T.StructField("f", T.FloatType()),
            T.StructField("m", T.MapType(T.IntegerType(), T.StringType())),
            T.StructField("empty", T.MapType(T.StringType(), T.StringType())),
            T.StructField("bin", T.BinaryType()),
        ]
    )
    df = spark.createDataFrame(
        [(0, float("nan"), float("-inf"), 0.1, {1: "a"}, {}, bytearray(b"\xff"))], schema
    )
    translator.apply(df.coalesce(1), HttpSink(server.ingest_url), sink_id="http-spellings")
    assert server.records() == [
        {
            "id": 0,
            "nan": "NaN",
            "inf": "-Infinity",
            "f": 0.1,
            "m": {"1": "a"},
            "empty": {},
            "bin": "/w==",
        }
    ]


def test_variants_are_their_json(spark, translator, server):  # type: ignore[no-untyped-def]
    """A variant column, and variants nested in an array and a struct, inline as Spark writes."""
    df = spark.sql(
        """SELECT 0 AS id, parse_json('{"a": [1, 2.5, null], "b": "x"}') AS v,
                  array(parse_json('1'), parse_json('"s"')) AS vs,
                  named_struct('inner', parse_json('{"k": true}')) AS st"""
    ).coalesce(1)
    translator.apply(df, HttpSink(server.ingest_url), sink_id="http-variants")
    [(spark_json,)] = df.selectExpr("to_json(struct(*))").collect()
    assert server.records() == [json.loads(spark_json)]
    assert server.records()[0]["v"] == {"a": [1, 2.5, None], "b": "x"}


def test_a_type_without_json_is_refused_naming_the_column(spark, translator, server):  # type: ignore[no-untyped-def]
    """Refused on the driver, naming the Spark type, before any writer starts."""
    df = spark.sql("SELECT 1 AS id, INTERVAL '1' DAY AS wait").coalesce(1)
    with pytest.raises(SinkConfigurationError, match=r"column 'wait' of type interval day"):
        translator.apply(df, HttpSink(server.ingest_url), sink_id="http-interval")
    assert server.records() == []


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=schemas().flatmap(lambda schema: rows(schema).map(lambda found: (schema, found))))
def test_random_schemas_and_values(spark, translator, server, tmp_path_factory, data):  # type: ignore[no-untyped-def]
    schema, found = data
    check_same(
        spark, translator, server, tmp_path_factory.mktemp("http"), schema=schema, data=found
    )
