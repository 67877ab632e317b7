"""IcebergSink through SinkTopologyTranslator on the shared local Spark (local[2,4]).

Tests taking the ``native`` fixture run on both paths: the sink's own writers
(``native_write=False``) and Spark's Parquet writer (``native_write=True``).
"""

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from reference_sinks.iceberg import CHECKPOINT_ID_PROPERTY, COMMIT_ID_PROPERTY, SINK_ID_PROPERTY
from sinkv2 import DeliveryGuarantee
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStatus
from sinkv2_spark.testing import check_sink_on_spark
from tests.reference_sinks.iceberg.faulty import FaultyIcebergSink
from tests.reference_sinks.iceberg.tables import make_sink, read_back, rows, snapshots_of
from tests.reference_sinks.iceberg.test_contract import fresh_sink


def frame(spark, start: int, count: int, partitions: int = 4):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(pa.Table.from_batches([rows(start, count)])).repartition(
        partitions
    )


def expected(start: int, count: int) -> list[dict[str, object]]:
    return rows(start, count).to_pylist()


def data_files(warehouse: Path) -> list[Path]:
    return sorted(warehouse.rglob("*.parquet"))


@pytest.fixture(params=[False, True], ids=["sink-writers", "native"])
def native(request):  # type: ignore[no-untyped-def]
    """IcebergSink's ``native_write``: its own writers, or Spark's Parquet writer."""
    return request.param


def test_unpartitioned_reads_back_exactly_and_a_rerun_is_a_no_op(
    spark, translator, tmp_path, native
):  # type: ignore[no-untyped-def]
    sink = make_sink(tmp_path, sink_id="events", native_write=native)
    result = translator.apply(frame(spark, 0, 3000), sink, sink_id="events", checkpoint_id=1)
    assert result.status is CommitStatus.COMMITTED
    assert result.native_write is native
    assert result.records_written == 3000
    assert read_back(sink) == expected(0, 3000)
    [summary] = snapshots_of(sink)
    assert summary[CHECKPOINT_ID_PROPERTY] == "1"
    assert summary[SINK_ID_PROPERTY] == "events"
    assert int(summary["added-data-files"]) == result.subtasks == 4

    again = translator.apply(frame(spark, 0, 3000), sink, sink_id="events", checkpoint_id=1)
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert len(snapshots_of(sink)) == 1
    assert read_back(sink) == expected(0, 3000)


def test_batch_runs_without_checkpoint_id_each_append_once(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    sink = make_sink(tmp_path)
    translator.apply(frame(spark, 0, 500, partitions=2), sink, sink_id="batch")
    translator.apply(frame(spark, 500, 500, partitions=2), sink, sink_id="batch")
    summaries = snapshots_of(sink)
    assert len(summaries) == 2
    assert all(CHECKPOINT_ID_PROPERTY not in s for s in summaries)
    assert summaries[0][COMMIT_ID_PROPERTY] != summaries[1][COMMIT_ID_PROPERTY]
    assert read_back(sink) == expected(0, 1000)


def test_partitioned_identity_and_day_one_file_per_partition(spark, translator, tmp_path, native):  # type: ignore[no-untyped-def]
    sink = make_sink(tmp_path, partitioned=True, write_parallelism=3, native_write=native)
    result = translator.apply(frame(spark, 0, 4000), sink, sink_id="parts", checkpoint_id=7)
    assert result.native_write is native
    assert result.subtasks == 3
    assert read_back(sink) == expected(0, 4000)
    table = sink.load_table()
    partitions = table.inspect.partitions().to_pylist()
    files = data_files(tmp_path)
    assert len(files) == len(partitions)  # the pre-write topology kept each partition together
    assert sum(p["record_count"] for p in partitions) == 4000
    k2 = table.scan(row_filter="key == 'k2'").to_arrow().sort_by("id").to_pylist()
    assert k2 == [row for row in expected(0, 4000) if row["key"] == "k2"]
    keys = {"k0", "k1", "k2", "null"}
    if native:  # Spark's partitionBy of the derived column; a string carries a prefix
        keys = {"vk0", "vk1", "vk2", "__HIVE_DEFAULT_PARTITION__"}
    key = "key_p0" if native else "key"
    assert {Path(f).parent.parent.name for f in files} == {f"{key}={k}" for k in keys}


def test_a_crash_between_commit_and_recording_it_adds_no_duplicate(
    spark, translator, tmp_path, native
):  # type: ignore[no-untyped-def]
    sink = make_sink(tmp_path, native_write=native)

    def crash(event: str, epoch: int) -> None:
        if event == "committer-finished":
            raise SystemExit("driver killed after the Iceberg commit")

    with pytest.raises(SystemExit):
        translator.apply(
            frame(spark, 0, 1000), sink, sink_id="crash", checkpoint_id=3, on_stage=crash
        )
    assert len(snapshots_of(sink)) == 1  # committed in Iceberg, still pending in the store
    rerun = translator.apply(frame(spark, 0, 1000), sink, sink_id="crash", checkpoint_id=3)
    assert rerun.status is CommitStatus.RECOMMITTED
    assert (rerun.committed, rerun.already_committed) == (0, 1)
    assert len(snapshots_of(sink)) == 1
    assert read_back(sink) == expected(0, 1000)
    referenced = {Path(f["file_path"]).name for f in sink.load_table().inspect.files().to_pylist()}
    assert {f.name for f in data_files(tmp_path)} == referenced  # nothing else was left


def test_task_failures_still_give_exactly_the_input(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    inner = make_sink(tmp_path, partitioned=True, write_parallelism=4)
    failures = {
        (0, 0): "prepare_commit",
        (1, 0): "write",
        (1, 1): "prepare_commit",
        (3, 0): "write",
    }
    sink = FaultyIcebergSink(inner, failures)
    translator.apply(frame(spark, 0, 4000), sink, sink_id="faults", checkpoint_id=1)
    assert read_back(inner) == expected(0, 4000)
    table = inner.load_table()
    referenced = {Path(f["file_path"]).name for f in table.inspect.files().to_pylist()}
    assert {f.name for f in data_files(tmp_path)} == referenced  # losers' files are gone
    losers = {name.rsplit("-", 2)[0].split("-", 2)[2] for name in sink.removed}
    assert losers == {"00000", "00001", "00003"}  # the failed attempts had staged files


def test_a_schema_mismatch_fails_before_any_job(spark, translator, tmp_path):  # type: ignore[no-untyped-def]
    sink = make_sink(tmp_path)
    wrong = frame(spark, 0, 10).withColumnRenamed("value", "amount")
    with pytest.raises(
        SinkConfigurationError, match=r"missing \['value'\], unexpected \['amount'\]"
    ):
        translator.apply(wrong, sink, sink_id="schema", checkpoint_id=1)
    assert data_files(tmp_path) == []
    assert sink.load_table().current_snapshot() is None


def test_the_kit_s_spark_scenarios_with_random_task_failures(spark, tmp_path, native):  # type: ignore[no-untyped-def]
    data = spark.createDataFrame(
        pa.Table.from_batches([rows(0, 300)]).select(["id", "key", "value"])
    )
    check_sink_on_spark(
        spark,
        lambda: fresh_sink(native_write=native),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        data=data.repartition(3),
        expected=[{k: row[k] for k in ("id", "key", "value")} for row in rows(0, 300).to_pylist()],
        examples=3,
        # a failure mid-partition, one after everything was staged, and a second retry
        always=[{(0, 0): 5, (1, 0): 10_000, (1, 1): 0}],
    )


def test_the_pre_write_keys_are_iceberg_s_day_and_hour_in_any_session_zone(spark):  # type: ignore[no-untyped-def]
    from pyiceberg.partitioning import PartitionField
    from pyiceberg.transforms import DayTransform, HourTransform

    from reference_sinks.iceberg import IcebergSink
    from tests.reference_sinks.iceberg.tables import SCHEMA

    batch = rows(0, 48)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        frame = spark.createDataFrame(pa.Table.from_batches([batch]))
        keys = [
            IcebergSink._partition_column(SCHEMA, PartitionField(4, 1000, t, "k"))
            for t in (DayTransform(), HourTransform())
        ] + [IcebergSink._partition_column(SCHEMA, PartitionField(5, 1001, DayTransform(), "d"))]
        got = [tuple(row) for row in frame.orderBy("id").select(*keys).collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    micros = [int(r["ts"].timestamp() * 1_000_000) for r in batch.to_pylist()]
    ts_type = SCHEMA.find_field(4).field_type
    day = DayTransform().transform(ts_type)
    hour = HourTransform().transform(ts_type)
    date_day = DayTransform().transform(SCHEMA.find_field(5).field_type)
    days = [(r["day"] - dt.date(1970, 1, 1)).days for r in batch.to_pylist()]
    assert got == [(day(m), hour(m), date_day(d)) for m, d in zip(micros, days, strict=True)]
