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

    A test that leaves a prepared transaction or a replication slot behind fails here
    (`fresh_database`).
    """
    from tests.servers.postgres_server import fresh_database

    with fresh_database(postgres_server) as url:
        yield url
