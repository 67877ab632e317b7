"""RedisStreamSource red team (wt102): bad URLs, extreme ids, recreated streams, missed trims.

Engine-neutral like ``test_source.py``: epochs planned by `SourceEpochCoordinator` as
Spark's stream reader asks for them, a "restart" is a new coordinator on the same store.

- A wrong password, no password where one is needed, a database number out of range,
  ``rediss://`` to a server without TLS, nothing listening: a `SinkConfigurationError`
  naming the URL (password masked) and what to check, from the driver and the readers.
- The largest stream id (``18446744073709551615-18446744073709551615``): read, trimmed
  (``XTRIM MINID`` of its successor would be an invalid id), and an unbounded reader
  at it waits instead of failing (``XRANGE (max`` is an invalid range).
- A stream deleted and created again with ids at or below the position (its last
  id, or its ``entries-added`` count, went backwards): a clear error, never a silent
  skip of the new entries.
- A trim that did not happen after its epoch was acknowledged (the driver died, or
  Redis failed, between the two): the next run trims what its restored checkpoint
  says was committed, instead of holding those entries until more data comes.
- Connections dropped by the server between epochs: redis-py reconnects, every entry
  once.
- A key that lives on another node of a Redis Cluster (``MOVED``): an error that says
  so and what to do (a two-node cluster of real servers).
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis

from reference_sinks.redis import RedisStreamSource, RedisStreamSplit
from reference_sinks.redis._source_enumerator import RedisStreamEnumerator
from sinkv2.errors import CommitStateError, SinkConfigurationError
from sinkv2.runtime import ReadLimit, SqliteCommitStateStore
from sinkv2.testing import LocalSourceEngine
from tests.reference_sinks.redis.stream_data import append, rows_of
from tests.reference_sinks.redis.test_source import Run

FIELDS = pa.schema([pa.field("s", pa.string())])
MAX_ID = "18446744073709551615-18446744073709551615"


def ids_of(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


# --- connection mistakes -----------------------------------------------------------------


@pytest.fixture
def password_server(redis_server, redis_client):
    redis_client.config_set("requirepass", "s3cret")
    try:
        yield redis_server
    finally:
        with redis.Redis(port=redis_server.port, password="s3cret") as client:
            client.config_set("requirepass", "")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:{port}/0", r"redis://127\.0\.0\.1:\d+/0.*needs a password"),
        ("redis://:wrong@127.0.0.1:{port}/0", r"redis://:\*\*\*@127.*password"),
        ("redis://:s3cret@127.0.0.1:{port}/99", r"database.*99.*out of range|99.*database"),
        ("rediss://:s3cret@127.0.0.1:{port}/0", r"rediss://.*TLS"),
        ("redis://127.0.0.1:1/0", r"could not connect to redis://127\.0\.0\.1:1/0"),
    ],
)
def test_connection_mistakes_are_clear_errors_naming_the_url(password_server, url, message):
    url = url.format(port=password_server.port)
    source = RedisStreamSource(
        url, FIELDS, keys=["a"], client_options={"socket_connect_timeout": 1, "socket_timeout": 1}
    )
    with pytest.raises(SinkConfigurationError, match=message) as caught:
        LocalSourceEngine(source, 1).run()
    assert "s3cret" not in str(caught.value)
    assert "wrong" not in str(caught.value)


# --- the largest id --------------------------------------------------------------------------


def test_the_largest_stream_id_is_read_and_trimmed(redis_server, redis_client, tmp_path):
    redis_client.xadd("a", {"n": "1", "amount": "1"}, id="5-18446744073709551615")
    redis_client.xadd("a", {"n": "2", "amount": "1"}, id=MAX_ID)
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"], trim=True)
    first = run.step(run.coordinator.initial_epoch(), ReadLimit(max_records=1))
    assert ids_of(run.rows[first]) == ["5-18446744073709551615"]
    second = run.step(first)  # commits `first`: XTRIM MINID 6-0
    assert ids_of(run.rows[second]) == [MAX_ID]
    assert ids_of(rows_of(redis_client, "a")) == [MAX_ID]
    assert run.step(second) == second  # commits `second`: nothing can follow, all goes
    run.close()
    assert redis_client.xlen("a") == 0


def test_an_unbounded_reader_at_the_largest_id_waits(redis_server, redis_client):
    redis_client.xadd("a", {"s": "top"}, id=MAX_ID)
    source = RedisStreamSource(redis_server.url, FIELDS, keys=["a"], poll_interval_ms=5)
    engine = LocalSourceEngine(source, 1)
    steps = itertools.count()
    try:
        engine.run(until=lambda e: len(e.committed) >= 1, checkpoint_every=1)
        engine.run(until=lambda e: next(steps) > 30)  # polls again at the top: nothing new
        engine.checkpoint()
    finally:
        engine.close()
    assert [record.record["id"] for record in engine.committed] == [MAX_ID]


# --- a stream deleted and created again --------------------------------------------------


@pytest.mark.parametrize("how", ["ids below", "fewer entries"])
def test_a_stream_created_again_below_the_position_is_a_clear_error(
    redis_server, redis_client, tmp_path, how
):
    for n in range(1, 4):
        redis_client.xadd("a", {"n": str(n), "amount": "1"}, id=f"100-{n}")
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"])
    try:
        first = run.step(run.coordinator.initial_epoch())
        assert ids_of(run.rows[first]) == ["100-1", "100-2", "100-3"]
        redis_client.delete("a")
        if how == "ids below":  # ids at or below the position: never read, silently
            redis_client.xadd("a", {"n": "4", "amount": "1"}, id="50-1")
        else:  # ids past it, but the stream was given fewer entries than were read
            redis_client.xadd("a", {"n": "4", "amount": "1"}, id="200-1")
            redis_client.xadd("a", {"n": "5", "amount": "1"}, id="300-1")
            redis_client.xtrim("a", minid="300-1", approximate=False)  # 200-1 lost unread
        with pytest.raises(CommitStateError, match=r"stream 'a' was deleted and created again"):
            run.step(first)
    finally:
        run.close()


def test_a_stream_that_goes_on_is_not_mistaken_for_a_new_one(redis_server, redis_client, tmp_path):
    ids = append(redis_client, "a", 4)
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"])
    first = run.step(run.coordinator.initial_epoch(), ReadLimit(max_records=2))
    redis_client.xdel("a", ids[3])  # deleted past the position: the last id stays
    second = run.step(first)
    redis_client.xtrim("a", maxlen=0, approximate=False)  # all of it read: trimmed by the owner
    assert run.step(second) == second
    later = append(redis_client, "a", 2)
    third = run.step(second)
    run.close()
    assert ids_of(run.rows[first] + run.rows[second] + run.rows[third]) == ids[:3] + later


# --- a trim missed across a crash ----------------------------------------------------------


def test_a_trim_missed_after_the_acknowledgement_happens_when_the_next_run_starts(
    redis_server, redis_client, tmp_path, monkeypatch
):
    store = SqliteCommitStateStore(tmp_path / "s.sqlite")
    append(redis_client, "a", 5)
    run = Run(redis_server, store, keys=["a"], trim=True)
    first = run.step(run.coordinator.initial_epoch())
    real = RedisStreamEnumerator.notify_checkpoint_complete

    def dies(self: Any, checkpoint_id: int) -> None:
        raise redis.exceptions.ConnectionError("the driver died before XTRIM")

    monkeypatch.setattr(RedisStreamEnumerator, "notify_checkpoint_complete", dies)
    with pytest.raises(redis.exceptions.ConnectionError):
        run.step(first)  # `first` is acknowledged in the store, its trim never sent
    run.close()
    monkeypatch.setattr(RedisStreamEnumerator, "notify_checkpoint_complete", real)
    assert redis_client.xlen("a") == 5
    again = Run(redis_server, store, keys=["a"], trim=True)
    assert again.step(first) == first  # the next run starts: nothing new to read
    again.close()
    assert redis_client.xlen("a") == 0  # committed entries are not held any longer


# --- the server drops connections ----------------------------------------------------------


def test_connections_dropped_by_the_server_between_epochs_are_made_again(
    redis_server, redis_client, tmp_path
):
    ids = append(redis_client, "a", 3)
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"], trim=True)
    first = run.step(run.coordinator.initial_epoch())
    redis_client.client_kill_filter(_type="normal", skipme=True)
    ids += append(redis_client, "a", 2)
    second = run.step(first)
    redis_client.client_kill_filter(_type="normal", skipme=True)
    assert run.step(second) == second
    run.close()
    assert ids_of(run.rows[first] + run.rows[second]) == ids
    assert redis_client.xlen("a") == 0
    assert rows_of(redis_client, "a") == []


# --- Redis Cluster: a key on another node --------------------------------------------------


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:  # all bound at once: distinct ports
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


@pytest.fixture
def two_node_cluster(tmp_path: Path) -> Iterator[list[int]]:
    """Two cluster-enabled redis-servers sharing the slots half and half; their ports."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not on PATH"
    processes: list[subprocess.Popen[bytes]] = []
    ports, buses = _free_ports(2), _free_ports(2)  # the bus: not port + 10000 (> 65535?)
    try:
        for index, port in enumerate(ports):
            folder = tmp_path / f"node{index}"
            folder.mkdir()
            command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
            command += ["--appendonly", "no", "--cluster-enabled", "yes", "--dir", str(folder)]
            command += ["--cluster-port", str(buses[index])]
            processes.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        clients = [redis.Redis(port=port) for port in ports]
        deadline = time.monotonic() + 60
        for client in clients:
            while True:
                try:
                    client.ping()
                    break
                except redis.exceptions.ConnectionError:
                    assert time.monotonic() < deadline, "a cluster node did not start"
                    time.sleep(0.05)
        clients[0].execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        clients[1].execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", ports[1], buses[1])
        while not all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO") for c in clients):
            assert time.monotonic() < deadline, "the two-node cluster did not settle"
            time.sleep(0.05)
        for client in clients:
            client.close()
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def test_a_key_on_another_cluster_node_is_a_clear_error(two_node_cluster):
    here, there = two_node_cluster
    with redis.Redis(port=here) as client:
        assert client.execute_command("CLUSTER", "KEYSLOT", "b") < 8192  # served here
        assert client.execute_command("CLUSTER", "KEYSLOT", "a") >= 8192  # served there
        client.xadd("b", {"s": "here"})
    source = RedisStreamSource(f"redis://127.0.0.1:{here}/0", FIELDS, keys=["b", "a"])
    moved = (
        rf"the key 'a' lives on another node of a Redis Cluster \(.* MOVED \d+ 127.0.0.1:{there}"
    )
    with pytest.raises(SinkConfigurationError, match=moved):  # XREVRANGE when it starts
        LocalSourceEngine(source, 1).run()
    with pytest.raises(SinkConfigurationError, match=moved):  # XINFO STREAM at each cut
        source.end_positions([RedisStreamSplit("b"), RedisStreamSplit("a")])
