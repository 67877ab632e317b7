"""What a run says under the ``sinkv2.*`` loggers: every stage at INFO, advice as a WARNING."""

import logging

import pytest

from tests.spark.recording_sink import RecordingSink

pytestmark = pytest.mark.spark


def frame(spark, n, partitions):
    return (
        spark.range(n)
        .selectExpr("id", "cast(id % 7 as string) as key", "cast(id as double) as value")
        .repartition(partitions)
    )


def test_each_stage_and_the_commit_are_logged_at_info(spark, translator, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sinkv2")
    result = translator.apply(frame(spark, 100, 2), RecordingSink(tmp_path), sink_id="logged")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sinkv2.")]
    job = result.job_id
    for event in ("job-recorded", "writers-finished", "pending-recorded", "committed-recorded"):
        assert any(f"sink 'logged' job {job}: {event}" in line for line in lines), event
    assert any("writer stage of 2 subtask(s)" in line for line in lines)
    assert any(
        "epoch 1 (checkpoint 9223372036854775807) committed: 2 committed" in line for line in lines
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_many_tiny_partitions_get_the_coalesce_advice(spark, translator, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sinkv2")
    translator.apply(frame(spark, 320, 64), RecordingSink(tmp_path), sink_id="tiny")
    [warning] = [r.getMessage() for r in caplog.records if r.name == "sinkv2.spark"]
    assert "ran 64 tasks for 320 rows (5 rows per task)" in warning
    assert "df.coalesce(1) before apply()" in warning
    assert "ms per task" in warning
