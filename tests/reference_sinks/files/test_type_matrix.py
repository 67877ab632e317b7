"""Every Spark SQL type through FileSink reads back as Spark's own writer's output does.

Each DataFrame goes through `SinkTopologyTranslator.apply` into a FileSink (Parquet
and JSON lines), and through Spark's own ``df.write.parquet`` / ``df.write.json``
(timestamps with microseconds: Spark's default JSON format cuts them to
milliseconds). Both directories are read back with ``spark.read`` and the
DataFrame's schema; the rows must be equal value for value, NaN, -0.0, infinities
and nulls inside nested types included. Spark's JSON reader takes string map keys
only, so JSON lines are read with integer-keyed maps read as string-keyed (both
writers spell the key as its text).

The tests comparing with Spark's writers run on both of FileSink's paths: its own
writers (``native_write=False``) and Spark's writer staging the files for it (the
native path, ``native_write=True``), where the bytes are Spark's own.

Types FileSink cannot write so that they read back are refused before any file is
written, naming the column and its type. The defects of issue 14 are pinned: binary
and maps in JSON lines (whole rows read back as null), bare NaN tokens, and a Parquet
column widened between runs (a directory Spark cannot read).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import types as T

from reference_sinks.files import FileSink, RollingPolicy
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.spark_values import (
    ALL_TYPES,
    ALL_TYPES_ROWS,
    comparable,
    rows,
    schemas,
)

pytestmark = pytest.mark.spark

_RUNS = itertools.count()
FORMATS = ["parquet", "jsonl"]


def string_keys(kind: T.DataType) -> T.DataType:
    """``kind`` with every map's keys read as strings (Spark's JSON reader needs them)."""
    if isinstance(kind, T.StructType):
        return T.StructType(
            [T.StructField(f.name, string_keys(f.dataType), f.nullable) for f in kind.fields]
        )
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(string_keys(kind.elementType), kind.containsNull)
    if isinstance(kind, T.MapType):
        return T.MapType(T.StringType(), string_keys(kind.valueType), kind.valueContainsNull)
    return kind


def read(spark, path: str, fmt: str, schema: T.StructType) -> list[Any]:  # type: ignore[no-untyped-def]
    if fmt == "parquet":
        df = spark.read.schema(schema).parquet(path)
    else:
        df = spark.read.schema(string_keys(schema)).json(path)
    return df.orderBy("id").toArrow().to_pylist()  # type: ignore[no-any-return]


def spark_write(df, path: str, fmt: str) -> None:  # type: ignore[no-untyped-def]
    if fmt == "parquet":
        df.write.parquet(path)
    else:
        (
            df.write.option("timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")
            .option("timestampNTZFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
            .json(path)
        )


@pytest.fixture(params=["sink-writers", "native"])
def file_sink(request):  # type: ignore[no-untyped-def]
    """Makes FileSinks on one of its paths: its own writers, or Spark's (native) writer."""
    native = request.param == "native"

    def make(path: str, fmt: str) -> FileSink:
        if native:
            rolling = RollingPolicy(max_bytes=None)  # Spark cannot roll files by size
            return FileSink(path, fmt, rolling_policy=rolling, native_write=True)  # type: ignore[arg-type]
        return FileSink(path, fmt, native_write=False)  # type: ignore[arg-type]

    return make


def through_both(spark, translator, tmp_path: Path, df, fmt: str, *, make=FileSink):  # type: ignore[no-untyped-def]
    """``df`` through FileSink and through Spark's writer, each read back by Spark."""
    run = next(_RUNS)
    ours, theirs = str(tmp_path / f"sink-{run}"), str(tmp_path / f"spark-{run}")
    translator.apply(df, make(ours, fmt), sink_id=f"matrix-{run}")
    spark_write(df, theirs, fmt)
    return read(spark, ours, fmt, df.schema), read(spark, theirs, fmt, df.schema)


def check_same(spark, translator, tmp_path: Path, schema, data, *, fmt: str, make=FileSink):  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(data, schema).repartition(2)
    ours, theirs = through_both(spark, translator, tmp_path, df, fmt, make=make)
    assert len(theirs) == len(data)
    assert comparable(ours) == comparable(theirs)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_type_with_its_edge_values(spark, translator, tmp_path, fmt, file_sink):  # type: ignore[no-untyped-def]
    check_same(spark, translator, tmp_path, ALL_TYPES, ALL_TYPES_ROWS, fmt=fmt, make=file_sink)


@pytest.mark.parametrize("fmt", FORMATS)
def test_variants_and_void_columns(spark, translator, tmp_path, fmt, file_sink):  # type: ignore[no-untyped-def]
    df = spark.sql(
        """
        SELECT id,
               CASE WHEN id = 1 THEN NULL ELSE parse_json(doc) END AS v,
               array(parse_json(doc), NULL) AS vs,
               NULL AS nothing
        FROM VALUES (0L, '{"a": [1, "x", null], "b": {"c": 1.5e300}}'), (1L, '2'),
                    (2L, '"ünï"'), (3L, 'null') AS t(id, doc)
        """
    ).repartition(2)
    run = next(_RUNS)
    ours, theirs = str(tmp_path / f"sink-{run}"), str(tmp_path / f"spark-{run}")
    translator.apply(df, file_sink(ours, fmt), sink_id=f"variant-{run}")
    spark_write(df, theirs, fmt)

    def as_json(path: str) -> list[Any]:
        reader = spark.read.schema(df.schema)
        found = reader.parquet(path) if fmt == "parquet" else reader.json(path)
        return (  # type: ignore[no-any-return]
            found.selectExpr("id", "to_json(v) AS v", "to_json(vs) AS vs", "nothing")
            .orderBy("id")
            .toArrow()
            .to_pylist()
        )

    assert as_json(ours) == as_json(theirs)
    assert as_json(ours)[0]["v"] == '{"a":[1,"x",null],"b":{"c":1.5E300}}'


def test_day_time_intervals_in_parquet(spark, translator, tmp_path, file_sink):  # type: ignore[no-untyped-def]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType(), nullable=False),
            T.StructField("i", T.DayTimeIntervalType()),
            T.StructField("h", T.DayTimeIntervalType(T.DayTimeIntervalType.HOUR)),
            T.StructField("a", T.ArrayType(T.DayTimeIntervalType())),
        ]
    )
    data = [
        (0, dt.timedelta(days=-106751990), dt.timedelta(hours=5), [None, dt.timedelta(0)]),
        (1, dt.timedelta(days=1, microseconds=5), None, None),
        (2, None, dt.timedelta(hours=-3), []),
    ]
    check_same(spark, translator, tmp_path, schema, data, fmt="parquet", make=file_sink)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (T.DayTimeIntervalType(), dt.timedelta(seconds=1)),
        (T.ArrayType(T.DayTimeIntervalType()), [dt.timedelta(seconds=1)]),
    ],
)
def test_intervals_are_refused_in_json_lines_before_any_file(  # type: ignore[no-untyped-def]
    spark, translator, tmp_path, kind, value
):
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("span", kind)])
    df = spark.createDataFrame([(0, value)], schema)
    out = tmp_path / "out"
    with pytest.raises(SinkConfigurationError, match=r"column 'span' of type .*interval"):
        translator.apply(
            df, FileSink(str(out), "jsonl", native_write=False), sink_id="interval-json"
        )
    assert not out.exists() or not list(out.rglob("*.jsonl"))


def test_a_type_arrow_cannot_carry_is_refused_naming_its_column(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    df = spark.sql("SELECT 1L AS id, INTERVAL '1-2' YEAR TO MONTH AS months")
    with pytest.raises(SinkConfigurationError, match=r"column 'months' of type interval year"):
        translator.apply(df, FileSink(str(tmp_path / "out"), native_write=False), sink_id="ym")


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=schemas().flatmap(lambda schema: rows(schema).map(lambda found: (schema, found))))
@pytest.mark.parametrize("fmt", FORMATS)
def test_random_schemas_and_values(spark, translator, tmp_path_factory, fmt, file_sink, data):  # type: ignore[no-untyped-def]  # noqa: PLR0917  # pytest fixtures
    schema, found = data
    check_same(
        spark, translator, tmp_path_factory.mktemp("matrix"), schema, found, fmt=fmt, make=file_sink
    )


# --- the defects of issue 14 -------------------------------------------------------------


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line under ``path``, parsed strictly (a bare NaN or Infinity fails)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    found = [
        json.loads(line, parse_constant=refuse)
        for file in sorted(path.rglob("*.jsonl"))
        for line in file.read_text(encoding="utf-8").splitlines()
    ]
    return sorted(found, key=lambda record: record["id"])


def test_json_lines_binary_is_base64_and_the_row_reads_back(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("b", T.BinaryType())])
    df = spark.createDataFrame([(1, bytearray(b"\x00\xff\x80ok"))], schema)
    translator.apply(
        df, FileSink(str(tmp_path / "out"), "jsonl", native_write=False), sink_id="binary"
    )
    assert json_lines(tmp_path / "out") == [{"id": 1, "b": "AP+Ab2s="}]
    back = spark.read.schema(schema).json(str(tmp_path / "out")).collect()
    assert [tuple(row) for row in back] == [(1, bytearray(b"\x00\xff\x80ok"))]


def test_json_lines_maps_are_objects_and_read_back(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("m", T.MapType(T.StringType(), T.IntegerType())),
            T.StructField("e", T.MapType(T.StringType(), T.IntegerType())),
        ]
    )
    df = spark.createDataFrame([(1, {"a": 1, "b": None}, {})], schema)
    translator.apply(
        df, FileSink(str(tmp_path / "out"), "jsonl", native_write=False), sink_id="map"
    )
    assert json_lines(tmp_path / "out") == [{"id": 1, "m": {"a": 1, "b": None}, "e": {}}]
    back = spark.read.schema(schema).json(str(tmp_path / "out")).collect()
    assert [row.asDict() for row in back] == [{"id": 1, "m": {"a": 1, "b": None}, "e": {}}]


def test_json_lines_spell_nan_and_infinities_as_spark_does(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("d", T.DoubleType()),
            T.StructField("f", T.ArrayType(T.FloatType())),
        ]
    )
    df = spark.createDataFrame(
        [(0, float("nan"), [float("inf")]), (1, float("-inf"), [1.5, float("nan")])], schema
    ).coalesce(1)
    translator.apply(
        df, FileSink(str(tmp_path / "out"), "jsonl", native_write=False), sink_id="nan"
    )
    df.write.json(str(tmp_path / "spark"))
    spark_lines = [
        json.loads(line.value)
        for line in spark.read.text(str(tmp_path / "spark")).orderBy("value").collect()
    ]
    assert json_lines(tmp_path / "out") == spark_lines  # strict JSON, Spark's spelling
    assert spark_lines[0] == {"id": 0, "d": "NaN", "f": ["Infinity"]}


def test_a_parquet_column_widened_between_runs_is_refused_with_both_schemas(
    spark, translator, tmp_path
):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    first = spark.createDataFrame([(1, 10)], "id long, n int")
    translator.apply(first, FileSink(out), sink_id="widen")
    widened = spark.createDataFrame([(2, 2**40)], "id long, n long")
    with pytest.raises(SinkConfigurationError) as refused:
        translator.apply(widened, FileSink(out), sink_id="widen")
    message = str(refused.value)
    assert "column 'n' is bigint, was int" in message
    assert "[id: bigint, n: int]" in message
    assert "[id: bigint, n: bigint]" in message
    assert spark.read.parquet(out).collect() == [(1, 10)]  # nothing written, still readable
    staged = list((tmp_path / "out").rglob("*.parquet"))
    assert len(staged) == 1


def test_parquet_schema_changes_that_spark_reads_are_accepted(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    translator.apply(spark.createDataFrame([(1, 10)], "id long, n int"), FileSink(out), sink_id="s")
    added = spark.createDataFrame([(2, 20, "x")], "id long, n int, extra string")
    translator.apply(added, FileSink(out), sink_id="s")
    reordered = spark.createDataFrame([("y", 30, 3)], "extra string, n int, id long")
    translator.apply(reordered, FileSink(out), sink_id="s")
    found = spark.read.option("mergeSchema", "true").parquet(out).orderBy("id").collect()
    assert [row.asDict() for row in found] == [
        {"id": 1, "n": 10, "extra": None},
        {"id": 2, "n": 20, "extra": "x"},
        {"id": 3, "n": 30, "extra": "y"},
    ]
    dropped = spark.createDataFrame([(4, 40)], "id long, n int")
    with pytest.raises(SinkConfigurationError, match=r"column 'extra' is missing"):
        translator.apply(dropped, FileSink(out), sink_id="s")


def test_a_directory_spark_wrote_is_checked_too(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    spark.createDataFrame([(1, dt.datetime(2024, 1, 1))], "id long, t timestamp").write.parquet(out)
    pq.read_schema(next((tmp_path / "out").glob("*.parquet")))  # Spark's INT96 timestamps
    same = spark.createDataFrame([(2, dt.datetime(2024, 1, 2))], "id long, t timestamp")
    translator.apply(same, FileSink(out), sink_id="spark-dir")
    assert spark.read.parquet(out).count() == 2
    other = spark.createDataFrame([(3, dt.datetime(2024, 1, 3))], "id long, t timestamp_ntz")
    with pytest.raises(SinkConfigurationError, match=r"column 't' is timestamp_ntz, was timestamp"):
        translator.apply(other, FileSink(out), sink_id="spark-dir")


@pytest.mark.parametrize("fmt", FORMATS)
def test_other_partition_columns_are_refused(spark, translator, tmp_path, fmt):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    df = spark.createDataFrame([(1, "a", "b")], "id long, p string, q string")
    translator.apply(df, FileSink(out, fmt, partition_by=["p"]), sink_id="parts")
    refused = r"partitioned by \['p'\].*this sink by \['q'\]"
    with pytest.raises(SinkConfigurationError, match=refused):
        translator.apply(df, FileSink(out, fmt, partition_by=["q"]), sink_id="parts")
    translator.apply(df, FileSink(out, fmt, partition_by=["p"]), sink_id="parts")
