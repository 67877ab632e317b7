"""The kit's scratch directories: what a killed kit run left is removed by the next run."""

import os
import subprocess
import sys

from sinkv2.testing._engine import kit_state_dir, scratch_dir


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_processs_kit_directories_go_and_live_ones_stay(tmp_path, monkeypatch):
    monkeypatch.setattr("sinkv2.testing._engine.scratch_dir", lambda: str(tmp_path))
    dead = _dead_pid()
    left = [tmp_path / f"sinkv2-kit-{dead}-abc", tmp_path / f"sinkv2-kit-stream-{dead}-def"]
    for directory in left:
        (directory / "commit_state.sqlite.locks").mkdir(parents=True)
        (directory / "commit_state.sqlite").write_bytes(b"x")
    alive = tmp_path / f"sinkv2-kit-{os.getppid()}-ghi"
    alive.mkdir()
    unrelated = tmp_path / "sinkv2-kit-old-style"
    unrelated.mkdir()
    mine = kit_state_dir("sinkv2-kit-")
    assert mine.parent == tmp_path
    assert mine.name.startswith(f"sinkv2-kit-{os.getpid()}-")
    assert not left[0].exists()
    assert left[1].exists()  # a stream run's, swept by the next stream run
    kit_state_dir("sinkv2-kit-stream-")
    assert not any(directory.exists() for directory in left)
    assert alive.exists()
    assert unrelated.exists()


def test_the_default_scratch_is_memory_when_there_is_some():
    found = scratch_dir()
    assert found is None or found == "/dev/shm"
