"""IcebergSink on the native path: Spark's Parquet writer writes the files, the sink appends them.

What is particular to it, pitfall by pitfall (the shared promises - exactly once,
read-back, task failures, the kit - run on both paths in `test_spark.py` and
`test_type_matrix.py`): partition values come from the path, never from statistics,
for every transform Spark can compute as Iceberg does (empty strings and nulls apart,
in any session time zone), checked against the files' bounds; files are registered
by name through the table's name mapping, and files with other field ids or INT96
timestamps are refused; what cannot be served falls back to the sink's writers and
says why; a dead job's native directory, Spark's ``_temporary`` in it, goes with the
next run while committed files stay.
"""

from __future__ import annotations

import glob
import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, IsNull
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from reference_sinks.iceberg import IcebergSink
from sinkv2 import NativeFilesWritten
from sinkv2.errors import SinkConfigurationError, SinkWriterError
from sinkv2.runtime import CommitStatus

pytestmark = pytest.mark.spark

_TABLES = itertools.count()

SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "key", StringType()),
    NestedField(3, "ts", TimestamptzType()),
    NestedField(4, "local", TimestampType()),
    NestedField(5, "day", DateType()),
    NestedField(6, "n", IntegerType()),
    NestedField(7, "flag", BooleanType()),
)
DATA = """
    SELECT id,
           CASE WHEN id % 9 = 0 THEN '' WHEN id % 11 = 0 THEN NULL
                WHEN id % 13 = 0 THEN 'a/b=c%' ELSE concat('k', id % 3) END AS key,
           CASE WHEN id % 23 = 0 THEN NULL
                ELSE timestamp_micros(1711756800000000 + id * 3607000123) END AS ts,
           timestamp_ntz '2024-12-31 22:00:00' + make_dt_interval(0, id % 5, 0, 0) AS local,
           date '1969-12-30' + cast(id % 4 as int) AS day,
           cast(id % 3 - 1 as int) AS n,
           id % 2 = 0 AS flag
    FROM range(300)
"""


def table_with(tmp_path: Path, *fields: PartitionField, schema: Schema = SCHEMA, **options):  # type: ignore[no-untyped-def]
    name = f"ns.t{next(_TABLES)}"
    spec = PartitionSpec(*fields) if fields else None
    return IcebergSink.local(tmp_path / "wh", name, schema=schema, partition_spec=spec, **options)


def data_files(sink: IcebergSink) -> list:  # type: ignore[type-arg]
    return [task.file for task in sink.load_table().scan().plan_files()]


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def test_partition_values_come_from_the_path_for_every_transform(spark, translator, tmp_path, zone):  # type: ignore[no-untyped-def]
    fields = [
        PartitionField(2, 1000, IdentityTransform(), "key"),
        PartitionField(3, 1001, HourTransform(), "ts_hour"),
        PartitionField(4, 1002, DayTransform(), "local_day"),
        PartitionField(5, 1003, MonthTransform(), "day_month"),
        PartitionField(3, 1004, YearTransform(), "ts_year"),
        PartitionField(6, 1005, IdentityTransform(), "n"),
        PartitionField(7, 1006, IdentityTransform(), "flag"),
        PartitionField(5, 1007, IdentityTransform(), "day"),
    ]
    sink = table_with(tmp_path, *fields, write_parallelism=2)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        df = spark.sql(DATA)
        result = translator.apply(df, sink, sink_id="transforms", checkpoint_id=1)
        expected = df.toArrow()
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert result.native_write
    table = sink.load_table()
    schema = table.schema()
    # Every file's partition record is what Iceberg's own transforms give its rows.
    for file in data_files(sink):
        path = file.file_path.removeprefix("file://")
        content = pq.read_table(path)
        for position, field in enumerate(fields):
            source = schema.find_field(field.source_id)
            transform = field.transform.transform(source.field_type)
            column = content.column(source.name)
            if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
                column = column.cast(
                    pa.int64() if pa.types.is_timestamp(column.type) else pa.int32()
                )
            values = {transform(value) for value in column.to_pylist()}
            assert values == {file.partition[position]}, (field.name, path)
    # Filtered scans see the rows: empty strings and nulls are different partitions.
    scan = table.scan(row_filter=EqualTo("key", "")).to_arrow()
    assert scan.num_rows == sum(1 for key in expected.column("key").to_pylist() if key == "")
    nulls = table.scan(row_filter=IsNull("key")).to_arrow()
    assert nulls.num_rows == expected.column("key").null_count
    escaped = table.scan(row_filter=EqualTo("key", "a/b=c%")).to_arrow()
    assert escaped.num_rows == sum(1 for k in expected.column("key").to_pylist() if k == "a/b=c%")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(300))


def test_the_table_gets_a_name_mapping_and_files_carry_no_field_ids(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    sink = table_with(tmp_path)
    assert sink.load_table().metadata.name_mapping() is None
    translator.apply(spark.sql(DATA), sink, sink_id="mapping", checkpoint_id=1)
    table = sink.load_table()
    assert table.metadata.name_mapping() == table.schema().name_mapping
    for file in data_files(sink):
        path = file.file_path.removeprefix("file://")
        assert all(not (f.metadata or {}).get(b"PARQUET:field_id") for f in pq.read_schema(path))
        timestamps = pq.read_metadata(path).schema.column(2)  # ts: micros, never INT96
        assert (timestamps.name, timestamps.physical_type) == ("ts", "INT64")


@pytest.mark.parametrize(
    ("fields", "schema", "reason"),
    [
        ([PartitionField(1, 1000, BucketTransform(4), "b")], SCHEMA, "bucket"),
        ([PartitionField(2, 1000, TruncateTransform(2), "t")], SCHEMA, "truncate"),
        ([PartitionField(4, 1000, IdentityTransform(), "l")], SCHEMA, "identity of a timestamp"),
        (
            [],
            Schema(NestedField(1, "id", LongType()), NestedField(2, "u", UUIDType())),
            "column of type uuid",
        ),
    ],
    ids=["bucket", "truncate", "identity-ntz", "uuid"],
)
def test_what_spark_cannot_write_runs_the_sinks_writers_and_says_why(  # type: ignore[no-untyped-def]  # noqa: PLR0917  # fixtures and parameters
    spark, translator, tmp_path, fields, schema, reason
):
    sink = table_with(tmp_path, *fields, schema=schema)
    if schema is SCHEMA:
        df = spark.sql(DATA)
        result = translator.apply(df, sink, sink_id="fallback", checkpoint_id=1)
        assert not result.native_write
        assert reason in result.native_write_unavailable
        assert sorted(sink.load_table().scan().to_arrow().column("id").to_pylist()) == list(
            range(300)
        )
    plan = sink.plan_native_file_write(
        spark.createDataFrame([], "id long, u string") if schema is not SCHEMA else spark.sql(DATA)
    )
    assert reason in plan.reason
    required = table_with(tmp_path, *fields, schema=schema, native_write=True)
    with pytest.raises(SinkConfigurationError, match=r"native_write=True\) cannot let Spark"):
        required.plan_native_file_write(spark.sql(DATA))


def test_a_name_mapping_that_disagrees_with_the_schema_runs_the_sinks_writers(
    spark, translator, tmp_path
):  # type: ignore[no-untyped-def]
    sink = table_with(tmp_path)
    wrong = SCHEMA.name_mapping.model_dump_json().replace('"field-id":2', '"field-id":6', 1)
    with sink.load_table().transaction() as transaction:
        transaction.set_properties({"schema.name-mapping.default": wrong})
    result = translator.apply(spark.sql(DATA), sink, sink_id="mapping", checkpoint_id=1)
    assert not result.native_write
    assert "maps 'key' to field id 6" in result.native_write_unavailable
    assert sorted(sink.load_table().scan().to_arrow().column("key").to_pylist(), key=str)


def spark_file(spark, directory: Path, df, **options) -> None:  # type: ignore[no-untyped-def]
    writer = df.coalesce(1).write
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.parquet(str(directory))


@pytest.fixture
def planned(spark, tmp_path):  # type: ignore[no-untyped-def]
    """An identity-partitioned sink with a planned native write; what a write of it made."""
    sink = table_with(tmp_path, PartitionField(2, 1000, IdentityTransform(), "key"))
    plan = sink.plan_native_file_write(spark.sql(DATA))
    _, _, _, root = sink.data_location()

    def written(token: str) -> NativeFilesWritten:
        return NativeFilesWritten(
            job_id="job",
            checkpoint_id=1,
            attempt_token=token,
            directory=plan.epoch_directory(token),
            write=plan,
            records=1,
        )

    return sink, Path(root) / "sinkv2-native", written


def test_int96_timestamps_are_refused(spark, planned):  # type: ignore[no-untyped-def]
    sink, native, written = planned
    df = spark.sql(DATA).drop("key")
    spark_file(
        spark,
        native / "job-native-1" / "key_p0=vk1",
        df,
        **{"spark.sql.parquet.outputTimestampType": "INT96"},
    )
    with pytest.raises(SinkWriterError, match="INT96"):
        sink.native_file_committables(written("job-native-1"))


def test_files_with_other_field_ids_are_refused(spark, planned):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as sf

    sink, native, written = planned
    df = (
        spark.sql(DATA)
        .drop("key")
        .withColumn("n", sf.col("n").alias("n", metadata={"parquet.field.id": 99}))
    )
    spark_file(
        spark,
        native / "job-native-2" / "key_p0=vk1",
        df,
        **{"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"},
    )
    with pytest.raises(SinkWriterError, match="column 'n' has field id 99, the table's is 6"):
        sink.native_file_committables(written("job-native-2"))


def test_a_directory_its_rows_contradict_is_refused(spark, planned):  # type: ignore[no-untyped-def]
    sink, native, written = planned
    df = spark.sql(DATA).filter("key = 'k1'")
    spark_file(
        spark,
        native / "job-native-3" / "key_p0=vk2",
        df,
        **{"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"},
    )
    with pytest.raises(
        SinkWriterError, match=r"directory says key='k2', but its rows' 'key' values give 'k1'"
    ):
        sink.native_file_committables(written("job-native-3"))


def test_a_dead_jobs_native_directory_goes_and_committed_files_stay(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    sink = table_with(tmp_path, PartitionField(2, 1000, IdentityTransform(), "key"))
    first = translator.apply(spark.sql(DATA), sink, sink_id="dead", checkpoint_id=1)
    _, _, _, root = sink.data_location()
    native = Path(root) / "sinkv2-native"
    committed = sorted(glob.glob(f"{native}/**/*.parquet", recursive=True))
    assert committed
    assert not glob.glob(f"{native}/**/.*.crc", recursive=True)  # the clean-up removed them

    from sinkv2.runtime import CommitCoordinator
    from sinkv2_spark._engine.committable_streams import SparkCommittableStreams

    dead = CommitCoordinator(
        sink,
        sink_id="dead",
        store=translator.state_store,
        streams=SparkCommittableStreams(spark, "dead"),
        job_id="deadbeef",
    )
    dead.open()
    dead.close()  # its driver died mid-write:
    attempt = native / "deadbeef-native-2/_temporary/0/_temporary/attempt_0_0000_m_1/key_p0=vk1"
    attempt.mkdir(parents=True)
    (attempt / "part-00001-abc.c000.zstd.parquet").write_bytes(b"PAR1 half a file")
    again = translator.apply(spark.sql(DATA), sink, sink_id="dead", checkpoint_id=2)
    assert first.status is again.status is CommitStatus.COMMITTED
    assert again.cleaned_jobs == ("deadbeef",)
    assert not (native / "deadbeef-native-2").exists()
    on_disk = sorted(glob.glob(f"{native}/**/*", recursive=True))
    assert all(Path(p).is_dir() or "_temporary" not in p for p in on_disk)
    referenced = {f.file_path.removeprefix("file://") for f in data_files(sink)}
    assert {p for p in on_disk if Path(p).is_file()} == referenced
    assert set(committed) <= referenced
    assert len(sink.load_table().scan().to_arrow()) == 600


def test_an_identity_partitioned_table_reads_back_with_a_filter_in_spark_too(
    spark, translator, tmp_path
):  # type: ignore[no-untyped-def]
    """Spark reads the data files as they are: every table column is in them."""
    sink = table_with(tmp_path, PartitionField(2, 1000, IdentityTransform(), "key"))
    translator.apply(spark.sql(DATA), sink, sink_id="spark-read", checkpoint_id=1)
    paths = [f.file_path for f in data_files(sink)]
    back = spark.read.parquet(*paths).select("id", "key")
    assert back.columns == ["id", "key"]
    expected = spark.sql(DATA).select("id", "key")
    assert back.exceptAll(expected).count() == expected.exceptAll(back).count() == 0
