"""SinkResult.summary(): what was measured, what was not, and how long it took."""

from sinkv2.runtime import CommitStatus, SinkResult


def result(**changes):
    fields = {
        "sink_id": "orders",
        "epoch": 3,
        "checkpoint_id": 3,
        "status": CommitStatus.COMMITTED,
        "job_id": "job-1",
    }
    return SinkResult(**{**fields, **changes})


def rows(summary):
    return dict(line.split("  ", 1) for line in summary.splitlines())


def value(summary, name):
    return rows(summary)[name].strip()


def test_a_metric_no_writer_touched_is_not_measured_rather_than_zero():
    summary = result(
        records_written=5,
        subtasks=2,
        writer_metrics={"numRecordsSend": 5, "numRecordsSendErrors": 0},
    ).summary()

    assert value(summary, "metric: numRecordsSend") == "5"
    assert value(summary, "metric: numRecordsSendErrors") == "0"  # measured: 0 errors
    assert value(summary, "metric: numBytesSend") == "not measured"
    assert value(summary, "metric: currentSendTime") == "not measured"


def test_a_sinks_own_metrics_show_beside_flinks():
    summary = result(subtasks=1, writer_metrics={"rowsSkipped": 2.5}).summary()
    assert value(summary, "metric: rowsSkipped") == "2.50"
    assert value(summary, "metric: numRecordsSend") == "not measured"


def test_without_writers_no_metric_is_listed():
    summary = result(status=CommitStatus.ALREADY_COMMITTED).summary()
    assert "metric:" not in summary


def test_total_time_is_the_sum_of_the_stages():
    summary = result(stage_seconds={"write": 1.5, "commit": 0.25}).summary()
    names = [line.split("  ")[0].strip() for line in summary.splitlines()]
    assert names.index("time: commit") < names.index("time: total")
    assert value(summary, "time: write") == "1,500.0 ms"
    assert value(summary, "time: total") == "1,750.0 ms"


def test_no_stages_no_total():
    assert "time:" not in result().summary()


def test_str_is_the_summary():
    one = result(subtasks=1)
    assert str(one) == one.summary()
