"""The SQLite store's operator queries: what `sinkv2 state` reads without a lease.

The same questions as the PostgreSQL store's (test_postgres_store.py), asked of a
file: read-only, no file created, a held sink id seen without taking it.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from sinkv2.errors import CommitStateError, ConcurrentCommitError, SinkConfigurationError
from sinkv2.runtime import EpochStatus, SqliteCommitStateStore
from sinkv2.runtime._sql.file_lock import lock_path


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")


def test_operator_queries_on_a_missing_file_create_nothing(store):
    assert store.sink_ids() == []
    assert store.epochs("orders") == []
    assert store.jobs("orders") == []
    assert store.origin("orders") is None
    assert store.holder("orders") is None
    assert not store.path.exists()
    assert not lock_path(store.path, "orders").parent.exists()


def test_operator_queries_see_a_held_sink_without_taking_it(store):
    with store.acquire("orders", job_id="running") as lease:
        lease.record_job()
        lease.bind_origin("spark query 1")
        lease.record_pending(1, explicit=True, serializer_version=1, payload=b"a")
        lease.mark_committed(1)
        lease.record_pending(2, explicit=True, serializer_version=1, payload=b"b")
        with store.acquire("clicks", job_id="other") as clicks:
            clicks.record_pending(1, explicit=False, serializer_version=1, payload=b"c")
        assert store.sink_ids() == ["clicks", "orders"]
        assert store.epochs("orders") == lease.epochs()
        assert [r.epoch for r in store.epochs("orders", EpochStatus.PENDING)] == [2]
        assert store.jobs("orders") == ["running"]  # the holder's own job is listed
        assert store.origin("orders") == "spark query 1"
        holder = store.holder("orders")
        assert (holder.job_id, holder.pid, holder.host) == (
            "running",
            os.getpid(),
            socket.gethostname(),
        )
        assert "job 'running'" in str(holder)
        assert store.holder("clicks") is None
        lease.mark_committed(2)  # the queries took nothing the lease needs
    assert store.holder("orders") is None
    with store.acquire("orders", job_id="next"):  # nor left anything behind
        pass


def test_a_holder_in_another_process_is_seen_and_still_refuses_others(store):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys
                from sinkv2.runtime import SqliteCommitStateStore
                lease = SqliteCommitStateStore({str(store.path)!r}).acquire("orders", job_id="far")
                print("held", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline() == b"held\n"
        holder = store.holder("orders")
        assert (holder.job_id, holder.pid) == ("far", child.pid)
        with pytest.raises(ConcurrentCommitError, match="job 'far'"):
            store.acquire("orders", job_id="mine")
    finally:
        child.communicate(b"")  # closes stdin: the child exits, its lock goes with it
    assert store.holder("orders") is None


def test_a_held_lock_whose_file_is_being_rewritten_names_the_recorded_holder(store):
    with store.acquire("orders", job_id="running"):
        lock_path(store.path, "orders").write_text("")  # between truncate and write
        assert store.holder("orders").job_id == "running"  # from sink_fence


def test_operator_queries_read_an_unreadable_file_as_an_error(store):
    store.path.write_bytes(b"not a database at all" * 200)
    with pytest.raises(CommitStateError, match="cannot be opened"):
        store.sink_ids()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.epochs(""), "'sink_id' must be a non-empty str"),
        (lambda s: s.epochs("orders", "pending"), "takes EpochStatus members"),
        (lambda s: s.jobs(None), "'sink_id' must be a non-empty str"),
        (lambda s: s.origin(7), "'sink_id' must be a non-empty str"),
        (lambda s: s.holder(7), "'sink_id' must be a non-empty str"),
    ],
)
def test_operator_queries_reject_bad_arguments(store, call, message):
    with pytest.raises(SinkConfigurationError, match=message):
        call(store)


def test_the_lock_file_record_is_what_holder_reads(store):
    with store.acquire("orders", job_id="running"):
        recorded = json.loads(lock_path(store.path, "orders").read_text())
        assert store.holder("orders").since == recorded["since"]
