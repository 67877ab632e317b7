"""A throwaway local ``redis-server`` for tests and benchmarks of Redis sinks.

It lives in the repository's tests, not in the wheel: copy it to test your own sink.

::

    with LocalRedisServer.start() as server:
        sink = RedisSink(server.url, SetMode(key="k:{id}"))
        ...

It runs in the foreground of a child process, on a free port of 127.0.0.1, without
persistence, and is stopped by its PID.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from types import TracebackType
from typing import Any, Final, final

__all__ = ["INSTALL", "LocalRedisServer"]

INSTALL: Final = "apt-get install redis-server (Debian/Ubuntu) or brew install redis (macOS)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@final
class LocalRedisServer:
    """A ``redis-server`` child process; `url` points at database 0."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    @classmethod
    def start(cls, *, timeout_s: float = 60.0) -> LocalRedisServer:
        """Start a server and wait until it answers ``PING``.

        Args:
            timeout_s: How long to wait for ``PING``; generous, so that only a broken
                server fails, not a loaded machine.

        Raises:
            RuntimeError: ``redis-server`` is not on PATH (the message says how to
                install it), or it did not answer in time.
        """
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"redis-server is not on PATH: {INSTALL}")
        port = _free_port()
        command = [binary, "--port", str(port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = cls(port, process)
        deadline = time.monotonic() + timeout_s
        while not server._answers_ping():
            if process.poll() is not None or time.monotonic() > deadline:
                status = process.poll()
                server.stop()
                why = f"exited with status {status}" if status is not None else "still runs"
                raise RuntimeError(
                    f"redis-server on port {port} did not answer PING within {timeout_s} s "
                    f"({why}); run '{binary} --port {port}' to see why"
                )
            time.sleep(0.02)
        return server

    def client(self) -> Any:
        """A synchronous ``redis.Redis`` client on database 0 (close it when done)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """Terminate the process (kill it if it does not exit in 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LocalRedisServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
