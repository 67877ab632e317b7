"""Files that appear whole or not at all, and no temporary left behind by a crash.

A file is written under a hidden temporary name beside its target,
``.<name>.<32 hex digits>.tmp``, then renamed onto it, so a reader never sees part of
it. A process killed between the two leaves the temporary behind. Every write of a
target first deletes the temporaries an earlier attempt at that same target left:
`FileSource` writes the same dead letters, and archives the same file to the same
name, when the split or the clean-up is done again after a crash, so the next run
removes what the crashed one left. A concurrent attempt at the same target (a
speculative task) may lose its temporary to this; its rename then fails and the task
is retried, while the other attempt's file is whole.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable

import pyarrow.fs as pafs

__all__ = ["write_atomically"]


def _orphans(fs: pafs.FileSystem, directory: str, name: str) -> list[str]:
    pattern = re.compile(rf"\.{re.escape(name)}\.[0-9a-f]{{32}}\.tmp")
    selector = pafs.FileSelector(directory, allow_not_found=True)
    return [
        info.path
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and pattern.fullmatch(info.base_name)
    ]


def write_atomically(fs: pafs.FileSystem, target: str, write: Callable[[str], None]) -> None:
    """Make ``target`` whole: ``write`` fills a hidden temporary path, renamed onto it.

    Temporaries of ``target`` left by an attempt that died are deleted first.
    """
    directory, _, name = target.rpartition("/")
    for orphan in _orphans(fs, directory, name):
        with contextlib.suppress(FileNotFoundError):  # renamed or deleted meanwhile
            fs.delete_file(orphan)
    temporary = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
    write(temporary)
    fs.move(temporary, target)
