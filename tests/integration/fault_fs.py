"""A fault-injecting wrapper around the real local filesystem, for FileSink's compaction.

Every call goes to ``pyarrow.fs.LocalFileSystem``; only the first time a process of the
test opens a ``.tmp`` file for writing (the compaction's merged file, written under a
temporary name), the wrapper first writes a few bytes of it for real (the half-written
file a dying task leaves) and then acts:

- ``"kill-worker-once"``: SIGKILL the calling process, the Spark Python worker running
  the compaction task; Spark retries the task. A marker file made with ``O_EXCL`` makes
  it happen once across processes, so the retry gets through.
- ``"block"``: create the marker and sleep, so a test can kill the driver host while the
  compaction task is mid-merge.

The handler is picklable (plain attributes), so a ``FileSink(filesystem=...)`` built on
it travels to executors with the sink.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pyarrow.fs as pafs

MERGE_STARTED = "merge-started"
"""The marker file's name, in the handler's ``markers`` directory."""


class FaultInjectingHandler(pafs.FileSystemHandler):
    """Delegates to ``LocalFileSystem``; the first ``.tmp`` write does ``action``."""

    def __init__(self, markers: str, action: str) -> None:
        if action not in ("kill-worker-once", "block"):
            raise ValueError(f"action must be 'kill-worker-once' or 'block' (got {action!r})")
        self.markers = markers
        self.action = action

    @property
    def _local(self) -> pafs.LocalFileSystem:
        return pafs.LocalFileSystem()

    def _claim(self) -> bool:
        """Whether this call is the first ``.tmp`` write of the test (atomic across processes)."""
        try:
            fd = os.open(Path(self.markers) / MERGE_STARTED, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return True

    def open_output_stream(self, path, metadata):
        if path.endswith(".tmp") and self._claim():
            with self._local.open_output_stream(path) as half:
                half.write(b"PAR1 half a merged file")  # what a task killed mid-write leaves
            if self.action == "kill-worker-once":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)  # "block": the test kills the whole driver host meanwhile
        return self._local.open_output_stream(path, metadata=metadata)

    # --- everything else: the local filesystem as it is ----------------------------------

    def __eq__(self, other):
        return isinstance(other, FaultInjectingHandler) and vars(other) == vars(self)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((self.markers, self.action))

    def get_type_name(self):
        return "fault-injecting-local"

    def normalize_path(self, path):
        return self._local.normalize_path(path)

    def get_file_info(self, paths):
        return self._local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self._local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self._local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok):
        self._local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise PermissionError("the fault-injecting test filesystem never empties '/'")

    def delete_file(self, path):
        self._local.delete_file(path)

    def move(self, src, dest):
        self._local.move(src, dest)

    def copy_file(self, src, dest):
        self._local.copy_file(src, dest)

    def open_input_stream(self, path):
        return self._local.open_input_stream(path)

    def open_input_file(self, path):
        return self._local.open_input_file(path)

    def open_append_stream(self, path, metadata):
        return self._local.open_append_stream(path, metadata=metadata)


def fault_injecting_fs(markers: str | os.PathLike[str], action: str) -> pafs.PyFileSystem:
    """The local filesystem with ``action`` on the first ``.tmp`` write (see the module)."""
    return pafs.PyFileSystem(FaultInjectingHandler(os.fspath(markers), action))
