"""Nested values at their edges through IcebergSink, read back as Spark's own writer gives them.

Null structs inside lists and maps (a required struct child then holds "nulls" where
its parent is null), zoned timestamps nested in lists, maps and structs in a session
time zone other than UTC, and struct field names Avro cannot hold. Each DataFrame goes
through `SinkTopologyTranslator.apply` on both of IcebergSink's paths and its data
files are compared with ``df.write.parquet`` read back by Spark.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.iceberg import IcebergSink
from sinkv2.errors import SinkConfigurationError
from tests.reference_sinks.iceberg.test_type_matrix import through_sink, through_spark
from tests.reference_sinks.spark_values import comparable

pytestmark = pytest.mark.spark


@pytest.fixture(params=[False, True], ids=["sink-writers", "native"])
def native(request):  # type: ignore[no-untyped-def]
    """IcebergSink's ``native_write``: its own writers, or Spark's Parquet writer."""
    return request.param


@contextlib.contextmanager
def session_zone(spark, zone: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The Spark session's time zone set to ``zone``, restored afterwards."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def check_sql(spark, translator, tmp_path: Path, expression: str, *, native: bool) -> None:  # type: ignore[no-untyped-def]
    """``SELECT <expression> AS c`` (two rows) reads back from the table's files as from Spark's."""
    df = spark.sql(f"SELECT id, {expression} AS c FROM range(2)").repartition(1)
    expected = through_spark(spark, tmp_path, df)
    files, _ = through_sink(spark, translator, tmp_path, df, native=native)
    assert comparable(files) == comparable(expected)


NULL_STRUCTS_IN_COLLECTIONS = [
    "array(named_struct('a', 1), NULL)",
    "map('a', named_struct('x', 1), 'b', NULL)",
    "array(map('k', array(named_struct('a', 1, 'b', array(map('z', CAST('NaN' AS DOUBLE)))),"
    " NULL)), NULL, map('n', NULL))",
    "named_struct('s', array(named_struct('a', 1), NULL))",
]


@pytest.mark.parametrize("expression", NULL_STRUCTS_IN_COLLECTIONS)
def test_a_null_struct_in_a_list_or_map_stays_null(spark, translator, tmp_path, native, expression):  # type: ignore[no-untyped-def]
    check_sql(spark, translator, tmp_path, expression, native=native)


@pytest.mark.parametrize("native_write", [False, None], ids=["sink-writers", "default"])
def test_a_null_variant_in_an_array_stays_null(spark, translator, tmp_path, native_write):  # type: ignore[no-untyped-def]
    """A variant is a struct of two required binaries (Spark's own ``toArrow`` fails on it)."""
    df = spark.sql(
        "SELECT id, array(parse_json('1'), parse_json('null'), NULL) AS c FROM range(2)"
    ).repartition(1)
    expected = [
        {
            "id": row.id,
            "c": [None if v is None else {"value": v.value, "metadata": v.metadata} for v in row.c],
        }
        for row in df.orderBy("id").collect()
    ]
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "wh", "ns.v", schema=schema, native_write=native_write)
    result = translator.apply(df, sink, sink_id="v", checkpoint_id=1)
    assert result.native_write is False  # Spark's writer cannot write a variant into this table
    table = sink.load_table()
    paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    files = pa.concat_tables([pq.read_table(path) for path in paths]).sort_by("id")
    assert comparable(files.to_pylist()) == comparable(expected)


def test_native_write_of_a_nested_variant_is_refused_up_front(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    df = spark.sql("SELECT id, array(parse_json('1'), NULL) AS c FROM range(2)")
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "wh", "ns.v", schema=schema, native_write=True)
    with pytest.raises(SinkConfigurationError, match="variant"):
        translator.apply(df, sink, sink_id="v", checkpoint_id=1)


NESTED_TIMESTAMPS = [
    "array(TIMESTAMP'2024-03-30 12:00:00.123456')",
    "map(TIMESTAMP'2024-03-30 12:00:00.123456', 1)",
    "named_struct('a', TIMESTAMP'2024-03-30 12:00:00.123456')",
    "map('k', array(named_struct('t', TIMESTAMP'2024-03-30 12:00:00.123456')))",
    "named_struct('t', TIMESTAMP'2024-03-30 12:00:00', 'a', array(named_struct('x', 1), NULL))",
]


@pytest.mark.parametrize("expression", NESTED_TIMESTAMPS)
def test_nested_timestamps_in_another_session_zone(spark, translator, tmp_path, native, expression):  # type: ignore[no-untyped-def]
    with session_zone(spark, "America/New_York"):
        check_sql(spark, translator, tmp_path, expression, native=native)


@pytest.mark.parametrize("native_write", [False, None], ids=["sink-writers", "default"])
def test_struct_field_names_avro_cannot_hold_are_written(spark, translator, tmp_path, native_write):  # type: ignore[no-untyped-def]
    """The data files spell 'a.b' as 'a_x2Eb' (as pyiceberg does); readers go by field id."""
    df = spark.sql("SELECT id, named_struct('a.b', 2, '1x', 3) AS c FROM range(2)").repartition(1)
    expected = through_spark(spark, tmp_path, df)
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "wh", "ns.d", schema=schema, native_write=native_write)
    result = translator.apply(df, sink, sink_id="d", checkpoint_id=1)
    assert result.native_write is False  # Spark's writer cannot take a dot in a name
    assert sink.load_table().scan().to_arrow().sort_by("id").to_pylist() == expected


@pytest.mark.parametrize(
    "native_write", [False, True, None], ids=["sink-writers", "native", "default"]
)
def test_an_empty_struct_field_name_is_refused_before_any_job(
    spark, translator, tmp_path, native_write
):  # type: ignore[no-untyped-def]
    df = spark.sql("SELECT id, named_struct('', 1, 'a.b', 2) AS c FROM range(2)")
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
    sink = IcebergSink.local(tmp_path / "wh", "ns.e", schema=schema, native_write=native_write)
    with pytest.raises(SinkConfigurationError, match=r"empty name .*got c\.''\); rename"):
        translator.apply(df, sink, sink_id="e", checkpoint_id=1)
    assert sink.load_table().current_snapshot() is None


OUT_OF_PYTHON_RANGE = [
    ("America/New_York", "TIMESTAMP'9999-12-31 23:59:59.999999'", "unix_micros"),
    ("Asia/Kolkata", "TIMESTAMP'0001-01-01 00:00:00'", "unix_micros"),
    ("UTC", "date_add(DATE'9999-12-31', 1)", "unix_date"),
]


@pytest.mark.parametrize("case", OUT_OF_PYTHON_RANGE, ids=lambda case: case[1])
def test_values_outside_python_years_are_written(spark, translator, tmp_path, native, case):  # type: ignore[no-untyped-def]
    """Their UTC instant or day is past year 9999 or before year 1: no bounds, same values.

    Compared as days or microseconds since the epoch: Python cannot hold them as dates.
    """
    zone, expression, unix = case
    with session_zone(spark, zone):
        df = spark.sql(f"SELECT id, {expression} AS c FROM range(2)").repartition(1)
        expected = spark.sql(f"SELECT id, {unix}({expression}) AS c FROM range(2)")
        want = expected.orderBy("id").toArrow().to_pylist()
        schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=False)
        sink = IcebergSink.local(tmp_path / "wh", "ns.o", schema=schema, native_write=native)
        translator.apply(df, sink, sink_id="o", checkpoint_id=1)
    table = sink.load_table()
    paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    files = pa.concat_tables([pq.read_table(path) for path in paths]).sort_by("id")
    days_or_micros = pa.int32() if unix == "unix_date" else pa.int64()
    got = files.set_column(1, "c", files.column("c").cast(days_or_micros)).to_pylist()
    assert got == want
