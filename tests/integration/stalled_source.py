"""The log source with a reader that stalls once, mid micro-batch, for a test to kill around.

`StallingLogSource` is the real log source (``tests/spark/log_source.py``); its split
reader, once it has emitted a fetch of a split that starts at line ``stall_from_line``
or later (``1``: a file read on from where an earlier micro-batch stopped), records
``<markers>/stalled`` holding its Python worker's pid and sleeps, the first time only
across all processes (an exclusive create). The task attempt is then mid-read and
mid-write: part of its slice went on to the sink's writer. Every later attempt reads on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsChange,
)
from tests.spark.log_source import (
    LogSource,
    LogSourceReader,
    LogSplit,
    LogSplitReader,
    _ChunkEmitter,
)


def _claim(markers: str) -> bool:
    """Whether this is the first stall of all (atomic across processes); records the pid."""
    try:
        fd = os.open(Path(markers) / "stalled", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


class StallingSplitReader(LogSplitReader):
    """Stalls before its second fetch if a split started at ``stall_from_line`` or later."""

    def __init__(self, source: StallingLogSource) -> None:
        super().__init__(source)
        self._stalling = source
        self._late = False
        self._fetches = 0

    def handle_splits_changes(self, splits_changes: SplitsChange[LogSplit]) -> None:
        self._late |= any(s.line >= self._stalling.stall_from_line for s in splits_changes.splits)
        super().handle_splits_changes(splits_changes)

    def fetch(self) -> RecordsBySplits[Any]:
        if self._fetches and self._late and _claim(self._stalling.markers):
            time.sleep(3600)  # the test kills this worker's executor meanwhile
        self._fetches += 1
        return super().fetch()


class StallingReader(LogSourceReader):
    """The log reader over a `StallingSplitReader`."""

    def __init__(self, context: Any, source: StallingLogSource) -> None:
        SingleThreadMultiplexSourceReaderBase.__init__(
            self, lambda: StallingSplitReader(source), _ChunkEmitter(), context
        )


class StallingLogSource(LogSource):
    """The log source; one of its readers stalls once (see the module)."""

    def __init__(
        self, directory: str, *, markers: str, stall_from_line: int, **options: Any
    ) -> None:
        super().__init__(directory, **options)
        self.markers = markers
        self.stall_from_line = stall_from_line

    def create_reader(self, reader_context: Any) -> StallingReader:
        return StallingReader(reader_context, self)
