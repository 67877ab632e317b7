"""Scratch directories named by the process that owns them.

A test server or kit run removes its directory when it ends; a process killed
mid-run cannot. Its directory carries its pid, so the next process to make one
with the same prefix finds it, sees the owner is gone and removes it: nothing a
killed run left outlives the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["owned_temp_dir", "process_alive"]


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def owned_temp_dir(
    prefix: str,
    *,
    base: str | None = None,
    before_removal: Callable[[Path], None] | None = None,
) -> Path:
    """A new private directory ``<base>/<prefix><pid>-<random>`` of this process.

    First it removes the directories with the same prefix whose owner no longer
    exists; ``before_removal`` is called on each before it goes (to stop what
    still runs from it, say).
    """
    base = base or tempfile.gettempdir()
    owned = re.compile(re.escape(prefix) + r"(\d+)-")
    for entry in os.scandir(base):
        owner = owned.match(entry.name)
        if owner is None or not entry.is_dir() or process_alive(int(owner.group(1))):
            continue
        if before_removal is not None:
            before_removal(Path(entry.path))
        shutil.rmtree(entry.path, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))
