"""Scratch directories named by their owner: a dead owner's go, with what still runs from them."""

import os
import subprocess
import sys

from sinkv2.testing._owned import owned_temp_dir, process_alive


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_owners_directories_go_after_the_hook_and_a_live_owners_stay(tmp_path):
    dead = _dead_pid()
    assert not process_alive(dead)
    left = tmp_path / f"srv-{dead}-abc"
    (left / "data").mkdir(parents=True)
    alive = tmp_path / f"srv-{os.getppid()}-def"
    alive.mkdir()
    other_prefix = tmp_path / f"other-{dead}-ghi"
    other_prefix.mkdir()
    seen = []
    mine = owned_temp_dir("srv-", base=str(tmp_path), before_removal=seen.append)
    assert seen == [left]
    assert not left.exists()
    assert alive.exists()
    assert other_prefix.exists()
    assert mine.parent == tmp_path
    assert mine.name.startswith(f"srv-{os.getpid()}-")
