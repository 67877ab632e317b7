"""FileSink through SinkTopologyTranslator on local Spark (local[2,4]: task retries allowed).

Spark reads back exactly the input: both formats, partitioned or not, both writer
paths, with injected task failures, after compaction, and a re-run with the same
checkpoint id writes nothing.
"""

from pathlib import Path

import pytest

from reference_sinks.files import CompactionPolicy, FileSink, RollingPolicy
from sinkv2.runtime import CommitStatus
from tests.reference_sinks.files.faulty import faulty

pytestmark = pytest.mark.spark

N = 3000


def frame(spark, n=N, partitions=4):
    # key: a few plain values, one that needs escaping, and nulls.
    return (
        spark.range(n)
        .selectExpr(
            "id",
            "case when id % 11 = 0 then null when id % 5 = 1 then 'a/b=c%' "
            "else concat('k', cast(id % 5 as string)) end as key",
            "cast(id as double) / 2 as value",
        )
        .repartition(partitions)
    )


def read_back(spark, base, fmt):
    if fmt == "jsonl":
        return spark.read.json(str(base)).select("id", "key", "value")
    return spark.read.parquet(str(base)).select("id", "key", "value")


def assert_exactly_the_input(spark, base, fmt, n=N):
    back = read_back(spark, base, fmt)
    expected = frame(spark, n)
    assert back.count() == n
    assert expected.exceptAll(back).count() == 0
    assert back.exceptAll(expected).count() == 0


def staged_files(base):
    return [p for p in (Path(base) / "_staging").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    "case",
    [
        ("parquet", (), True),
        ("parquet", ("key",), True),
        ("parquet", ("key",), False),
        ("jsonl", ("key",), True),
        ("jsonl", (), False),
    ],
    ids=[
        "parquet-flat-arrow",
        "parquet-part-arrow",
        "parquet-part-rows",
        "jsonl-part-arrow",
        "jsonl-flat-rows",
    ],
)
def test_spark_reads_back_exactly_the_input(spark, translator, tmp_path, case):
    fmt, partition_by, arrow = case
    out = tmp_path / "out"
    sink = faulty(FileSink(out, fmt, partition_by=partition_by), arrow=arrow)
    result = translator.apply(frame(spark), sink, sink_id="files")
    assert result.status is CommitStatus.COMMITTED
    assert result.records_written == N
    assert_exactly_the_input(spark, out, fmt)
    assert staged_files(out) == []
    if partition_by:
        assert (out / "key=a%2Fb%3Dc%25").is_dir()
        assert (out / "key=__HIVE_DEFAULT_PARTITION__").is_dir()


@pytest.mark.parametrize(
    "case",
    [
        ("parquet", True, {(0, 0): 0, (1, 0): 1, (1, 1): 0, (3, 0): 1}),
        ("jsonl", False, {(0, 0): 5, (2, 0): 400, (2, 1): 700, (3, 2): 3}),
    ],
    ids=["parquet-arrow", "jsonl-rows"],
)
def test_task_failures_never_lose_or_duplicate_a_row(spark, translator, tmp_path, case):
    fmt, arrow, failures = case
    out = tmp_path / "out"
    inner = FileSink(out, fmt, partition_by=["key"], rolling_policy=RollingPolicy(max_rows=100))
    result = translator.apply(frame(spark), faulty(inner, failures, arrow=arrow), sink_id="f")
    assert result.status is CommitStatus.COMMITTED
    assert_exactly_the_input(spark, out, fmt)
    assert staged_files(out) == []  # losers' staging cleaned up, winners' committed
    assert list((out / "_staging").iterdir()) == []  # and once committed, no directory stays


def test_a_rerun_with_the_same_checkpoint_id_writes_nothing(spark, translator, tmp_path):
    out = tmp_path / "out"
    sink = FileSink(out, partition_by=["key"])
    first = translator.apply(frame(spark), sink, sink_id="ckpt", checkpoint_id=7)
    files = sorted(p for p in out.rglob("*.parquet"))
    again = translator.apply(frame(spark), sink, sink_id="ckpt", checkpoint_id=7)
    assert first.status is CommitStatus.COMMITTED
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert again.records_written == 0
    assert sorted(p for p in out.rglob("*.parquet")) == files
    assert_exactly_the_input(spark, out, "parquet")


def test_compaction_merges_small_files_and_keeps_the_row_multiset(spark, translator, tmp_path):
    out = tmp_path / "out"
    sink = FileSink(
        out,
        partition_by=["key"],
        rolling_policy=RollingPolicy(max_rows=50),
        compaction=CompactionPolicy(min_files=2, target_bytes=10**8),
    )
    result = translator.apply(frame(spark), faulty(sink, {(1, 0): 2}), sink_id="compact")
    assert result.status is CommitStatus.COMMITTED
    assert_exactly_the_input(spark, out, "parquet")
    partitions = [p for p in out.iterdir() if p.name.startswith("key=")]
    assert len(partitions) == 6  # k0, k2, k3, k4, the escaped one, null
    assert all(len(list(p.glob("*.parquet"))) == 1 for p in partitions)
    assert all("-compact-" in next(p.glob("*.parquet")).name for p in partitions)
    assert staged_files(out) == []


def test_the_kits_spark_scenarios_hold_exactly_once(spark, tmp_path_factory):
    import shutil

    from sinkv2 import DeliveryGuarantee
    from sinkv2.testing import SinkUnderTest
    from sinkv2_spark.testing import check_sink_on_spark
    from tests.reference_sinks.files.test_contract import read_visible

    def make():
        base = tmp_path_factory.mktemp("kit")
        return SinkUnderTest(
            FileSink(base / "out", partition_by=["key"], rolling_policy=RollingPolicy(max_rows=40)),
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
    )
