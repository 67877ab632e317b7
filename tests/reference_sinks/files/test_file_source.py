"""FileSource, bounded: the source kit on real files, formats, partitions, splits, bad input."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_sinks._row_cut import COUNT_WHEN_CUT
from reference_sinks.files import (
    CsvOptions,
    FileReadError,
    FileSource,
    FileSourceSplit,
    file_source_from_options,
)
from reference_sinks.files._json_lines import JsonLinesEncoder
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import Boundedness, SourceReaderError, SupportsEndPositions, inspect_source
from sinkv2.testing import LocalSourceEngine, check_source
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    rows,
    write_csv,
    write_jsonl,
    write_parquet,
)


def read_all(source: Any, parallelism: int = 3) -> list[dict[str, Any]]:
    engine = LocalSourceEngine(source, parallelism)
    engine.run()
    engine.finish()
    return [record.record for record in engine.committed]


def by_id(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: r["id"])


def partitioned_parquet(base: Path) -> list[dict[str, Any]]:
    """Three partitions (one value needs escaping, one is null), row groups of 4 rows."""
    expected = []
    for index, (directory, value) in enumerate(
        [("key=a", "a"), ("key=b%2Fc", "b/c"), ("key=__HIVE_DEFAULT_PARTITION__", None)]
    ):
        records = rows(index * 30, 30)
        write_parquet(base / directory / "part-0.parquet", records)
        expected += [{**r, "key": value} for r in records]
    write_parquet(base / "_staging" / "key=a" / "hidden.parquet", rows(1000, 3))
    write_parquet(base / "key=a" / ".part-1.parquet.crc", rows(2000, 3))
    (base / "_SUCCESS").write_text("")
    return expected


def test_parquet_passes_the_source_kit_with_row_group_splits_and_partitions(tmp_path: Path):
    expected = partitioned_parquet(tmp_path)
    check_source(lambda: FileSource(tmp_path, split_bytes=200, batch_rows=5), expected=expected)


def test_a_large_parquet_file_is_cut_into_row_group_splits(tmp_path: Path):
    write_parquet(tmp_path / "one.parquet", rows(0, 40), row_group_size=4)
    source = FileSource(tmp_path, split_bytes=150)
    engine = LocalSourceEngine(source, 2)
    engine.run()
    engine.finish()
    split_ids = {record.split_id for record in engine.committed}
    assert len(split_ids) > 2
    assert all("#rg=" in str(split_id) for split_id in split_ids)
    assert by_id([r.record for r in engine.committed]) == rows(0, 40)


@pytest.mark.parametrize("file_format", ["jsonl", "csv"])
def test_json_lines_and_csv_pass_the_source_kit(tmp_path: Path, file_format: str):
    write = write_jsonl if file_format == "jsonl" else write_csv
    expected = []
    for index in range(4):
        records = rows(index * 20, 20)
        write(tmp_path / f"day={index}" / f"part.{file_format}", records)
        expected += [{**r, "day": index} for r in records]
    if file_format == "csv":  # strings, as Spark's CSV reader gives them (inferSchema off)
        expected = [{**r, "id": str(r["id"]), "score": str(r["score"])} for r in expected]
    check_source(lambda: FileSource(tmp_path, file_format, batch_rows=6), expected=expected)


def test_csv_infers_types_when_asked(tmp_path: Path):
    write_csv(tmp_path / "a.csv", rows(0, 10))
    source = FileSource(tmp_path, "csv", csv=CsvOptions(infer_schema=True))
    assert source.get_produced_type().types == [pa.int32(), pa.string(), pa.float64()]
    assert by_id(read_all(source)) == rows(0, 10)


def test_csv_without_header_names_columns_as_spark_does(tmp_path: Path):
    (tmp_path / "a.csv").write_text("1,x\n2,\n", encoding="utf-8")
    source = FileSource(tmp_path, "csv", csv=CsvOptions(header=False))
    assert source.get_produced_type().names == ["_c0", "_c1"]
    assert by_id_text(read_all(source)) == [{"_c0": "1", "_c1": "x"}, {"_c0": "2", "_c1": None}]


def by_id_text(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: r["_c0"])


def test_json_inference_follows_spark_dates_and_timestamps_stay_strings(tmp_path: Path):
    write_jsonl(
        tmp_path / "a.jsonl",
        [{"n": 1, "x": 1.5, "d": "2024-03-30", "t": "2024-03-30T10:00:00", "z": None}],
    )
    schema = FileSource(tmp_path, "jsonl").get_produced_type()
    assert dict(zip(schema.names, schema.types, strict=True)) == {
        "n": pa.int64(),
        "x": pa.float64(),
        "d": pa.string(),
        "t": pa.string(),
        "z": pa.string(),
    }


def test_json_lines_written_by_file_sink_read_back_with_their_schema(tmp_path: Path):
    """FileSink's JSON spellings (decimal strings, ISO times, base64) come back as the values."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("amount", pa.decimal128(20, 4)),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", "UTC")),
            ("local", pa.timestamp("us")),
            ("blob", pa.binary()),
            ("tags", pa.list_(pa.string())),
        ]
    )
    records = [
        {
            "id": i,
            "amount": decimal.Decimal(f"{i}.0125") if i % 3 else None,
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
            "at": dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC) + dt.timedelta(hours=i),
            "local": dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
            "blob": bytes([i, 0, 255]),
            "tags": ["a", None] if i % 2 else None,
        }
        for i in range(12)
    ]
    batch = pa.RecordBatch.from_pylist(records, schema=schema)
    (tmp_path / "part.jsonl").write_bytes(JsonLinesEncoder(schema).encode(batch))
    got = by_id(read_all(FileSource(tmp_path, "jsonl", schema=schema)))
    assert got == records


def test_restored_splits_skip_what_was_read(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 50), row_group_size=7)
    source = FileSource(tmp_path)
    split = FileSourceSplit(str(tmp_path / "a.parquet"), str(tmp_path / "a.parquet"), 0, 0)
    got = [row for batch in source._read(split.at(23)) for row in batch.to_pylist()]
    assert got == rows(23, 27)


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(0, 60),
    group=st.integers(1, 9),
    split_bytes=st.sampled_from([64, 300, 10**9]),
    batch_rows=st.integers(1, 13),
    data=st.data(),
)
def test_split_positions_round_trip_and_resume_exactly(  # noqa: PLR0917 - hypothesis arguments
    tmp_path_factory: pytest.TempPathFactory,
    count: int,
    group: int,
    split_bytes: int,
    batch_rows: int,
    data: st.DataObject,
):
    """Every split, at any position, serialized and back, reads exactly its rows after it."""
    base = tmp_path_factory.mktemp("pos")
    write_parquet(base / "a.parquet", rows(0, count), row_group_size=group)
    source = FileSource(base, split_bytes=split_bytes, batch_rows=batch_rows)
    serializer = source.get_split_serializer()
    engine = LocalSourceEngine(source, 1)
    splits = list(engine.enumerator.snapshot_state(0).remaining)
    whole: list[dict[str, Any]] = []
    for split in splits:
        split_rows = [row for batch in source._read(split) for row in batch.to_pylist()]
        whole += split_rows
        position = data.draw(st.integers(0, len(split_rows)), label=f"position in {split.id}")
        restored = serializer.deserialize(
            serializer.get_version(), serializer.serialize(split.at(position))
        )
        assert restored == split.at(position)
        assert [r for b in source._read(restored) for r in b.to_pylist()] == split_rows[position:]
    engine.close()
    assert whole == rows(0, count)


def test_the_source_is_bounded_picklable_and_tells_parquet_end_positions(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 3))
    source = FileSource(tmp_path)
    assert source.get_boundedness() is Boundedness.BOUNDED
    assert inspect_source(source).produced_type == SCHEMA
    assert isinstance(source, SupportsEndPositions)
    continuous = source.monitor_continuously(dt.timedelta(seconds=2))
    assert continuous.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    assert source.get_boundedness() is Boundedness.BOUNDED  # unchanged
    split = FileSourceSplit("a", "a", 1, 0)
    assert continuous.end_positions([split, split.until(None, 7)]) == [COUNT_WHEN_CUT, 7]
    jsonl = FileSource(tmp_path, format="jsonl", schema=SCHEMA)
    assert jsonl.end_positions([split]) == [None]  # not counted: read whole
    assert cloudpickle.loads(cloudpickle.dumps(continuous)).monitor_interval == 2.0


def test_a_truncated_parquet_file_fails_naming_it(tmp_path: Path):
    good = write_parquet(tmp_path / "a.parquet", rows(0, 10))
    bad = tmp_path / "b.parquet"
    bad.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(tmp_path))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert problem.path == str(bad)
    assert "b.parquet" in str(problem)


def test_a_bad_json_value_fails_naming_file_and_column(tmp_path: Path):
    write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "day": "2024-02-30"}])
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(tmp_path, "jsonl", schema=schema))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert problem.column == "day"
    assert "a.jsonl" in str(problem)


def test_a_column_of_another_type_in_a_later_file_fails_naming_it(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 3))
    pq.write_table(pa.table({"id": ["not a number"]}), tmp_path / "b.parquet")
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(tmp_path))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert (problem.column, Path(problem.path).name) == ("id", "b.parquet")


def test_a_column_missing_in_a_later_file_reads_as_nulls(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 2))
    pq.write_table(pa.table({"id": pa.array([7], pa.int64())}), tmp_path / "b.parquet")
    got = by_id(read_all(FileSource(tmp_path)))
    assert got[-1] == {"id": 7, "name": None, "score": None}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "orc"}, "format must be one of"),
        ({"split_bytes": 0}, "split_bytes must be a positive int"),
        ({"batch_rows": True}, "batch_rows must be a positive int"),
        ({"schema": "id long"}, "schema must be a pyarrow.Schema"),
        ({"partition_columns": {"k": "int"}}, "partition_columns must map"),
        ({"extensions": ".parquet"}, "extensions must be a list"),
        ({"csv": {"header": True}}, "csv must be a CsvOptions"),
    ],
)
def test_bad_arguments_are_refused_at_construction(
    tmp_path: Path, kwargs: dict[str, Any], message: str
):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match=message):
        FileSource(tmp_path, **kwargs)


def test_an_empty_directory_needs_a_schema(tmp_path: Path):
    with pytest.raises(SinkConfigurationError, match="pass schema="):
        FileSource(tmp_path)
    assert read_all(FileSource(tmp_path, schema=SCHEMA)) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": 0}, "interval must be a positive number"),
        ({"interval": 1, "clean_source": "move"}, "'off', 'archive' or 'delete'"),
        ({"interval": 1, "clean_source": "archive"}, "archive_dir is needed"),
        ({"interval": 1, "archive_dir": "/tmp/x"}, "archive_dir is needed"),
        ({"interval": 1, "max_file_age": -1}, "max_file_age must be a positive number"),
    ],
)
def test_bad_monitoring_arguments_are_refused(tmp_path: Path, kwargs: dict[str, Any], message: str):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match=message):
        FileSource(tmp_path).monitor_continuously(**kwargs)


def test_an_archive_inside_the_directory_is_refused(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="inside path"):
        FileSource(tmp_path).monitor_continuously(
            1, clean_source="archive", archive_dir=tmp_path / "done"
        )


def test_a_partition_column_that_is_also_a_data_column_is_refused(tmp_path: Path):
    write_parquet(tmp_path / "id=1" / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="both data columns and partition"):
        FileSource(tmp_path)
    assert len(read_all(FileSource(tmp_path, partition_columns={}))) == 1


def test_a_single_file_path_reads_that_file(tmp_path: Path):
    path = write_parquet(tmp_path / "a.parquet", rows(0, 9))
    write_parquet(tmp_path / "b.parquet", rows(100, 9))
    assert by_id(read_all(FileSource(path))) == rows(0, 9)


def test_string_options_make_the_same_source(tmp_path: Path):
    write_csv(tmp_path / "a.csv", rows(0, 4))
    source = file_source_from_options(
        path=str(tmp_path), format="CSV", infer_schema="true", batch_rows="2"
    )
    assert source.get_produced_type().types == [pa.int32(), pa.string(), pa.float64()]
    assert by_id(read_all(source)) == rows(0, 4)
    streaming = file_source_from_options(
        path=str(tmp_path),
        format="csv",
        monitor_interval="5",
        max_file_age="3600",
        clean_source="archive",
        archive_dir=str(tmp_path.parent / "done"),
    )
    assert streaming.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    assert (streaming.monitor_interval, streaming.max_file_age) == (5.0, 3600.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs the 'path' option"),
        ({"format": "orc"}, "'format' option must be one of"),
        ({"batch_rows": "0"}, "'batch_rows' option must be a positive integer"),
        ({"header": "maybe"}, "'header' option must be 'true' or 'false'"),
        ({"monitor_interval": "soon"}, "'monitor_interval' option must be a positive number"),
        ({"max_file_age": "60"}, "are for a continuous source"),
        ({"monitor_interval": "1", "clean_source": "move"}, "'clean_source' option must be"),
    ],
)
def test_bad_string_options_are_named(tmp_path: Path, options: dict[str, str], message: str):
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    if options:
        options = {"path": str(tmp_path), **options}
    with pytest.raises(SinkConfigurationError, match=message):
        file_source_from_options(**options)


def test_a_bad_csv_row_fails_naming_file_row_and_column(tmp_path: Path):
    (tmp_path / "a.csv").write_text("id,name,score\n1,a,0.5\nx,b,1.5\n", encoding="utf-8")
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(tmp_path, "csv", schema=SCHEMA))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert problem.column == "id"
    assert "a.csv' as CSV: line 3, column 'id'" in str(problem)
    assert "holds 'x', which is not a int64" in str(problem)
