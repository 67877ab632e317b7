"""FileSink on the native path: Spark's own writer stages the files, FileSink commits them.

The same promises as the Python path (`test_file_sink_spark.py`): Spark reads back
exactly the input, task failures (injected into the write's tasks by the kit, with
half-written attempt files) never lose or duplicate a row, a re-run with the same
checkpoint id writes nothing, and nothing stays in ``_staging/``. Plus what is
particular to it: when it is used and why not (``SinkResult``), and that what a dead
job's native write left - Spark's ``_temporary`` included - goes with the next run.
"""

import logging
import re
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from reference_sinks.files import CompactionPolicy, FileSink, RollingPolicy
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStatus
from tests.reference_sinks.files.test_file_sink_spark import (
    N,
    assert_exactly_the_input,
    frame,
    staged_files,
)

pytestmark = pytest.mark.spark

FAST = RollingPolicy(max_rows=200, max_bytes=None)


def native(out, fmt="parquet", **options):
    options.setdefault("rolling_policy", FAST)
    return FileSink(out, fmt, native_write=True, **options)


@pytest.mark.parametrize(
    ("fmt", "partition_by"),
    [("parquet", ("key",)), ("parquet", ()), ("jsonl", ("key",))],
    ids=["parquet-part", "parquet-flat", "jsonl-part"],
)
def test_spark_reads_back_exactly_the_input(spark, translator, tmp_path, fmt, partition_by):
    out = tmp_path / "out"
    result = translator.apply(
        frame(spark), native(out, fmt, partition_by=partition_by), sink_id="n"
    )
    assert result.status is CommitStatus.COMMITTED
    assert result.native_write
    assert result.native_write_unavailable is None
    assert result.records_written == N
    assert result.subtasks == 4
    assert_exactly_the_input(spark, out, fmt)
    assert list((out / "_staging").iterdir()) == []  # Spark's bookkeeping went with staging
    extension = ".parquet" if fmt == "parquet" else ".jsonl"
    committed = [p for p in out.rglob("*") if p.is_file()]
    assert committed
    assert all(p.name.startswith(f"part-{result.job_id}-native-eoi-") for p in committed)
    assert all(p.suffix == extension for p in committed)
    if partition_by:
        assert (out / "key=a%2Fb%3Dc%25").is_dir()
        assert (out / "key=__HIVE_DEFAULT_PARTITION__").is_dir()
    # max_rows is Spark's maxRecordsPerFile: no file has more rows.
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert max(pq.read_metadata(p).num_rows for p in committed) <= FAST.max_rows


def test_task_failures_mid_write_never_lose_or_duplicate_a_row(spark, translator, tmp_path):
    from sinkv2_spark.testing import with_task_failures

    out = tmp_path / "out"
    # Subtask 1 dies at element 10 twice, subtask 2 after writing everything.
    failures = {(1, 0): 10, (1, 1): 400, (2, 0): 10**6, (3, 0): 0}
    sink = with_task_failures(native(out, partition_by=["key"]), failures)
    result = translator.apply(frame(spark), sink, sink_id="f")
    assert result.native_write
    assert result.status is CommitStatus.COMMITTED
    assert_exactly_the_input(spark, out, "parquet")
    assert staged_files(out) == []


def test_a_rerun_with_the_same_checkpoint_id_writes_nothing(spark, translator, tmp_path):
    out = tmp_path / "out"
    sink = native(out, partition_by=["key"])
    first = translator.apply(frame(spark), sink, sink_id="ckpt", checkpoint_id=7)
    files = sorted(out.rglob("*.parquet"))
    again = translator.apply(frame(spark), sink, sink_id="ckpt", checkpoint_id=7)
    assert first.status is CommitStatus.COMMITTED
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert again.records_written == 0
    assert sorted(out.rglob("*.parquet")) == files
    assert all("-native-7-" in p.name for p in files)
    assert_exactly_the_input(spark, out, "parquet")


def test_an_empty_input_commits_no_file(spark, translator, tmp_path):
    out = tmp_path / "out"
    result = translator.apply(frame(spark).limit(0), native(out), sink_id="empty")
    assert result.native_write
    assert result.records_written == 0
    assert result.committed == 0
    assert [p for p in out.rglob("*") if p.is_file()] == []


def test_a_write_that_fails_commits_nothing_and_leaves_no_staging(spark, translator, tmp_path):
    from sinkv2_spark.testing import with_task_failures

    out = tmp_path / "out"
    always = {(0, attempt): 5 for attempt in range(4)}  # every attempt of subtask 0 fails
    sink = with_task_failures(native(out), always)
    with pytest.raises(Exception, match="injected failure at element 5"):
        translator.apply(frame(spark), sink, sink_id="failing")
    assert [p for p in out.rglob("*") if p.is_file()] == []
    with translator.state_store.acquire("failing", job_id="probe") as lease:
        assert lease.epochs() == []
    assert list((out / "_staging").iterdir()) == []  # removed at once, _temporary too


def test_the_next_run_removes_what_a_dead_jobs_native_write_left(spark, translator, tmp_path):
    from sinkv2.runtime import CommitCoordinator
    from sinkv2_spark._engine.committable_streams import SparkCommittableStreams

    out = tmp_path / "out"
    sink = native(out, partition_by=["key"])
    dead = CommitCoordinator(
        sink,
        sink_id="dead",
        store=translator.state_store,
        streams=SparkCommittableStreams(spark, "dead"),
        job_id="deadbeef",
    )
    dead.open()  # the job is recorded ...
    dead.close()  # ... and its driver is gone without finishing it
    attempt = out / "_staging/deadbeef-native-eoi/_temporary/0/_temporary/attempt_0_0000_m_1"
    (attempt / "key=k1").mkdir(parents=True)
    (attempt / "key=k1/part-00001-abc.c000.snappy.parquet").write_bytes(b"PAR1 half a file")
    (attempt / "key=k1/.part-00001-abc.c000.snappy.parquet.crc").write_bytes(b"crc")
    result = translator.apply(frame(spark), sink, sink_id="dead")
    assert result.cleaned_jobs == ("deadbeef",)
    assert_exactly_the_input(spark, out, "parquet")
    assert list((out / "_staging").iterdir()) == []


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (
            {"rolling_policy": RollingPolicy(max_bytes=256 * 1024**2)},
            r"rolling_policy.max_bytes=268435456: Spark's writer cannot roll files by size; "
            r"leave max_bytes unset",
        ),
        (
            {"rolling_policy": FAST, "compaction": CompactionPolicy(min_files=2)},
            "compaction= merges",
        ),
        (
            {"rolling_policy": FAST, "filesystem": pafs.LocalFileSystem()},
            "Spark cannot write through",
        ),
        ({"rolling_policy": FAST, "native_write": False}, r"native_write=False"),
    ],
    ids=["max-bytes", "compaction", "filesystem", "asked-not-to"],
)
def test_the_sinks_writers_run_when_spark_cannot_and_the_result_says_why(
    spark, translator, tmp_path, *, options, reason, caplog
):
    out = tmp_path / "out"
    caplog.set_level(logging.INFO, logger="sinkv2.spark")
    result = translator.apply(frame(spark), FileSink(out, **options), sink_id="fallback")
    # One line in the log says why, with what to change.
    [line] = [
        r.getMessage() for r in caplog.records if "the sink's own writers run" in r.getMessage()
    ]
    assert re.search(reason, line)
    advice = ("leave native_write unset", "leave max_bytes unset", "drop compaction=", "name a")
    assert any(what in line for what in advice), line
    assert not result.native_write
    assert result.native_write_unavailable is not None
    assert re.search(reason, result.native_write_unavailable)
    assert "writer" in result.summary()
    assert_exactly_the_input(spark, out, "parquet")


def test_a_default_file_sink_takes_sparks_writer(spark, translator, tmp_path):
    # FileSink(path), what a user writes first: its default rolling policy is Spark's
    # own (one file per task, no maxRecordsPerFile) and Flink's for bulk formats.
    sink = FileSink(tmp_path / "out")
    assert sink.rolling_policy == RollingPolicy(max_rows=None, max_bytes=None)
    result = translator.apply(frame(spark), sink, sink_id="defaults")
    assert result.native_write
    assert result.native_write_unavailable is None
    assert "maxRecordsPerFile" not in sink.plan_native_file_write(frame(spark)).options
    assert_exactly_the_input(spark, tmp_path / "out", "parquet")


def test_a_float_partition_column_falls_back_to_the_sinks_writers(spark, translator, tmp_path):
    df = frame(spark).selectExpr("id", "key", "value")
    sink = FileSink(tmp_path / "out", partition_by=["value"], rolling_policy=FAST)
    with pytest.raises(Exception, match="partition"):
        translator.apply(df, sink, sink_id="floats")
    plan = sink.plan_native_file_write(df)
    assert "partition column 'value' is double" in plan.reason


def test_native_write_true_is_refused_before_any_job_when_spark_cannot(spark, translator, tmp_path):
    sink = FileSink(
        tmp_path / "out", native_write=True, rolling_policy=RollingPolicy(max_bytes=10**6)
    )
    with pytest.raises(SinkConfigurationError, match=r"native_write=True\) cannot let Spark"):
        translator.apply(frame(spark), sink, sink_id="required")
    assert not (tmp_path / "out" / "_staging").exists()


def test_native_write_must_be_a_bool_or_none(tmp_path):
    with pytest.raises(SinkConfigurationError, match="native_write must be True, False or None"):
        FileSink(tmp_path / "out", native_write="yes")


def test_the_kits_spark_scenarios_hold_exactly_once_on_the_native_path(spark, tmp_path_factory):
    import shutil

    from sinkv2 import DeliveryGuarantee
    from sinkv2.testing import SinkUnderTest
    from sinkv2_spark.testing import check_sink_on_spark
    from tests.reference_sinks.files.test_contract import read_visible

    def make():
        base = tmp_path_factory.mktemp("kit")
        return SinkUnderTest(
            FileSink(
                base / "out",
                partition_by=["key"],
                rolling_policy=RollingPolicy(max_rows=40, max_bytes=None),
                native_write=True,
            ),
            read_back=lambda: read_visible(base / "out", "parquet"),
            close=lambda: shutil.rmtree(base, ignore_errors=True),
        )

    check_sink_on_spark(
        spark,
        make,
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        data=frame(spark, 400),
        expected=frame(spark, 400).toArrow().to_pylist(),
        examples=3,
        always=[{(0, 0): 7, (1, 0): 10**6, (1, 1): 0}],
    )


def test_the_plan_names_the_staging_directory_and_spark_options(tmp_path):
    from sinkv2 import NativeFileWrite

    sink = native(tmp_path / "out", "jsonl", partition_by=["key"])

    class Schema:
        fields = ()

    class Input:
        schema = Schema()

    plan = sink.plan_native_file_write(Input())
    assert isinstance(plan, NativeFileWrite)
    assert plan.format == "json"
    assert plan.location == f"file://{Path(tmp_path / 'out').resolve()}/_staging"
    assert plan.partition_by == ("key",)
    assert plan.options["maxRecordsPerFile"] == "200"
    assert plan.options["timestampFormat"].endswith("SSSSSSxxx")
