"""FileSource on Spark (bounded): what FileSink wrote, read through FLIP-27, as Spark reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from reference_sinks.files import FileSink, FileSource
from sinkv2.runtime import CommitStatus
from sinkv2_spark import from_source, register

pytestmark = pytest.mark.spark

N = 2000


def frame(spark: Any) -> Any:
    """Many types, nulls in nested values, a partition column with escapes and nulls."""
    return spark.range(N).selectExpr(
        "id",
        "case when id % 11 = 0 then null when id % 5 = 1 then 'a/b=c%' "
        "else concat('k', cast(id % 5 as string)) end as key",
        "cast(id as double) / 3 as value",
        "cast(id as decimal(18, 3)) / 7 as amount",
        "date_add(date'2024-01-01', cast(id % 400 as int)) as day",
        "timestamp_micros(1700000000000000 + id * 1000003) as at",
        "case when id % 4 = 0 then null else cast(concat('b', id) as binary) end as blob",
        "case when id % 6 = 0 then null else array(named_struct('x', id, 'y', "
        "case when id % 3 = 0 then null else 'y' end), null) end as items",
        "map('k', case when id % 2 = 0 then null else id end) as props",
    )


def same_rows(left: Any, right: Any) -> None:
    """The same rows (a map compared as its JSON: Spark's set operations refuse maps)."""
    left, right = comparable(left), comparable(right)
    assert left.count() == right.count() == N
    assert left.exceptAll(right).count() == 0
    assert right.exceptAll(left).count() == 0


def comparable(df: Any) -> Any:
    from pyspark.sql import functions as F  # Spark's usual alias

    maps = [f.name for f in df.schema.fields if f.dataType.typeName() == "map"]
    return df.select(*[F.to_json(c).alias(c) if c in maps else F.col(c) for c in df.columns])


def types(df: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


def test_from_source_reads_what_file_sink_wrote_as_spark_read_parquet_does(
    spark: Any, translator: Any, tmp_path: Path
):
    out = tmp_path / "out"
    result = translator.apply(frame(spark), FileSink(out, partition_by=["key"]), sink_id="files")
    assert result.status is CommitStatus.COMMITTED
    native = spark.read.parquet(str(out))
    ours = from_source(
        spark,
        FileSource(out, split_bytes=64 * 1024, batch_rows=300),
        parallelism=3,
        native_read=False,
    )
    assert types(ours) == types(native)
    same_rows(ours, native)
    register(spark)
    door = (
        spark.read.format("sinkv2")
        .option("source", "reference_sinks.files:file_source_from_options")
        .option("path", str(out))
        .load()
    )
    same_rows(door, native)


def test_json_lines_file_sink_wrote_read_back_with_the_schema_as_spark_json_does(
    spark: Any, translator: Any, tmp_path: Path
):
    out = tmp_path / "out"
    df = frame(spark).drop("props")  # pyarrow's JSON reader has no map type
    translator.apply(df, FileSink(out, "jsonl", partition_by=["key"]), sink_id="jsonl")
    data = df.drop("key")
    native = spark.read.schema(data.schema).json(str(out))
    schema = pa.schema(
        [f.with_nullable(True) for f in to_arrow_schema(data.schema, timezone="UTC")]
    )
    ours = from_source(spark, FileSource(out, "jsonl", schema=schema), parallelism=2)
    assert [name for name, _ in types(ours)] == [name for name, _ in types(native)]
    same_rows(ours.select(*native.columns), native)


def test_a_json_lines_directory_is_inferred_from_every_file_as_spark_read_json_does(
    spark: Any, tmp_path: Path
):
    # Fields in other orders, a column only the second file has, long and double,
    # structs and arrays that differ, a column null everywhere, a bool/long conflict
    # (a string column: Spark reads the other values as their JSON text).
    files = {
        "a.jsonl": [
            '{"n": 1, "s": {"z": 1, "y": [1, 2]}, "flag": true, "nothing": null}',
            '{"n": 2, "s": null, "flag": 3, "arr": [1]}',
        ],
        "b.jsonl": [
            '{"late": "x", "n": 2.5, "s": {"w": "k", "y": [0.5]}, "arr": [], "flag": false}',
            '{"late": {"k": [1, 2.50]}, "n": 7}',
        ],
    }
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    native = spark.read.json(str(tmp_path))
    ours = from_source(spark, FileSource(tmp_path, "jsonl"))
    assert types(ours) == types(native)
    same = sorted(map(str, ours.collect())) == sorted(map(str, native.collect()))
    assert same, (ours.collect(), native.collect())


def test_a_csv_directory_is_inferred_from_every_file_as_spark_read_csv_does(
    spark: Any, tmp_path: Path
):
    # int, long (second file), decimal, int/double across files, booleans in any
    # case, dates, timestamps with offsets, Spark's spellings (+5, 1d, Inf), empty
    # fields, a column empty everywhere. (The same header in both: Spark reads a
    # header other than the first file's as a row.)
    (tmp_path / "a.csv").write_text(
        "i,l,big,mix,flag,day,at,odd,none\n"
        "1,1,12345678901234567890,1,true,2024-01-01,2024-01-01T10:00:00Z,+5,\n"
        "2,,,2,TRUE,,2024-01-02 03:04:05.25+02:00,1d,\n"
    )
    (tmp_path / "b.csv").write_text(
        "i,l,big,mix,flag,day,at,odd,none\n"
        "3,3000000000,5,2.5,False,2024-12-31,2024-01,Inf,\n"
        ",,,,,,,,\n"
    )
    from reference_sinks.files import CsvOptions

    native = spark.read.option("header", True).option("inferSchema", True).csv(str(tmp_path))
    ours = from_source(spark, FileSource(tmp_path, "csv", csv=CsvOptions(infer_schema=True)))
    assert types(ours) == types(native)
    same = sorted(map(str, ours.collect())) == sorted(map(str, native.collect()))
    assert same, (ours.collect(), native.collect())


@pytest.mark.parametrize("native_read", [False, None])
def test_spark_parquet_extremes_and_intervals_read_as_spark_reads_them(
    spark: Any, tmp_path: Path, native_read: bool | None
):
    """INT96 timestamps at years 1 and 9999 (out of pyarrow's default nanoseconds) and
    day-time intervals (INT64 that only Spark's stored schema marks) as Spark reads them;
    a year-month interval is its number of months (Arrow has no type pyspark maps)."""
    spark.sql(
        "select timestamp'0001-01-01 00:00:00' as ts_min,"
        " timestamp'9999-12-31 23:59:59.999999' as ts_max, date'0001-01-01' as d_min,"
        " interval '3 04:05:06.789' day to second as dti,"
        " array(interval '1 00:00:01' day to second, null) as dtis,"
        " named_struct('i', interval '-2 00:00:00.5' day to second) as dts,"
        " interval '2-3' year to month as ymi"
    ).write.parquet(str(tmp_path / "out"))
    native = spark.read.parquet(str(tmp_path / "out"))
    ours = from_source(spark, FileSource(tmp_path / "out"), native_read=native_read)

    def as_json(df: Any) -> list[str]:  # collect() cannot make year-1 timestamps in Python
        return [row[0] for row in df.selectExpr("to_json(struct(*))").collect()]

    assert [(f.name, f.dataType.simpleString()) for f in ours.schema.fields] == [
        (f.name, "int" if f.name == "ymi" else f.dataType.simpleString())
        for f in native.schema.fields
    ]
    assert as_json(ours) == as_json(native.withColumn("ymi", native.ymi.cast("int")))


@pytest.mark.parametrize("native_read", [False, None])
def test_unsigned_parquet_integers_are_widened_as_spark_reads_them(
    spark: Any, tmp_path: Path, native_read: bool | None
):
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "u8": pa.array([255, None], pa.uint8()),
            "u64": pa.array([2**64 - 1, 2], pa.uint64()),
            "l": pa.array([[2**32 - 1], None], pa.list_(pa.uint32())),
            "s": pa.array([{"x": 7}, None], pa.struct([("x", pa.uint16())])),
        }
    )
    pq.write_table(table, tmp_path / "x.parquet")
    native = spark.read.parquet(str(tmp_path))
    ours = from_source(spark, FileSource(tmp_path), native_read=native_read)
    assert ours.schema.simpleString() == native.schema.simpleString()
    assert sorted(map(str, ours.collect())) == sorted(map(str, native.collect()))
