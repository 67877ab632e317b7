"""The `IcebergSource` reader: Iceberg's ``IcebergSourceReader`` on the reader framework.

An `IcebergSplitReader` (the fetcher thread's half) reads its splits one after the
other, each as Arrow batches after the split's position; the emitter hands each
batch on with ``collect_batch`` and moves the split's position by its rows. The
reader asks the enumerator for a split at start (unless splits were restored) and
whenever one is finished: splits are pulled one at a time, as in Iceberg's source.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import final

import pyarrow as pa

from reference_sinks.iceberg._source_split import IcebergSourceSplit
from sinkv2.source import SourceOutput, SourceReaderContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

__all__ = ["IcebergSourceReader", "IcebergSplitReader", "IcebergSplitState"]

ReadSplit = Callable[[IcebergSourceSplit], Iterator[pa.RecordBatch]]
"""A split's records after its position, as batches of the produced type."""


@final
class IcebergSplitState:
    """A split being read: the split, and the records emitted from it so far."""

    __slots__ = ("records_read", "split")

    def __init__(self, split: IcebergSourceSplit) -> None:
        self.split = split
        self.records_read = split.records_read


@final
class IcebergSplitReader:
    """Reads its splits one after another, a batch per fetch."""

    def __init__(self, read_split: ReadSplit) -> None:
        self._read_split = read_split
        self._splits: collections.deque[IcebergSourceSplit] = collections.deque()
        self._current: tuple[str, Iterator[pa.RecordBatch]] | None = None

    def fetch(self) -> RecordsBySplits[pa.RecordBatch]:
        """The current split's next batch, or that split finished."""
        if self._current is None:
            if not self._splits:
                return RecordsBySplits({})
            split = self._splits.popleft()
            self._current = (split.path, self._read_split(split))
        split_id, batches = self._current
        batch = next(batches, None)
        if batch is None:
            self._current = None
            return RecordsBySplits.finished(split_id)
        return RecordsBySplits({split_id: [batch]})

    def handle_splits_changes(self, splits_changes: SplitsChange[IcebergSourceSplit]) -> None:
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
        self, element: pa.RecordBatch, output: SourceOutput[object], split_state: IcebergSplitState
    ) -> None:
        output.collect_batch(element)
        split_state.records_read += element.num_rows


@final
class IcebergSourceReader(
    SingleThreadMultiplexSourceReaderBase[
        pa.RecordBatch, object, IcebergSourceSplit, IcebergSplitState
    ]
):
    """Asks for a split at start (unless restored) and after each finished one.

    Args:
        context: The reader's context.
        read_split: Reads one split after its position.
    """

    def __init__(self, context: SourceReaderContext, read_split: ReadSplit) -> None:
        super().__init__(lambda: IcebergSplitReader(read_split), _BatchEmitter(), context)
        self._restored = False

    def add_splits(self, splits: list[IcebergSourceSplit]) -> None:
        """Take splits (restored ones before `start`, assigned ones after)."""
        self._restored = self._restored or bool(splits)
        super().add_splits(splits)

    def start(self) -> None:
        """Ask for a first split unless splits were restored."""
        if not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: IcebergSourceSplit) -> IcebergSplitState:
        """The split's mutable state, at its position."""
        return IcebergSplitState(split)

    def to_split_type(self, split_id: str, split_state: IcebergSplitState) -> IcebergSourceSplit:
        """The split at the position reached."""
        return split_state.split.at(split_state.records_read)

    def on_split_finished(self, finished_split_ids: dict[str, IcebergSplitState]) -> None:
        """Ask for the next split."""
        self.context.send_split_request()
