"""`PostgresSource`'s enumerator and reader: chunk splits handed out on request, read by COPY.

The enumerator (Flink's static split enumerator, as the JDBC source's) holds the
planned chunks and answers each reader's split request with the next one, or "no
more splits" once none is left; a failed reader's splits go back to the front.

The reader (on the reader framework, as Flink's ``JdbcSourceSplitReader``) asks for a
split at start (unless splits were restored) and after each finished one, so splits
are pulled one at a time and a fast reader takes more of them. Its split reader,
in the fetcher thread, opens one connection on first use and reads each split in a
read-only repeatable-read transaction of its own: one ``COPY`` of the chunk's rows in
the chunk's order after the split's position, a batch per fetch.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, final

import pyarrow as pa

from reference_sinks.postgres._source_split import PostgresEnumeratorState, PostgresSourceSplit
from sinkv2.source import SourceOutput, SourceReaderContext, SplitEnumeratorContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "PostgresSourceReader",
    "PostgresSplitEnumerator",
    "PostgresSplitReader",
    "ReadSplit",
]

ReadSplit = Callable[["psycopg.Connection[Any]", PostgresSourceSplit], Iterator[pa.RecordBatch]]
"""A split's rows after its position, as batches of the produced type, read on a connection."""
Connect = Callable[[], "psycopg.Connection[Any]"]


@final
class PostgresSplitEnumerator:
    """Hands out the planned chunks, one per split request; see the module docstring."""

    def __init__(
        self, context: SplitEnumeratorContext[PostgresSourceSplit], state: PostgresEnumeratorState
    ) -> None:
        self._context = context
        self._remaining = collections.deque(state.remaining)

    def start(self) -> None:
        """Nothing: the chunks were planned before."""

    def close(self) -> None:
        """Nothing to release."""

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next chunk, or signal that none is left."""
        if not self._remaining:
            self._context.signal_no_more_splits(subtask_id)
            return
        self._context.assign_split(self._remaining.popleft(), subtask_id)

    def add_splits_back(self, splits: list[PostgresSourceSplit], subtask_id: int) -> None:
        """A failed reader's splits go first to the next requests."""
        self._remaining.extendleft(reversed(splits))

    def add_reader(self, subtask_id: int) -> None:
        """Nothing: readers ask for splits themselves."""

    def snapshot_state(self, checkpoint_id: int) -> PostgresEnumeratorState:
        """The chunks not assigned yet."""
        return PostgresEnumeratorState(remaining=tuple(self._remaining))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing: a snapshot acknowledges nothing upstream."""


@final
class PostgresSplitState:
    """A split being read: the split, and the rows emitted from it so far."""

    __slots__ = ("records_read", "split")

    def __init__(self, split: PostgresSourceSplit) -> None:
        self.split = split
        self.records_read = split.records_read


@final
class PostgresSplitReader:
    """Reads its splits one after another, a batch per fetch, on one connection."""

    def __init__(self, connect: Connect, read_split: ReadSplit) -> None:
        self._connect = connect
        self._read_split = read_split
        self._connection: psycopg.Connection[Any] | None = None
        self._splits: collections.deque[PostgresSourceSplit] = collections.deque()
        self._current: tuple[str, Iterator[pa.RecordBatch]] | None = None

    def fetch(self) -> RecordsBySplits[pa.RecordBatch]:
        """The current split's next batch, or that split finished."""
        if self._current is None:
            if not self._splits:
                return RecordsBySplits({})
            split = self._splits.popleft()
            if self._connection is None:
                self._connection = self._connect()
            self._current = (split.id, self._read_split(self._connection, split))
        split_id, batches = self._current
        batch = next(batches, None)
        if batch is None:
            self._current = None
            return RecordsBySplits.finished(split_id)
        return RecordsBySplits({split_id: [batch]})

    def handle_splits_changes(self, splits_changes: SplitsChange[PostgresSourceSplit]) -> None:
        """Queue added splits; chunk splits are never removed."""
        if isinstance(splits_changes, SplitsAddition):
            self._splits.extend(splits_changes.splits)

    def wake_up(self) -> None:
        """A fetch waits only for the server: nothing to interrupt."""

    def close(self) -> None:
        """End the current read and close the connection."""
        current, self._current = self._current, None
        connection, self._connection = self._connection, None
        if connection is not None:
            if current is not None:  # a COPY still running: stop it rather than drain it
                connection.cancel_safe()
            connection.close()
        if current is not None:
            close = getattr(current[1], "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the connection is closed already
                    close()


@final
class _BatchEmitter:
    """Emits a batch and moves its split's position by its rows."""

    def emit_record(
        self,
        element: pa.RecordBatch,
        output: SourceOutput[object],
        split_state: PostgresSplitState,
    ) -> None:
        output.collect_batch(element)
        split_state.records_read += element.num_rows


@final
class PostgresSourceReader(
    SingleThreadMultiplexSourceReaderBase[
        pa.RecordBatch, object, PostgresSourceSplit, PostgresSplitState
    ]
):
    """Asks for a chunk at start and after each finished one; reads it on its connection.

    Args:
        context: The reader's context.
        connect: Opens the reader's connection (once, in the fetcher thread).
        read_split: Reads one split after its position.
    """

    def __init__(
        self, context: SourceReaderContext, connect: Connect, read_split: ReadSplit
    ) -> None:
        super().__init__(lambda: PostgresSplitReader(connect, read_split), _BatchEmitter(), context)
        self._restored = False

    def add_splits(self, splits: list[PostgresSourceSplit]) -> None:
        """Take splits (restored ones before `start`, assigned ones after)."""
        self._restored = self._restored or bool(splits)
        super().add_splits(splits)

    def start(self) -> None:
        """Ask for a first split unless splits were restored."""
        if not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: PostgresSourceSplit) -> PostgresSplitState:
        """The split's mutable state, at its position."""
        return PostgresSplitState(split)

    def to_split_type(self, split_id: str, split_state: PostgresSplitState) -> PostgresSourceSplit:
        """The split at the position reached."""
        return split_state.split.at(split_state.records_read)

    def on_split_finished(self, finished_split_ids: dict[str, PostgresSplitState]) -> None:
        """Ask for the next split."""
        self.context.send_split_request()
