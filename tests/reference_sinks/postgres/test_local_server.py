"""The test PostgreSQL server: a cluster whose test run was killed is gone once the next starts.

A killed pytest cannot stop its server: the postmaster runs on, holding its port,
its directory and its System V segment. The next `LocalPostgresServer.start` ends
it and removes all three.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.servers.postgres_server import LocalPostgresServer

ROOT = Path(__file__).resolve().parents[3]

_OWNER = """
import sys, time
from tests.servers.postgres_server import LocalPostgresServer
server = LocalPostgresServer.start()
print(server.root, server.pid(), flush=True)
time.sleep(600)
"""


def _segments() -> set[str]:
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {row.split()[1] for row in rows}


def _runs(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_a_killed_runs_cluster_is_stopped_and_removed_by_the_next_start():
    with subprocess.Popen(
        [sys.executable, "-c", _OWNER], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as owner:
        try:
            root_text, pid_text = owner.stdout.readline().split()
        finally:
            owner.kill()
    root, postmaster = Path(root_text), int(pid_text)
    shmid = (root / "data" / "postmaster.pid").read_text().splitlines()[6].split()[1]
    assert shmid in _segments()
    assert _runs(postmaster)  # the orphan runs on
    assert str(os.getpid()) not in root.name
    server = LocalPostgresServer.start()
    try:
        assert not root.exists()
        deadline = time.monotonic() + 60  # a loaded machine is slow, not broken
        while _runs(postmaster) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _runs(postmaster)
        assert shmid not in _segments()
        with server.connect() as connection:  # dynamic shared memory in the data directory
            shown = connection.execute("SHOW dynamic_shared_memory_type").fetchone()
        assert shown == ("mmap",)
    finally:
        server.stop()
    assert not server.root.exists()
