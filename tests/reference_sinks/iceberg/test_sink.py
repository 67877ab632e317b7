"""IcebergSink without Spark: configuration, schema checks, pickling, writers, cleanup, abort."""

import datetime as dt
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from reference_sinks.iceberg import IcebergSink, local_catalog
from sinkv2 import inspect_sink
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CommitRetryPolicy,
    commit_with_retries,
)
from tests.reference_sinks.iceberg.tables import (
    ARROW_SCHEMA,
    EPOCH,
    make_sink,
    read_back,
    rows,
    snapshots_of,
    stage,
)

NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)


def staged_files(warehouse: Path) -> list[str]:
    return sorted(p.name for p in warehouse.rglob("sinkv2-*.parquet"))


def test_capabilities_match_the_flip_372_iceberg_sink(tmp_path: Path) -> None:
    capabilities = inspect_sink(make_sink(tmp_path))
    assert capabilities.committer
    assert capabilities.pre_write_topology
    assert capabilities.pre_commit_topology
    assert capabilities.attempt_cleanup
    assert capabilities.abort
    assert not capabilities.writer_state


def test_the_sink_survives_cloudpickle_and_keeps_no_live_catalog(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, sink_id="orders")
    copy = cloudpickle.loads(cloudpickle.dumps(sink))
    assert not any(isinstance(value, SqlCatalog) for value in vars(sink).values())
    assert copy.sink_id == "orders"
    committable = stage(copy, [rows(0, 20)], checkpoint_id=1)
    commit_with_retries(copy.create_committer(None), [committable], policy=NO_WAIT)
    assert len(read_back(sink)) == 20


@pytest.mark.parametrize("table", ["events", "", ".", 7])
def test_table_must_be_namespace_dot_table(tmp_path: Path, table: object) -> None:
    with pytest.raises(SinkConfigurationError, match=r"'namespace\.table'"):
        IcebergSink(local_catalog(tmp_path), table)  # type: ignore[arg-type]


def test_a_missing_table_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(
        SinkConfigurationError, match=r"'ns.nope' does not exist in catalog 'sinkv2'"
    ):
        IcebergSink(local_catalog(tmp_path), "ns.nope")


def test_catalog_must_be_a_pyiceberg_catalog_on_disk(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigurationError, match="needs a pyiceberg Catalog"):
        IcebergSink("sqlite:///x", "ns.t")  # type: ignore[arg-type]
    memory = SqlCatalog("mem", uri="sqlite:///:memory:", warehouse=tmp_path.as_uri())
    with pytest.raises(SinkConfigurationError, match="in-memory SQLite catalog"):
        IcebergSink(memory, "ns.t")


@pytest.mark.parametrize(
    ("option", "value"), [("commit_attempts", 0), ("write_parallelism", -1), ("sink_id", " ")]
)
def test_options_are_validated(tmp_path: Path, option: str, value: object) -> None:
    make_sink(tmp_path)
    with pytest.raises(SinkConfigurationError, match=option):
        IcebergSink(local_catalog(tmp_path), "ns.events", **{option: value})  # type: ignore[arg-type]


def test_schema_mismatch_names_the_columns_expected_and_got(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.check_schema(ARROW_SCHEMA)
    spark_like = pa.schema(
        [
            ("id", pa.int64()),
            ("key", pa.large_string()),
            ("value", pa.float64()),
            ("ts", pa.timestamp("us", "Europe/Paris")),
            ("day", pa.date32()),
        ]
    )
    sink.check_schema(spark_like)  # large strings and zoned timestamps are fine
    wrong_names = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(SinkConfigurationError) as missing:
        sink.check_schema(wrong_names)
    message = str(missing.value)
    assert "missing ['key', 'value', 'ts', 'day'], unexpected ['name']" in message
    assert (
        "expected columns [id: long, key: string, value: double, ts: timestamptz, day: date]"
        in message
    )
    assert "got [id: int64, name: string]" in message
    wrong_type = ARROW_SCHEMA.set(2, pa.field("value", pa.string()))
    with pytest.raises(
        SinkConfigurationError, match=r"column types do not match.*got \[.*value: string"
    ):
        sink.check_schema(wrong_type)


def test_partitioned_writer_splits_by_partition_with_values_scans_can_prune(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, partitioned=True)
    committable = stage(sink, [rows(0, 200), rows(200, 100)], checkpoint_id=1)
    table = sink.load_table()
    records = {tuple(file.partition_record(table.metadata)) for file in committable.files}
    assert len(committable.files) == len(records)  # one file per partition per writer
    assert (None, 19812) in records  # null key; 2024-03-30 is day 19812
    commit_with_retries(sink.create_committer(None), [committable], policy=NO_WAIT)
    assert [row["id"] for row in read_back(sink)] == list(range(300))
    scanned = sink.load_table().scan(row_filter="key == 'k1'")
    assert sorted(r["id"] for r in scanned.to_arrow().to_pylist()) == [
        i for i in range(300) if i % 17 and i % 3 == 1
    ]
    assert len(list(scanned.plan_files())) < len(committable.files)
    by_day = sink.load_table().scan(
        row_filter=f"ts >= '{(EPOCH + dt.timedelta(days=3)).isoformat()}'"
    )
    assert {r["ts"].date() for r in by_day.to_arrow().to_pylist()} == {dt.date(2024, 4, 2)}


def test_the_row_path_writes_the_same_rows(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    writer = sink.create_writer(BasicWriterInitContext(job_id="rows", attempt_token="rows-00000-0"))
    for element in rows(0, 10).to_pylist():
        writer.write(element, BasicSinkWriterContext())
    writer.flush(True)
    (result,) = writer.prepare_commit()
    writer.close()
    assert sum(file.record_count for file in result.files) == 10
    assert writer.prepare_commit() == []  # nothing new since


def test_attempt_cleanup_removes_only_the_losers_of_that_job(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, partitioned=True)
    winner = stage(sink, [rows(0, 40)], job_id="job", attempt=1, checkpoint_id=1)
    stage(sink, [rows(0, 40)], job_id="job", attempt=0, checkpoint_id=1)  # a failed attempt
    other_job = stage(sink, [rows(0, 5)], job_id="other", checkpoint_id=2)
    sink.clean_up_attempts("job", {"job-00000-1"})
    left = staged_files(tmp_path)
    assert left == sorted(Path(f.path).name for f in (*winner.files, *other_job.files))
    sink.clean_up_attempts("job", {"job-00000-1"})  # idempotent
    assert staged_files(tmp_path) == left


def test_abort_deletes_uncommitted_files_and_leaves_committed_ones(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    committed = stage(sink, [rows(0, 10)], job_id="a", checkpoint_id=1)
    aborted = stage(sink, [rows(10, 10)], job_id="b", checkpoint_id=2)
    commit_with_retries(sink.create_committer(None), [committed], policy=NO_WAIT)
    sink.abort([committed, aborted])
    sink.abort([committed, aborted])  # idempotent
    assert staged_files(tmp_path) == sorted(Path(f.path).name for f in committed.files)
    assert len(read_back(sink)) == 10
    assert len(snapshots_of(sink)) == 1


def test_a_batch_whose_column_is_all_null_takes_the_table_type(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    untyped = pa.RecordBatch.from_pylist(
        [{"id": 1, "key": None, "value": 0.5, "ts": None, "day": None}]
    )
    assert pa.types.is_null(untyped.schema.field("key").type)
    writer = sink.create_writer(BasicWriterInitContext(job_id="n", attempt_token="n-00000-0"))
    writer.write_arrow_batch(untyped, BasicSinkWriterContext())
    writer.flush(True)
    (result,) = writer.prepare_commit()
    writer.close()
    commit_with_retries(
        sink.create_committer(None), [result_committable(sink, result)], policy=NO_WAIT
    )
    assert read_back(sink) == [{"id": 1, "key": None, "value": 0.5, "ts": None, "day": None}]


def result_committable(sink: IcebergSink, result: object) -> object:
    from reference_sinks.iceberg._model import AggregateWriteResults

    return AggregateWriteResults(sink.sink_id)([result])  # type: ignore[list-item]


def test_batches_with_string_and_large_string_go_to_one_file(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    small = rows(0, 3)
    large = rows(3, 3)
    large = large.cast(large.schema.set(1, pa.field("key", pa.large_string())))
    writer = sink.create_writer(BasicWriterInitContext(job_id="s", attempt_token="s-00000-0"))
    writer.write_arrow_batch(small, BasicSinkWriterContext())
    writer.write_arrow_batch(large, BasicSinkWriterContext())
    writer.flush(True)
    (result,) = writer.prepare_commit()
    writer.close()
    assert len(result.files) == 1
    commit_with_retries(
        sink.create_committer(None), [result_committable(sink, result)], policy=NO_WAIT
    )
    assert read_back(sink) == rows(0, 6).to_pylist()


def test_hour_month_and_identity_transforms_split_batches_like_iceberg(tmp_path: Path) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import HourTransform, IdentityTransform, MonthTransform

    from tests.reference_sinks.iceberg.tables import SCHEMA

    spec = PartitionSpec(
        PartitionField(4, 1000, HourTransform(), "ts_hour"),
        PartitionField(5, 1001, MonthTransform(), "day_month"),
        PartitionField(2, 1002, IdentityTransform(), "key"),
    )
    sink = IcebergSink.local(tmp_path, "ns.hours", schema=SCHEMA, partition_spec=spec)
    committable = stage(sink, [rows(0, 100)], checkpoint_id=1)
    table = sink.load_table()
    expected = {
        (
            HourTransform().transform(SCHEMA.find_field(4).field_type)(
                int(row["ts"].timestamp() * 1_000_000)
            ),
            (row["day"].year - 1970) * 12 + row["day"].month - 1,
            row["key"],
        )
        for row in rows(0, 100).to_pylist()
    }
    assert {tuple(f.partition_record(table.metadata)) for f in committable.files} == expected
    commit_with_retries(sink.create_committer(None), [committable], policy=NO_WAIT)
    assert read_back(sink) == rows(0, 100).to_pylist()


def test_the_public_surface_is_exactly_all() -> None:
    import reference_sinks.iceberg as module

    public = {name for name in vars(module) if not name.startswith("_")}
    submodules = {"pyiceberg"}
    assert public - submodules == set(module.__all__)
    assert len(module.__all__) == len(set(module.__all__))


def test_cleanup_after_the_commit_keeps_every_committed_file(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, partitioned=True)
    committed = stage(sink, [rows(0, 40)], job_id="job", attempt=1, checkpoint_id=1)
    failed = stage(sink, [rows(0, 40)], job_id="job", attempt=0, checkpoint_id=1)
    commit_with_retries(sink.create_committer(None), [committed], policy=NO_WAIT)
    sink.clean_up_attempts("job", ())  # what the runtime does once the epoch is committed
    sink.clean_up_attempts("job", ())  # idempotent
    assert staged_files(tmp_path) == sorted(Path(f.path).name for f in committed.files)
    assert not set(staged_files(tmp_path)) & {Path(f.path).name for f in failed.files}
    assert [row["id"] for row in read_back(sink)] == list(range(40))


def test_cleanup_never_deletes_a_file_an_older_snapshot_references(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    committed = stage(sink, [rows(0, 10)], job_id="job", checkpoint_id=1)
    commit_with_retries(sink.create_committer(None), [committed], policy=NO_WAIT)
    first = sink.load_table().current_snapshot()
    assert first is not None
    sink.load_table().overwrite(pa.Table.from_batches([rows(100, 3)]))  # not sinkv2's files
    sink.clean_up_attempts("job", ())
    assert staged_files(tmp_path) == sorted(Path(f.path).name for f in committed.files)
    old = sink.load_table().scan(snapshot_id=first.snapshot_id).to_arrow()
    assert sorted(old.column("id").to_pylist()) == list(range(10))  # time travel still reads
    assert sorted(r["id"] for r in read_back(sink)) == [100, 101, 102]


def test_cleanup_reads_no_manifest_when_nothing_is_to_be_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make_sink(tmp_path)
    committed = stage(sink, [rows(0, 10)], job_id="job", checkpoint_id=1)
    commit_with_retries(sink.create_committer(None), [committed], policy=NO_WAIT)

    def no_manifests(*args: object) -> list[str]:
        raise AssertionError("manifests read although no file of the job is a candidate")

    monkeypatch.setattr("reference_sinks.iceberg._sink._unreferenced", no_manifests)
    sink.clean_up_attempts("other-job", ())
    sink.clean_up_attempts("job", {"job-00000-0"})
    assert [row["id"] for row in read_back(sink)] == list(range(10))
