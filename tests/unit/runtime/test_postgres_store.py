"""The PostgreSQL commit state store: what only it has - advisory locks held by
connections, a schema of its own, operator queries, and a server that can go away.

The contract every store keeps is tested in test_store_contract.py. Everything here
runs against the real local server of the ``postgres_server`` fixture, on a fresh
database per test (``postgres_url``); crashes and races use real subprocesses.
"""

import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import cloudpickle
import psycopg
import pytest

from sinkv2.errors import (
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime import EpochStatus, PostgresCommitStateStore, SinkHolder
from sinkv2.runtime._sql.postgres import LAYOUT_VERSION, lock_ids, sink_lock_key
from tests.unit.runtime.store_backends import SOURCE_EPOCH_COLUMNS


@pytest.fixture
def store(postgres_url):
    return PostgresCommitStateStore(postgres_url)


def admin(url):
    return psycopg.connect(url, autocommit=True)


def wait_until(predicate, what, timeout_s=60.0):
    """Poll until ``predicate()`` holds; fail (never assert on timing) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.02)


def python(url, code, *args):
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom sinkv2.runtime import PostgresCommitStateStore\n"
            "store = PostgresCommitStateStore(sys.argv[1])\n" + textwrap.dedent(code),
            url,
            *map(str, args),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tables(url, schema="sinkv2"):
    with admin(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
        ).fetchall()
    return [name for (name,) in rows]


# -- the lock lives with the connection -------------------------------------------


def test_the_lock_is_a_session_advisory_lock_on_the_documented_key(store, postgres_url):
    with store.acquire("orders", job_id="j") as lease:
        key = store.lock_key("orders")
        assert key == sink_lock_key("sinkv2", "orders")
        assert -(2**63) <= key < 2**63
        classid, objid = lock_ids(key)
        with admin(postgres_url) as connection:
            rows = connection.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
                (classid, objid),
            ).fetchall()
        assert rows == [(lease.backend_pid,)]
        # the key names the schema and the sink id, nothing else
        assert store.lock_key("clicks") != key
        assert PostgresCommitStateStore(postgres_url, schema="other").lock_key("orders") != key
        assert PostgresCommitStateStore(postgres_url).lock_key("orders") == key


def test_store_commits_are_flushed_even_where_the_server_commits_asynchronously(postgres_url):
    # A restart after a server crash trusts the store's records: its commits must not be
    # lost with the server's synchronous_commit off (as the test server has it), and a
    # stronger setting the user chose is kept.
    with admin(postgres_url) as connection:
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("off",)
    stronger = f"{postgres_url}?options=-c%20synchronous_commit%3Dremote_apply"
    for url, setting in ((postgres_url, "local"), (stronger, "remote_apply")):
        with PostgresCommitStateStore(url)._connect("test", "check the setting") as connection:
            assert connection.execute("SHOW synchronous_commit").fetchone() == (setting,)


def test_terminating_the_holders_backend_frees_the_sink_id_and_voids_the_lease(store):
    lease = store.acquire("orders", job_id="stuck")
    lease.record_pending(1, explicit=True, serializer_version=1, payload=b"p")
    holder = store.holder("orders")
    assert holder == SinkHolder(
        sink_id="orders",
        backend_pid=lease.backend_pid,
        job_id="stuck",
        pid=os.getpid(),
        host=socket.gethostname(),
        since=holder.since,
        fencing_token=lease.fencing_token,
    )
    assert holder.is_this_process
    # a backend pid that no longer holds the sink id is left alone
    assert store.terminate_holder("orders", backend_pid=holder.backend_pid + 1) is None
    assert store.holder("orders") == holder

    assert store.terminate_holder("orders", backend_pid=holder.backend_pid) == holder
    assert store.holder("orders") is None
    assert store.terminate_holder("orders") is None  # nobody holds it now

    with store.acquire("orders", job_id="rerun") as rerun:
        assert rerun.fencing_token == lease.fencing_token + 1
        assert rerun.get(1).status is EpochStatus.PENDING
    for call in (lambda: lease.mark_committed(1), lambda: lease.get(1), lease.record_job):
        with pytest.raises(CommitStateError, match=r"connection .* was lost") as caught:
            call()
        assert "another driver may hold the sink id now" in str(caught.value)
        assert "Nothing was written by this call" in str(caught.value)
    assert "lost" in repr(lease)
    lease.release()
    lease.release()
    with pytest.raises(IllegalLifecycleError, match="was released"):
        lease.get(1)


HOLD = """
    import os
    lease = store.acquire("orders", job_id="doomed-job")
    lease.record_pending(1, explicit=True, serializer_version=3, payload=b"staged")
    print(os.getpid(), lease.backend_pid, lease.fencing_token, flush=True)
    sys.stdin.readline()
"""


def test_a_sigkilled_drivers_lock_dies_with_its_connection(store):
    with python(store.conninfo, HOLD) as child:
        pid, backend_pid, token = map(int, child.stdout.readline().split())
        with pytest.raises(ConcurrentCommitError) as caught:
            store.acquire("orders", job_id="rerun")
        message = str(caught.value)
        assert f"job 'doomed-job' (pid {pid} on host {socket.gethostname()!r}" in message
        assert f"PostgreSQL backend pid {backend_pid}" in message
        assert f"SELECT pg_terminate_backend({backend_pid})" in message
        assert "terminate_holder('orders')" in message
        assert "this process" not in message
        os.kill(pid, signal.SIGKILL)
        child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    # the server notices the closed socket and ends the backend, which drops the lock
    wait_until(lambda: store.holder("orders") is None, "the dead driver's lock vanishing")
    with store.acquire("orders", job_id="rerun") as lease:
        assert lease.fencing_token == token + 1
        [record] = lease.epochs(EpochStatus.PENDING)
        assert (record.job_id, record.payload) == ("doomed-job", b"staged")
        lease.mark_committed(1)


RACE = """
    sys.stdin.readline()
    from sinkv2.errors import ConcurrentCommitError
    try:
        lease = store.acquire("orders", job_id=sys.argv[2])
    except ConcurrentCommitError as error:
        print("refused", type(error).__name__, flush=True)
    else:
        print("held", lease.fencing_token, flush=True)
        sys.stdin.readline()
        lease.release()
"""


def test_processes_racing_to_acquire_let_exactly_one_hold_the_sink_id(store):
    store.acquire("warm-up", job_id="j").release()  # tables exist; the race is on the lock
    children = [python(store.conninfo, RACE, f"racer-{n}") for n in range(4)]
    try:
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        answers = [child.stdout.readline().split() for child in children]
        assert sorted(answer[0] for answer in answers) == ["held"] + ["refused"] * 3
        assert [answer for answer in answers if answer[0] == "held"] == [["held", "1"]]
        for child, answer in zip(children, answers, strict=True):
            child.communicate("done\n" if answer[0] == "held" else "", timeout=60)
            assert child.returncode == 0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()
    with store.acquire("orders", job_id="after") as lease:
        assert lease.fencing_token == 2


def test_a_server_restart_between_acquire_and_a_write_fails_the_write_clearly(
    store, postgres_server
):
    lease = store.acquire("orders", job_id="before-restart")
    try:
        lease.record_pending(1, explicit=True, serializer_version=1, payload=b"p")
        postgres_server.restart()
        with pytest.raises(CommitStateError) as caught:
            lease.mark_committed(1)
        message = str(caught.value)
        assert "could not record epoch 1 as committed" not in message  # not a plain refusal
        assert "cannot record epoch 1 as committed for sink 'orders'" in message
        assert f"connection (backend pid {lease.backend_pid}) was lost" in message
        assert "re-run the job" in message
        with pytest.raises(CommitStateError, match="was lost"):
            lease.next_epoch()
    finally:
        lease.release()
    with store.acquire("orders", job_id="after-restart") as rerun:
        assert rerun.get(1).status is EpochStatus.PENDING
        assert rerun.fencing_token == lease.fencing_token + 1


def test_a_takeover_waits_for_a_write_in_flight_and_then_fences_the_old_lease(store, postgres_url):
    """The fence row is read FOR SHARE: a token increment cannot slip between check and write."""
    lease = store.acquire("orders", job_id="old")
    try:
        with admin(postgres_url) as other, other.transaction():
            other.execute("SELECT 1 FROM sinkv2.sink_fence WHERE sink_id = 'orders' FOR UPDATE")
            outcome = []

            def write():
                try:
                    lease.record_pending(1, explicit=True, serializer_version=1, payload=b"p")
                except StaleFencingTokenError as error:
                    outcome.append(error)
                else:
                    outcome.append("written")

            writer = threading.Thread(target=write)
            writer.start()
            wait_until(
                lambda: _waiting_on_a_lock(postgres_url, lease.backend_pid),
                "the lease's write waiting for the fence row",
            )
            other.execute(
                "UPDATE sinkv2.sink_fence SET fencing_token = fencing_token + 1, "
                "holder_job_id = 'usurper' WHERE sink_id = 'orders'"
            )
        writer.join(timeout=60)
        assert not writer.is_alive()
        # the write read the fence row after the takeover committed, and saw the new token
        [error] = outcome
        assert isinstance(error, StaleFencingTokenError), error
        assert "the sink's current token is 2, held by job 'usurper'" in str(error)
        assert store.epochs("orders") == []
    finally:
        lease.release()


def _waiting_on_a_lock(url, backend_pid):
    with admin(url) as connection:
        row = connection.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (backend_pid,)
        ).fetchone()
    return row is not None and row[0] == "Lock"


# -- the schema -------------------------------------------------------------------


def test_concurrent_first_acquires_create_the_tables_once(postgres_url):
    stores = [PostgresCommitStateStore(postgres_url, schema="fresh") for _ in range(8)]
    start = threading.Barrier(len(stores))
    results, errors = [], []

    def first_acquire(n):
        start.wait()
        try:
            with stores[n].acquire(f"sink-{n}", job_id="j") as lease:
                results.append(lease.fencing_token)
        except Exception as error:  # noqa: BLE001  # reported below
            errors.append(error)

    threads = [threading.Thread(target=first_acquire, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [1] * len(stores)
    with admin(postgres_url) as connection:
        layout = connection.execute("SELECT * FROM fresh.sink_store_layout").fetchall()
    assert layout == [(True, LAYOUT_VERSION)]


FENCE_COLUMNS = [
    "fencing_token",
    "holder_job_id",
    "holder_pid",
    "holder_host",
    "holder_since",
    "holder_backend_pid",
]


def test_the_layout_is_the_documented_one(store, postgres_url):
    store.acquire("orders", job_id="j").release()
    with admin(postgres_url) as connection:
        rows = connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'sinkv2' ORDER BY table_name, ordinal_position"
        ).fetchall()
    columns = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    assert columns == {
        "pending_sink_state": [
            "sink_id",
            "epoch",
            "status",
            "explicit",
            "serializer_version",
            "payload",
            "fencing_token",
            "job_id",
            "updated_at",
            "checkpoint_id",
            "writer_states",
        ],
        "sink_fence": ["sink_id", *FENCE_COLUMNS],
        "sink_job": ["sink_id", "job_id", "fencing_token", "started_at"],
        "sink_origin": ["sink_id", "origin", "bound_at"],
        "sink_result": ["sink_id", "job_id", "recorded_at", "outcome"],
        "sink_store_layout": ["singleton", "version"],
        "source_epoch_state": SOURCE_EPOCH_COLUMNS,
        "source_fence": ["source_id", *FENCE_COLUMNS],
    }


def test_a_schema_with_the_stores_tables_but_no_layout_is_refused_untouched(postgres_url):
    with admin(postgres_url) as connection:
        connection.execute("CREATE SCHEMA sinkv2")
        connection.execute("CREATE TABLE sinkv2.sink_fence (sink_id TEXT)")
    store = PostgresCommitStateStore(postgres_url)
    with pytest.raises(CommitStateError, match=r"not a commit state store: .*\['sink_fence'\]"):
        store.acquire("orders", job_id="j")
    with pytest.raises(CommitStateError, match="not a commit state store"):
        store.sink_ids()
    assert tables(postgres_url) == ["sink_fence"]


def test_an_empty_layout_table_is_refused(store, postgres_url):
    store.acquire("orders", job_id="j").release()
    with admin(postgres_url) as connection:
        connection.execute("DELETE FROM sinkv2.sink_store_layout")
    with pytest.raises(CommitStateError, match="is empty, so the layout of the store is unknown"):
        store.acquire("orders", job_id="j")


def test_a_schema_shared_with_other_tables_is_fine_and_stores_in_two_schemas_are_apart(
    postgres_url,
):
    with admin(postgres_url) as connection:
        connection.execute('CREATE SCHEMA "Shared Place"')
        connection.execute('CREATE TABLE "Shared Place".users (name TEXT)')
    shared = PostgresCommitStateStore(postgres_url, schema="Shared Place")
    default = PostgresCommitStateStore(postgres_url)
    with (
        shared.acquire("orders", job_id="a") as one,
        default.acquire("orders", job_id="b") as two,
    ):
        one.record_pending(1, explicit=True, serializer_version=1, payload=b"shared")
        assert two.get(1) is None
        assert (one.fencing_token, two.fencing_token) == (1, 1)
    assert "users" in tables(postgres_url, "Shared Place")
    assert [r.payload for r in shared.epochs("orders")] == [b"shared"]
    assert default.epochs("orders") == []


# -- privileges -------------------------------------------------------------------


@pytest.fixture
def limited_role(postgres_url):
    """A login role with no privilege beyond CONNECT (PostgreSQL 15's defaults)."""
    role = f"limited_{uuid.uuid4().hex[:8]}"
    with admin(postgres_url) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN")
    yield role
    with admin(postgres_url) as connection:
        connection.execute(f"DROP OWNED BY {role}")
        connection.execute(f"DROP ROLE {role}")


def _as_role(url, role):
    return PostgresCommitStateStore(f"{url}?user={role}")


def test_a_role_without_create_gets_the_privilege_hint_and_one_with_a_schema_works(
    postgres_url, limited_role
):
    store = _as_role(postgres_url, limited_role)
    with pytest.raises(CommitStateError) as caught:
        store.acquire("orders", job_id="j")
    message = str(caught.value)
    assert "InsufficientPrivilege" in message
    assert "needs CREATE on the database (or CREATE and USAGE on the schema" in message
    assert tables(postgres_url) == []

    with admin(postgres_url) as connection:
        connection.execute("CREATE SCHEMA sinkv2")
        connection.execute(f"GRANT USAGE, CREATE ON SCHEMA sinkv2 TO {limited_role}")
    with store.acquire("orders", job_id="j") as lease:
        lease.record_pending(1, explicit=True, serializer_version=1, payload=b"p")
        assert lease.mark_committed(1).status is EpochStatus.COMMITTED


def test_terminating_another_roles_holder_needs_the_right_to_signal_it(postgres_url, limited_role):
    with admin(postgres_url) as connection:
        connection.execute("CREATE SCHEMA sinkv2")
        connection.execute(f"GRANT USAGE, CREATE ON SCHEMA sinkv2 TO {limited_role}")
    limited = _as_role(postgres_url, limited_role)
    limited.acquire("warm-up", job_id="j").release()  # the tables belong to the limited role
    superuser = PostgresCommitStateStore(postgres_url)
    with superuser.acquire("orders", job_id="j") as lease:
        with pytest.raises(CommitStateError, match="needs the same role, membership in pg_signal"):
            limited.terminate_holder("orders")
        assert limited.holder("orders").backend_pid == lease.backend_pid
        lease.record_job()  # still held, still usable


def test_a_schema_whose_name_needs_quoting_holds_the_whole_store(postgres_url):
    schema = 'Odd "name" 100%s ?'  # quotes, a percent sign and a question mark
    store = PostgresCommitStateStore(postgres_url, schema=schema)
    with store.acquire("orders", job_id="j") as lease:
        lease.record_job()
        lease.bind_origin("spark query 1")
        lease.record_pending(1, explicit=True, serializer_version=1, payload=b"a")
        lease.mark_committed(1)
        lease.record_pending(2, explicit=True, serializer_version=1, payload=b"b")
        assert store.sink_ids() == ["orders"]
        assert store.epochs("orders") == lease.epochs()
        assert store.jobs("orders") == ["j"]
        assert store.origin("orders") == "spark query 1"
        assert store.holder("orders").fencing_token == lease.fencing_token
        assert lease.prune(2) == 1
    assert tables(postgres_url, schema) == [
        "pending_sink_state",
        "sink_fence",
        "sink_job",
        "sink_origin",
        "sink_result",
        "sink_store_layout",
        "source_epoch_state",
        "source_fence",
    ]
    assert tables(postgres_url) == []  # nothing went to the default schema


# -- operator queries -------------------------------------------------------------


def test_operator_queries_on_a_store_without_tables_create_nothing(store, postgres_url):
    assert store.sink_ids() == []
    assert store.epochs("orders") == []
    assert store.jobs("orders") == []
    assert store.origin("orders") is None
    assert store.holder("orders") is None
    assert store.terminate_holder("orders") is None
    assert tables(postgres_url) == []


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
        assert (holder.job_id, holder.backend_pid, holder.fencing_token) == (
            "running",
            lease.backend_pid,
            lease.fencing_token,
        )
        assert "job 'running'" in str(holder)
        assert f"backend pid {lease.backend_pid}" in str(holder)
        assert store.holder("clicks") is None
        lease.mark_committed(2)  # the queries took nothing the lease needs


def test_a_holder_not_recorded_yet_is_shown_by_its_backend_only(store, postgres_url):
    """Between taking the lock and recording itself, a driver is known by its backend."""
    with admin(postgres_url) as connection:
        connection.execute("SELECT pg_advisory_lock(%s)", (store.lock_key("orders"),))
        backend_pid = connection.info.backend_pid
        holder = store.holder("orders")
        assert holder == SinkHolder("orders", backend_pid, None, None, None, None, None)
        assert str(holder) == (
            f"a driver whose details are not recorded yet (PostgreSQL backend pid {backend_pid})"
        )
        with pytest.raises(ConcurrentCommitError, match="not recorded yet"):
            store.acquire("orders", job_id="j")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.epochs(""), "'sink_id' must be a non-empty str"),
        (lambda s: s.epochs("orders", "pending"), "takes EpochStatus members"),
        (lambda s: s.holder(7), "'sink_id' must be a non-empty str"),
        (lambda s: s.terminate_holder("orders", backend_pid=0), "'backend_pid' must be"),
        (lambda s: s.terminate_holder("orders", backend_pid=True), "'backend_pid' must be"),
        (lambda s: s.lock_key(None), "'sink_id' must be a non-empty str"),
    ],
)
def test_operator_queries_reject_bad_arguments(store, call, message):
    with pytest.raises(SinkConfigurationError, match=message):
        call(store)


# -- configuration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"conninfo": ""}, "'conninfo' must be a non-empty str"),
        ({"conninfo": b"host=x"}, "'conninfo' must be a non-empty str .*of type bytes"),
        ({"conninfo": "host=x nonsense"}, "not a connection string libpq can parse"),
        ({"conninfo": "host=x", "schema": ""}, "'schema' must be a non-empty str"),
        ({"conninfo": "host=x", "schema": "s" * 64}, "at most 63 bytes"),
        ({"conninfo": "host=x", "schema": "a\0b"}, "without NUL"),
    ],
)
def test_bad_settings_are_refused_at_construction(kwargs, message):
    with pytest.raises(SinkConfigurationError, match=message):
        PostgresCommitStateStore(**kwargs)


def test_the_store_pickles_and_hides_passwords_in_repr_and_messages(postgres_url):
    store = PostgresCommitStateStore(
        "host=127.0.0.1 port=1 dbname=app user=me password=hunter2 connect_timeout=5",
        schema="s",
    )
    for dumps in (pickle.dumps, cloudpickle.dumps):
        revived = pickle.loads(dumps(store))
        assert revived == store
        assert hash(revived) == hash(store)
        assert (revived.conninfo, revived.schema) == (store.conninfo, "s")
    assert "hunter2" not in repr(store)
    assert "password=***" in repr(store)
    assert store.target == (
        "PostgreSQL commit state store (host=127.0.0.1 port=1 dbname=app user=me, schema 's')"
    )
    assert store != PostgresCommitStateStore(postgres_url, schema="s")
    # nothing listens on port 1: a clear error, naming the server but not the password
    with pytest.raises(CommitStateError, match="could not take sink 'orders': cannot connect") as e:
        store.acquire("orders", job_id="j")
    assert "host=127.0.0.1 port=1" in str(e.value)
    assert "hunter2" not in str(e.value)


def test_without_psycopg_the_store_says_how_to_install_it():
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from sinkv2.runtime import PostgresCommitStateStore\n"
        "try:\n    PostgresCommitStateStore('host=x')\n"
        "except ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (
        "PostgresCommitStateStore needs psycopg; install it with: pip install 'sinkv2[postgres]'"
    )


# What main wrote before sources had tables, literally: layout 3.
LAYOUT_3 = (
    "CREATE SCHEMA sinkv2",
    """CREATE TABLE sinkv2.pending_sink_state (
        sink_id TEXT NOT NULL, epoch BIGINT NOT NULL CHECK (epoch > 0),
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit BOOLEAN NOT NULL, serializer_version BIGINT NOT NULL, payload BYTEA NOT NULL,
        fencing_token BIGINT NOT NULL, job_id TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        checkpoint_id BIGINT NOT NULL, writer_states BYTEA NOT NULL DEFAULT '\\x',
        PRIMARY KEY (sink_id, epoch))""",
    """CREATE TABLE sinkv2.sink_fence (
        sink_id TEXT PRIMARY KEY, fencing_token BIGINT NOT NULL, holder_job_id TEXT NOT NULL,
        holder_pid BIGINT NOT NULL, holder_host TEXT NOT NULL,
        holder_since DOUBLE PRECISION NOT NULL, holder_backend_pid INTEGER NOT NULL)""",
    """CREATE TABLE sinkv2.sink_job (
        sink_id TEXT NOT NULL, job_id TEXT NOT NULL, fencing_token BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (sink_id, job_id))""",
    """CREATE TABLE sinkv2.sink_origin (
        sink_id TEXT PRIMARY KEY NOT NULL, origin TEXT NOT NULL,
        bound_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE sinkv2.sink_store_layout (
        singleton BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton), version INTEGER NOT NULL)""",
    "INSERT INTO sinkv2.sink_store_layout (version) VALUES (3)",
)


def test_a_layout_3_schema_gets_the_source_tables_and_keeps_its_sink_rows(store, postgres_url):
    rows = [
        ("orders", 1, "committed", True, 2, b"one", 4, "old", 1.0, 1, b"states"),
        ("orders", 2, "pending", False, 2, b"two", 4, "old", 2.0, 2, b""),
    ]
    with admin(postgres_url) as connection:
        for statement in LAYOUT_3:
            connection.execute(statement)
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO sinkv2.pending_sink_state VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
        connection.execute(
            "INSERT INTO sinkv2.sink_fence VALUES ('orders', 4, 'old', 1, 'h', 1.0, 1)"
        )
        connection.execute("INSERT INTO sinkv2.sink_job VALUES ('orders', 'old', 4, 1.0)")
    # an operator's read migrates it, as an acquire would
    assert store.source_ids() == []
    with admin(postgres_url) as connection:
        assert connection.execute("SELECT version FROM sinkv2.sink_store_layout").fetchall() == [
            (LAYOUT_VERSION,)
        ]
        stored = connection.execute(
            "SELECT * FROM sinkv2.pending_sink_state ORDER BY epoch"
        ).fetchall()
    assert stored == rows
    assert "source_epoch_state" in tables(postgres_url)
    with store.acquire_source("orders", job_id="new") as source:
        assert source.fencing_token == 1
        source.record_epoch(0, enumerator_checkpoint=b"cp", assignment=b"as")
    with store.acquire("orders", job_id="new") as sink:
        assert sink.fencing_token == 5
        assert sink.get(1).writer_states == b"states"
        assert sink.unfinished_jobs() == ["old"]
        sink.mark_committed(2)
