"""A real redis-server for the Redis sink tests: one per session, on 127.0.0.1.

The server runs in the foreground of a child process (no persistence) on a free
port and is stopped by its PID at the end. Each test gets an empty database
(``FLUSHALL`` before it). Without ``redis-server`` on PATH the fixture fails: these
tests never silently skip.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
import redis

INSTALL = "apt-get install redis-server (Debian/Ubuntu) or brew install redis (macOS)"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A redis-server child process; ``url`` points at database 0."""

    def __init__(self, port: int, process: subprocess.Popen) -> None:
        self.port = port
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)


def start_redis_server() -> RedisServer:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(f"redis-server is not on PATH; the Redis sink tests need it: {INSTALL}")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, process)
    deadline = time.monotonic() + 10
    with server.client() as client:
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    stop_redis_server(server)
                    pytest.fail(f"redis-server on port {port} did not answer PING")
                time.sleep(0.02)
    return server


def stop_redis_server(server: RedisServer) -> None:
    process = server.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def redis_server():
    server = start_redis_server()
    yield server
    stop_redis_server(server)


@pytest.fixture
def redis_client(redis_server):
    """A client on an empty server; closed after the test."""
    with redis_server.client() as client:
        client.flushall()
        yield client
