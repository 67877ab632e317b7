"""FileSource's native read: Spark's Parquet reader reads what FileSource's readers read.

The unit tests ask `FileSource.native_read` directly (no Spark); the Spark tests read
the same files through both paths of `from_source` and compare rows and schemas.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks.files import FileReadError, FileSource
from reference_sinks.files._source_listing import list_files, make_splits
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import NativeRead, NativeReadUnavailable
from tests.reference_sinks.files.file_source_data import SCHEMA, rows, write_csv, write_parquet


def splits_of(source: FileSource) -> list[Any]:
    fs, root = source.resolve()
    return [
        split
        for status in list_files(fs, root, source.extensions)
        for split in make_splits(fs, status, source.format, source.split_bytes)
    ]


def answer(source: FileSource) -> NativeRead | NativeReadUnavailable:
    return source.native_read(splits_of(source))


# --- which splits are files Spark reads alike (no Spark) --------------------------------------


def test_whole_files_and_row_group_splits_covering_a_file_are_read_natively(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 40), row_group_size=4)
    write_parquet(tmp_path / "b.parquet", rows(40, 3))
    whole = answer(FileSource(tmp_path))
    assert isinstance(whole, NativeRead)
    assert whole.format == "parquet"
    assert whole.paths == (f"file://{tmp_path}/a.parquet", f"file://{tmp_path}/b.parquet")
    assert whole.partition_columns == ()
    assert whole.base_path is None
    cut = FileSource(tmp_path, split_bytes=200)
    assert len(splits_of(cut)) > 2  # a.parquet is cut into runs of row groups
    assert answer(cut) == whole


def test_partition_directories_become_spark_partition_columns(tmp_path: Path):
    write_parquet(tmp_path / "day=2024-01-01" / "k=a%3Ab" / "x.parquet", rows(0, 3))
    write_parquet(
        tmp_path / "day=2024-01-02" / "k=__HIVE_DEFAULT_PARTITION__" / "y.parquet", rows(3, 2)
    )
    read = answer(FileSource(tmp_path))
    assert isinstance(read, NativeRead)
    assert read.partition_columns == ("day", "k")
    assert read.base_path == f"file://{tmp_path}"
    loose = tmp_path / "day=2024-01-03" / "extra" / "k=b"
    write_parquet(loose / "z.parquet", rows(5, 1))
    assert "not exactly the partition columns" in reason(FileSource(tmp_path))


def reason(source: FileSource, splits: list[Any] | None = None) -> str:
    found = source.native_read(splits_of(source) if splits is None else splits)
    assert isinstance(found, NativeReadUnavailable), found
    return found.reason


def test_what_spark_would_read_otherwise_is_refused_with_a_reason(tmp_path: Path):
    write_csv(tmp_path / "csv" / "a.csv", rows(0, 3))
    assert "format 'csv' is read by FileSource itself" in reason(
        FileSource(tmp_path / "csv", "csv")
    )

    data = tmp_path / "parquet"
    write_parquet(data / "a.parquet", rows(0, 40))
    source = FileSource(data, split_bytes=200)
    splits = splits_of(source)
    assert "starts at record 3" in reason(source, [splits[0].at(3), *splits[1:]])
    assert "cover row groups" in reason(source, splits[1:])

    glob = tmp_path / "glob[1]"
    write_parquet(glob / "a.parquet", rows(0, 2))
    assert "glob pattern" in reason(FileSource(glob))

    mixed = tmp_path / "mixed"
    write_parquet(mixed / "a.parquet", rows(0, 2))
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), mixed / "b.parquet")
    assert "column 'id' of" in reason(FileSource(mixed))

    cased = tmp_path / "cased"
    write_parquet(cased / "a.parquet", rows(0, 2))
    pq.write_table(pa.table({"ID": pa.array([1], pa.int64())}), cased / "b.parquet")
    assert "differ only in case" in reason(FileSource(cased))

    unsigned = tmp_path / "unsigned"
    unsigned.mkdir()
    pq.write_table(pa.table({"n": pa.array([1], pa.uint32())}), unsigned / "a.parquet")
    # widened as Spark's reader widens it (uint32 to long): both readers read it alike
    assert isinstance(answer(FileSource(unsigned)), NativeRead)

    assert "dead_letter_dir" in reason(FileSource(data, dead_letter_dir=tmp_path / "dead"))

    typed = tmp_path / "typed"
    write_parquet(typed / "d=1.5" / "a.parquet", rows(0, 2))
    assert "partition column(s) ['d']" in reason(
        FileSource(typed, partition_columns={"d": pa.float64()})
    )


def test_a_footer_that_does_not_parse_is_the_python_paths_error(tmp_path: Path):
    path = write_parquet(tmp_path / "a.parquet", rows(0, 10))
    source = FileSource(tmp_path)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(FileReadError, match=r"cannot read .*a\.parquet.* as [Pp]arquet") as raised:
        source.native_read(splits_of(source))
    assert raised.value.path == str(path)


def test_native_read_fields_are_checked():
    with pytest.raises(SinkConfigurationError, match="base_path is needed with partition_columns"):
        NativeRead(format="parquet", paths=["file:///a"], partition_columns=["day"])
    with pytest.raises(SinkConfigurationError, match="must map str to str"):
        NativeRead(format="parquet", paths=[], options={"x": 1})  # type: ignore[dict-item]
    with pytest.raises(SinkConfigurationError, match="format must be a non-empty str"):
        NativeRead(format=" ", paths=[])


# --- both paths on Spark ----------------------------------------------------------------------

UTC = dt.UTC

COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "i64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "i8": (pa.int8(), st.integers(-128, 127)),
    "flag": (pa.bool_(), st.booleans()),
    "f64": (pa.float64(), st.floats(allow_nan=False)),
    "f32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "text": (pa.string(), st.text(max_size=4)),
    "blob": (pa.binary(), st.binary(max_size=4)),
    "day": (pa.date32(), st.dates()),
    "at": (
        pa.timestamp("us", "UTC"),
        st.datetimes(timezones=st.just(UTC), min_value=dt.datetime(2, 1, 1)),
    ),
    "local": (pa.timestamp("us"), st.datetimes()),
    "amount": (
        pa.decimal128(9, 2),
        st.decimals(
            min_value=-(10**6), max_value=10**6, places=2, allow_nan=False, allow_infinity=False
        ),
    ),
    "items": (
        pa.list_(pa.int32()),
        st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=3),
    ),
    "pair": (
        pa.struct([("x", pa.string()), ("y", pa.list_(pa.int64()))]),
        st.fixed_dictionaries(
            {
                "x": st.none() | st.text(max_size=3),
                "y": st.none() | st.lists(st.integers(0, 9), max_size=2),
            }
        ),
    ),
    "props": (
        pa.map_(pa.string(), pa.int64()),
        st.dictionaries(st.text(max_size=3), st.none() | st.integers(0, 9), max_size=2).map(
            lambda d: list(d.items())
        ),
    ),
}


@st.composite
def tables(draw: Any) -> list[pa.Table]:
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=3, max_size=8, unique=True))
    schema = pa.schema([(name, COLUMNS[name][0]) for name in names])
    files = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(0, 6))
        data = {name: [draw(st.none() | COLUMNS[name][1]) for _ in range(count)] for name in names}
        files.append(pa.table(data, schema=schema))
    return files


def collected(df: Any) -> list[str]:
    return sorted(repr(row) for row in df.collect())


@pytest.mark.spark
@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(files=tables())
def test_both_paths_give_the_same_rows_and_schema(
    spark: Any, tmp_path_factory: Any, files: list[pa.Table]
):
    from sinkv2_spark import from_source

    root = tmp_path_factory.mktemp("native")
    for index, table in enumerate(files):
        pq.write_table(table, root / f"part-{index}.parquet", row_group_size=2)
    source = FileSource(root)
    native = from_source(spark, source, native_read=True, parallelism=2)
    python = from_source(spark, source, native_read=False, parallelism=2)
    assert native.inputFiles()
    assert not python.inputFiles()
    assert native.schema == python.schema
    expected = collected(python)
    assert collected(native) == expected
    assert len(expected) == sum(table.num_rows for table in files)


class NonNullIds:
    """A FileSource whose produced type declares ``id`` not nullable (Spark's reader cannot)."""

    def __init__(self, path: Path) -> None:
        self.files = FileSource(path)
        produced = self.files.get_produced_type()
        self.produced = produced.set(0, produced.field("id").with_nullable(False))

    def get_produced_type(self) -> pa.Schema:
        return self.produced

    def get_boundedness(self) -> Any:
        return self.files.get_boundedness()

    def create_enumerator(self, enum_context: Any) -> Any:
        return self.files.create_enumerator(enum_context)

    def restore_enumerator(self, enum_context: Any, checkpoint: Any) -> Any:
        return self.files.restore_enumerator(enum_context, checkpoint)

    def create_reader(self, reader_context: Any) -> Any:
        return self.files.create_reader(reader_context)

    def get_split_serializer(self) -> Any:
        return self.files.get_split_serializer()

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return self.files.get_enumerator_checkpoint_serializer()

    def native_read(self, splits: Any) -> Any:
        return self.files.native_read(splits)


@pytest.mark.spark
def test_fallbacks_are_logged_and_bad_files_fail_on_both_paths(
    spark: Any, tmp_path: Path, caplog: Any
):
    from sinkv2_spark import from_source, register

    parted = tmp_path / "parted"  # Spark's own files: INT96 timestamps, escaped partitions
    spark.range(40).selectExpr(
        "id",
        "case when id % 7 = 0 then null when id % 3 = 1 then 'a/b=c%' else 'k' end as key",
        "cast(id as decimal(18, 3)) / 7 as amount",
        "timestamp_micros(1700000000000000 + id * 1000003) as at",
        "case when id % 4 = 0 then null else array(named_struct('x', id, 'y', "
        "case when id % 3 = 0 then null else 'y' end), null) end as items",
        "map('k', case when id % 2 = 0 then null else id end) as props",
    ).repartition(3).write.partitionBy("key").parquet(str(parted))
    cut = FileSource(parted, split_bytes=200)  # row-group splits, whole files in the end
    with caplog.at_level(logging.INFO, logger="sinkv2.spark"):
        native = from_source(spark, cut, parallelism=2)
    assert "read by Spark's parquet reader (" in caplog.text
    python = from_source(spark, cut, native_read=False, parallelism=2)
    assert native.schema == python.schema
    assert native.schema.simpleString() == (
        "struct<id:bigint,amount:decimal(21,6),at:timestamp,"
        "items:array<struct<x:bigint,y:string>>,props:map<string,bigint>,key:string>"
    )
    rows_read = collected(native)
    assert rows_read == collected(python)
    assert len(rows_read) == 40

    csv = tmp_path / "csv"
    write_csv(csv / "a.csv", rows(0, 4))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sinkv2.spark"):
        fallback = from_source(spark, FileSource(csv, "csv"), parallelism=1)
    assert "read through the source's readers (the Python path)" in caplog.text
    assert "format 'csv' is read by FileSource itself" in caplog.text
    assert not fallback.inputFiles()  # a Python data source's scan lists no files
    with pytest.raises(SinkConfigurationError, match=r"native_read=True.*format 'csv'"):
        from_source(spark, FileSource(csv, "csv"), native_read=True)

    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = from_source(spark, FileSource(empty, schema=SCHEMA), native_read=True)
    assert nothing.schema.simpleString() == "struct<id:bigint,name:string,score:double>"
    assert nothing.count() == 0

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sinkv2.spark"):
        strict = from_source(spark, NonNullIds(parted), parallelism=1)
    assert "declares ['id'] not nullable" in caplog.text
    assert not strict.schema["id"].nullable
    with pytest.raises(SinkConfigurationError, match=r"declares \['id'\] not nullable"):
        from_source(spark, NonNullIds(parted), native_read=True)

    register(spark)
    door = spark.read.format("sinkv2").option("source", "files").option("path", str(parted))
    assert door.option("nativeRead", "false").load().columns == native.columns
    with pytest.raises(Exception, match="cannot read natively"):
        door.option("nativeRead", "true").load().count()

    bad = tmp_path / "bad"
    path = write_parquet(bad / "a.parquet", rows(0, 10))
    source = FileSource(bad)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(FileReadError, match=r"cannot read .*a\.parquet.* as [Pp]arquet"):
        from_source(spark, source)
    with pytest.raises(Exception, match=r"FileReadError.*cannot read .*a\.parquet.* as [Pp]arquet"):
        from_source(spark, source, native_read=False, parallelism=1).collect()
