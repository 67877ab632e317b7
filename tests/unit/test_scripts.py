"""The shell scripts' split: the demo's set-up needs no server, the tests' set-up installs them.

``scripts/test`` runs ``bash scripts/demo`` itself on a PATH without redis-server and
PostgreSQL (``scripts/without-servers``); these cheap checks keep the pieces honest
without a Spark run: the PATH filter hides the servers and nothing else, and
``scripts/setup`` passes on such a PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash")


def run(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / "without-servers"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_servers_hides_redis_and_postgres_but_keeps_every_other_program():
    found = run(
        "bash",
        "-c",
        "for p in redis-server initdb pg_ctl postgres git bash; do"
        " command -v $p >/dev/null && echo $p; done",
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["git", "bash"]


def test_without_servers_refuses_no_command():
    result = subprocess.run(
        ["bash", str(SCRIPTS / "without-servers")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "usage: bash scripts/without-servers COMMAND" in result.stderr


def test_demo_setup_passes_on_a_machine_without_the_servers(tmp_path):
    # A copy of the checkout's set-up with an installed .venv (the interpreter running
    # the tests): scripts/setup then only checks, and must not ask for either server.
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPTS / "setup", tmp_path / "scripts" / "setup")
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    stamp = tmp_path / ".venv" / ".sinkv2-installed"
    stamp.touch()
    later = time.time() + 10
    os.utime(stamp, (later, later))
    # scripts/setup only checks that a java is on PATH; a stand-in keeps this test about
    # the servers, on any machine.
    stand_in = tmp_path / "stand-in-bin"
    stand_in.mkdir()
    (stand_in / "java").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (stand_in / "java").chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in}{os.pathsep}{os.environ['PATH']}"}
    result = run("bash", str(tmp_path / "scripts" / "setup"), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "redis" not in result.stdout + result.stderr
    assert "postgres" not in (result.stdout + result.stderr).lower()


def test_the_demo_needs_only_the_setup_and_the_test_path_installs_the_servers():
    demo = (SCRIPTS / "demo").read_text(encoding="utf-8")
    test = (SCRIPTS / "test").read_text(encoding="utf-8")
    assert "bash scripts/setup\n" in demo
    assert "setup-servers" not in demo
    assert "bash scripts/without-servers bash scripts/demo" in test
    # The demo runs before the servers are installed.
    assert test.index("scripts/without-servers bash scripts/demo") < test.index(
        "bash scripts/setup-servers"
    )


def test_setup_refuses_a_java_older_than_17_before_installing_anything(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPTS / "setup", tmp_path / "scripts" / "setup")
    stand_in = tmp_path / "stand-in-bin"
    stand_in.mkdir()
    (stand_in / "java").write_text(
        "#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n", encoding="utf-8"
    )
    (stand_in / "java").chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_in}{os.pathsep}{os.environ['PATH']}"}
    result = run("bash", str(tmp_path / "scripts" / "setup"), cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "Spark 4 needs Java 17+, found Java 11" in result.stderr
    assert not (tmp_path / ".venv").exists()  # refused before the venv and the install
