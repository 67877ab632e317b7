"""A driver that dies mid-commit, then a re-run: the data lands exactly once.

The dying driver is a real subprocess with its own Spark session; it exits with
``os._exit`` (no cleanup, no lock release) at the exact stage named.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sinkv2.runtime import CommitStatus, EpochStatus
from tests.spark.recording_sink import RecordingSink

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
CRASHED = 17

DRIVER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from sinkv2.runtime import CommitRetryPolicy, SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator
    from tests.spark.recording_sink import RecordingSink

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    def die_at(event, epoch):
        if event == {crash_at!r}:
            os._exit({crashed})

    translator = SinkTopologyTranslator(state_store=SqliteCommitStateStore({store!r}))
    df = spark.range({n}).selectExpr("id", "cast(id % 7 as string) as key").repartition(3)
    translator.apply(df, RecordingSink({base!r}), sink_id="crashy",
                     checkpoint_id={checkpoint_id!r}, on_stage=die_at)
    os._exit(0)
    """
)


def crash_driver(tmp_path, *, crash_at, checkpoint_id, n=300):
    script = DRIVER.format(
        root=str(ROOT),
        crash_at=crash_at,
        crashed=CRASHED,
        store=str(tmp_path / "state.sqlite"),
        base=str(tmp_path / "out"),
        checkpoint_id=checkpoint_id,
        n=n,
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == CRASHED, done.stderr[-3000:]


def rerun(spark, tmp_path, *, checkpoint_id, n=300):
    from sinkv2.runtime import SqliteCommitStateStore
    from sinkv2_spark import SinkTopologyTranslator

    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    sink = RecordingSink(tmp_path / "out")
    df = spark.range(n).selectExpr("id", "cast(id % 7 as string) as key").repartition(3)
    result = SinkTopologyTranslator(state_store=store).apply(
        df, sink, sink_id="crashy", checkpoint_id=checkpoint_id
    )
    return result, sink, store


def ids(sink):
    return sorted(record["id"] for record in sink.committed_records())


def test_death_after_pending_is_recorded_commits_once_on_rerun(spark, tmp_path):
    crash_driver(tmp_path, crash_at="pending-recorded", checkpoint_id=7)
    assert RecordingSink(tmp_path / "out").committed_records() == []  # nothing visible yet
    result, sink, _ = rerun(spark, tmp_path, checkpoint_id=7)
    assert result.status is CommitStatus.RECOMMITTED
    assert result.records_written == 0  # committed from the stored committables
    assert result.committed == 3
    assert ids(sink) == list(range(300))


def test_death_after_the_committer_ran_commits_once_on_rerun(spark, tmp_path):
    crash_driver(tmp_path, crash_at="committer-finished", checkpoint_id=8)
    assert ids(RecordingSink(tmp_path / "out")) == list(range(300))  # committed, not recorded
    result, sink, store = rerun(spark, tmp_path, checkpoint_id=8)
    assert result.status is CommitStatus.RECOMMITTED
    assert result.already_committed == 3  # the committer recognised its own work
    assert result.committed == 0
    assert ids(sink) == list(range(300))
    with store.acquire("crashy", job_id="inspect") as lease:
        assert lease.get(8).status is EpochStatus.COMMITTED


def test_crashed_run_without_checkpoint_id_is_aborted_at_the_next_start(spark, tmp_path):
    crash_driver(tmp_path, crash_at="pending-recorded", checkpoint_id=None)
    staged_by_crash = sorted(p.stem for p in (tmp_path / "out" / "_staging").glob("*.jsonl"))
    assert len(staged_by_crash) == 3
    result, sink, store = rerun(spark, tmp_path, checkpoint_id=None)
    assert result.aborted_epochs == (1,)
    assert result.epoch == 2
    aborted = [json.loads(line) for line in (sink.base / "aborts.jsonl").read_text().splitlines()]
    assert sorted(aborted) == staged_by_crash  # the abort hook got the crashed run's committables
    assert not any((sink.staging / f"{token}.jsonl").exists() for token in staged_by_crash)
    assert ids(sink) == list(range(300))  # the re-run's data, once
    with store.acquire("crashy", job_id="inspect") as lease:
        assert [(r.epoch, r.status) for r in lease.epochs()] == [
            (1, EpochStatus.ABORTED),
            (2, EpochStatus.COMMITTED),
        ]
