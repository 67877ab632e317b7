"""IcebergSource's native read path: Spark's Parquet reader, by name or by field id.

One Spark test reads tables IcebergSink wrote with both of its writers (Spark's
Parquet writer, files without field ids; its own pyarrow writer, files with them),
after columns are renamed (top level and nested) and added, natively and through
the source's readers, and checks the two give the same schema and rows; another
reads a table of 33 data files and checks Spark listed them on the driver (no Spark
job, the session's listing threshold put back). The
fallbacks (a row filter, position deletes, a split past record 0, a widened type,
a rename over files without field ids) are checked without Spark: each gives a
reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import LongType, StringType

from reference_sinks.iceberg import IcebergSink, IcebergSource, local_catalog
from sinkv2 import SimpleVersionedSerialization
from sinkv2.runtime import CommitStatus, plan_bounded_read
from sinkv2.source import NativeRead, NativeReadUnavailable
from sinkv2_spark import from_source

N = 200


def frame(spark: Any) -> Any:
    """Nullable columns only (Spark's reader makes every column nullable), one nested."""
    return spark.range(N).selectExpr(
        "cast(id as bigint) as id",
        "case when id % 7 = 0 then null else concat('k', cast(id % 5 as string)) end as key",
        "cast(id as double) / 3 as value",
        "case when id % 6 = 0 then null else named_struct('a', nullif(cast(id as string), ''), "
        "'n', nullif(id, -1)) end as s",
        "case when id % 4 = 0 then null else array(named_struct('x', nullif(id, -1)), null) "
        "end as items",
    )


def splits(source: IcebergSource) -> list[Any]:
    plan = plan_bounded_read(source, 1)
    serializer = source.get_split_serializer()
    return [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
        for part in plan.splits
        for framed in part
    ]


def both(spark: Any, source: IcebergSource) -> tuple[pa.Schema, list[dict[str, Any]]]:
    """The native read's Arrow schema and rows by id; the Python path's are the same."""
    native = from_source(spark, source, parallelism=2, native_read=True).toArrow()
    python = from_source(spark, source, parallelism=2, native_read=False).toArrow()
    assert native.schema == python.schema == source.get_produced_type()
    rows = sorted(native.to_pylist(), key=lambda r: r["id"])
    assert rows == sorted(python.to_pylist(), key=lambda r: r["id"])
    return native.schema, rows


@pytest.mark.spark
def test_native_and_python_paths_agree_after_renames_and_adds_for_both_writers(
    spark: Any, translator: Any, tmp_path: Path
) -> None:
    df = frame(spark)
    schema = pa.schema([f.with_nullable(True) for f in df.limit(1).toArrow().schema])
    warehouse = tmp_path / "wh"
    for name, native_write in (("db.spark_files", True), ("db.arrow_files", False)):
        sink = IcebergSink.local(warehouse, name, schema=schema, native_write=native_write)
        result = translator.apply(df.repartition(2), sink, sink_id=name)
        assert result.status is CommitStatus.COMMITTED
        assert result.native_write is native_write
    catalog = local_catalog(warehouse)

    # an added column, then rows written by pyiceberg (with field ids) next to the old files
    for name in ("db.spark_files", "db.arrow_files"):
        table = catalog.load_table(name)
        with table.update_schema() as update:
            update.add_column("added", StringType())
            update.add_column(("s", "b"), LongType())
        table = catalog.load_table(name)
        more = pa.Table.from_pylist(
            [
                {"id": N + i, "key": "new", "added": f"a{i}", "s": {"a": "z", "n": i, "b": i}}
                for i in range(5)
            ],
            schema=table.schema().as_arrow(),
        )
        table.append(more)
        source = IcebergSource(catalog, name)
        answer = source.native_read(splits(source))
        assert isinstance(answer, NativeRead), answer
        assert answer.field_ids is None  # every file has the current names: read by name
        _, rows = both(spark, source)
        assert len(rows) == N + 5
        assert rows[0]["added"] is None
        assert rows[-1]["added"] == "a4"
        assert rows[1]["s"]["b"] is None
        assert rows[-1]["s"]["b"] == 4

    # renames: files with field ids are read by id; files without them fall back
    for name in ("db.spark_files", "db.arrow_files"):
        table = catalog.load_table(name)
        with table.update_schema() as update:
            update.rename_column("key", "label")
            update.rename_column("s.a", "alpha")
            update.rename_column("items.element.x", "ex")
    spark_files = IcebergSource(catalog, "db.spark_files")
    answer = spark_files.native_read(splits(spark_files))
    assert isinstance(answer, NativeReadUnavailable)
    assert "no Parquet field ids" in answer.reason
    arrow_files = IcebergSource(catalog, "db.arrow_files")
    answer = arrow_files.native_read(splits(arrow_files))
    assert isinstance(answer, NativeRead)
    assert answer.field_ids is not None
    native_schema, rows = both(spark, arrow_files)
    assert native_schema.names == ["id", "label", "value", "s", "items", "added"]
    first = rows[1]  # id 1: every value present
    assert first["label"] == "k1"
    assert first["s"]["alpha"] == "1"
    assert first["items"][0]["ex"] == 1
    assert rows[0]["s"] is None
    assert rows[0]["items"] is None
    assert sum(r["label"] is None for r in rows) == len(range(0, N, 7))
    assert spark.conf.get("spark.sql.parquet.fieldId.read.enabled") == "true"


def test_row_filters_deletes_positions_and_widened_types_fall_back_with_a_reason(
    tmp_path: Path,
) -> None:
    catalog = local_catalog(tmp_path)
    catalog.create_namespace("ns")
    table = catalog.create_table(
        "ns.t", schema=pa.schema([("id", pa.int64()), ("n", pa.int32()), ("k", pa.string())])
    )
    table.append(
        pa.Table.from_pylist(
            [{"id": i, "n": i, "k": "x"} for i in range(10)],
            schema=pa.schema([("id", pa.int64()), ("n", pa.int32()), ("k", pa.string())]),
        )
    )
    source = IcebergSource(catalog, "ns.t")
    planned = splits(source)
    assert isinstance(source.native_read(planned), NativeRead)
    filtered = IcebergSource(catalog, "ns.t", row_filter="id > 3")
    reason = filtered.native_read(splits(filtered))
    assert isinstance(reason, NativeReadUnavailable)
    assert "row_filter" in reason.reason
    moved = [planned[0].at(3)]
    reason = source.native_read(moved)
    assert isinstance(reason, NativeReadUnavailable)
    assert "record 3" in reason.reason
    deleted = [attrs.evolve(planned[0], position_deletes=("file:///tmp/deletes.parquet",))]
    reason = source.native_read(deleted)
    assert isinstance(reason, NativeReadUnavailable)
    assert "position-delete" in reason.reason
    with table.update_schema() as update:
        update.update_column("n", LongType())
    widened = IcebergSource(catalog, "ns.t")
    reason = widened.native_read(splits(widened))
    assert isinstance(reason, NativeReadUnavailable)
    assert "widen" in reason.reason
    assert isinstance(source.native_read([]), NativeRead)


@pytest.mark.spark
def test_a_table_of_many_files_is_listed_on_the_driver_without_a_spark_job(
    spark: Any, tmp_path: Path
) -> None:
    """Above 32 paths Spark would list the files with a job; the native read lists them itself."""
    catalog = local_catalog(tmp_path)
    catalog.create_namespace("ns")
    schema = pa.schema([("id", pa.int64()), ("k", pa.string())])
    table = catalog.create_table("ns.many", schema=schema)
    files = 33
    paths = []
    for part in range(files):  # one snapshot of 33 files (add_files: quicker than 33 appends)
        rows = [{"id": part * 10 + i, "k": f"f{part}"} for i in range(10)]
        paths.append(str(tmp_path / f"part-{part}.parquet"))
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), paths[-1])
    table.add_files(paths)
    source = IcebergSource(catalog, "ns.many")
    answer = source.native_read(splits(source))
    assert isinstance(answer, NativeRead)
    assert len(answer.paths) == files
    threshold = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(threshold, None)
    context = spark.sparkContext
    context.setJobGroup("iceberg-many-files", "from_source of 33 data files")
    try:
        df = from_source(spark, source, parallelism=2, native_read=True)
        listing_jobs = list(context.statusTracker().getJobIdsForGroup("iceberg-many-files"))
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    assert listing_jobs == []
    assert spark.conf.get(threshold, None) == before  # put back as it was
    (row,) = df.selectExpr("count(*) as n", "sum(id) as s", "count(distinct k) as f").collect()
    assert (row.n, row.s, row.f) == (files * 10, sum(range(files * 10)), files)
