"""Stores with a known history for the ``sinkv2 state`` tests, on SQLite and PostgreSQL."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_sink import Staged, StagingSink

from sinkv2 import SimpleVersionedSerialization
from sinkv2.runtime import (
    PostgresCommitStateStore,
    SqliteCommitStateStore,
    SubtaskStates,
    WriterStates,
)

HERE = Path(__file__).resolve().parent


def framed(*staged):
    serializer = StagingSink().get_committable_serializer()
    return SimpleVersionedSerialization.write_version_and_serialize_list(serializer, staged)


def populate(store, staging):
    """Two sink ids: a batch one with each status and a dead job, a stream with writer states.

    orders: epoch 1 committed (1 committable), 2 pending (2, naming files in
    ``staging``), 3 aborted (none); job "batch-1" unfinished.
    clicks: epoch 1 pending, explicit, 1 committable, states of cli_sink.StagingSink.
    """
    staging.mkdir(parents=True, exist_ok=True)
    for name in ("a.part", "b.part", "c.part"):
        (staging / name).write_text("staged rows\n")
    with store.acquire("orders", job_id="batch-1") as lease:
        lease.record_job()
        lease.record_pending(
            1, explicit=False, serializer_version=1, payload=framed(Staged("x", 1))
        )
        lease.mark_committed(1)
        lease.record_pending(
            2,
            explicit=False,
            serializer_version=1,
            payload=framed(Staged(str(staging / "a.part"), 3), Staged(str(staging / "b.part"), 4)),
        )
        lease.record_pending(3, explicit=False, serializer_version=1, payload=framed())
        lease.mark_aborted(3)
    states = WriterStates(
        state_name="cli_sink.StagingSink",
        number_of_subtasks=1,
        subtasks=(SubtaskStates(subtask_id=0, attempt_token="stream-1-0", states=(b"s",)),),
    )
    with store.acquire("clicks", job_id="stream-1") as lease:
        lease.bind_origin("query-1")
        lease.record_pending(
            1,
            explicit=True,
            serializer_version=1,
            payload=framed(Staged(str(staging / "c.part"), 5)),
            writer_states=states.encode(),
        )


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    """The location of a populated store, as an operator types it."""
    if request.param == "sqlite":
        store = SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")
        where = str(store.path)
    else:
        where = request.getfixturevalue("postgres_url")
        store = PostgresCommitStateStore(where)
    populate(store, tmp_path / "staging")
    return where


@pytest.fixture
def sqlite_location(tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")
    populate(store, tmp_path / "staging")
    return str(store.path)


def open_store(location):
    if location.startswith("postgresql://"):
        return PostgresCommitStateStore(location)
    return SqliteCommitStateStore(location)


class Driver:
    """Another process holding a sink id's lease until stopped: a running driver."""

    def __init__(self, location, sink_id, job_id="running-job"):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, location, sink_id, job_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        line = self.process.stdout.readline()
        assert line == b"held\n", f"the driver did not take {sink_id!r}: {line!r}"
        self.pid = self.process.pid

    def stop(self):
        self.process.communicate(b"")
        assert self.process.returncode == 0


_DRIVER = textwrap.dedent(
    """
    import sys
    from sinkv2.runtime import PostgresCommitStateStore, SqliteCommitStateStore
    location, sink_id, job_id = sys.argv[1:]
    if location.startswith("postgresql://"):
        store = PostgresCommitStateStore(location)
    else:
        store = SqliteCommitStateStore(location)
    with store.acquire(sink_id, job_id=job_id):
        print("held", flush=True)
        sys.stdin.read()
    """
)


@pytest.fixture
def driver():
    started = []

    def start(location, sink_id, job_id="running-job"):
        started.append(Driver(location, sink_id, job_id))
        return started[-1]

    yield start
    for each in started:
        if each.process.returncode is None:
            each.stop()


@pytest.fixture
def cli_env():
    """The environment of a ``sinkv2`` subprocess that can import cli_sink."""
    return {**os.environ, "PYTHONPATH": str(HERE)}


HOST = socket.gethostname()
