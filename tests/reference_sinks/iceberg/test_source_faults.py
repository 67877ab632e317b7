"""IcebergSource against what pyiceberg commits: deletes, expired history, filters, bad input.

No Spark. Each test builds its tables with pyiceberg on the embedded `local_catalog`
and compares the source with pyiceberg's own scan (and a filter applied here).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import EMPTY_DICT, Record
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from reference_sinks.iceberg import (
    IcebergSource,
    IcebergSourceError,
    iceberg_source_from_options,
    local_catalog,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.testing import LocalSourceEngine
from tests.reference_sinks.iceberg.test_source import (
    FLAT_ARROW,
    append,
    by_id,
    flat_rows,
    flat_table,
    read_all,
)

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
    ]
)


def commit_delete_file(table: Any, path: Path, content: DataFileContent, rows: int) -> int:
    """Commit a delete file as pyiceberg can: a ``fast_append`` (an 'append' snapshot)."""
    delete = DataFile.from_args(
        content=content,
        file_path=path.as_uri(),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=path.stat().st_size,
        spec_id=table.metadata.default_spec_id,
        equality_ids=[1] if content == DataFileContent.EQUALITY_DELETES else None,
    )
    with (
        table.transaction() as transaction,
        transaction.update_snapshot().fast_append() as snapshot,
    ):
        snapshot.append_data_file(delete)
    return int(table.current_snapshot().snapshot_id)


def stream_until(engine: LocalSourceEngine, rows: int) -> None:
    engine.run(until=lambda e: len(e.committed) >= rows, checkpoint_every=2, max_steps=2000)


def test_delete_files_pyiceberg_commits_are_applied_or_refused_never_ignored(
    tmp_path: Path,
) -> None:
    """A position-delete file is applied by a bounded read; committed as an 'append', a stream
    refuses it (or skips it when asked); an equality-delete file is refused by both, named."""
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 10))
    (task,) = table.scan().plan_files()
    catalog = local_catalog(tmp_path)
    stream = IcebergSource(catalog, "ns.t").monitor_continuously(1)
    engine = LocalSourceEngine(stream, 1)
    stream_until(engine, 10)
    checkpoint = engine.checkpoint()
    engine.close()

    positions = tmp_path / "pos-deletes.parquet"
    pq.write_table(
        pa.table(
            {"file_path": [task.file.file_path] * 3, "pos": [0, 3, 9]}, POSITION_DELETE_SCHEMA
        ),
        positions,
    )
    deleting = commit_delete_file(table, positions, DataFileContent.POSITION_DELETES, 3)
    append(table, flat_rows(10, 2))
    kept = [r for r in flat_rows(0, 12) if r["id"] not in (0, 3, 9)]
    assert by_id(table.scan().to_arrow().to_pylist()) == kept  # pyiceberg applies it too
    assert by_id(read_all(IcebergSource(catalog, "ns.t"))) == kept

    refused = LocalSourceEngine(stream, 1, checkpoint=checkpoint)
    with pytest.raises(IcebergSourceError, match=f"snapshot {deleting} .* adds 1 delete") as err:
        refused.run(max_steps=200)
    assert err.value.snapshot_id == deleting
    skipping = IcebergSource(catalog, "ns.t").monitor_continuously(1, skip_overwrites=True)
    engine = LocalSourceEngine(skipping, 1, checkpoint=checkpoint)
    stream_until(engine, 2)
    engine.run(until=lambda e: e.clock_ms >= 3000, max_steps=2000)
    assert sorted(r.record["id"] for r in engine.committed) == [10, 11]
    engine.close()

    equality = tmp_path / "eq-deletes.parquet"
    pq.write_table(
        pa.table(
            {"id": [5]},
            pa.schema([pa.field("id", pa.int64(), False, {b"PARQUET:field_id": b"1"})]),
        ),
        equality,
    )
    eq_snapshot = commit_delete_file(table, equality, DataFileContent.EQUALITY_DELETES, 1)
    with pytest.raises(
        IcebergSourceError,
        match=r"equality-delete file .*eq-deletes\.parquet .*it deletes rows of file:.*/data/",
    ) as err:
        read_all(IcebergSource(catalog, "ns.t"))
    assert err.value.snapshot_id == eq_snapshot
    pinned = IcebergSource(catalog, "ns.t", snapshot_id=deleting)  # before the equality deletes
    assert by_id(read_all(pinned)) == [r for r in kept if r["id"] < 10]


class _ReplaceFiles(_OverwriteFiles):
    """A compaction's commit: pyiceberg 0.12 summarises appends, overwrites and deletes only."""

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        return Summary(Operation.REPLACE, **summary.additional_properties)


def test_replace_snapshots_are_skipped_and_every_append_is_read_once(tmp_path: Path) -> None:
    """A compaction ('replace': the same rows in another file) adds nothing to a stream."""
    table = flat_table(tmp_path)
    append(table, flat_rows(0, 4))
    append(table, flat_rows(4, 4))
    catalog = local_catalog(tmp_path)
    stream = IcebergSource(catalog, "ns.t").monitor_continuously(1, start="earliest")
    engine = LocalSourceEngine(stream, 2)
    stream_until(engine, 8)
    checkpoint = engine.checkpoint()
    engine.close()
    compacted = tmp_path / "compacted.parquet"
    pq.write_table(table.scan().to_arrow(), compacted)
    with table.transaction() as transaction:
        rewrite = _ReplaceFiles(operation=Operation.OVERWRITE, transaction=transaction, io=table.io)
        for old in table.scan().plan_files():
            rewrite.delete_data_file(old.file)
        rewrite.append_data_file(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=compacted.as_uri(),
                file_format=FileFormat.PARQUET,
                partition=Record(),
                record_count=8,
                file_size_in_bytes=compacted.stat().st_size,
                spec_id=0,
            )
        )
        rewrite.commit()
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().summary.operation == Operation.REPLACE
    append(table, flat_rows(8, 3))
    restored = LocalSourceEngine(stream, 2, checkpoint=checkpoint)
    stream_until(restored, 3)
    restored.run(until=lambda e: e.clock_ms >= 3000, max_steps=2000)
    seen = [dict(r.record) for r in engine.committed + restored.committed]
    assert by_id(seen) == flat_rows(0, 11)
    restored.close()


def test_a_stream_from_a_time_starts_at_the_oldest_snapshot_at_or_after_it(
    tmp_path: Path,
) -> None:
    """Iceberg's INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP: inclusive; and when every snapshot kept
    is after the time but older ones were expired, a clear error naming the expired one."""
    table = flat_table(tmp_path)
    first = append(table, flat_rows(0, 2))
    second = append(table, flat_rows(2, 2))
    append(table, flat_rows(4, 2))
    catalog = local_catalog(tmp_path)
    at_second = dt.datetime.fromtimestamp(table.snapshot_by_id(second).timestamp_ms / 1000, dt.UTC)
    stream = IcebergSource(catalog, "ns.t").monitor_continuously(1, start=at_second)
    engine = LocalSourceEngine(stream, 1)
    stream_until(engine, 4)
    assert sorted(r.record["id"] for r in engine.committed) == [2, 3, 4, 5]
    engine.close()

    java_expired(table, first, "ns.expired")
    long_ago = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    stream = IcebergSource(catalog, "ns.expired").monitor_continuously(1, start=long_ago)
    with pytest.raises(IcebergSourceError, match=f"snapshot {first}, was expired") as err:
        LocalSourceEngine(stream, 1).run(max_steps=200)
    assert err.value.snapshot_id == first
    # what the message offers instead reads the snapshots kept
    engine = LocalSourceEngine(
        IcebergSource(catalog, "ns.expired").monitor_continuously(1, start="earliest"), 1
    )
    stream_until(engine, 4)
    assert sorted(r.record["id"] for r in engine.committed) == [2, 3, 4, 5]
    engine.close()


def java_expired(table: Any, expired: int, name: str) -> None:
    """Register as ``name`` ``table`` with snapshot ``expired`` expired as Iceberg's Java
    library expires it: its child keeps the parent id (pyiceberg's expiry clears it)."""
    from pyiceberg.serializers import ToOutputFile

    metadata = table.metadata
    snapshots = [s for s in metadata.snapshots if s.snapshot_id != expired]
    log = [entry for entry in metadata.snapshot_log if entry.snapshot_id != expired]
    location = f"{table.location()}/metadata/java-expired.metadata.json"
    ToOutputFile.table_metadata(
        metadata.model_copy(update={"snapshots": snapshots, "snapshot_log": log}),
        table.io.new_output(location),
    )
    local_catalog(Path(table.location().removeprefix("file://")).parents[1]).register_table(
        name, location
    )


TYPED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "f", DoubleType()),
    NestedField(3, "ts", TimestamptzType()),
    NestedField(4, "local", TimestampType()),
    NestedField(5, "day", DateType()),
    NestedField(6, "price", DecimalType(9, 2)),
    NestedField(7, "s", StringType()),
    NestedField(8, "u", UUIDType()),
)
TYPED_ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("f", pa.float64()),
        ("ts", pa.timestamp("us", "UTC")),
        ("local", pa.timestamp("us")),
        ("day", pa.date32()),
        ("price", pa.decimal128(9, 2)),
        ("s", pa.string()),
        ("u", pa.uuid()),
    ]
)
T0 = dt.datetime(2024, 3, 30, tzinfo=dt.UTC)
UUIDS = [uuid.UUID(int=n * 7919) for n in range(5)]


def typed_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "f": None if i % 5 == 0 else math.nan if i % 5 == 1 else i / 2,
        "ts": None if i % 7 == 0 else T0 + dt.timedelta(hours=5 * i),
        "local": None if i % 6 == 0 else dt.datetime(2024, 3, 30) + dt.timedelta(hours=3 * i),
        "day": None if i % 4 == 0 else dt.date(2024, 1, 1) + dt.timedelta(days=i % 6),
        "price": None if i % 3 == 0 else decimal.Decimal(i * 25) / 100,
        "s": None if i % 3 == 1 else "ab"[i % 2] + str(i % 4),
        "u": None if i % 4 == 2 else UUIDS[i % 5].bytes,
    }


def sql_compare(value: Any, test: Any) -> bool:
    """A comparison as SQL filters rows: a null (or NaN, in an ordering) never passes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(test(value))


FILTERS: list[tuple[str, Any]] = [
    ("f > 2.0", lambda r: sql_compare(r["f"], lambda v: v > 2.0)),
    (
        "f <= 3.5 or f is nan",
        lambda r: r["f"] is not None and (math.isnan(r["f"]) or r["f"] <= 3.5),
    ),
    ("f is null", lambda r: r["f"] is None),
    ("not f is null and id < 9", lambda r: r["f"] is not None and r["id"] < 9),
    (
        "ts >= '2024-03-31T00:00:00+00:00'",
        lambda r: sql_compare(r["ts"], lambda v: v >= T0 + dt.timedelta(days=1)),
    ),
    (
        "local < '2024-03-31T06:00:00'",
        lambda r: sql_compare(r["local"], lambda v: v < dt.datetime(2024, 3, 31, 6)),
    ),
    ("day = '2024-01-03'", lambda r: r["day"] == dt.date(2024, 1, 3)),
    (
        "day > '2024-01-03' and price >= '1.50'",
        lambda r: (
            sql_compare(r["day"], lambda v: v > dt.date(2024, 1, 3))
            and sql_compare(r["price"], lambda v: v >= decimal.Decimal("1.5"))
        ),
    ),
    ("s in ('a0', 'b1')", lambda r: r["s"] in ("a0", "b1")),
    ("s like 'a%'", lambda r: sql_compare(r["s"], lambda v: v.startswith("a"))),
    ("s != 'a2'", lambda r: sql_compare(r["s"], lambda v: v != "a2")),
    ("not (id > 12 or s is null)", lambda r: not (r["id"] > 12 or r["s"] is None)),
]


@pytest.mark.parametrize(("expression", "keep"), FILTERS, ids=[f for f, _ in FILTERS])
def test_a_row_filter_gives_what_pyiceberg_and_the_filter_give(
    typed_table: Path, expression: str, keep: Any
) -> None:
    """Pushdown (partitions, column bounds) never changes the rows: the source's read
    equals pyiceberg's scan with the filter, and the rows the filter keeps (nulls and NaN
    in the filtered columns; timestamps with and without zone, dates, decimals, UUIDs)."""
    catalog = local_catalog(typed_table)
    source = IcebergSource(catalog, "ns.typed", row_filter=expression, selected_fields=["id", "s"])
    got = sorted(r["id"] for r in read_all(source, parallelism=1))
    table = catalog.load_table("ns.typed")
    assert got == sorted(table.scan(row_filter=expression).to_arrow()["id"].to_pylist())
    assert got == [i for i in range(24) if keep(typed_row(i))]


def test_a_filter_arrow_cannot_apply_fails_when_made_naming_it(typed_table: Path) -> None:
    """pyiceberg's Arrow filter compares a UUID column with nothing (its own scan fails too,
    reading); the source says so when it is made, and reads 'is null' on one."""
    catalog = local_catalog(typed_table)
    with pytest.raises(SinkConfigurationError, match=r"row_filter \"u = '0.*cannot be applied"):
        IcebergSource(catalog, "ns.typed", row_filter=f"u = '{UUIDS[2]}'")
    source = IcebergSource(catalog, "ns.typed", row_filter="u is null", selected_fields=["id"])
    got = sorted(r["id"] for r in read_all(source, parallelism=1))
    assert got == [i for i in range(24) if typed_row(i)["u"] is None]


@pytest.fixture(scope="module")
def typed_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 rows in 4 appends of a table partitioned by day then (evolved) unpartitioned."""
    warehouse = tmp_path_factory.mktemp("typed")
    catalog = local_catalog(warehouse)
    catalog.create_namespace("ns")
    table = catalog.create_table(
        "ns.typed",
        schema=TYPED,
        partition_spec=PartitionSpec(PartitionField(5, 1000, IdentityTransform(), "day")),
        properties={"write.parquet.row-group-limit": "3"},
    )
    for start in (0, 6):
        table.append(
            pa.Table.from_pylist([typed_row(i) for i in range(start, start + 6)], TYPED_ARROW)
        )
    with table.update_spec() as spec:
        spec.remove_field("day")
    for start in (12, 18):
        table.append(
            pa.Table.from_pylist([typed_row(i) for i in range(start, start + 6)], TYPED_ARROW)
        )
    return warehouse


def test_evolved_columns_and_files_of_another_column_order_read_by_field_id(
    tmp_path: Path,
) -> None:
    """int -> long, float -> double, renamed, dropped and added columns; a file added with
    its columns in another order (read through the name mapping); a null list<struct> in it
    stays null (written by pyarrow: pyiceberg 0.12's table.append writes it as [])."""
    catalog = local_catalog(tmp_path)
    catalog.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "n", IntegerType()),
        NestedField(3, "x", FloatType()),
        NestedField(4, "gone", StringType()),
        NestedField(
            5,
            "items",
            ListType(6, StructType(NestedField(7, "a", IntegerType())), element_required=False),
        ),
    )
    table = catalog.create_table("ns.e", schema=schema)
    items_type = pa.list_(pa.struct([("a", pa.int32())]))
    first = pa.Table.from_pylist(
        [
            {"id": 1, "n": 2**31 - 1, "x": 1.5, "gone": "g", "items": [{"a": None}]},
            {"id": 2, "n": None, "x": None, "gone": None, "items": [None, {"a": 3}]},
        ],
        pa.schema(
            [
                pa.field("id", pa.int64(), False),
                ("n", pa.int32()),
                ("x", pa.float32()),
                ("gone", pa.string()),
                ("items", items_type),
            ]
        ),
    )
    table.append(first)
    with table.update_schema() as update:
        update.update_column("n", LongType())
        update.update_column("x", DoubleType())
    with table.update_schema() as update:
        update.rename_column("n", "count")
        update.delete_column("gone")
    with table.update_schema() as update:
        update.add_column("gone", StringType())  # the same name, a new field id
    table = catalog.load_table("ns.e")
    reordered = tmp_path / "reordered.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"gone": "new", "x": 0.25, "items": None, "count": 2**40, "id": 3},
                {"gone": None, "x": None, "items": [], "count": None, "id": 4},
            ],
            pa.schema(
                [
                    ("gone", pa.string()),
                    ("x", pa.float64()),
                    ("items", items_type),
                    ("count", pa.int64()),
                    pa.field("id", pa.int64(), False),
                ]
            ),
        ),
        reordered,
    )
    table.add_files([reordered.as_uri()])
    source = IcebergSource(catalog, "ns.e", batch_rows=1)
    assert source.get_produced_type().names == ["id", "count", "x", "items", "gone"]
    expected = [
        {"id": 1, "count": 2**31 - 1, "x": 1.5, "items": [{"a": None}], "gone": None},
        {"id": 2, "count": None, "x": None, "items": [None, {"a": 3}], "gone": None},
        {"id": 3, "count": 2**40, "x": 0.25, "items": None, "gone": "new"},
        {"id": 4, "count": None, "x": None, "items": [], "gone": None},
    ]
    assert by_id(read_all(source)) == expected
    # the first file holds none of these columns (the old 'gone' has another id): null rows
    added_only = IcebergSource(catalog, "ns.e", selected_fields=["gone"])
    assert sorted(read_all(added_only), key=lambda r: r["gone"] is not None) == [
        {"gone": None}
    ] * 3 + [{"gone": "new"}]
    filtered = IcebergSource(catalog, "ns.e", row_filter="count > 5", selected_fields=["x"])
    assert sorted(r["x"] for r in read_all(filtered)) == [0.25, 1.5]


def test_bad_arguments_and_options_fail_when_made_naming_them(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    append(table, flat_rows(0, 3))
    catalog = local_catalog(tmp_path)
    where = {"table": "ns.t", "warehouse": str(tmp_path)}
    for make, message in [
        (
            lambda: IcebergSource(catalog, "ns.t", row_filter="id >> 3"),
            r"row_filter 'id >> 3' does not parse \(at character",
        ),
        (
            lambda: iceberg_source_from_options(**where, row_filter="id = = 1"),
            "row_filter 'id = = 1' does not parse",
        ),
        (
            lambda: IcebergSource(catalog, "ns.t", row_filter="nope > 1"),
            "row_filter 'nope > 1'.*nope",
        ),
        (lambda: IcebergSource(catalog, "ns.t", row_filter="id > 'x'"), "row_filter"),
        (lambda: IcebergSource(catalog, "ns.t", selected_fields=[]), "selected_fields is empty"),
        (
            lambda: iceberg_source_from_options(**where, selected_fields=" , "),
            "selected_fields is empty",
        ),
        (
            lambda: IcebergSource(catalog, "ns.t", selected_fields=["id", "nope"]),
            r"selected_fields \['id', 'nope'\].*nope",
        ),
        (lambda: IcebergSource(catalog, "ns.t").monitor_continuously(math.inf), "finite"),
        (lambda: IcebergSource(catalog, "ns.t").monitor_continuously(math.nan), "finite"),
        (
            lambda: iceberg_source_from_options(**where, monitor_interval="inf"),
            "'monitor_interval' option",
        ),
        (
            lambda: iceberg_source_from_options(**where, monitor_interval="0"),
            "'monitor_interval' option",
        ),
        (
            lambda: iceberg_source_from_options(
                **where, monitor_interval="1", start="2024-03-30T10:00:00"
            ),
            "'start' option .* with its zone",
        ),
        (lambda: iceberg_source_from_options(**where, as_of="2024-03-30"), "'as_of' option"),
        (
            lambda: IcebergSource(catalog, "ns.t", as_of=before),
            r"no snapshot current at \d{4}-.*as_of",
        ),
        (
            lambda: iceberg_source_from_options(**where, asof="x"),
            r"does not know the options \['asof'\]; it takes table, .*as_of",
        ),
        (
            lambda: iceberg_source_from_options(table="ns.t", **{"catalog.type": "bogus"}),
            r"catalog options \['catalog.type'\]",
        ),
        (lambda: IcebergSource(catalog, "nope.t"), "'nope.t' does not exist"),
        (lambda: IcebergSource(catalog, "ns..t"), "table 'ns..t' is not an Iceberg table name"),
    ]:
        with pytest.raises(SinkConfigurationError, match=message):
            make()
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    assert by_id(read_all(iceberg_source_from_options(**where, as_of=at))) == flat_rows(0, 3)
    assert FLAT_ARROW.names == ["id", "key", "value"]


def test_a_branch_is_read_bounded_and_followed_until_it_is_removed(tmp_path: Path) -> None:
    table = flat_table(tmp_path)
    first = append(table, flat_rows(0, 2))
    table.manage_snapshots().create_branch(first, "b").commit()
    table.append(pa.Table.from_pylist(flat_rows(2, 2), schema=FLAT_ARROW), branch="b")
    append(table, flat_rows(100, 1))  # on main only
    catalog = local_catalog(tmp_path)
    assert by_id(read_all(IcebergSource(catalog, "ns.t", ref="b"))) == flat_rows(0, 4)
    stream = IcebergSource(catalog, "ns.t", ref="b").monitor_continuously(1)
    engine = LocalSourceEngine(stream, 1)
    stream_until(engine, 4)
    table = catalog.load_table("ns.t")
    table.append(pa.Table.from_pylist(flat_rows(4, 1), schema=FLAT_ARROW), branch="b")
    stream_until(engine, 5)
    assert by_id([dict(r.record) for r in engine.committed]) == flat_rows(0, 5)
    on_branch = table.snapshot_by_name("b").snapshot_id
    main = IcebergSource(catalog, "ns.t").monitor_continuously(1, start=on_branch)
    with pytest.raises(IcebergSourceError, match=f"snapshot {on_branch} .* not an ancestor of"):
        LocalSourceEngine(main, 1).run(max_steps=200)
    table.manage_snapshots().remove_branch("b").commit()
    with pytest.raises(IcebergSourceError, match="follows the ref 'b', which the table no longer"):
        engine.run(max_steps=200)
    engine.close()
    main_engine = LocalSourceEngine(IcebergSource(catalog, "ns.t").monitor_continuously(1), 1)
    stream_until(main_engine, 3)
    catalog.drop_table("ns.t")
    with pytest.raises(IcebergSourceError, match=r"'ns\.t' no longer exists in its catalog"):
        main_engine.run(max_steps=200)
    main_engine.close()


def test_identity_partition_columns_a_file_does_not_hold_read_as_its_partition_values(
    tmp_path: Path,
) -> None:
    """Iceberg's column projection: a file imported with its partition values in its path only
    reads them from its manifest entry (as pyiceberg's reader does), filters included."""
    table = flat_table(tmp_path)
    catalog = local_catalog(tmp_path)
    with table.update_schema() as update:
        update.add_column("day", DateType())
    with table.update_spec() as spec:
        spec.add_field("key", IdentityTransform(), "key")
        spec.add_field("day", IdentityTransform(), "day")
    table = catalog.load_table("ns.t")
    imported = tmp_path / "imported-k9" / "part-0.parquet"
    imported.parent.mkdir()
    pq.write_table(
        pa.table(
            {"id": [50, 51], "value": [1.5, None]},
            pa.schema(
                [
                    pa.field("id", pa.int64(), False, {b"PARQUET:field_id": b"1"}),
                    pa.field("value", pa.float64(), True, {b"PARQUET:field_id": b"3"}),
                ]
            ),
        ),
        imported,
    )
    day = dt.date(2024, 3, 30)
    data = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=imported.as_uri(),
        file_format=FileFormat.PARQUET,
        partition=Record("k9", (day - dt.date(1970, 1, 1)).days),
        record_count=2,
        file_size_in_bytes=imported.stat().st_size,
        spec_id=table.metadata.default_spec_id,
    )
    with (
        table.transaction() as transaction,
        transaction.update_snapshot().fast_append() as snapshot,
    ):
        snapshot.append_data_file(data)
    table = catalog.load_table("ns.t")
    expected = [
        {"id": 50, "key": "k9", "value": 1.5, "day": day},
        {"id": 51, "key": "k9", "value": None, "day": day},
    ]
    assert by_id(table.scan().to_arrow().to_pylist()) == expected  # pyiceberg reads them so
    source = IcebergSource(catalog, "ns.t")
    assert by_id(read_all(source)) == expected
    (split,) = source._plan_snapshot(table, table.current_snapshot().snapshot_id)
    assert len(split.identity) == 2  # key and day, as checkpoints carry them:
    serializer = source.get_split_serializer()
    assert serializer.deserialize(serializer.get_version(), serializer.serialize(split)) == split
    assert "identity-partition value" in getattr(source.native_read([split]), "reason", "")
    filtered = IcebergSource(
        catalog, "ns.t", row_filter="key = 'k9' and value > 1", selected_fields=["id", "day"]
    )
    assert read_all(filtered) == [{"id": 50, "day": day}]
