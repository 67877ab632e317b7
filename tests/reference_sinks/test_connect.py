"""Every reference sink on a real Spark Connect server, through both doors, under task failures.

The data source door runs the same writes from the run's classic session too.

``apply()`` runs the contract kit's Spark scenarios (`check_sink_on_spark`) on the
Connect session; ``df.write.format("sinkv2")`` runs the factories of
``connect_sinks`` (the server's workers import them by name). Each write has task
attempts failing mid-partition, at the first element, on a retry and after every
element was staged (at ``flush(True)``): exactly-once sinks show every row once,
at-least-once ones every row (Redis keys are idempotent; HTTP may repeat rows).
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter

import pytest

from sinkv2 import DeliveryGuarantee
from sinkv2.runtime import EpochStatus, SqliteCommitStateStore
from sinkv2.testing import SinkUnderTest
from sinkv2_spark import register
from sinkv2_spark.testing import check_sink_on_spark
from tests.reference_sinks import connect_sinks

pytestmark = [pytest.mark.spark, pytest.mark.connect]

N = 400
FACTORIES = "tests.reference_sinks.connect_sinks"
FAILURES = [[0, 0, 5], [1, 0, 0], [1, 1, 30], [3, 0, 10_000]]  # 10_000: at flush(True)
SCHEDULE = {(s, a): at for s, a, at in FAILURES}
_names = itertools.count()


def frame(spark, n=N, partitions=4):
    return (
        spark.range(n)
        .selectExpr(
            "id", "concat('k', cast(id % 7 as string)) as key", "cast(id as double) / 2 as value"
        )
        .repartition(partitions)
    )


def expected(n=N):
    return [{"id": i, "key": f"k{i % 7}", "value": i / 2} for i in range(n)]


def by_id(rows):
    return sorted(rows, key=lambda row: row["id"])


@pytest.fixture(scope="module")
def redis_server():
    from tests.servers.redis_server import LocalRedisServer

    server = LocalRedisServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http_server():
    from tests.servers.http_server import LocalServer

    server = LocalServer.start()
    yield server
    server.stop()


# --- each sink: a fresh destination, its door options, and what it shows -----------------


def files_target(tmp_path_factory):
    from tests.reference_sinks.files.test_contract import read_visible

    base = tmp_path_factory.mktemp("files")
    out = base / "out"
    return (
        {"path": str(out)},
        lambda: connect_sinks.files(path=str(out)),
        lambda: read_visible(out, "parquet"),
        lambda: shutil.rmtree(base, ignore_errors=True),
    )


def files_native_target(tmp_path_factory):
    from tests.reference_sinks.files.test_contract import read_visible

    base = tmp_path_factory.mktemp("files")
    out = base / "out"
    return (
        {"path": str(out)},
        lambda: connect_sinks.files_native(path=str(out)),
        lambda: read_visible(out, "parquet"),
        lambda: shutil.rmtree(base, ignore_errors=True),
    )


def iceberg_target(tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("lake")
    table = f"ns.events_{next(_names)}"

    def read():
        from reference_sinks.iceberg import IcebergSink

        return IcebergSink.local(warehouse, table).load_table().scan().to_arrow().to_pylist()

    return (
        {"warehouse": str(warehouse), "table": table},
        lambda: connect_sinks.iceberg(warehouse=str(warehouse), table=table),
        read,
        lambda: shutil.rmtree(warehouse, ignore_errors=True),
    )


def postgres_target(url):
    from tests.reference_sinks.postgres.helpers import create_table, prepared, read_rows

    name = create_table(
        url,
        "CREATE TABLE {name} (id bigint, key text, value double precision)",
        f"events_{next(_names)}",
    )

    def read():
        assert prepared(url) == []  # no prepared transaction outlives the run
        return read_rows(url, name, "id, key, value")

    return (
        {"connection": url, "table": name},
        lambda: connect_sinks.postgres(connection=url, table=name),
        read,
        lambda: None,
    )


def redis_target(server):
    with server.client() as client:
        client.flushall()

    def read():
        with server.client() as client:
            rows = []
            for key in client.scan_iter("row:*"):
                fields = client.hgetall(key)
                rows.append(
                    {
                        "id": int(fields[b"id"]),
                        "key": fields[b"key"].decode(),
                        "value": float(fields[b"value"]),
                    }
                )
            return rows

    return ({"url": server.url}, lambda: connect_sinks.redis(url=server.url), read, lambda: None)


def http_target(server):
    server.reset()
    return (
        {"url": server.ingest_url},
        lambda: connect_sinks.http(url=server.ingest_url),
        lambda: [{k: r[k] for k in ("id", "key", "value")} for r in server.records()],
        server.reset,
    )


SINKS = {
    "files": DeliveryGuarantee.EXACTLY_ONCE,
    "files_native": DeliveryGuarantee.EXACTLY_ONCE,  # Spark's Parquet writer (issue 13)
    "iceberg": DeliveryGuarantee.EXACTLY_ONCE,
    "postgres": DeliveryGuarantee.EXACTLY_ONCE,
    "redis": DeliveryGuarantee.AT_LEAST_ONCE,
    "http": DeliveryGuarantee.AT_LEAST_ONCE,
}


@pytest.fixture
def target(request, tmp_path_factory):
    """(door options, make_sink, read_back, clean_up) for a fresh destination."""
    name = request.param
    if name == "files":
        return lambda: files_target(tmp_path_factory)
    if name == "files_native":
        return lambda: files_native_target(tmp_path_factory)
    if name == "iceberg":
        return lambda: iceberg_target(tmp_path_factory)
    if name == "postgres":
        url = request.getfixturevalue("postgres_url")
        return lambda: postgres_target(url)
    if name == "redis":
        server = request.getfixturevalue("redis_server")
        return lambda: redis_target(server)
    server = request.getfixturevalue("http_server")
    return lambda: http_target(server)


def check_shows(name, visible):
    if SINKS[name] is DeliveryGuarantee.EXACTLY_ONCE or name == "redis":
        assert by_id(visible) == expected()  # every row once (Redis: one key per id)
    else:
        counts = Counter(json.dumps(row, sort_keys=True) for row in visible)
        assert set(counts) == {json.dumps(row, sort_keys=True) for row in expected()}


@pytest.mark.parametrize("target", list(SINKS), indirect=True)
def test_apply_under_the_kit_s_task_failures(connect_session, target, request):
    name = request.node.callspec.params["target"]

    def make():
        _, sink, read, close = target()
        return SinkUnderTest(sink(), read_back=read, close=close)

    check_sink_on_spark(
        connect_session,
        make,
        guarantee=SINKS[name],
        data=frame(connect_session),
        expected=expected(),
        examples=1,
        always=[SCHEDULE],
        sink_id=f"connect-apply-{name}",
    )


@pytest.mark.parametrize("target", list(SINKS), indirect=True)
def test_the_data_source_under_task_failures(connect_session, target, request, tmp_path):
    name = request.node.callspec.params["target"]
    write_through_the_door(connect_session, name, target, tmp_path)


@pytest.mark.parametrize("target", list(SINKS), indirect=True)
def test_the_data_source_on_a_classic_session_under_task_failures(spark, target, request, tmp_path):
    """The same writes from the run's classic (py4j) session: one door, both kinds of session."""
    name = request.node.callspec.params["target"]
    write_through_the_door(spark, name, target, tmp_path)


def write_through_the_door(session, name, target, tmp_path):
    register(session)
    options, _, read, close = target()
    state = tmp_path / "state.sqlite"
    writer = (
        frame(session)
        .write.format("sinkv2")
        .option("sink", f"{FACTORIES}:{name}")
        .option("sink_id", f"connect-door-{name}")
        .option("state_store", str(state))
        .option("failures", json.dumps(FAILURES))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    try:
        writer.mode("append").save()
        check_shows(name, read())
    finally:
        close()
    with SqliteCommitStateStore(state).acquire(f"connect-door-{name}", job_id="inspect") as lease:
        assert [(r.epoch, r.status) for r in lease.epochs()] == [(1, EpochStatus.COMMITTED)]
