"""What the data-source doors' jobs did, on the driver: last_result and SinkResultListener.

Real Spark (the shared local[2,4] session); the jobs run in Spark's Python workers
and record their outcome in the commit state store, which the driver reads.
"""

from __future__ import annotations

import json
import time

import pytest

from sinkv2.errors import CommitError, SinkConfigurationError, SinkWriterError
from sinkv2.runtime import CommitStatus, SqliteCommitStateStore
from sinkv2_spark import SinkResultListener, last_result, register
from tests.spark.datasource_stream_sinks import configure_hook
from tests.spark.recording_sink import RecordingSink
from tests.spark.stateful_sink import StatefulSink
from tests.spark.test_datasource import committed, expected, frame, write
from tests.spark.test_datasource_stream import expected as stream_expected
from tests.spark.test_datasource_stream import run_stateful, write_files

pytestmark = pytest.mark.spark

SINKS = "tests.spark.datasource_sinks"
STREAM_SINKS = "tests.spark.datasource_stream_sinks"
LISTENER_WAIT_S = 60


@pytest.fixture(scope="module")
def door(spark):
    register(spark)
    return spark


def store_of(tmp_path):
    return str(tmp_path / "state" / "commit_state.sqlite")


# --- batch: df.write.format("sinkv2") -----------------------------------------------------


def test_a_batch_write_s_result_reaches_the_driver(door, tmp_path):
    base = tmp_path / "out"
    assert last_result("results", state_store=store_of(tmp_path)) is None  # no store yet
    for _ in range(2):
        write(
            frame(door),
            f"{SINKS}:recording",
            tmp_path,
            base=str(base),
            sink_id="results",
            checkpoint_id="1",
        )
        result = last_result("results", state_store=store_of(tmp_path))
        if _ == 0:
            assert result.status is CommitStatus.COMMITTED
            assert (result.records_written, result.subtasks, result.epoch) == (1000, 4, 1)
            assert result.committed == 4
            first_job = result.job_id
        else:
            assert result.status is CommitStatus.ALREADY_COMMITTED  # the re-run wrote nothing
            assert (result.records_written, result.committed) == (0, 0)
            assert result.job_id != first_job
    assert committed(RecordingSink(base)) == expected(1000)
    assert last_result("another", state_store=store_of(tmp_path)) is None


def test_a_batch_writer_error_reaches_the_driver_readable(door, tmp_path):
    with pytest.raises(Exception, match="cannot write value") as raised:  # PythonException
        write(
            frame(door, 100),
            f"{SINKS}:recording",
            tmp_path,
            base=str(tmp_path / "out"),
            sink_id="rejects",
            reject_value="5.0",
        )
    spark_text = str(raised.value)
    assert "SinkWriterError: ValueError: cannot write value 5.0\n" in spark_text
    assert "[sinkv2 writer failure]" not in spark_text  # no JSON report for a door's user
    assert spark_text.count("File ") <= 6  # sinkv2's frames cut: the cause's last lines only

    with pytest.raises(SinkWriterError) as recorded:
        last_result("rejects", state_store=store_of(tmp_path))
    message = str(recorded.value)
    assert message.startswith("ValueError: cannot write value 5.0\n  writer of DoorRecordingSink ")
    assert "in write({'id': 10, 'key': '3', 'value': 5.0}) at element" in message
    assert "nothing of it was committed" in message
    assert 'raise ValueError(f"cannot write value' in message  # the worker's last lines


def test_a_failed_commit_is_reported_and_the_next_run_says_it_recommitted(door, tmp_path):
    base = tmp_path / "out"
    options = {"base": str(base), "sink_id": "recommit", "checkpoint_id": "3"}
    with pytest.raises(Exception, match="disk on fire"):
        write(
            frame(door, 100), f"{SINKS}:recording", tmp_path, commit_script='["unknown"]', **options
        )
    with pytest.raises(CommitError) as recorded:
        last_result("recommit", state_store=store_of(tmp_path))
    first_line = str(recorded.value).splitlines()[0]
    assert first_line.startswith("CommitFailedError: ")
    assert "disk on fire" in first_line
    assert "while committing checkpoint 3" in str(recorded.value)
    assert "stays pending, and the next run of the sink id commits it" in str(recorded.value)

    write(frame(door, 100), f"{SINKS}:recording", tmp_path, **options)
    result = last_result("recommit", state_store=store_of(tmp_path))
    assert result.status is CommitStatus.RECOMMITTED  # not "already committed, committed=0"
    assert result.epoch == 3
    # the first commit failed one of the 4 committables; the recommit commits it
    assert (result.committed, result.already_committed) == (1, 3)
    assert result.records_written == 0  # nothing written again
    assert committed(RecordingSink(base)) == expected(100)


def test_last_result_checks_its_arguments(tmp_path):
    with pytest.raises(SinkConfigurationError, match="'sink_id' must be the write's non-empty"):
        last_result("", state_store=store_of(tmp_path))
    with pytest.raises(SinkConfigurationError, match="'state_store' must be a SQLite file"):
        last_result("s", state_store=object())
    with pytest.raises(SinkConfigurationError, match="needs the stream's checkpoint_location="):
        SinkResultListener("s")


# --- streams: df.writeStream.format("sinkv2") -----------------------------------------------


def wait_for(listener, *, results=0, errors=0):
    """Spark's listener bus delivers events after the query ended: wait for them."""
    deadline = time.monotonic() + LISTENER_WAIT_S
    while len(listener.results) < results or len(listener.errors) < errors:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return listener


@pytest.fixture
def listen(door):
    added = []

    def add(listener):
        door.streams.addListener(listener)
        added.append(listener)
        return listener

    yield add
    for listener in added:
        door.streams.removeListener(listener)


def test_a_stream_s_results_reach_a_listener_and_a_restart_says_what_it_recommitted(
    door, tmp_path, request, listen
):
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    sink_id = f"listened-{tmp_path.name}"
    request.addfinalizer(
        configure_hook(
            sink_id, log=tmp_path / "stages.jsonl", die_at=("pending-recorded", 2)
        ).unlink
    )
    printed = []
    listener = listen(
        SinkResultListener(sink_id, checkpoint_location=str(checkpoint), on_result=printed.append)
    )
    write_files(files, 0, 1)
    with pytest.raises(Exception, match="DriverDied: pending-recorded of checkpoint 2"):
        run_stateful(door, tmp_path, files, sink_id=sink_id, on_stage=f"{STREAM_SINKS}:hook")
    wait_for(listener, results=1, errors=1)
    assert [(r.checkpoint_id, r.status) for r in listener.results] == [(1, CommitStatus.COMMITTED)]
    assert printed == listener.results
    (error,) = listener.errors
    assert isinstance(error, CommitError)
    assert str(error).startswith("DriverDied: pending-recorded of checkpoint 2\n")

    write_files(files, 2)
    run_stateful(door, tmp_path, files, sink_id=sink_id, on_stage=f"{STREAM_SINKS}:hook")
    wait_for(listener, results=3)
    restart = listener.results[1:]
    assert [(r.checkpoint_id, r.status) for r in restart] == [
        (2, CommitStatus.RECOMMITTED),  # the first result says what the restart did
        (3, CommitStatus.COMMITTED),
    ]
    assert restart[0].committed + restart[0].already_committed > 0
    assert restart[0].records_written == 0
    assert committed_rows(tmp_path) == stream_expected(range(3))
    newest = last_result(sink_id, checkpoint_location=str(checkpoint))
    assert newest == restart[1]


def test_a_stream_s_writer_error_reaches_the_listener_readable(door, tmp_path, listen):
    files, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    listener = listen(SinkResultListener("failing", checkpoint_location=str(checkpoint)))
    write_files(files, 0)
    always = json.dumps([[0, attempt, 1] for attempt in range(4)])  # local[2,4]: 4 attempts
    with pytest.raises(Exception, match="SinkWriterError: FaultInjected: injected failure"):
        run_stateful(door, tmp_path, files, sink_id="failing", failures=always)
    wait_for(listener, errors=1)
    (error,) = listener.errors
    assert isinstance(error, SinkWriterError)
    assert str(error).startswith("FaultInjected: injected failure at element 1\n  writer of ")
    assert listener.results == []
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with pytest.raises(SinkWriterError, match=r"^FaultInjected: injected failure"):
        last_result("failing", state_store=store)


def committed_rows(tmp_path):
    return sorted(StatefulSink(tmp_path / "out").committed_records(), key=lambda r: r["id"])
