"""A real redis-server for the Redis sink tests: one per session, on 127.0.0.1.

The server runs in the foreground of a child process (no persistence) on a free
port and is stopped by its PID at the end. Each test gets an empty database
(``FLUSHALL`` before it). Without ``redis-server`` on PATH the fixture fails: these
tests never silently skip.
"""

from __future__ import annotations

import pytest

from tests.servers.redis_server import LocalRedisServer


def start_redis_server() -> LocalRedisServer:
    try:
        return LocalRedisServer.start()
    except RuntimeError as error:
        pytest.fail(f"the Redis sink tests need a redis-server: {error}")


@pytest.fixture(scope="session")
def redis_server():
    server = start_redis_server()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server):
    """A client on an empty server; closed after the test."""
    with redis_server.client() as client:
        client.flushall()
        yield client
