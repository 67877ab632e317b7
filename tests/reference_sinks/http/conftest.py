"""One real local HTTP server per test session, in its own process, reset before each test.

The server (``tests.servers.http_server``) runs in a subprocess so that its
CPU work does not share the GIL of the writer under test; it is stopped by PID.
"""

import pytest

from tests.servers.http_server import LocalServer


@pytest.fixture(scope="session")
def http_server():
    server = LocalServer.start()
    yield server
    server.stop()


@pytest.fixture
def server(http_server):
    http_server.reset()
    yield http_server
    http_server.reset()
