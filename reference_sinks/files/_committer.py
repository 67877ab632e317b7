"""The FileSink committer: renames staged files into place, idempotently."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import TYPE_CHECKING, final

import pyarrow.fs as pafs

from reference_sinks.files._committables import PendingFile
from sinkv2 import Committer

if TYPE_CHECKING:
    from sinkv2 import CommitRequest

__all__ = ["FileCommitter", "exists", "remove_quietly"]


def exists(fs: pafs.FileSystem, path: str) -> bool:
    """Whether ``path`` is a file in ``fs``."""
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def remove_quietly(fs: pafs.FileSystem, path: str) -> None:
    """Delete the file ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


@final
class FileCommitter(Committer[PendingFile]):
    """Makes each pending file visible by renaming it from staging to its final name.

    For each committable:

    - staged file present: create the partition directory, ``move`` it into place
      (on local disk and HDFS an atomic rename that replaces; on object stores a
      copy then delete, visible only once complete), then delete the sources a
      merged file replaces;
    - staged file gone, final present: committed already (a replay) -
      ``signal_already_committed``, and leftover sources are deleted;
    - both gone: ``signal_failed_with_unknown_reason`` naming both paths (the data is
      lost; the job must fail rather than report success).

    The winning attempts' staging directories are left in place, empty: a streaming
    writer may still be writing its next files there, and removing a directory is
    not atomic with respect to that on every filesystem. ``FileSink.clean_up_attempts``
    removes them once the job is done.
    """

    def __init__(self, fs: pafs.FileSystem) -> None:
        self._fs = fs

    def commit(self, requests: Collection[CommitRequest[PendingFile]]) -> None:
        """Rename every staged file into place, or recognise it as done."""
        fs = self._fs
        for request in requests:
            file = request.get_committable()
            if exists(fs, file.staged):
                fs.create_dir(file.final.rsplit("/", 1)[0], recursive=True)
                fs.move(file.staged, file.final)
            elif exists(fs, file.final):
                request.signal_already_committed()
            else:
                request.signal_failed_with_unknown_reason(
                    FileNotFoundError(
                        f"neither the staged file {file.staged} nor the committed file "
                        f"{file.final} exists; it was removed by something other than this "
                        "sink, and its rows are lost"
                    )
                )
                continue
            for source in file.sources:
                remove_quietly(fs, source)

    def close(self) -> None:
        """Nothing to release."""
