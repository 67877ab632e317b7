"""RedisSink against a real redis-server (no Spark): modes, retries, state, errors."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import attrs
import pytest
import redis
import redis.exceptions

from reference_sinks.redis import HashMode, RedisSink, SetMode, StreamMode
from sinkv2.asyncsink import AsyncSinkWriterConfiguration, ExponentialBackoff
from sinkv2.errors import FatalDestinationError, SinkConfigurationError, UndeliverableEntriesError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
from tests.reference_sinks.redis.helpers import FlakyRoundTrips, write_all
from tests.servers.redis_server import LocalRedisServer, _free_port

ROWS = [{"id": i, "name": f"n{i}", "score": i / 2, "note": None} for i in range(1000)]
SMALL = AsyncSinkWriterConfiguration(
    max_batch_size=50,
    max_in_flight_requests=4,
    max_buffered_requests=200,
    request_timeout_ms=60_000,  # no request of a loaded machine takes that long
    retry_backoff=ExponentialBackoff(initial_ms=1, max_ms=20),
)


WAIT_S = 60  # for what must happen: a loaded machine slows a test, it does not fail it


def once(condition, action):
    """Run ``action`` on a thread as soon as ``condition()`` holds (or after WAIT_S)."""

    def run():
        deadline = time.monotonic() + WAIT_S
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.005)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def send_errors(context):
    return context.metrics.get_num_records_send_errors_counter().get_count()


def set_sink(server, **options):
    return RedisSink(server.url, SetMode(key="user:{id}", **options), configuration=SMALL)


def test_set_mode_writes_every_row_as_json(redis_server, redis_client):
    _, context = write_all(set_sink(redis_server), ROWS)
    assert redis_client.dbsize() == len(ROWS)
    assert json.loads(redis_client.get("user:7")) == ROWS[7]
    assert context.metrics.get_num_records_send_counter().get_count() == len(ROWS)
    assert context.metrics.get_num_records_send_errors_counter().get_count() == 0


def test_set_mode_value_function_and_ttl(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url,
        SetMode(
            key=lambda row: f"score:{row['id']}", value=lambda row: row["score"], ttl_ms=60_000
        ),
        configuration=SMALL,
    )
    write_all(sink, ROWS[:10])
    assert redis_client.get("score:3") == b"1.5"
    assert 0 < redis_client.pttl("score:3") <= 60_000


def test_ttl_expires_keys(redis_server, redis_client):
    write_all(set_sink(redis_server, ttl_ms=1000), ROWS[:5])
    assert 0 < redis_client.pttl("user:1") <= 1000
    deadline = time.monotonic() + 30  # Redis expires keys lazily and in sampled cycles
    while redis_client.dbsize() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.dbsize() == 0


def test_rewriting_the_same_rows_is_idempotent(redis_server, redis_client):
    sink = set_sink(redis_server)
    write_all(sink, ROWS)
    before = {key: redis_client.get(key) for key in redis_client.scan_iter()}
    write_all(sink, ROWS[::-1][:300] + ROWS)
    after = {key: redis_client.get(key) for key in redis_client.scan_iter()}
    assert after == before


def test_the_last_element_of_a_key_wins(redis_server, redis_client):
    updates = [{"id": i % 7, "name": f"v{i}"} for i in range(500)]
    write_all(
        RedisSink(
            redis_server.url, SetMode(key="k:{id}", value=lambda r: r["name"]), configuration=SMALL
        ),
        updates,
    )
    for key_id in range(7):
        last = max(i for i in range(500) if i % 7 == key_id)
        assert redis_client.get(f"k:{key_id}") == f"v{last}".encode()


def test_hash_mode_merges_non_null_columns(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url, HashMode(key="user:{id}", ttl_ms=60_000), configuration=SMALL
    )
    write_all(sink, ROWS[:100])
    assert redis_client.hgetall("user:5") == {b"id": b"5", b"name": b"n5", b"score": b"2.5"}
    assert redis_client.pttl("user:5") > 0
    write_all(sink, [{"id": 5, "name": None, "extra": True}])
    assert redis_client.hgetall("user:5") == {
        b"id": b"5",
        b"name": b"n5",
        b"score": b"2.5",
        b"extra": b"true",
    }


def test_hash_mode_fields_function_and_all_null_rows(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url,
        HashMode(key="h:{id}", fields=lambda row: {"n": row["name"]}),
        configuration=SMALL,
    )
    _, context = write_all(sink, [{"id": 1, "name": "a"}, {"id": 2, "name": None}])
    assert redis_client.hgetall("h:1") == {b"n": b"a"}
    assert not redis_client.exists("h:2")  # Redis has no empty hash
    assert context.metrics.get_num_records_send_counter().get_count() == 2


def test_stream_mode_with_redis_ids_appends_every_row(redis_server, redis_client):
    sink = RedisSink(redis_server.url, StreamMode(key="events"), configuration=SMALL)
    write_all(sink, ROWS)
    entries = redis_client.xrange("events")
    assert len(entries) == len(ROWS)
    assert sorted(int(fields[b"id"]) for _, fields in entries) == list(range(len(ROWS)))
    assert b"note" not in entries[0][1]


def test_stream_mode_with_ids_ignores_redelivery(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url,
        StreamMode(key="s:{shard}", id=lambda row: f"{row['id'] + 1}"),
        configuration=SMALL,
    )
    rows = [{"shard": i % 3, "id": i} for i in range(300)]
    write_all(sink, rows)
    write_all(sink, rows[100:])  # a replay after a restore from an older checkpoint
    for shard in range(3):
        ids = [entry_id for entry_id, _ in redis_client.xrange(f"s:{shard}")]
        assert ids == [f"{i + 1}-0".encode() for i in range(shard, 300, 3)]


def test_stream_ids_out_of_order_fail_naming_stream_and_id(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url, StreamMode(key="s", id=lambda row: row["id"]), configuration=SMALL
    )
    with pytest.raises(FatalDestinationError, match=r"stream 's' with id 5-0.*out of order"):
        write_all(sink, [{"id": "7"}, {"id": "5"}])


def test_wrongtype_is_fatal_and_names_the_key(redis_server, redis_client):
    redis_client.rpush("user:3", "a list")
    sink = RedisSink(redis_server.url, HashMode(key="user:{id}"), configuration=SMALL)
    with pytest.raises(FatalDestinationError, match=r"HSET for key 'user:3': WRONGTYPE"):
        write_all(sink, ROWS[:10])


def test_an_oversize_entry_is_undeliverable(redis_server, redis_client):
    config = AsyncSinkWriterConfiguration(
        max_batch_size=10,
        max_buffered_requests=100,
        max_record_size_in_bytes=100,
        max_batch_size_in_bytes=1000,
    )
    sink = RedisSink(
        redis_server.url, SetMode(key="k:{id}", value=lambda r: r["v"]), configuration=config
    )
    with pytest.raises(
        UndeliverableEntriesError, match="larger than max_record_size_in_bytes=100"
    ) as raised:
        write_all(sink, [{"id": 1, "v": "x"}, {"id": 2, "v": "y" * 200}])
    assert raised.value.dead_letters[0].request_entry[0] == b"k:2"


def test_connection_failures_lose_nothing(redis_server, redis_client):
    sink = set_sink(redis_server)
    context = BasicWriterInitContext()
    writer = sink.create_writer(context)
    FlakyRoundTrips(fail_before={0, 3, 4}, fail_after={1, 7}).install(writer)
    element_context = BasicSinkWriterContext()
    for row in ROWS:
        writer.write(row, element_context)
    writer.flush(True)
    writer.close()
    assert redis_client.dbsize() == len(ROWS)
    metrics = context.metrics
    assert metrics.get_num_records_send_counter().get_count() == len(ROWS)
    assert 5 <= metrics.get_num_records_send_errors_counter().get_count() <= 5 * 50


def test_killed_connections_mid_stream_lose_nothing(redis_server, redis_client):
    # The retry budget is not under test here (a loaded machine can lose eleven
    # reconnects in a row to a killer this eager); that nothing is lost or doubled is.
    sink = RedisSink(
        redis_server.url,
        SetMode(key="user:{id}"),
        configuration=attrs.evolve(SMALL, max_retries_per_entry=None),
    )
    context = BasicWriterInitContext()
    writer = sink.create_writer(context)
    element_context = BasicSinkWriterContext()
    rows = [{"id": i, "v": i} for i in range(20_000)]
    stop = threading.Event()

    def killer():
        with redis_server.client() as admin:
            admin.client_setname("admin")
            while not stop.is_set():
                for client in admin.client_list():
                    if client["name"] != "admin":
                        admin.client_kill_filter(_id=client["id"])
                time.sleep(0.01)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        for row in rows:
            writer.write(row, element_context)
        writer.flush(True)
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert redis_client.dbsize() == len(rows)
    assert context.metrics.get_num_records_send_errors_counter().get_count() > 0


def test_server_paused_beyond_the_socket_timeout_loses_nothing(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url,
        SetMode(key="user:{id}"),
        configuration=SMALL,
        client_options={"socket_timeout": 0.1},
    )
    context = BasicWriterInitContext()
    writer = sink.create_writer(context)
    element_context = BasicSinkWriterContext()
    for row in ROWS[:100]:
        writer.write(row, element_context)
    # Paused until a write timed out on the socket: not a 400 ms pause that a loaded
    # machine could sit out before it sends anything.
    redis_client.client_pause(WAIT_S * 1000, all=False)
    unpause = once(lambda: send_errors(context) > 0, redis_client.client_unpause)
    try:
        for row in ROWS[100:]:
            writer.write(row, element_context)
        writer.flush(True)
    finally:
        unpause.join()
        writer.close()
    assert redis_client.dbsize() == len(ROWS)
    assert send_errors(context) > 0


def test_retryable_replies_are_retried(redis_server, redis_client):
    redis_client.config_set("maxmemory", "1")  # every write gets OOM
    config = attrs.evolve(
        SMALL,
        max_retries_per_entry=None,
        retry_backoff=ExponentialBackoff(initial_ms=10, max_ms=50),
    )
    sink = RedisSink(redis_server.url, SetMode(key="user:{id}"), configuration=config)
    context = BasicWriterInitContext()
    writer = sink.create_writer(context)
    element_context = BasicSinkWriterContext()

    def lift():
        with redis_server.client() as admin:
            admin.config_set("maxmemory", "0")

    # Lifted once a write was refused, not after a 100 ms timer a loaded machine
    # could overrun before the first write went out.
    thread = once(lambda: send_errors(context) > 0, lift)
    try:
        for row in ROWS:
            writer.write(row, element_context)
        writer.flush(True)
    finally:
        thread.join()
        redis_client.config_set("maxmemory", "0")
        writer.close()
    assert redis_client.dbsize() == len(ROWS)
    assert send_errors(context) > 0


@pytest.mark.parametrize("batch", [50, 500], ids=["some-delivered", "all-buffered"])
def test_a_writer_restored_from_its_state_delivers_the_rest(redis_server, redis_client, batch):
    config = attrs.evolve(SMALL, max_batch_size=batch, max_buffered_requests=batch * 4)
    sink = RedisSink(redis_server.url, SetMode(key="user:{id}"), configuration=config)
    serializer = sink.get_writer_state_serializer()
    writer, _ = write_all(sink, ROWS[:120], end=False)
    writer.flush(False)
    states = writer.snapshot_state(1)
    writer.close()  # a crash: the buffer is gone, the state survives
    restored = [
        serializer.deserialize(serializer.get_version(), serializer.serialize(state))
        for state in states
    ]
    in_state = sum(len(state) for state in restored)
    assert in_state > 0
    assert redis_client.dbsize() + in_state == 120
    if batch == 500:
        assert redis_client.dbsize() == 0
    context = BasicWriterInitContext(restored_checkpoint_id=1)
    write_all(sink, ROWS[120:], states=restored, context=context)
    assert redis_client.dbsize() == len(ROWS)
    assert context.metrics.get_num_records_send_counter().get_count() == len(ROWS) - 120 + in_state


def test_a_checkpoint_after_delivery_has_an_empty_state(redis_server, redis_client):
    writer, _ = write_all(set_sink(redis_server), ROWS[:75], end=False)
    writer.flush(False)
    states = writer.snapshot_state(1)
    remaining = sum(len(state) for state in states)
    writer.flush(True)
    assert writer.snapshot_state(2)[0].buffered_request_entries == ()
    writer.close()
    assert remaining == 25  # 75 rows, batches of 50: the last 25 wait in the buffer
    assert redis_client.dbsize() == 75


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RedisSink("http://x", SetMode(key="k")), "must be a redis://"),
        (lambda: RedisSink("redis://h", "SET"), "SetMode, HashMode or StreamMode"),
        (lambda: SetMode(key=""), "must not be empty"),
        (lambda: SetMode(key=42), "template str"),
        (lambda: SetMode(key="u:{id"), "does not parse"),
        (lambda: SetMode(key="u:{}"), "bare column name"),
        (lambda: SetMode(key="u:{a.b}"), "bare column name"),
        (lambda: SetMode(key="u:{id:>5}"), "bare column name"),
        (lambda: SetMode(key="k", ttl_ms=0), "positive int of milliseconds"),
        (lambda: HashMode(key="k", ttl_ms=True), "positive int of milliseconds"),
        (lambda: SetMode(key="k", value="name"), "must be a function"),
        (lambda: StreamMode(key="k", id="1-1"), "must be a function"),
        (
            lambda: RedisSink("redis://h", StreamMode(key="k", id=str), keep_key_order=False),
            "cannot go with StreamMode",
        ),
        (
            lambda: RedisSink("redis://h", SetMode(key="k"), keep_key_order="yes"),
            "True, False or None",
        ),
        (lambda: RedisSink("redis://h", SetMode(key="k"), client_options=[1]), "client_options"),
        (
            lambda: RedisSink("redis://h", SetMode(key="k"), client_options={"connection_pool": 1}),
            "must not set connection_pool.*Sentinel and Cluster",
        ),
        (
            lambda: RedisSink("redis+sentinel://h/mymaster", SetMode(key="k")),
            "for Redis Sentinel or Cluster, point it at the primary",
        ),
        (
            lambda: RedisSink("redis://h", SetMode(key="k"), configuration={}),
            "AsyncSinkWriterConfiguration",
        ),
        (
            lambda: RedisSink(
                "redis://h",
                SetMode(key="k"),
                configuration=AsyncSinkWriterConfiguration(ordering_key=len),
            ),
            "sets the configuration's ordering_key itself",
        ),
    ],
)
def test_bad_configuration_fails_when_the_sink_is_built(build, message):
    with pytest.raises(SinkConfigurationError, match=message):
        build()


@pytest.mark.parametrize(
    ("mode", "row", "message"),
    [
        (SetMode(key="u:{id}"), {"name": "x"}, "names column 'id', which the element lacks"),
        (SetMode(key="u:{id}"), {"id": None}, "column 'id' is null"),
        (SetMode(key=lambda r: None), {"id": 1}, "key function must return str"),
        (
            SetMode(key="k", value=lambda r: None),
            {"id": 1},
            "cannot store None as the value of key 'k'",
        ),
        (SetMode(key="k", value=lambda r: [1]), {"id": 1}, "cannot store \\[1\\] of type list"),
        (HashMode(key="k", fields=lambda r: 3), {"id": 1}, "must return a mapping"),
        (StreamMode(key="s"), {"id": None}, "has no non-null field"),
        (StreamMode(key="s", id=lambda r: "1-x"), {"id": 1}, "'<ms>-<seq>'"),
    ],
)
def test_bad_data_fails_in_write_with_the_key(redis_server, redis_client, mode, row, message):
    sink = RedisSink(redis_server.url, mode, configuration=SMALL)
    with pytest.raises(SinkConfigurationError, match=message):
        write_all(sink, [row])


def test_values_are_encoded_as_redis_stores_them(redis_server, redis_client):
    import datetime
    import decimal

    row = {
        "id": 1,
        "b": b"\x00\xff",
        "t": True,
        "d": decimal.Decimal("1.10"),
        "f": 0.1,
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "day": datetime.date(2024, 1, 2),
    }
    write_all(RedisSink(redis_server.url, HashMode(key="r:{id}"), configuration=SMALL), [row])
    assert redis_client.hgetall("r:1") == {
        b"id": b"1",
        b"b": b"\x00\xff",
        b"t": b"true",
        b"d": b"1.10",
        b"f": b"0.1",
        b"ts": b"2024-01-02T03:04:05",
        b"day": b"2024-01-02",
    }
    write_all(
        RedisSink(redis_server.url, SetMode(key="j:{id}"), configuration=SMALL), [row | {"b": "x"}]
    )
    assert json.loads(redis_client.get("j:1"))["ts"] == "2024-01-02T03:04:05"


def test_the_repr_hides_the_password():
    sink = RedisSink("redis://user:secret@127.0.0.1:1/0", SetMode(key="k"))
    assert "secret" not in repr(sink)
    assert "user:***@127.0.0.1:1" in repr(sink)


def test_auth_failures_are_fatal(redis_server, redis_client):
    sink = RedisSink(
        redis_server.url.replace("redis://", "redis://nobody:wrong@"),
        SetMode(key="k:{id}"),
        configuration=SMALL,
    )
    with pytest.raises(FatalDestinationError) as raised:
        write_all(sink, ROWS[:3])
    assert isinstance(raised.value.__cause__, redis.exceptions.AuthenticationError)


def _is_free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def start_cluster_node(directory):
    """A real redis-server in cluster mode on a free port (its node file in ``directory``)."""
    port = _free_port()
    while port > 55_535 or not _is_free(port + 10_000):  # the cluster bus is port + 10000
        port = _free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--cluster-enabled", "yes"]
    command += ["--cluster-config-file", str(directory / f"nodes-{port}.conf")]
    node = LocalRedisServer(
        port, subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=directory)
    )
    deadline = time.monotonic() + WAIT_S
    while not node._answers_ping():
        if time.monotonic() > deadline:
            node.stop()
            pytest.fail(f"a cluster-mode redis-server on port {port} did not start")
        time.sleep(0.02)
    return node


def test_a_cluster_node_is_refused_with_a_clear_message(tmp_path):
    """Writing to a Redis Cluster node that redirects (MOVED) fails at once, saying why."""
    owner, other = start_cluster_node(tmp_path), start_cluster_node(tmp_path)
    try:
        with owner.client() as first, other.client() as second:
            first.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            second.execute_command("CLUSTER", "MEET", "127.0.0.1", owner.port)
            deadline = time.monotonic() + WAIT_S
            while True:  # until the other node knows who serves the slots
                try:
                    second.set("probe", 1)
                except redis.exceptions.MovedError:
                    break
                except redis.exceptions.ResponseError:  # CLUSTERDOWN until it knows
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("the second cluster node never answered MOVED")
                time.sleep(0.05)
        sink = RedisSink(other.url, SetMode(key="user:{id}"), configuration=SMALL)
        with pytest.raises(
            FatalDestinationError, match=r"is a Redis Cluster node.*does not follow"
        ):
            write_all(sink, ROWS[:5])
    finally:
        owner.stop()
        other.stop()


def test_an_acl_user_with_a_password_writes(redis_server, redis_client):
    redis_client.acl_setuser(
        "writer", enabled=True, passwords=["+s3cret"], keys="*", commands=["+@all"]
    )
    try:
        url = redis_server.url.replace("redis://", "redis://writer:s3cret@")
        write_all(RedisSink(url, SetMode(key="user:{id}"), configuration=SMALL), ROWS[:100])
        assert redis_client.dbsize() == 100
    finally:
        redis_client.acl_deluser("writer")


def test_tls_connections_write(tmp_path):
    """rediss:// with a CA file: the packed path reads and writes the TLS streams."""
    directory = tmp_path
    subject = ["-subj", "/CN=sinkv2-test-ca", "-days", "1"]

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        *subject,
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )
    port = _free_port()
    command = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--tls-auth-clients", "no"]
    command += ["--tls-cert-file", "server.crt", "--tls-key-file", "server.key"]
    command += ["--tls-ca-cert-file", "ca.crt"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=directory)
    url = f"rediss://127.0.0.1:{port}/0"
    try:
        ca = str(directory / "ca.crt")
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with redis.Redis.from_url(url, ssl_ca_certs=ca) as probe:
                    probe.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail("the TLS redis-server did not start")
                time.sleep(0.05)
        sink = RedisSink(
            url, SetMode(key="user:{id}"), configuration=SMALL, client_options={"ssl_ca_certs": ca}
        )
        write_all(sink, ROWS)
        with redis.Redis.from_url(url, ssl_ca_certs=ca) as client:
            assert client.dbsize() == len(ROWS)
            assert json.loads(client.get("user:7")) == ROWS[7]
    finally:
        process.terminate()
        process.wait(timeout=10)
