"""SinkTopologyTranslator on a real local Spark (local[2,4]: task retries allowed)."""

import collections
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinkv2 import END_OF_INPUT
from sinkv2.errors import (
    CommitFailedError,
    ConcurrentCommitError,
    SinkConfigurationError,
    SinkDefinitionError,
    SinkWriterError,
)
from sinkv2.runtime import CommitStatus, EpochStatus
from tests.spark.recording_sink import RecordingSink, TopologySink

pytestmark = pytest.mark.spark


def frame(spark, n=1000, partitions=4):
    return (
        spark.range(n)
        .selectExpr("id", "cast(id % 7 as string) as key", "cast(id as double) / 2 as value")
        .repartition(partitions)
    )


def expected(n):
    return sorted(
        ({"id": i, "key": str(i % 7), "value": i * 0.5} for i in range(n)), key=lambda r: r["id"]
    )


def committed(sink):
    return sorted(sink.committed_records(), key=lambda r: r["id"])


def test_every_element_is_delivered_exactly_once(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    result = translator.apply(frame(spark), sink, sink_id="recording")
    assert committed(sink) == expected(1000)
    assert result.status is CommitStatus.COMMITTED
    assert result.records_written == 1000
    assert result.subtasks == 4
    assert result.committed == 4
    assert result.checkpoint_id == END_OF_INPUT
    assert result.writer_metrics["numRecordsSend"] == 1000
    assert result.writer_metrics["currentSendTime"] == 5 + 3  # a gauge: the largest, not a sum
    assert set(result.stage_seconds) >= {"write", "commit"}
    assert "records written" in str(result)
    assert "1,000" in str(result)


def test_writer_lifecycle_follows_flinks_order_with_the_right_contexts(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    result = translator.apply(frame(spark, 200, partitions=3), sink, sink_id="lifecycle")
    events = sink.events_by_token()
    assert len(events) == 3
    subtasks = set()
    for token, log in events.items():
        assert token.startswith(result.job_id)
        names = [e["event"] for e in log]
        assert names == ["create", "write", "flush", "prepare_commit", "snapshot_state", "close"]
        create = log[0]
        subtasks.add(create["subtask"])
        assert create["parallelism"] == 3
        assert create["attempt"] == 0
        assert create["job"] == result.job_id
        assert create["restored"] is None
        assert log[2]["end_of_input"] is True
        assert log[4]["checkpoint_id"] == END_OF_INPUT
    assert subtasks == {0, 1, 2}


def test_empty_partitions_still_run_the_whole_lifecycle(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    result = translator.apply(frame(spark, 2, partitions=4), sink, sink_id="sparse")
    assert committed(sink) == expected(2)
    assert result.subtasks == 4
    for log in sink.events_by_token().values():
        assert [e["event"] for e in log if e["event"] != "write"] == [
            "create",
            "flush",
            "prepare_commit",
            "snapshot_state",
            "close",
        ]


def test_pre_write_pre_commit_and_post_commit_topologies_run(spark, translator, tmp_path):
    sink = TopologySink(tmp_path / "out", partitions=3)
    result = translator.apply(frame(spark, 500, partitions=5), sink, sink_id="topology")
    assert committed(sink) == expected(500)
    assert result.subtasks == 3  # the pre-write topology repartitioned to 3
    assert result.committed == 1  # the pre-commit topology merged them into one
    post = [json.loads(line) for line in (sink.base / "post_commit.jsonl").read_text().splitlines()]
    assert len(post) == 1
    assert len(post[0]) == 3
    assert set(result.stage_seconds) >= {
        "pre-write topology",
        "pre-commit topology",
        "post-commit topology",
    }


def test_a_checkpoint_id_makes_a_rerun_write_nothing(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    first = translator.apply(frame(spark, 300), sink, sink_id="idem", checkpoint_id=5)
    second = translator.apply(frame(spark, 300), sink, sink_id="idem", checkpoint_id=5)
    assert first.status is CommitStatus.COMMITTED
    assert first.epoch == 5
    assert second.status is CommitStatus.ALREADY_COMMITTED
    assert second.records_written == 0
    assert committed(sink) == expected(300)
    assert len(sink.events_by_token()) == 4  # no writer ran the second time


def test_runs_without_a_checkpoint_id_are_new_epochs(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    epochs = [translator.apply(frame(spark, 10), sink, sink_id="auto").epoch for _ in range(2)]
    assert epochs == [1, 2]
    assert len(sink.committed_records()) == 20


# --- failures -----------------------------------------------------------------------------


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failures=st.dictionaries(
        st.tuples(
            st.integers(0, 3), st.integers(0, 2)
        ),  # (subtask, attempt) below the 4-attempt budget
        st.integers(0, 260),  # the element at which that attempt fails
        max_size=5,
    )
)
def test_random_task_failures_never_lose_or_duplicate(
    spark, translator, tmp_path_factory, failures
):
    sink = RecordingSink(tmp_path_factory.mktemp("faults"), failures=failures)
    result = translator.apply(frame(spark, 1000), sink, sink_id="faults")
    assert committed(sink) == expected(1000)
    after_writers, after_commit = sink.cleanups_log()
    winners = set(after_writers["kept"])
    assert len(winners) == 4  # one attempt per subtask won; the losers' staging went first
    assert not winners & set(after_writers["removed"])
    assert after_commit["kept"] == []  # once committed, nothing the job staged is needed
    assert set(after_commit["removed"]) == winners
    assert list(sink.staging.glob("*.jsonl")) == []
    logs = list(sink.events_by_token().values())
    sizes = {log[0]["subtask"]: log[-1]["count"] for log in logs if len(log) == 6}
    # Attempt a of subtask s runs only if attempts 0..a-1 failed; it fails if its
    # scheduled element index is inside the partition.
    predicted = set()
    for subtask, size in sizes.items():
        attempt = 0
        while failures.get((subtask, attempt), size) < size:
            predicted.add((subtask, attempt))
            attempt += 1
    failed = {(log[0]["subtask"], log[0]["attempt"]) for log in logs if len(log) < 6}
    assert failed == predicted
    assert result.records_written == 1000


def test_a_row_the_writer_cannot_handle_fails_the_job_and_nothing_is_visible(
    spark, translator, tmp_path
):
    sink = RecordingSink(tmp_path / "out", reject_value=250.0)
    with pytest.raises(SinkWriterError) as caught:
        translator.apply(frame(spark, 1000), sink, sink_id="bad-row")
    error = caught.value
    assert "cannot write value 250.0" in str(error)
    assert "'id': 500" in str(error)  # the element itself
    assert error.position is not None
    assert 0 <= error.position < 1000
    assert f"at element {error.position} of subtask {error.subtask_id}" in str(error)
    assert sink.committed_records() == []
    assert sink.cleanups_log()[-1]["kept"] == []  # every attempt's staging removed
    # A task of the aborted job that Spark was still killing may stage after that
    # clean-up; the next run of the sink id removes what the failed job left.
    again = translator.apply(frame(spark, 10), RecordingSink(tmp_path / "out"), sink_id="bad-row")
    assert len(again.cleaned_jobs) == 1  # the failed job
    assert list(sink.staging.glob("*.jsonl")) == []
    assert len(sink.committed_records()) == 10


def test_unknown_commit_failure_names_sink_epoch_and_committable_and_rerun_commits_once(
    spark, translator, state_store, tmp_path
):
    sink = RecordingSink(tmp_path / "out", commit_script=["unknown"])
    with pytest.raises(CommitFailedError) as caught:
        translator.apply(frame(spark, 100), sink, sink_id="orders", checkpoint_id=3)
    message = str(caught.value)
    assert "sink 'orders' epoch 3" in message
    assert "StagedBatch(token=" in message
    assert "disk on fire" in message
    with state_store.acquire("orders", job_id="inspect") as lease:
        assert lease.get(3).status is EpochStatus.PENDING

    healed = RecordingSink(tmp_path / "out")
    result = translator.apply(frame(spark, 100), healed, sink_id="orders", checkpoint_id=3)
    assert result.status is CommitStatus.RECOMMITTED
    assert result.records_written == 0  # committed from the stored committables
    assert committed(healed) == expected(100)


def test_retries_and_known_failures_are_counted(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out", commit_script=["retry", "known"])
    result = translator.apply(frame(spark, 100, partitions=3), sink, sink_id="mixed")
    assert result.retries == 1
    assert result.failed_with_known_reason == 1
    assert result.committed == 2
    assert len(sink.committed_records()) < 100


def test_a_second_driver_on_the_same_sink_id_fails_before_writing(
    spark, translator, state_store, tmp_path
):
    sink = RecordingSink(tmp_path / "out")
    with (
        state_store.acquire("shared", job_id="the-other-driver"),
        pytest.raises(ConcurrentCommitError, match="the-other-driver"),
    ):
        translator.apply(frame(spark, 50), sink, sink_id="shared")
    assert sink.events_by_token() == {}
    assert (
        translator.apply(frame(spark, 50), sink, sink_id="shared").status is CommitStatus.COMMITTED
    )


# --- validation before any job ------------------------------------------------------------


def _jobs(spark):
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_half_implemented_sink_is_refused_before_any_spark_job(spark, translator, tmp_path):
    class Broken(RecordingSink):
        get_committable_serializer = None

    before = _jobs(spark)
    with pytest.raises(SinkDefinitionError, match="get_committable_serializer"):
        translator.apply(frame(spark, 10), Broken(tmp_path / "out"), sink_id="broken")
    assert _jobs(spark) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checkpoint_id": 0}, "checkpoint_id must be a positive int"),
        ({"checkpoint_id": END_OF_INPUT}, "checkpoint_id must be a positive int"),
        ({"checkpoint_id": "7"}, "checkpoint_id must be a positive int"),
        ({"sink_id": ""}, "sink_id must be a non-empty str"),
        ({"checkpoint_id": 3}, "checkpoint_id needs an explicit sink_id"),
    ],
)
def test_bad_arguments_are_configuration_errors(spark, translator, tmp_path, kwargs, message):
    with pytest.raises(SinkConfigurationError, match=message):
        translator.apply(frame(spark, 10), RecordingSink(tmp_path / "out"), **kwargs)


def test_not_a_dataframe_is_a_configuration_error(translator, tmp_path):
    with pytest.raises(
        SinkConfigurationError, match=r"takes a pyspark\.sql\.DataFrame \(got list\)"
    ):
        translator.apply([1, 2], RecordingSink(tmp_path / "out"))


def test_a_streaming_dataframe_needs_a_sink_id_and_a_checkpoint_location(
    spark, translator, tmp_path
):
    stream = spark.readStream.format("rate").load()
    with pytest.raises(SinkConfigurationError, match="a streaming apply\\(\\) needs sink_id"):
        translator.apply(stream, RecordingSink(tmp_path / "out"))
    with pytest.raises(SinkConfigurationError, match="needs checkpoint_location"):
        translator.apply(stream, RecordingSink(tmp_path / "out"), sink_id="s")


def test_streaming_arguments_on_a_batch_dataframe_are_refused(spark, translator, tmp_path):
    with pytest.raises(SinkConfigurationError, match="checkpoint_location, trigger apply to"):
        translator.apply(
            frame(spark, 3),
            RecordingSink(tmp_path / "out"),
            checkpoint_location=str(tmp_path / "c"),
            trigger={"once": True},
        )


def test_pre_commit_topology_that_loses_committables_is_caught_before_commit(
    spark, translator, tmp_path
):
    class Lossy(TopologySink):
        def add_pre_commit_topology(self, committables):
            return super().add_pre_commit_topology(committables.limit(1))

    sink = Lossy(tmp_path / "out", partitions=3)
    with pytest.raises(SinkConfigurationError, match=r"lost 2 writer output\(s\)"):
        translator.apply(frame(spark, 100), sink, sink_id="lossy")
    assert sink.committed_records() == []
    assert list(sink.staging.glob("*.jsonl")) == []  # nothing of the run stays staged


def test_pre_commit_topology_that_duplicates_committables_is_caught(spark, translator, tmp_path):
    class Doubling(TopologySink):
        def add_pre_commit_topology(self, committables):
            return super().add_pre_commit_topology(committables.union(committables))

    with pytest.raises(SinkConfigurationError, match="duplicated 3"):
        translator.apply(frame(spark, 100), Doubling(tmp_path / "out", partitions=3), sink_id="dup")


def test_element_form_is_a_dict_per_row_with_python_values(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    translator.apply(
        spark.createDataFrame(
            [(1, "a", 2.5, None)], "id long, key string, value double, note string"
        ),
        sink,
    )
    assert sink.committed_records() == [{"id": 1, "key": "a", "value": 2.5, "note": None}]


def test_counts_are_a_multiset_match_not_just_a_set(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    df = spark.createDataFrame([(1,)] * 50, "id long").repartition(3)
    translator.apply(df, sink, sink_id="dups")
    assert collections.Counter(r["id"] for r in sink.committed_records()) == {1: 50}


def test_checkpoint_ids_and_assigned_epochs_never_collide(spark, translator, tmp_path):
    sink = RecordingSink(tmp_path / "out")
    assert translator.apply(frame(spark, 10), sink, sink_id="mixed-ids").epoch == 1
    with pytest.raises(SinkConfigurationError, match="belongs to a run without a checkpoint_id"):
        translator.apply(frame(spark, 20), sink, sink_id="mixed-ids", checkpoint_id=1)
    assert len(sink.committed_records()) == 10


def test_failed_post_commit_topology_runs_again_on_rerun(spark, translator, state_store, tmp_path):
    sink = TopologySink(tmp_path / "out", partitions=2)
    (sink.base / "fail-post-commit").touch()
    with pytest.raises(RuntimeError, match="post-commit topology failed"):
        translator.apply(frame(spark, 100), sink, sink_id="post", checkpoint_id=4)
    with state_store.acquire("post", job_id="inspect") as lease:
        assert lease.get(4).status is EpochStatus.PENDING
    (sink.base / "fail-post-commit").unlink()
    result = translator.apply(frame(spark, 100), sink, sink_id="post", checkpoint_id=4)
    assert result.status is CommitStatus.RECOMMITTED
    assert result.already_committed == 1
    assert (sink.base / "post_commit.jsonl").read_text().count("\n") == 1
    assert committed(sink) == expected(100)


def test_the_input_is_computed_once_even_with_adaptive_execution_and_a_shuffle(
    spark, translator, tmp_path
):
    from pyspark.sql.functions import udf

    computed = spark.sparkContext.accumulator(0)

    @udf("long")
    def counted(value):
        computed.add(1)
        return value

    df = spark.range(500).select(counted("id").alias("id")).repartition(3)
    result = translator.apply(df, RecordingSink(tmp_path / "out"), sink_id="once")
    assert result.subtasks == 3
    assert computed.value == 500


def test_exhausted_commit_retries_name_sink_epoch_and_committable(spark, translator, tmp_path):
    from sinkv2.errors import CommitRetriesExhaustedError

    sink = RecordingSink(tmp_path / "out", commit_script=["retry"] * 11)  # Flink's 10 retries + 1
    with pytest.raises(CommitRetriesExhaustedError) as caught:
        translator.apply(frame(spark, 10, partitions=1), sink, sink_id="stubborn", checkpoint_id=2)
    message = str(caught.value)
    assert "sink 'stubborn' epoch 2" in message
    assert "after 10 retries" in message
    assert "StagedBatch(token=" in message
    assert sink.committed_records() == []


def test_a_sink_without_a_committer_runs_and_reports_its_writer_metrics(spark, translator):
    # Every async sink is one: writers deliver, nothing is committed. The writer
    # stage used to fail when no subtask produced a committable.
    from sinkv2.asyncsink import AsyncSinkWriterConfiguration
    from tests.unit.test_async_sink import ScriptedSink

    sink = ScriptedSink(lambda row, context: row["id"], AsyncSinkWriterConfiguration())
    result = translator.apply(spark.range(1_000).repartition(3), sink, sink_id="writer-only")
    assert result.records_written == 1_000
    assert result.committed == 0
    assert result.writer_metrics["numRecordsSend"] == 1_000


def test_a_stream_that_needs_exactly_once_refuses_a_sink_without_a_committer(
    spark, translator, tmp_path
):
    from sinkv2 import DeliveryGuarantee

    class Plain:
        def create_writer(self, context):
            raise AssertionError("no writer may start")

    stream = spark.readStream.format("rate").load()
    with pytest.raises(SinkConfigurationError, match="cannot give EXACTLY_ONCE: without a"):
        translator.apply(
            stream,
            Plain(),
            sink_id="plain",
            checkpoint_location=str(tmp_path / "ckpt"),
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        )
    with pytest.raises(SinkConfigurationError, match="guarantee must be a DeliveryGuarantee"):
        translator.apply(
            stream,
            Plain(),
            sink_id="plain",
            checkpoint_location=str(tmp_path / "ckpt"),
            guarantee="exactly-once",
        )
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written
