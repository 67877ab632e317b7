"""Shared fixtures: hypothesis profiles, and one local Spark session per test run.

The Spark session starts only when a test asks for it, so ``tests/unit`` never
starts a JVM. ``local[2,4]`` lets each task fail up to 3 times and be retried.
"""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Executors must run the interpreter that has sinkv2 and pyarrow installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("sinkv2-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server():
    """One real Spark Connect server per test run, from pyspark's own jars (see
    ``tests/servers/spark_connect_server.py``); started only when a test asks for it."""
    from tests.servers.spark_connect_server import LocalSparkConnectServer

    try:
        server = LocalSparkConnectServer.start()
    except RuntimeError as error:
        pytest.fail(f"these tests need a Spark Connect server: {error}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _connect_client(connect_server):
    session = connect_server.session()
    yield session
    session.stop()


@pytest.fixture
def connect_session(_connect_client, monkeypatch):
    """A Spark Connect session on `connect_server`, apart from the classic `spark` one.

    PySpark decides process-wide whether ``pyspark.sql.functions`` builds Connect or
    classic columns (``SPARK_CONNECT_MODE_ENABLED``); it is set for this test only,
    so a classic session in the same run keeps working.
    """
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return _connect_client


@pytest.fixture
def state_store(tmp_path):
    from sinkv2.runtime import SqliteCommitStateStore

    return SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")


@pytest.fixture
def translator(state_store):
    from sinkv2.runtime import CommitRetryPolicy
    from sinkv2_spark import SinkTopologyTranslator

    return SinkTopologyTranslator(
        state_store=state_store,
        retry_policy=CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0),
    )


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server per test run (started only when a test asks for it)."""
    from tests.servers.postgres_server import LocalPostgresServer

    try:
        server = LocalPostgresServer.start()
    except RuntimeError as error:
        pytest.fail(f"these tests need a PostgreSQL server: {error}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """The URL of a fresh, empty database; dropped after the test.

    A test that leaves a prepared transaction or a replication slot behind fails here,
    after they are removed: prepared transactions hold locks and block vacuum, a slot
    holds WAL, and no sink or source may leave one once its run is over.
    """
    import uuid

    name = f"t_{uuid.uuid4().hex[:12]}"
    with postgres_server.connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with postgres_server.connect() as admin:
        left = admin.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = %s ORDER BY gid", (name,)
        ).fetchall()
        if left:
            import psycopg
            from psycopg import sql

            with psycopg.connect(url, autocommit=True) as connection:
                for (gid,) in left:  # a utility statement: the gid is a literal, not a parameter
                    connection.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        slots = admin.execute(
            "SELECT slot_name, active_pid FROM pg_replication_slots WHERE database = %s "
            "ORDER BY slot_name",
            (name,),
        ).fetchall()
        for slot, pid in slots:
            if pid is not None:  # a walsender still streams it: end it, wait for it
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    assert not left, f"prepared transactions left behind: {[gid for (gid,) in left]}"
    assert not slots, f"replication slots left behind: {[slot for (slot, _) in slots]}"
