"""``sinkv2 state release`` on PostgreSQL: a session that outlived its driver.

A driver's advisory lock lives as long as its connection. When the driver is gone
but the connection lingers (a host cut off from the network), ``release`` ends the
session: at once if the driver was on this host and its process is gone, with
``--force`` if it was elsewhere; never while the driver runs. The lingering session
is played by an admin connection holding the sink's lock and recorded as the holder.
"""

import subprocess
import sys

import psycopg
import pytest
from conftest import HOST, populate

from sinkv2._cli import main
from sinkv2.runtime import PostgresCommitStateStore


@pytest.fixture
def store(postgres_url, tmp_path):
    store = PostgresCommitStateStore(postgres_url)
    populate(store, tmp_path / "staging")
    return store


def dead_pid():
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(child.stdout)


@pytest.fixture
def lingering(store, postgres_url):
    """Make an admin session hold 'orders', recorded as a driver on ``host`` with ``pid``."""
    sessions = []

    def linger(host, pid, job_id="dead-job"):
        session = psycopg.connect(postgres_url, autocommit=True)
        sessions.append(session)
        session.execute("SELECT pg_advisory_lock(%s)", (store.lock_key("orders"),))
        if job_id is not None:
            session.execute(
                "UPDATE sinkv2.sink_fence SET holder_job_id = %s, holder_pid = %s, "
                "holder_host = %s, holder_backend_pid = pg_backend_pid() WHERE sink_id = 'orders'",
                (job_id, pid, host),
            )
        return session

    yield linger
    for session in sessions:
        session.close()


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_release_ends_the_session_of_a_driver_gone_from_this_host(
    capsys, store, postgres_url, lingering
):
    pid = dead_pid()
    session = lingering(HOST, pid)
    assert store.holder("orders").job_id == "dead-job"
    code, out, _ = run(capsys, "state", "show", postgres_url, "orders")
    assert "[driver not running]" in out
    code, out, err = run(capsys, "state", "release", postgres_url, "orders")
    assert (code, err) == (0, "")
    assert f"ended the session of job 'dead-job' (pid {pid} on host {HOST!r}" in out
    assert store.holder("orders") is None
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    with store.acquire("orders", job_id="rerun"):
        pass


def test_a_driver_on_another_host_is_released_only_with_force(
    capsys, store, postgres_url, lingering
):
    lingering("elsewhere", 4242)
    code, out, err = run(capsys, "state", "release", postgres_url, "orders")
    assert (code, out) == (1, "")
    assert "cannot be seen from this host" in err
    assert "pass --force" in err
    assert store.holder("orders").host == "elsewhere"
    code, out, _ = run(capsys, "state", "release", postgres_url, "orders", "--force", "--json")
    assert code == 0
    assert '"host": "elsewhere"' in out
    assert store.holder("orders") is None


def test_a_holder_not_recorded_yet_is_not_released(capsys, store, postgres_url, lingering):
    lingering(HOST, 0, job_id=None)
    code, _, err = run(capsys, "state", "release", postgres_url, "orders", "--force")
    assert code == 1
    assert "is acquiring it right now" in err
    assert store.holder("orders") is not None


def test_a_running_driver_is_not_released_even_with_force(capsys, postgres_url, store, driver):
    running = driver(postgres_url, "orders")
    code, _, err = run(capsys, "state", "release", postgres_url, "orders", "--force")
    assert code == 1
    assert "that driver process is running" in err
    assert store.holder("orders").pid == running.pid


def test_the_schema_option_picks_the_stores_tables(capsys, postgres_url, store):
    other = PostgresCommitStateStore(postgres_url, schema="other")
    other.acquire("elsewhere", job_id="j").release()
    code, out, _ = run(capsys, "state", "list", postgres_url, "--schema", "other")
    assert code == 0
    assert "elsewhere" in out
    assert "orders" not in out


def test_an_unreachable_server_is_one_line(capsys):
    code, out, err = run(capsys, "state", "list", "postgresql://nobody@127.0.0.1:1/none")
    assert (code, out) == (1, "")
    assert "cannot connect" in err
    assert err.count("\n") == 1
