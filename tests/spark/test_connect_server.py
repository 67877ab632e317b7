"""The test Spark Connect server: what a killed test run left goes when the next server starts."""

import subprocess
import sys
import time

from sinkv2.testing._owned import owned_temp_dir
from tests.servers.spark_connect_server import SERVER_CLASS, _stop_orphan

_SLEEP = "import time; time.sleep(600)"


def test_an_orphan_server_is_killed_and_other_processes_are_left_alone(tmp_path):
    workdir = owned_temp_dir("sinkv2-connect-", base=str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with (
        subprocess.Popen([sys.executable, "-c", _SLEEP, SERVER_CLASS], cwd=workdir) as orphan,
        subprocess.Popen([sys.executable, "-c", _SLEEP], cwd=workdir) as stranger,
        subprocess.Popen([sys.executable, "-c", _SLEEP, SERVER_CLASS], cwd=elsewhere) as other,
    ):
        try:
            for process in (orphan, stranger, other):
                (workdir / "server.pid").write_text(str(process.pid))
                _stop_orphan(workdir)
            deadline = time.monotonic() + 60  # a loaded machine is slow, not broken
            while orphan.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert orphan.poll() is not None
            assert stranger.poll() is None  # not a Connect server
            assert other.poll() is None  # a server, but of another directory
        finally:
            for process in (orphan, stranger, other):
                process.kill()
