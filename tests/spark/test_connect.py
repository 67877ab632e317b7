"""apply() and the sinkv2 data source on a real Spark Connect server (local[2,4]).

The server is the `connect_server` fixture's (one per test run, from pyspark's own
jars); its Python workers import ``tests.*`` as a user's workers import their sink
module. The classic ``spark`` session is not used here.
"""

import json

import pytest

from sinkv2 import END_OF_INPUT
from sinkv2.errors import SinkConfigurationError, SinkWriterError
from sinkv2.runtime import CommitStatus, EpochStatus, SqliteCommitStateStore
from sinkv2_spark import register
from sinkv2_spark._engine.connect import is_connect, number_of_partitions
from sinkv2_spark.testing import check_sink_on_spark
from tests.spark import datasource_sinks, log_source
from tests.spark.recording_sink import RecordingSink, TopologySink

pytestmark = [pytest.mark.spark, pytest.mark.connect]

SINKS = "tests.spark.datasource_sinks"


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


def epochs(state_store, sink_id):
    with state_store.acquire(sink_id, job_id="inspect") as lease:
        return [(record.epoch, record.status) for record in lease.epochs()]


class RepartitioningTopologySink(datasource_sinks.DoorTopologySink):
    """TopologySink (repartition(3), merge, record) whose writers skip the parallelism."""

    add_pre_write_topology = TopologySink.add_pre_write_topology


def test_the_fixture_session_is_a_connect_one(connect_session):
    assert is_connect(connect_session)
    assert is_connect(connect_session.range(1))
    assert not hasattr(connect_session.range(1), "_jdf")
    assert number_of_partitions(frame(connect_session, 10, partitions=3)) == 3


# --- apply() ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failures",
    [
        [],
        [[1, 0, 10]],  # subtask 1's first attempt fails at its 10th element
        [[0, 0, 0], [0, 1, 100], [2, 0, 200], [3, 0, 5], [3, 1, 6]],  # retried up to 3 times
    ],
)
def test_apply_commits_every_element_once_under_task_failures(
    connect_session, translator, state_store, tmp_path, failures
):
    base = tmp_path / "out"
    sink = datasource_sinks.recording(base=str(base), failures=json.dumps(failures))
    result = translator.apply(frame(connect_session), sink, sink_id="recording")
    assert result.status is CommitStatus.COMMITTED
    assert result.records_written == 1000
    assert result.subtasks == 4
    assert result.committed == 4
    assert result.checkpoint_id == END_OF_INPUT
    assert committed(RecordingSink(base)) == expected(1000)
    attempts = RecordingSink(base).events_by_token()
    assert len(attempts) == 4 + len(failures)  # every attempt wrote; the losers were removed
    assert all(token.startswith(result.job_id) for token in attempts)
    assert list(RecordingSink(base).staging.glob("*.jsonl")) == []
    assert epochs(state_store, "recording") == [(1, EpochStatus.COMMITTED)]


def test_apply_runs_the_plan_once(connect_session, translator, tmp_path):
    """A non-deterministic input is written as executed once: rand() is drawn once."""
    base = tmp_path / "out"
    df = frame(connect_session, 400).selectExpr("id", "key", "rand() as value")
    result = translator.apply(df, datasource_sinks.recording(base=str(base)), sink_id="once")
    assert result.records_written == 400
    records = RecordingSink(base).committed_records()
    assert sorted(r["id"] for r in records) == list(range(400))  # no row twice, none lost


def test_a_checkpoint_id_makes_a_rerun_write_and_commit_nothing(
    connect_session, translator, tmp_path
):
    base = tmp_path / "out"
    sink = datasource_sinks.recording(base=str(base))
    first = translator.apply(frame(connect_session, 300), sink, sink_id="idem", checkpoint_id=3)
    again = translator.apply(frame(connect_session, 300), sink, sink_id="idem", checkpoint_id=3)
    assert first.status is CommitStatus.COMMITTED
    assert again.status is CommitStatus.ALREADY_COMMITTED
    assert committed(RecordingSink(base)) == expected(300)
    assert len(RecordingSink(base).events_by_token()) == 4  # no writer ran the second time


def test_topologies_run_with_committable_dataframes_of_the_connect_session(
    connect_session, translator, tmp_path
):
    base = tmp_path / "out"
    sink = RepartitioningTopologySink(base)
    result = translator.apply(frame(connect_session, 500), sink, sink_id="topologies")
    assert result.subtasks == 3  # the pre-write topology's repartition(3)
    assert committed(RecordingSink(base)) == expected(500)
    post = [json.loads(line) for line in (base / "post_commit.jsonl").read_text().splitlines()]
    assert len(post) == 1  # the pre-commit topology merged the three subtasks' committables
    assert len(post[0]) == 3


def test_empty_partitions_are_subtasks_too(connect_session, translator, tmp_path):
    base = tmp_path / "out"
    sink = datasource_sinks.recording(base=str(base))
    result = translator.apply(frame(connect_session, 2, partitions=4), sink, sink_id="sparse")
    assert result.subtasks == 4
    assert committed(RecordingSink(base)) == expected(2)


def test_writers_asking_for_the_parallelism_get_an_error_naming_connect(
    connect_session, translator, tmp_path
):
    sink = RecordingSink(tmp_path / "out")  # its writers log get_number_of_parallel_subtasks()
    with pytest.raises(SinkWriterError, match=r"not known to writers on a Spark Connect session"):
        translator.apply(frame(connect_session, 10), sink, sink_id="parallelism")
    assert RecordingSink(tmp_path / "out").committed_records() == []


def test_a_writer_failure_arrives_as_a_sink_writer_error(connect_session, translator, tmp_path):
    base = tmp_path / "out"
    sink = datasource_sinks.recording(base=str(base), reject_value="5.0")
    with pytest.raises(SinkWriterError, match=r"cannot write value 5\.0") as caught:
        translator.apply(frame(connect_session, 100), sink, sink_id="rejects")
    assert caught.value.position is not None
    assert "The job failed and nothing was committed" in str(caught.value)
    assert RecordingSink(base).committed_records() == []


def test_a_streaming_apply_is_refused_naming_connect(connect_session, translator, tmp_path):
    stream = connect_session.readStream.format("rate").load()
    with pytest.raises(SinkConfigurationError, match=r"streaming apply\(\) needs a classic"):
        translator.apply(
            stream,
            datasource_sinks.recording(base=str(tmp_path / "out")),
            sink_id="stream",
            checkpoint_location=str(tmp_path / "checkpoint"),
        )


def test_a_sink_that_does_not_pickle_is_refused_before_any_job(
    connect_session, translator, tmp_path
):
    import threading

    sink = datasource_sinks.recording(base=str(tmp_path / "out"))
    sink.lock = threading.Lock()
    with pytest.raises(SinkConfigurationError, match=r"sink\.lock"):
        translator.apply(frame(connect_session, 10), sink, sink_id="lock")


def test_the_kit_runs_on_connect(connect_session, tmp_path):
    from sinkv2 import DeliveryGuarantee
    from sinkv2.testing import SinkUnderTest

    runs = iter(range(100))

    def make():
        base = tmp_path / f"run{next(runs)}"
        sink = datasource_sinks.DoorRecordingSink(base)
        return SinkUnderTest(sink, read_back=lambda: RecordingSink(base).committed_records())

    check_sink_on_spark(
        connect_session,
        make,
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        data=frame(connect_session, 200),
        expected=expected(200),
        examples=2,
        always=[{(0, 0): 5, (3, 1): 0}],
    )


# --- the data source ----------------------------------------------------------------------


@pytest.fixture
def door(connect_session):
    register(connect_session)
    return connect_session


def write(df, sink, state, **options):
    writer = df.write.format("sinkv2").option("sink", sink).option("state_store", str(state))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


@pytest.mark.parametrize("failures", [[], [[0, 0, 0], [1, 0, 50], [1, 1, 60], [3, 0, 200]]])
def test_the_data_source_commits_every_element_once_under_task_failures(door, tmp_path, failures):
    base = tmp_path / "out"
    state = tmp_path / "state.sqlite"
    write(
        frame(door),
        f"{SINKS}:recording",
        state,
        base=str(base),
        sink_id="door",
        failures=json.dumps(failures),
    )
    sink = RecordingSink(base)
    assert committed(sink) == expected(1000)
    assert len(sink.events_by_token()) == 4 + len(failures)
    assert list(sink.staging.glob("*.jsonl")) == []
    assert epochs(SqliteCommitStateStore(state), "door") == [(1, EpochStatus.COMMITTED)]


def test_the_data_source_reruns_a_checkpoint_id_as_a_no_op(door, tmp_path):
    base = tmp_path / "out"
    for _ in range(2):
        write(
            frame(door, 300),
            f"{SINKS}:recording",
            tmp_path / "state.sqlite",
            base=str(base),
            sink_id="idem",
            checkpoint_id="4",
        )
    assert committed(RecordingSink(base)) == expected(300)
    assert len(RecordingSink(base).events_by_token()) == 4


def test_the_data_source_s_writer_failure_commits_nothing(door, tmp_path):
    base = tmp_path / "out"
    with pytest.raises(Exception, match=r"cannot write value 5\.0"):
        write(
            frame(door, 100),
            f"{SINKS}:recording",
            tmp_path / "state.sqlite",
            base=str(base),
            sink_id="rejects",
            reject_value="5.0",
        )
    assert RecordingSink(base).committed_records() == []
    assert list(RecordingSink(base).staging.glob("*.jsonl")) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sink_id": "x"}, "needs the 'sink' option"),
        ({"sink": "nope", "sink_id": "x"}, "short name .* or 'module:callable'"),
        ({"sink": "no_such_module:make", "sink_id": "x"}, "names module 'no_such_module'"),
        ({"sink": f"{SINKS}:missing", "sink_id": "x"}, "has no 'missing'"),
        ({"sink": "files", "path": "P"}, "needs the 'sink_id' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "checkpoint_id": "abc"}, "integer"),
        ({"sink": "files", "path": "P", "sink_id": "x", "max_rows": "-1"}, "'max_rows' option"),
        ({"sink": "files", "path": "P", "sink_id": "x", "colour": "red"}, "does not take"),
    ],
)
def test_bad_options_fail_with_our_message_before_data_moves(door, tmp_path, options, message):
    options = {k: (str(tmp_path / "P") if v == "P" else v) for k, v in options.items()}
    writer = door.range(10).write.format("sinkv2")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer = writer.option("state_store", str(tmp_path / "state.sqlite"))
    with pytest.raises(Exception, match=message):
        writer.mode("append").save()
    assert not (tmp_path / "P").exists()


def test_the_data_source_s_default_store_is_the_server_s(door, connect_server, tmp_path):
    """Without a state_store option, epochs are recorded where the server's workers are."""
    out = tmp_path / "files"
    door.range(50).write.format("sinkv2").option("sink", "files").option(
        "sink_id", "server-default"
    ).mode("append").save(str(out))
    store = SqliteCommitStateStore(connect_server.state_dir / "commit_state.sqlite")
    assert epochs(store, "server-default") == [(1, EpochStatus.COMMITTED)]


# --- the read doors -----------------------------------------------------------------------


def test_the_read_door_reads_a_flip27_source_on_the_server(door):
    df = (
        door.read.format("sinkv2")
        .option("source", "tests.spark.test_from_source:sequence")
        .option("start", "1")
        .option("end", "500")
        .option("num_splits", "3")
        .load()
    )
    assert df.columns == ["value"]
    assert sorted(row.value for row in df.collect()) == list(range(1, 501))


def test_the_stream_read_door_reads_every_line_once_on_the_server(door, tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    logs.mkdir()
    log_source.append(logs, "a.log", range(100))
    log_source.append(logs, "b.log", range(50))
    query = (
        door.readStream.format("sinkv2")
        .option("source", "tests.spark.log_source:make")
        .option("path", str(logs))
        .option("source_id", "connect-logs")
        .option("state_store", str(tmp_path / "state.sqlite"))
        .option("maxRecordsPerTrigger", "40")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    got = sorted((row.file, row.line) for row in door.read.parquet(str(out)).collect())
    expected = [("a.log", i) for i in range(100)] + [("b.log", i) for i in range(50)]
    assert got == expected
    batches = [p for p in (tmp_path / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    assert len(batches) >= 4  # 150 lines, at most 40 per micro-batch
