"""A real Spark standalone cluster on this machine: one master, two workers.

Started from the pyspark package's own ``spark-class``. The workers listen on
different loopback addresses (127.0.0.1 and 127.0.0.2), so Spark sees two hosts,
which is what speculative execution needs: it never runs a speculative copy on
the host that runs the original attempt.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyspark

from tests.integration.jvm_temp import jvm_temp_env


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class StandaloneCluster:
    def __init__(self, workdir: Path, workers: int = 2) -> None:
        self.workdir = workdir
        self.workers = workers
        self.spark_home = Path(pyspark.__file__).parent
        self.port = _free_port("127.0.0.1")
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, host: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_LOCAL_IP": host,
            "SPARK_WORKER_DIR": str(self.workdir / name),
            **jvm_temp_env(self.workdir / "jvm-tmp"),
        }
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes.append(
            subprocess.Popen(
                [str(self.spark_home / "bin" / "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        self._start(
            "master",
            "127.0.0.1",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--webui-port", str(_free_port("127.0.0.1")),
        )  # fmt: skip
        for index in range(1, self.workers + 1):
            host = f"127.0.0.{index}"
            self._start(
                f"worker{index}",
                host,
                "org.apache.spark.deploy.worker.Worker",
                "--host", host,
                "--cores", "1",
                "--memory", "1g",
                "--webui-port", str(_free_port(host)),
                self.master_url,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            master_log = (self.workdir / "master.log").read_text(errors="replace")
            if master_log.count("Registering worker") >= self.workers:
                return self
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"standalone cluster did not come up; see logs in {self.workdir}:\n"
            + (self.workdir / "master.log").read_text(errors="replace")[-2000:]
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
