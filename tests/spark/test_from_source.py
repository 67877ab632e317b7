"""`from_source`: bounded FLIP-27 sources read by Spark as batch DataFrames."""

from __future__ import annotations

import datetime
import functools
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T
from pyspark.sql.utils import PythonException

from sinkv2.errors import SinkConfigurationError
from sinkv2.source import SourceContractError, SourceDefinitionError
from sinkv2.source.lib import DataGeneratorSource, NumberSequenceSource
from sinkv2_spark import from_source
from sinkv2_spark._doors.source_read import SOURCE_DOOR_OPTIONS, _checked_schema, door_source

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("score", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("day", pa.date32()),
    ]
)


def row(index: int) -> dict[str, Any]:
    return {
        "id": index,
        "name": None if index % 7 == 0 else f"name-{index}",
        "score": index / 4,
        "ok": index % 2 == 0,
        "day": datetime.date(2026, 1, 1) + datetime.timedelta(days=index % 300),
    }


def test_a_number_sequence_is_every_number_once(spark):
    df = from_source(spark, NumberSequenceSource(1, 20_000, num_splits=5))
    assert df.schema == T.StructType([T.StructField("value", T.LongType(), False)])
    (got,) = df.selectExpr("count(*) c", "sum(value) s", "count(distinct value) d").collect()
    assert (got.c, got.s, got.d) == (20_000, 20_000 * 20_001 // 2, 20_000)


def test_generated_rows_arrive_with_their_types_and_nulls(spark):
    df = from_source(spark, DataGeneratorSource(row, 500, SCHEMA, batch_size=64), parallelism=3)
    assert [(f.name, f.dataType, f.nullable) for f in df.schema.fields] == [
        ("id", T.LongType(), False),
        ("name", T.StringType(), True),
        ("score", T.DoubleType(), True),
        ("ok", T.BooleanType(), True),
        ("day", T.DateType(), True),
    ]
    got = sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])
    assert got == [row(i) for i in range(500)]


def test_each_subtask_with_splits_is_one_task(spark):
    df = from_source(spark, NumberSequenceSource(0, 99, num_splits=7), parallelism=3)
    assert df.rdd.getNumPartitions() == 3
    sizes = df.rdd.glom().map(len).collect()
    assert sum(sizes) == 100
    assert min(sizes) > 0


def test_a_source_without_data_is_an_empty_frame(spark):
    df = from_source(spark, NumberSequenceSource(5, 4))
    assert df.count() == 0
    assert df.columns == ["value"]


def test_an_unbounded_source_without_end_positions_is_refused_for_a_stream(spark):
    with pytest.raises(SourceContractError, match="SupportsEndPositions"):
        from_source(spark, NumberSequenceSource(0, None), source_id="unbounded")
    with pytest.raises(ValueError, match="streaming=False asks for a batch read"):
        from_source(spark, NumberSequenceSource(0, None), streaming=False)
    with pytest.raises(SinkConfigurationError, match="needs source_id"):
        from_source(spark, NumberSequenceSource(0, 9), streaming=True)
    with pytest.raises(SinkConfigurationError, match="Limit it with maxSplitsPerTrigger"):
        from_source(
            spark,
            NumberSequenceSource(0, 9),
            source_id="n",
            streaming=True,
            max_records_per_trigger=5,
        )


def test_a_bounded_source_streams_split_by_split_and_ends_under_available_now(spark, tmp_path):
    df = from_source(
        spark,
        NumberSequenceSource(1, 1_000, num_splits=4),
        source_id="numbers",
        streaming=True,
        parallelism=2,
        state_store=str(tmp_path / "state.sqlite"),
        max_splits_per_trigger=1,
    )
    assert df.isStreaming
    query = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [250] * 4
    got = sorted(r.value for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == list(range(1, 1_001))


def test_a_non_source_is_named_before_spark_runs(spark):
    with pytest.raises(SourceDefinitionError, match="create_enumerator"):
        from_source(spark, object())
    with pytest.raises(ValueError, match="parallelism must be a positive int"):
        from_source(spark, NumberSequenceSource(0, 9), parallelism=0)
    with pytest.raises(ValueError, match="source_id must be a non-empty str"):
        from_source(spark, NumberSequenceSource(0, 9), source_id=" ")


def misspelt(index: int) -> dict[str, Any]:
    return {"value": index} if index < 50 else {"valeu": index}


def test_a_record_that_does_not_fit_fails_the_read_with_the_reason(spark):
    source = DataGeneratorSource(misspelt, 100, pa.schema([("value", pa.int64())]))
    with pytest.raises(PythonException, match=r"valeu"):
        from_source(spark, source, parallelism=1).collect()


def flaky(marker: Path, index: int) -> dict[str, Any]:
    """Fails the first attempt of the task that reads index 250 (the marker says it did)."""
    if index == 250 and not marker.exists():
        marker.touch()
        raise OSError("the first attempt of this task fails")
    return {"value": index}


def test_a_failed_task_reads_its_splits_again_from_their_start(spark, tmp_path):
    marker = tmp_path / "failed-once"
    source = DataGeneratorSource(
        functools.partial(flaky, marker), 1_000, pa.schema([("value", pa.int64())]), batch_size=100
    )
    got = sorted(r.value for r in from_source(spark, source, parallelism=2).collect())
    assert marker.exists()
    assert got == list(range(1_000))


def sequence(start: str, end: str, num_splits: str | None = None) -> NumberSequenceSource:
    """A factory for the read door: options arrive as strings."""
    return NumberSequenceSource(
        int(start), None if end == "none" else int(end), num_splits=num_splits and int(num_splits)
    )


def door(spark: Any, **options: str) -> Any:
    from sinkv2_spark import register

    register(spark)
    reader = spark.read.format("sinkv2")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def test_the_read_door_reads_a_source_its_factory_makes(spark):
    df = door(
        spark,
        source="tests.spark.test_from_source:sequence",
        start="1",
        end="5000",
        num_splits="4",
        parallelism="3",
    ).load()
    assert df.schema == T.StructType([T.StructField("value", T.LongType(), False)])
    assert df.rdd.getNumPartitions() == 3
    (got,) = df.selectExpr("count(*) c", "sum(value) s").collect()
    assert (got.c, got.s) == (5000, 5000 * 5001 // 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, r"needs \.option\('source', 'module:callable'\)"),
        (
            {"source": "sequence"},
            r"must be a reference source's short name \(files, iceberg, postgres, redis_stream\) "
            r"or 'module:callable'",
        ),
        ({"source": "no_such_module_x:f"}, "names module 'no_such_module_x', which does not"),
        (
            {"source": "tests.spark.test_from_source:sequence", "start": "1"},
            r"source 'tests.spark.test_from_source:sequence' needs the option 'end'; its "
            r"options are \['start', 'end', 'num_splits'\]",
        ),
        (
            {"source": "tests.spark.test_from_source:sequence", "start": "1", "ends": "9"},
            r"does not take the option 'ends' \(did you mean 'end'\?\) and needs the option",
        ),
        (
            {"source": "tests.spark.test_from_source:sequence", "start": "1", "end": "none"},
            "reads BOUNDED sources",
        ),
        (
            {"source": "tests.spark.test_from_source:sequence", "start": "1", "end": "9"}
            | {"parallelism": "0"},
            "'parallelism' option must be a positive integer",
        ),
        (
            {"source": "tests.spark.test_from_source:sequence", "start": "1", "end": "9"}
            | {"maxFilesPerTrigger": "2"},
            "'maxfilespertrigger' is Spark's file-stream name; this door's is maxSplitsPerTrigger",
        ),
    ],
)
def test_the_read_door_names_a_bad_option(spark, options, message):
    with pytest.raises(Exception, match=message):
        door(spark, **options).load().collect()


def test_the_read_door_refuses_a_schema_that_is_not_the_sources(spark):
    reader = door(spark, source="tests.spark.test_from_source:sequence", start="1", end="9")
    with pytest.raises(Exception, match=r"the source produces <value bigint NOT NULL>"):
        reader.schema("value string").load().collect()


def test_a_schema_that_differs_only_in_nullability_says_so():
    nullable = T.StructType([T.StructField("value", T.LongType(), True)])
    with pytest.raises(
        SinkConfigurationError,
        match=r"schema\(\.\.\.\) is <value bigint>; the source produces <value bigint NOT NULL>",
    ):
        _checked_schema(NumberSequenceSource(1, 9), nullable, "read")


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("maxOffsetsPerTrigger", "'maxOffsetsPerTrigger' is Spark's Kafka name; this door's is "),
        ("max_splits_per_trigger", "is from_source()'s keyword; the option is maxSplitsPerTrigger"),
        ("sourceId", "'sourceId' is spelled source_id"),
        ("checkpointLocation", "'checkpointLocation' belongs on writeStream"),
    ],
)
def test_the_door_names_the_spellings_of_spark_and_from_source(option, named):
    options = {"source": "tests.spark.test_from_source:sequence", "start": "1", "end": "9"}
    with pytest.raises(SinkConfigurationError, match=re.escape(named)):
        door_source({**options, option: "x"})


def test_a_class_named_as_the_factory_is_told_options_are_strings():
    with pytest.raises(
        SinkConfigurationError,
        match=r"'start' must be an int \(got '1' of type str\)\. The 'source' option names the "
        r"class NumberSequenceSource, which gets every option as a string",
    ):
        door_source({"source": "sinkv2.source.lib:NumberSequenceSource", "start": "1", "end": "9"})


def test_the_sources_page_lists_every_option_of_the_read_door():
    page = (Path(__file__).resolve().parents[2] / "docs/explanation/sources.md").read_text()
    (sentence,) = re.findall(r"The door's own options are (.*?)\.\s+Every other option", page, re.S)
    listed = {name.lower() for name in re.findall(r"`(\w+)`", sentence)} - {"from_source"}
    assert listed == set(SOURCE_DOOR_OPTIONS)  # nativeRead among them: refused, naming from_source


def test_a_batch_read_given_a_stream_s_arguments_says_it_ignores_them(spark, caplog):
    with caplog.at_level(logging.WARNING, logger="sinkv2.spark"):
        df = from_source(
            spark, NumberSequenceSource(0, 9), source_id="numbers", max_splits_per_trigger=2
        )

    assert not df.isStreaming
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "source_id, max_splits_per_trigger are for streams; the source is BOUNDED" in warning
    assert "Pass streaming=True to read it as a stream" in warning


def test_the_first_source_tutorial_s_source_reads_on_spark_in_batch_and_stream(spark, tmp_path):
    """docs/examples/first_source.py's Spark step: a script's source, shipped by value."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "docs" / "examples" / "first_source.py"
    spec = importlib.util.spec_from_file_location("first_source_on_spark", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        module.write_sample_files(tmp_path / "data")
        counts = module.read_with_spark(spark, tmp_path / "data", tmp_path / "state.sqlite")
    finally:
        from pyspark import cloudpickle

        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[spec.name]
    assert counts == (23, 23)
