"""Every Spark SQL type through RedisSink reads back, with redis-py, as Spark's value.

`SetMode`'s default value is the row as JSON: read with the DataFrame's schema
(`from_json`), it must equal Spark's own JSON writer's record read the same way
(``df.write.json``, timestamps with microseconds). `HashMode` stores each non-null
column as a field: numbers as Spark casts them to string (``NaN``, ``Infinity``),
binary as it is, arrays, maps and structs as JSON; read back by type (`from_text`)
they must equal Spark's values. NaN, -0.0 and nulls inside nested types included.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import types as T

from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.json_read import from_arrow, from_json, from_text, spark_json_lines
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
    raise AssertionError(f"the value has the non-JSON number {constant}")


def check_same(
    spark, translator, redis_server, client, *, tmp_path, schema: T.StructType, data
) -> None:  # type: ignore[no-untyped-def]
    client.flushall()
    df = spark.createDataFrame(data, schema).repartition(2)
    run = next(_RUNS)
    translator.apply(df, RedisSink(redis_server.url, SetMode(key="s:{id}")), sink_id=f"s{run}")
    translator.apply(df, RedisSink(redis_server.url, HashMode(key="h:{id}")), sink_id=f"h{run}")
    spark_records = spark_json_lines(spark, df, str(tmp_path / f"json-{run}"))
    spark_values = sorted(df.toArrow().to_pylist(), key=lambda row: row["id"])
    expected = [comparable(from_arrow(row, schema)) for row in spark_values]

    stored = [
        json.loads(client.get(f"s:{row['id']}"), parse_constant=_strict) for row in spark_values
    ]
    as_json = [comparable(from_json(record, schema)) for record in stored]
    assert as_json == [comparable(from_json(record, schema)) for record in spark_records]
    assert as_json == expected

    kinds = {field.name: field.dataType for field in schema.fields}
    hashes = [client.hgetall(f"h:{row['id']}") for row in spark_values]
    as_fields = [
        comparable(
            {name: None for name in kinds}
            | {k.decode(): from_text(v, kinds[k.decode()]) for k, v in fields.items()}
        )
        for fields in hashes
    ]
    assert as_fields == expected


def test_every_type_with_its_edge_values(spark, translator, redis_server, redis_client, tmp_path):  # type: ignore[no-untyped-def]
    check_same(
        spark,
        translator,
        redis_server,
        redis_client,
        tmp_path=tmp_path,
        schema=ALL_TYPES,
        data=ALL_TYPES_ROWS,
    )


def test_spellings_follow_spark(spark, translator, redis_server, redis_client):  # type: ignore[no-untyped-def]
    """The defects of issue 14: binary JSON was mangled text, maps lists of pairs, NaN bare."""
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("bin", T.BinaryType()),
            T.StructField("m", T.MapType(T.IntegerType(), T.StringType())),
            T.StructField("nan", T.DoubleType()),
            T.StructField("f", T.FloatType()),
            T.StructField("a", T.ArrayType(T.LongType())),
        ]
    )
    df = spark.createDataFrame(
        [(0, bytearray(b"\xff\x00"), {1: "a"}, float("nan"), 0.1, [1, None])], schema
    ).coalesce(1)
    translator.apply(df, RedisSink(redis_server.url, SetMode(key="s:{id}")), sink_id="set")
    translator.apply(df, RedisSink(redis_server.url, HashMode(key="h:{id}")), sink_id="hash")
    assert json.loads(redis_client.get("s:0")) == {
        "id": 0,
        "bin": "/wA=",
        "m": {"1": "a"},
        "nan": "NaN",
        "f": 0.1,
        "a": [1, None],
    }
    assert redis_client.hgetall("h:0") == {
        b"id": b"0",
        b"bin": b"\xff\x00",
        b"m": b'{"1":"a"}',
        b"nan": b"NaN",
        b"f": b"0.1",
        b"a": b"[1,null]",
    }


def test_variants_are_their_json(spark, translator, redis_server, redis_client):  # type: ignore[no-untyped-def]
    """A variant column, and variants nested in an array and a struct, as their JSON value.

    Spark's JSON writer puts a variant's JSON inline; ``CAST(v AS STRING)`` is that JSON
    text, which is what a hash field holds.
    """
    df = spark.sql(
        """SELECT 0 AS id, parse_json('{"a": [1, 2.5, null], "b": "x"}') AS v,
                  array(parse_json('1'), parse_json('"s"')) AS vs,
                  named_struct('inner', parse_json('{"k": true}')) AS st,
                  CAST(NULL AS VARIANT) AS missing"""
    ).coalesce(1)
    translator.apply(df, RedisSink(redis_server.url, SetMode(key="s:{id}")), sink_id="vset")
    translator.apply(df, RedisSink(redis_server.url, HashMode(key="h:{id}")), sink_id="vhash")
    [(spark_json,)] = df.selectExpr("to_json(struct(*))").collect()
    stored = json.loads(redis_client.get("s:0"))
    assert stored == {
        "id": 0,
        "v": {"a": [1, 2.5, None], "b": "x"},
        "vs": [1, "s"],
        "st": {"inner": {"k": True}},
        "missing": None,
    }
    assert {k: v for k, v in stored.items() if v is not None} == json.loads(spark_json)
    fields = redis_client.hgetall("h:0")
    assert json.loads(fields[b"v"]) == {"a": [1, 2.5, None], "b": "x"}
    assert json.loads(fields[b"vs"]) == [1, "s"]
    assert json.loads(fields[b"st"]) == {"inner": {"k": True}}
    assert b"missing" not in fields


def test_a_type_without_a_spelling_is_refused_naming_the_column(  # type: ignore[no-untyped-def]
    spark, translator, redis_server, redis_client
):
    """Refused on the driver, naming the Spark type, before any writer starts."""
    df = spark.sql("SELECT 1 AS id, INTERVAL '1' DAY AS wait").coalesce(1)
    sink = RedisSink(redis_server.url, HashMode(key="h:{id}"))
    with pytest.raises(SinkConfigurationError, match=r"column 'wait' of type interval day"):
        translator.apply(df, sink, sink_id="interval")
    assert redis_client.dbsize() == 0


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=schemas().flatmap(lambda schema: rows(schema).map(lambda found: (schema, found))))
def test_random_schemas_and_values(  # type: ignore[no-untyped-def]  # noqa: PLR0917 - pytest fixtures
    spark, translator, redis_server, redis_client, tmp_path_factory, data
):
    schema, found = data
    directory = tmp_path_factory.mktemp("redis")
    check_same(
        spark,
        translator,
        redis_server,
        redis_client,
        tmp_path=directory,
        schema=schema,
        data=found,
    )
