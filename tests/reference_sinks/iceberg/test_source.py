"""IcebergSource without Spark: the source kit, fidelity by field id, deletes, streams."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from reference_sinks.iceberg import (
    IcebergSink,
    IcebergSource,
    IcebergSourceError,
    IcebergSourceSplit,
    iceberg_source_from_options,
    local_catalog,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitRetryPolicy, commit_with_retries
from sinkv2.source import Boundedness, SupportsUncountedSplits
from sinkv2.testing import LocalSourceEngine, check_source
from tests.reference_sinks.iceberg.tables import stage

FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0)

FLAT = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "key", StringType()),
    NestedField(3, "value", DoubleType()),
)
FLAT_ARROW = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("key", pa.string()), ("value", pa.float64())]
)


def flat_rows(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "key": None if i % 7 == 0 else f"k{i % 3}", "value": i / 4}
        for i in range(start, start + count)
    ]


def flat_table(warehouse: Path, name: str = "ns.t") -> Any:
    catalog = local_catalog(warehouse)
    catalog.create_namespace_if_not_exists("ns")
    return catalog.create_table(name, schema=FLAT)


def append(table: Any, records: list[dict[str, Any]]) -> int:
    """Append ``records`` as one data file; the new snapshot's id."""
    table.append(pa.Table.from_pylist(records, schema=FLAT_ARROW))
    return int(table.current_snapshot().snapshot_id)


def read_all(source: Any, parallelism: int = 2) -> list[dict[str, Any]]:
    engine = LocalSourceEngine(source, parallelism)
    engine.run()
    engine.finish()
    records = [dict(record.record) for record in engine.committed]
    engine.close()
    return records


def by_id(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: r["id"])


def file_rows(table: Any) -> dict[str, list[dict[str, Any]]]:
    """Each data file's rows in file order, by its location (a split's id)."""
    return {
        task.file.file_path: pq.read_table(task.file.file_path.removeprefix("file://")).to_pylist()
        for task in table.scan().plan_files()
    }


def test_a_snapshot_passes_the_source_kit(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    for index in range(4):
        append(table, flat_rows(index * 13, 13))
    expected = [row for rows in file_rows(table).values() for row in rows]
    catalog = local_catalog(tmp_path)
    check_source(
        lambda: IcebergSource(catalog, "ns.t", batch_rows=5), expected=expected, max_examples=20
    )


def test_a_stream_of_appends_passes_the_source_kit(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    for index in range(4):
        append(table, flat_rows(index * 11, 11))
    by_file = file_rows(table)
    catalog = local_catalog(tmp_path)
    check_source(
        lambda: IcebergSource(catalog, "ns.t", batch_rows=4).monitor_continuously(1),
        split_records=lambda split_id: by_file[split_id],
        records_to_read=44,
        max_examples=20,
    )


NESTED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(
        2,
        "items",
        ListType(
            3,
            StructType(NestedField(4, "x", LongType()), NestedField(5, "y", StringType())),
            element_required=False,
        ),
    ),
    NestedField(6, "props", MapType(7, StringType(), 8, DoubleType(), value_required=False)),
    NestedField(9, "point", StructType(NestedField(10, "a", IntegerType()))),
)
NESTED_ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("items", pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())]))),
        ("props", pa.map_(pa.string(), pa.float64())),
        ("point", pa.struct([("a", pa.int32())])),
    ]
)
ITEM = st.none() | st.fixed_dictionaries(
    {"x": st.none() | st.integers(-(2**63), 2**63 - 1), "y": st.none() | st.text(max_size=4)}
)
NESTED_ROW = st.fixed_dictionaries(
    {
        "items": st.none() | st.lists(ITEM, max_size=3),
        "props": st.none()
        | st.dictionaries(st.text(max_size=3), st.none() | st.floats(allow_nan=False), max_size=3),
        "point": st.none()
        | st.fixed_dictionaries({"a": st.none() | st.integers(-(2**31), 2**31 - 1)}),
    }
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(NESTED_ROW, max_size=6), min_size=1, max_size=3))
def test_what_iceberg_sink_kept_reads_back_equal_nulls_in_nested_types_included(
    batches: list[list[dict[str, Any]]],
) -> None:
    """Null lists of structs, null structs in lists, null map values: as IcebergSink wrote them."""
    warehouse = Path(tempfile.mkdtemp(prefix="iceberg-source-", dir=FAST_TMP))
    try:
        sink = IcebergSink.local(warehouse, "ns.nested", schema=NESTED)
        written = []
        for index, batch in enumerate(batches):
            records = [
                {
                    **row,
                    "id": index * 100 + n,
                    "props": None if row["props"] is None else list(row["props"].items()),
                }
                for n, row in enumerate(batch)
            ]
            written += records
            committable = stage(
                sink, [pa.RecordBatch.from_pylist(records, schema=NESTED_ARROW)], job_id=f"j{index}"
            )
            commit_with_retries(sink.create_committer(None), [committable], policy=NO_WAIT)  # type: ignore[arg-type]
        source = IcebergSource.local(warehouse, "ns.nested", batch_rows=4)
        assert source.get_produced_type() == NESTED_ARROW
        assert by_id(read_all(source)) == by_id(written)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def test_columns_are_matched_by_field_id_after_renames_adds_and_widening(tmp_path: Path) -> None:
    catalog = local_catalog(tmp_path)
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "n", IntegerType()),
        NestedField(3, "s", StructType(NestedField(4, "a", StringType()))),
    )
    table = catalog.create_table("ns.evolving", schema=schema)
    table.append(
        pa.Table.from_pylist(
            [{"id": 1, "n": 5, "s": {"a": "x"}}, {"id": 2, "n": None, "s": None}],
            schema=pa.schema(
                [
                    pa.field("id", pa.int64(), nullable=False),
                    ("n", pa.int32()),
                    ("s", pa.struct([("a", pa.string())])),
                ]
            ),
        )
    )
    with table.update_schema() as update:
        update.update_column("n", LongType())
    with table.update_schema() as update:
        update.rename_column("n", "count")
        update.rename_column("s.a", "alpha")
        update.add_column(("s", "b"), LongType())
        update.add_column("added", StringType())
        update.rename_column("id", "key")
    table = catalog.load_table("ns.evolving")
    assert by_key(read_all(IcebergSource(catalog, "ns.evolving"))) == [
        {"key": 1, "count": 5, "s": {"alpha": "x", "b": None}, "added": None},
        {"key": 2, "count": None, "s": None, "added": None},
    ]
    projected = IcebergSource(
        catalog, "ns.evolving", selected_fields=["count"], row_filter="key > 1"
    )
    assert projected.get_produced_type() == pa.schema([("count", pa.int64())])
    assert read_all(projected) == [{"count": None}]


def by_key(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: r["key"])


def test_snapshot_time_ref_filter_and_projection_are_honoured(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    first = append(table, flat_rows(0, 10))
    moment = dt.datetime.now(dt.UTC)
    table.manage_snapshots().create_tag(first, "v1").commit()
    append(table, flat_rows(10, 10))
    catalog = local_catalog(tmp_path)
    assert by_id(read_all(IcebergSource(catalog, "ns.t"))) == flat_rows(0, 20)
    for pinned in (
        IcebergSource(catalog, "ns.t", snapshot_id=first),
        IcebergSource(catalog, "ns.t", as_of=moment),
        IcebergSource(catalog, "ns.t", ref="v1"),
    ):
        assert by_id(read_all(pinned)) == flat_rows(0, 10)
    filtered = IcebergSource(
        catalog, "ns.t", row_filter="id >= 15 and key = 'k1'", selected_fields=["id"]
    )
    assert filtered.get_produced_type() == pa.schema([pa.field("id", pa.int64(), nullable=False)])
    assert sorted(r["id"] for r in read_all(filtered)) == [16, 19]
    with pytest.raises(SinkConfigurationError, match="no snapshot_id 42"):
        IcebergSource(catalog, "ns.t", snapshot_id=42)
    with pytest.raises(SinkConfigurationError, match="at most one"):
        IcebergSource(catalog, "ns.t", snapshot_id=first, ref="v1")
    with pytest.raises(SinkConfigurationError, match="does not exist"):
        IcebergSource(catalog, "ns.missing")
    with pytest.raises(SinkConfigurationError, match="nope"):
        IcebergSource(catalog, "ns.t", selected_fields=["nope"])
    source = cloudpickle.loads(cloudpickle.dumps(filtered))
    assert sorted(r["id"] for r in read_all(source)) == [16, 19]


def test_position_deletes_are_applied_and_a_restored_split_resumes_after_them(
    tmp_path: Path,
) -> None:
    """A v2 position-delete file (pyiceberg 0.12 writes none: written here as the spec says)."""
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 30))
    (task,) = table.scan().plan_files()
    data_path = task.file.file_path
    deletes = tmp_path / "deletes.parquet"
    delete_schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    pq.write_table(
        pa.table(
            {"file_path": [data_path] * 4 + ["file:///other.parquet"], "pos": [0, 4, 17, 29, 1]},
            schema=delete_schema,
        ),
        deletes,
    )
    source = IcebergSource(local_catalog(tmp_path), "ns.t", batch_rows=4, row_filter="id >= 2")
    split = IcebergSourceSplit(data_path, 30, 0, 0, position_deletes=(deletes.as_uri(),))
    kept = [r for r in flat_rows(0, 30) if r["id"] not in (0, 1, 4, 17, 29)]
    assert [row for batch in source._read(split) for row in batch.to_pylist()] == kept
    resumed = [row for batch in source._read(split.at(10)) for row in batch.to_pylist()]
    assert resumed == kept[10:]


def test_a_restored_split_skips_exactly_what_was_emitted(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 40))
    source = IcebergSource(local_catalog(tmp_path), "ns.t", batch_rows=3)
    (task,) = table.scan().plan_files()
    split = IcebergSourceSplit(task.file.file_path, 40, 0, 0).at(7)
    rows = [row for batch in source._read(split) for row in batch.to_pylist()]
    assert rows == flat_rows(7, 33)


def test_a_stream_reads_each_new_append_once_and_refuses_or_skips_overwrites(
    tmp_path: Path,
) -> None:
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 5))
    catalog = local_catalog(tmp_path)
    stream = IcebergSource(catalog, "ns.t").monitor_continuously(1)
    assert stream.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    engine = LocalSourceEngine(stream, 2)
    engine.run(until=lambda e: len(e.committed) >= 5, checkpoint_every=2)
    append(table, flat_rows(5, 5))
    append(table, flat_rows(10, 5))
    engine.run(until=lambda e: len(e.committed) >= 15, checkpoint_every=2)
    checkpoint = engine.checkpoint()
    engine.close()
    append(table, flat_rows(15, 5))
    restored = LocalSourceEngine(stream, 3, checkpoint=checkpoint)
    restored.run(until=lambda e: len(e.committed) >= 5, checkpoint_every=2)
    restored.run(until=lambda e: e.clock_ms >= 4000, checkpoint_every=2, max_steps=2000)
    restored.checkpoint()
    seen = [dict(r.record) for r in engine.committed + restored.committed]
    assert by_id(seen) == flat_rows(0, 20)  # every row once, across the restore
    restored.close()

    before = len(table.snapshots())
    table.overwrite(pa.Table.from_pylist(flat_rows(100, 2), schema=FLAT_ARROW))
    append(table, flat_rows(200, 2))
    operations = [s.summary.operation.value for s in table.snapshots()[before:]]
    # pyiceberg's overwrite: a 'delete' of the old rows, then an 'append' of the new ones
    assert operations == ["delete", "append", "append"]
    refused = LocalSourceEngine(stream, 1, checkpoint=checkpoint)
    with pytest.raises(IcebergSourceError, match=r"snapshot \d+ of 'ns.t' is '(overwrite|delete)'"):
        refused.run(checkpoint_every=2, max_steps=200)
    skipping = IcebergSource(catalog, "ns.t").monitor_continuously(1, skip_overwrites=True)
    engine = LocalSourceEngine(skipping, 1, checkpoint=checkpoint)
    engine.run(until=lambda e: len(e.committed) >= 9, checkpoint_every=2, max_steps=2000)
    ids = [15, 16, 17, 18, 19, 100, 101, 200, 201]
    assert sorted(r.record["id"] for r in engine.committed) == ids
    engine.close()


@pytest.mark.parametrize(
    ("start", "first"), [("earliest", 0), ("latest", 5), ("table", 0), ("snapshot", 5)]
)
def test_a_stream_starts_where_asked(tmp_path: Path, start: str, first: int) -> None:
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 5))
    second = append(table, flat_rows(5, 5))
    point: Any = second if start == "snapshot" else start
    stream = IcebergSource(local_catalog(tmp_path), "ns.t").monitor_continuously(1, start=point)
    engine = LocalSourceEngine(stream, 1)
    engine.run(until=lambda e: len(e.committed) >= 10 - first, checkpoint_every=2, max_steps=2000)
    append(table, flat_rows(10, 2))
    engine.run(until=lambda e: len(e.committed) >= 12 - first, checkpoint_every=2, max_steps=2000)
    assert sorted(r.record["id"] for r in engine.committed) == list(range(first, 12))
    engine.close()


def test_expired_snapshots_past_the_position_are_a_clear_error(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    first = append(table, flat_rows(0, 3))
    catalog = local_catalog(tmp_path)
    stream = IcebergSource(catalog, "ns.t").monitor_continuously(1)
    engine = LocalSourceEngine(stream, 1)
    engine.run(until=lambda e: len(e.committed) >= 3, checkpoint_every=2)
    checkpoint = engine.checkpoint()
    engine.close()
    second = append(table, flat_rows(3, 3))
    append(table, flat_rows(6, 3))
    table.maintenance.expire_snapshots().by_ids([first, second]).commit()
    restored = LocalSourceEngine(stream, 1, checkpoint=checkpoint)
    with pytest.raises(
        IcebergSourceError, match=f"snapshot {first}, where the source stopped, was expired"
    ) as raised:
        restored.run(max_steps=200)
    assert raised.value.snapshot_id == first


def test_unread_appends_expired_after_a_kept_position_are_named_as_expired(
    tmp_path: Path,
) -> None:
    """pyiceberg's expiry clears the parent id of the snapshot after an expired one: the
    position is kept but cut off, which is expiry (appends lost unread), not a rollback."""
    table = flat_table(tmp_path)
    first = append(table, flat_rows(0, 3))
    stream = IcebergSource(local_catalog(tmp_path), "ns.t").monitor_continuously(1)
    engine = LocalSourceEngine(stream, 1)
    engine.run(until=lambda e: len(e.committed) >= 3, checkpoint_every=2)
    checkpoint = engine.checkpoint()
    engine.close()
    second = append(table, flat_rows(3, 3))
    append(table, flat_rows(6, 3))
    table.maintenance.expire_snapshots().by_ids([second]).commit()
    restored = LocalSourceEngine(stream, 1, checkpoint=checkpoint)
    with pytest.raises(
        IcebergSourceError, match=f"snapshot {first}, where the source stopped, is kept, but "
    ) as raised:
        restored.run(max_steps=200)
    assert raised.value.snapshot_id == first
    assert "rolled back" not in str(raised.value)


def test_a_missing_ref_is_named(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="has no ref \\(tag or branch\\) 'nope'"):
        IcebergSource(local_catalog(tmp_path), "ns.t", ref="nope")


def test_bad_stream_arguments_are_named(tmp_path: Path) -> None:
    flat_table(tmp_path)
    source = IcebergSource(local_catalog(tmp_path), "ns.t")
    with pytest.raises(SinkConfigurationError, match="interval"):
        source.monitor_continuously(0)
    with pytest.raises(SinkConfigurationError, match="start must be one of"):
        source.monitor_continuously(1, start="newest")  # type: ignore[arg-type]
    with pytest.raises(SinkConfigurationError, match="timezone-aware"):
        source.monitor_continuously(1, start=dt.datetime(2024, 1, 1))
    table = local_catalog(tmp_path).load_table("ns.t")
    pinned = IcebergSource(
        local_catalog(tmp_path), "ns.t", snapshot_id=append(table, flat_rows(0, 1))
    )
    with pytest.raises(SinkConfigurationError, match="drop snapshot_id"):
        pinned.monitor_continuously(1)
    with pytest.raises(SinkConfigurationError, match="pyiceberg Catalog"):
        IcebergSource("catalog", "ns.t")  # type: ignore[arg-type]


def test_equality_deletes_and_non_parquet_files_are_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    """pyiceberg 0.12 writes neither: the planned task is rebuilt with such a delete file."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import FileScanTask

    table = flat_table(tmp_path)
    snapshot = append(table, flat_rows(0, 3))
    (task,) = table.scan().plan_files()
    source = IcebergSource(local_catalog(tmp_path), "ns.t")
    equality = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path="file:///warehouse/eq-deletes.parquet",
        file_format=FileFormat.PARQUET,
        record_count=1,
        file_size_in_bytes=10,
    )
    with pytest.raises(
        IcebergSourceError, match=r"equality-delete file .*eq-deletes\.parquet"
    ) as err:
        source._split(FileScanTask(task.file, {equality}), snapshot)
    assert err.value.snapshot_id == snapshot
    orc = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="file:///warehouse/data.orc",
        file_format=FileFormat.ORC,
        record_count=1,
        file_size_in_bytes=10,
    )
    with pytest.raises(IcebergSourceError, match=r"data\.orc of 'ns\.t' is ORC"):
        source._split(FileScanTask(orc), snapshot)


def test_spark_options_make_the_same_source(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 6))
    source = iceberg_source_from_options(
        table="ns.t", warehouse=str(tmp_path), row_filter="id > 2", selected_fields="id, key"
    )
    assert source.get_produced_type().names == ["id", "key"]
    assert sorted(r["id"] for r in read_all(source)) == [3, 4, 5]
    stream = iceberg_source_from_options(
        table="ns.t", warehouse=str(tmp_path), monitor_interval="2", start="latest"
    )
    assert (stream.monitor_interval, stream.start) == (2.0, "latest")
    for options, message in [
        ({}, "needs the 'table' option"),
        ({"table": "ns.t"}, "needs a catalog"),
        ({"table": "ns.t", "warehouse": str(tmp_path), "start": "latest"}, "for a stream"),
        ({"table": "ns.t", "warehouse": str(tmp_path), "bogus": "1"}, "does not know"),
        (
            {"table": "ns.t", "warehouse": str(tmp_path), "monitor_interval": "1", "start": "x"},
            "'start' option",
        ),
    ]:
        with pytest.raises(SinkConfigurationError, match=message):
            iceberg_source_from_options(**options)


def test_a_record_limit_cuts_data_files_after_their_position_deletes(tmp_path: Path) -> None:
    """``maxRecordsPerTrigger`` as the engine-neutral coordinator applies it: each epoch holds at
    most its limit, a restart replays the same rows, every row once; a data file with position
    deletes is counted after them (its delete files read on the driver, only for a cut)."""
    from reference_sinks._row_cut import COUNT_WHEN_CUT
    from sinkv2.runtime import (
        ReadLimit,
        SourceEpochCoordinator,
        SqliteCommitStateStore,
        read_epoch_slice,
    )

    catalog = local_catalog(tmp_path)
    catalog.create_namespace_if_not_exists("ns")  # row groups of 2: a cut's rest skips them
    table = catalog.create_table(
        "ns.t", schema=FLAT, properties={"write.parquet.row-group-limit": "2"}
    )
    for start, count in ((0, 9), (9, 1), (10, 6)):
        append(table, flat_rows(start, count))
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")

    def coordinator() -> tuple[IcebergSource, SourceEpochCoordinator]:
        source = IcebergSource(local_catalog(tmp_path), "ns.t", batch_rows=2)
        return source, SourceEpochCoordinator(source, store, "t", parallelism=2)

    def ids(source: IcebergSource, run: SourceEpochCoordinator, epoch: int) -> list[int]:
        schema = source.get_produced_type()
        return [
            row["id"]
            for piece in run.slices(epoch)
            for batch in read_epoch_slice(source, schema, piece)
            for row in batch.to_pylist()
        ]

    source, run = coordinator()
    epoch, seen = run.initial_epoch(), []
    for limit in (4, 4, 3, 4, 4, 4, 4):
        end = run.next_epoch(epoch, ReadLimit(max_records=limit))
        if end == epoch:
            break
        got = ids(source, run, end)
        assert 0 < len(got) <= limit
        if len(seen) == 1:  # a restart: the epoch read last is read the same again
            run.close()
            source, run = coordinator()
            assert ids(source, run, end) == got
        seen.append(got)
        epoch = end
    run.close()
    assert sorted(i for got in seen for i in got) == list(range(16))
    assert len(seen) == 5  # 16 rows, at most 4 (once 3) an epoch

    data_path = next(iter(file_rows(table)))
    nine = next(p for p, rows in file_rows(table).items() if len(rows) == 9)
    deletes = tmp_path / "deletes.parquet"
    delete_schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    pq.write_table(
        pa.table({"file_path": [nine, nine, data_path], "pos": [1, 5, 40]}, schema=delete_schema),
        deletes,
    )
    split = IcebergSourceSplit(nine, 9, 0, 0, position_deletes=(deletes.as_uri(),))
    nine_ids = [row["id"] for row in file_rows(table)[nine]]
    kept = [i for position, i in enumerate(nine_ids) if position not in (1, 5)]
    assert pq.ParquetFile(nine.removeprefix("file://")).metadata.num_row_groups == 5
    source = IcebergSource(local_catalog(tmp_path), "ns.t", batch_rows=2)
    assert source.end_positions([split, split.at(0).until(None, 7)]) == [COUNT_WHEN_CUT, 7]
    head = source.cut_split(split, COUNT_WHEN_CUT, 4)
    assert (head.records, head.rest) == (4, split.at(4).until(None, 7))
    assert head.read is not None
    assert head.rest is not None
    assert [r["id"] for b in source._read(head.read) for r in b.to_pylist()] == kept[:4]
    last = source.cut_split(head.rest, 7, 4)
    assert (last.records, last.rest) == (3, None)
    assert last.read is not None
    assert [r["id"] for b in source._read(last.read) for r in b.to_pylist()] == kept[4:]
    assert "stops at 4" in getattr(source.native_read([head.read]), "reason", "")
    filtered = IcebergSource(local_catalog(tmp_path), "ns.t", row_filter="id >= 2")
    assert filtered.end_positions([split]) == [None]  # not known before the read: whole
    # said before any split exists, for the engine's warning at the start of a query
    assert isinstance(filtered, SupportsUncountedSplits)
    assert source.uncounted_splits() is None
    assert "row_filter 'id >= 2'" in (filtered.uncounted_splits() or "")
    assert (
        IcebergSource(local_catalog(tmp_path), "ns.t", row_filter="true").uncounted_splits() is None
    )
