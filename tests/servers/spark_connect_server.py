"""A throwaway local Spark Connect server, from the pyspark wheel's own jars.

It lives in the repository's tests, not in the wheel: copy it to test your own sink.

::

    with LocalSparkConnectServer.start() as server:
        spark = server.session()
        ...

The wheel ships ``jars/spark-connect_*.jar`` but not always
``sbin/start-connect-server.sh``, so the server is started the way that script
does it: ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer
spark-internal``, from the wheel's ``bin/`` with ``SPARK_HOME`` at the wheel. It
listens on a free port of 127.0.0.1, runs ``local[2,4]`` (each task may fail and be
retried up to 3 times, as the tests' classic session), needs no network, and is
stopped by its PID (``spark-submit`` execs the JVM, so the PID is the server's).

Its Python workers run this interpreter, with the repository root on
``PYTHONPATH`` (tests' own sink modules import there as a user's would), in a
working directory of their own: the server's default commit state store
(``$SINKV2_STATE_DIR``) is under it. `stop` removes that directory; one a killed
test run left (its owner's pid is in the name) goes when the next server starts,
after its server, if it still runs, is stopped by the PID it recorded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final

from sinkv2.testing._owned import owned_temp_dir

__all__ = ["SERVER_CLASS", "LocalSparkConnectServer"]

SERVER_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"
_ROOT: Final = Path(__file__).resolve().parents[2]
_LOG_TAIL: Final = 4000
_PID_FILE: Final = "server.pid"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stop_orphan(workdir: Path) -> None:
    """Kill the server a killed test run left running from ``workdir``, if it still runs."""
    try:
        pid = int((workdir / _PID_FILE).read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except (OSError, ValueError):
        return
    if SERVER_CLASS.encode() in command and cwd == str(workdir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pyspark_home() -> Path:
    import pyspark

    home = Path(pyspark.__file__).parent
    if not list((home / "jars").glob("spark-connect_*.jar")):
        raise RuntimeError(
            f"the pyspark wheel at {home} has no jars/spark-connect_*.jar; install "
            "pyspark 4.x from PyPI (pip install 'sinkv2[connect]')"
        )
    return home


@final
class LocalSparkConnectServer:
    """A Spark Connect server child process; `url` is its ``sc://`` address."""

    def __init__(self, port: int, process: subprocess.Popen[bytes], workdir: Path) -> None:
        self.port = port
        self.process = process
        self.workdir = workdir
        self.url = f"sc://127.0.0.1:{port}"

    @property
    def log(self) -> Path:
        """The server's stdout and stderr."""
        return self.workdir / "server.log"

    @property
    def state_dir(self) -> Path:
        """``$SINKV2_STATE_DIR`` of the server's Python workers."""
        return self.workdir / "state"

    @classmethod
    def start(
        cls, *, timeout_s: float = 180.0, conf: Mapping[str, str] | None = None
    ) -> LocalSparkConnectServer:
        """Start a server and wait until it accepts connections.

        Args:
            timeout_s: How long to wait for the port to open.
            conf: More Spark settings of the server, e.g. ``{"spark.x.y": "v"}``.

        Raises:
            RuntimeError: No Java, no Spark Connect jar in the wheel, or the server
                did not listen in time (the message has the end of its log).
        """
        home = _pyspark_home()
        port = _free_port()
        workdir = owned_temp_dir("sinkv2-connect-", before_removal=_stop_orphan)
        (workdir / "state").mkdir()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
            **(conf or {}),
        }
        command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        command += ["--master", "local[2,4]", "--name", "sinkv2-connect-tests"]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        command.append("spark-internal")
        python_path = os.pathsep.join(
            p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_SCALA_VERSION": "2.13",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SINKV2_STATE_DIR": str(workdir / "state"),
        }
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE"):
            env.pop(name, None)
        with (workdir / "server.log").open("wb") as log:
            process = subprocess.Popen(
                command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        (workdir / _PID_FILE).write_text(str(process.pid))
        server = cls(port, process, workdir)
        deadline = time.monotonic() + timeout_s
        while not server._listens():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = server.log.read_text(errors="replace")[-_LOG_TAIL:]
                server.stop()
                raise RuntimeError(
                    f"the Spark Connect server on port {port} did not start "
                    f"(exit status {process.poll()}); its log ends:\n{tail}"
                )
            time.sleep(0.2)
        return server

    def _listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def session(self) -> Any:
        """A Spark Connect session on this server (a new one per call).

        Built with the Connect builder itself, so a classic session in the same
        process is no obstacle (``SparkSession.builder.remote`` refuses then).
        """
        from pyspark.sql.connect.session import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def stop(self) -> None:
        """Terminate the server (kill it if it does not exit in 30 s); remove its directory."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalSparkConnectServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
