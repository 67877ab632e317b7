"""One reader for the reference sources whose splits are read whole, one after another.

`FileSource`, `IcebergSource` and `PostgresSource` read the same way, as Flink's
``FileSourceReader`` and ``JdbcSourceSplitReader`` do: the reader asks for a split at
start (unless splits were restored) and after each finished one, so splits are
pulled one at a time and a fast reader takes more of them; its split reader, in the
fetcher thread, reads one split at a time as Arrow batches after the split's
position, a batch per fetch; the emitter hands each batch on with ``collect_batch``
and moves the split's position by its rows. A split is any value with
``split_id()``, ``records_read`` (its position) and ``at(records_read)``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, Self, TypeVar, final

import pyarrow as pa

from sinkv2.source import SourceOutput, SourceReaderContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

__all__ = [
    "BatchSplitReader",
    "PositionedSplit",
    "PullingBatchReader",
    "ReadSplit",
    "SplitPosition",
]


class PositionedSplit(Protocol):
    """A split that knows how many of its records were emitted, and can move on."""

    @property
    def records_read(self) -> int: ...

    def split_id(self) -> str: ...

    def at(self, records_read: int) -> Self: ...


SplitT = TypeVar("SplitT", bound=PositionedSplit)

ReadSplit = Callable[[SplitT], Iterator[pa.RecordBatch]]
"""A split's records after its position, as batches of the produced type."""


@final
class SplitPosition(Generic[SplitT]):
    """A split being read: the split, and the records emitted from it so far."""

    __slots__ = ("records_read", "split")

    def __init__(self, split: SplitT) -> None:
        self.split = split
        self.records_read = split.records_read


@final
class BatchSplitReader(Generic[SplitT]):
    """Reads its splits one after another, a batch per fetch.

    Args:
        read_split: Reads one split after its position.
        close: Ends what reading holds open (a connection, a running query), given
            the split being read when the reader closes, if any; ``None``: nothing.
    """

    def __init__(
        self,
        read_split: ReadSplit[SplitT],
        close: Callable[[Iterator[pa.RecordBatch] | None], None] | None = None,
    ) -> None:
        self._read_split = read_split
        self._close = close
        self._splits: collections.deque[SplitT] = collections.deque()
        self._current: tuple[str, Iterator[pa.RecordBatch]] | None = None

    def fetch(self) -> RecordsBySplits[pa.RecordBatch]:
        """The current split's next batch, or that split finished."""
        if self._current is None:
            if not self._splits:
                return RecordsBySplits({})
            split = self._splits.popleft()
            self._current = (split.split_id(), self._read_split(split))
        split_id, batches = self._current
        batch = next(batches, None)
        if batch is None:
            self._current = None
            return RecordsBySplits.finished(split_id)
        return RecordsBySplits({split_id: [batch]})

    def handle_splits_changes(self, splits_changes: SplitsChange[SplitT]) -> None:
        """Queue added splits; these splits are never removed."""
        if isinstance(splits_changes, SplitsAddition):
            self._splits.extend(splits_changes.splits)

    def wake_up(self) -> None:
        """A fetch never waits for data that may not come: nothing to interrupt."""

    def close(self) -> None:
        """Drop the current split's batches; end what reading holds open."""
        current, self._current = self._current, None
        if self._close is not None:
            self._close(None if current is None else current[1])


@final
class _BatchEmitter(Generic[SplitT]):
    """Emits a batch and moves its split's position by its rows."""

    def emit_record(
        self,
        element: pa.RecordBatch,
        output: SourceOutput[object],
        split_state: SplitPosition[SplitT],
    ) -> None:
        output.collect_batch(element)
        split_state.records_read += element.num_rows


class PullingBatchReader(
    SingleThreadMultiplexSourceReaderBase[pa.RecordBatch, object, SplitT, SplitPosition[SplitT]]
):
    """Asks for a split at start (unless restored) and after each finished one.

    Args:
        context: The reader's context.
        split_reader: Makes the fetcher thread's `BatchSplitReader`.
    """

    def __init__(
        self,
        context: SourceReaderContext,
        split_reader: Callable[[], BatchSplitReader[SplitT]],
    ) -> None:
        super().__init__(split_reader, _BatchEmitter(), context)
        self._restored = False

    def add_splits(self, splits: list[SplitT]) -> None:
        """Take splits (restored ones before `start`, assigned ones after)."""
        self._restored = self._restored or bool(splits)
        super().add_splits(splits)

    def start(self) -> None:
        """Ask for a first split unless splits were restored."""
        if not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: SplitT) -> SplitPosition[SplitT]:
        """The split's mutable state, at its position."""
        return SplitPosition(split)

    def to_split_type(self, split_id: str, split_state: SplitPosition[SplitT]) -> SplitT:
        """The split at the position reached."""
        return split_state.split.at(split_state.records_read)

    def on_split_finished(self, finished_split_ids: dict[str, SplitPosition[SplitT]]) -> None:
        """Ask for the next split."""
        self.context.send_split_request()
