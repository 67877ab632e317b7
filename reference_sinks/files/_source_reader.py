"""The `FileSource` reader: Flink's ``FileSourceReader`` on the reader framework.

A `FileSplitReader` (the fetcher thread's half) reads its splits one after the
other, each as Arrow batches after the split's position; the emitter hands each
batch on with ``collect_batch`` (partition columns added) and moves the split's
position by its rows. The reader asks the enumerator for a split at start (unless
splits were restored) and whenever its splits are finished, so splits are pulled,
one at a time, as in Flink.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import final

import pyarrow as pa

from reference_sinks.files._source_split import FileSourceSplit, SplitsFinished
from sinkv2.source import SourceOutput, SourceReaderContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

__all__ = ["FileSourceReader", "FileSplitReader", "FileSplitState"]

ReadSplit = Callable[[FileSourceSplit], Iterator[pa.RecordBatch]]
"""A split's records after its position, as batches of the produced type."""


@final
class FileSplitState:
    """A split being read: the split, and the records emitted from it so far."""

    __slots__ = ("records_read", "split")

    def __init__(self, split: FileSourceSplit) -> None:
        self.split = split
        self.records_read = split.records_read


@final
class FileSplitReader:
    """Reads its splits one after another, a batch per fetch (Flink's ``FileSourceSplitReader``)."""

    def __init__(self, read_split: ReadSplit) -> None:
        self._read_split = read_split
        self._splits: collections.deque[FileSourceSplit] = collections.deque()
        self._current: tuple[str, Iterator[pa.RecordBatch]] | None = None

    def fetch(self) -> RecordsBySplits[pa.RecordBatch]:
        """The current split's next batch, or that split finished."""
        if self._current is None:
            if not self._splits:
                return RecordsBySplits({})
            split = self._splits.popleft()
            self._current = (split.id, self._read_split(split))
        split_id, batches = self._current
        batch = next(batches, None)
        if batch is None:
            self._current = None
            return RecordsBySplits.finished(split_id)
        return RecordsBySplits({split_id: [batch]})

    def handle_splits_changes(self, splits_changes: SplitsChange[FileSourceSplit]) -> None:
        """Queue added splits; file splits are never removed."""
        if isinstance(splits_changes, SplitsAddition):
            self._splits.extend(splits_changes.splits)

    def wake_up(self) -> None:
        """A fetch never blocks: nothing to interrupt."""

    def close(self) -> None:
        """Nothing stays open between fetches but the current file's iterator."""
        self._current = None


@final
class _BatchEmitter:
    """Emits a batch and moves its split's position by its rows."""

    def emit_record(
        self, element: pa.RecordBatch, output: SourceOutput[object], split_state: FileSplitState
    ) -> None:
        output.collect_batch(element)
        split_state.records_read += element.num_rows


@final
class FileSourceReader(
    SingleThreadMultiplexSourceReaderBase[pa.RecordBatch, object, FileSourceSplit, FileSplitState]
):
    """Flink's ``FileSourceReader``: asks for a split at start and after each finished one.

    Args:
        context: The reader's context.
        read_split: Reads one split after its position.
        report_finished: Tell the enumerator which splits were read to the end (a
            `SplitsFinished` event), for the clean-up of processed files.
    """

    def __init__(
        self, context: SourceReaderContext, read_split: ReadSplit, *, report_finished: bool
    ) -> None:
        super().__init__(lambda: FileSplitReader(read_split), _BatchEmitter(), context)
        self._report_finished = report_finished
        self._restored = False
        self._finished: list[str] = []  # since the last snapshot
        self._uncommitted: list[tuple[int, list[str]]] = []  # finished before snapshot cp

    def add_splits(self, splits: list[FileSourceSplit]) -> None:
        """Take splits (restored ones before `start`, assigned ones after)."""
        self._restored = self._restored or bool(splits)
        super().add_splits(splits)

    def start(self) -> None:
        """Ask for a first split unless splits were restored."""
        if not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: FileSourceSplit) -> FileSplitState:
        """The split's mutable state, at its position."""
        return FileSplitState(split)

    def to_split_type(self, split_id: str, split_state: FileSplitState) -> FileSourceSplit:
        """The split at the position reached."""
        return split_state.split.at(split_state.records_read)

    def on_split_finished(self, finished_split_ids: dict[str, FileSplitState]) -> None:
        """Ask for the next split (and, with a clean-up, remember which ended)."""
        if self._report_finished:
            self._finished.extend(finished_split_ids)
        self.context.send_split_request()

    def snapshot_state(self, checkpoint_id: int) -> list[FileSourceSplit]:
        """The unfinished splits at their positions; splits finished until now await this one."""
        if self._finished:
            self._uncommitted.append((checkpoint_id, self._finished))
            self._finished = []
        return super().snapshot_state(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Report the splits whose records this checkpoint committed (for the clean-up).

        Only now: a split reported before its records are committed could have its file
        removed and then be needed again by a restore.
        """
        done = [ids for cp, ids in self._uncommitted if cp <= checkpoint_id]
        self._uncommitted = [(cp, ids) for cp, ids in self._uncommitted if cp > checkpoint_id]
        if done:
            split_ids = tuple(split_id for ids in done for split_id in ids)
            self.context.send_source_event_to_coordinator(SplitsFinished(split_ids))
