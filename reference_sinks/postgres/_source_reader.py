"""`PostgresSource`'s enumerator and reader: chunk splits handed out on request, read by COPY.

The enumerator (Flink's static split enumerator, as the JDBC source's) holds the
planned chunks and answers each reader's split request with the next one, or "no
more splits" once none is left; a failed reader's splits go back to the front.

The reader (on the reader framework, as Flink's ``JdbcSourceSplitReader``) asks for a
split at start (unless splits were restored) and after each finished one, so splits
are pulled one at a time and a fast reader takes more of them. Its split reader,
in the fetcher thread, opens one connection (ADBC's PostgreSQL driver) on first use and
reads each split with one statement, a read-only repeatable-read transaction of its own:
the chunk's rows in the chunk's order after the split's position, a batch per fetch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, final

import pyarrow as pa

from reference_sinks._split_queue import SplitQueue
from reference_sinks._split_reader import BatchSplitReader, PullingBatchReader
from reference_sinks.postgres._source_split import PostgresEnumeratorState, PostgresSourceSplit
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import SourceReaderContext, SplitEnumeratorContext

if TYPE_CHECKING:
    from adbc_driver_manager import dbapi

__all__ = ["PostgresSourceReader", "PostgresSplitEnumerator", "ReadSplit"]

ReadSplit = Callable[["dbapi.Connection", PostgresSourceSplit], Iterator[pa.RecordBatch]]
"""A split's rows after its position, as batches of the produced type, read on a connection."""
Connect = Callable[[], "dbapi.Connection"]


@final
class PostgresSplitEnumerator:
    """Hands out the planned chunks, one per split request; see the module docstring."""

    def __init__(
        self,
        context: SplitEnumeratorContext[PostgresSourceSplit],
        state: PostgresEnumeratorState,
        reads: str,
    ) -> None:
        """Go on from ``state``, which must have been written by a source that ``reads``.

        Raises:
            SinkConfigurationError: ``state`` was written for another relation or split
                key: its key ranges and positions are not this source's.
        """
        if state.reads is not None and state.reads != reads:
            raise SinkConfigurationError(
                f"the checkpoint PostgresSource is restored from was written for "
                f"{state.reads}, not {reads}: its key ranges and positions are not this "
                "source's (its rows would be skipped or read twice). Start a new query for "
                "it (a new source_id and checkpoint location), or restore this one with the "
                "source it was started with"
            )
        self._reads = reads
        self._splits = SplitQueue(context, state.remaining, continuous=False)

    def start(self) -> None:
        """Nothing: the chunks were planned before."""

    def close(self) -> None:
        """Nothing to release."""

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next chunk, or signal that none is left."""
        self._splits.request(subtask_id, requester_hostname)

    def add_splits_back(self, splits: list[PostgresSourceSplit], subtask_id: int) -> None:
        """A failed reader's splits go first to the next requests."""
        self._splits.add_back(splits)

    def add_reader(self, subtask_id: int) -> None:
        """A reader (re)registered: a request of an earlier reader of its subtask is void."""
        self._splits.forget_request(subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> PostgresEnumeratorState:
        """The chunks not assigned yet."""
        return PostgresEnumeratorState(remaining=self._splits.remaining, reads=self._reads)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing: a snapshot acknowledges nothing upstream."""


@final
class _Connection:
    """The fetcher thread's connection: opened on the first split, closed with the reader."""

    def __init__(self, connect: Connect, read_split: ReadSplit) -> None:
        self._connect = connect
        self._read_split = read_split
        self._connection: dbapi.Connection | None = None

    def read(self, split: PostgresSourceSplit) -> Iterator[pa.RecordBatch]:
        """The split's rows after its position, on this reader's connection."""
        if self._connection is None:
            self._connection = self._connect()
        return self._read_split(self._connection, split)

    def close(self, current: Iterator[pa.RecordBatch] | None) -> None:
        """End the current read and close the connection."""
        connection, self._connection = self._connection, None
        if connection is not None and current is not None:
            # A statement may still run (in the fetcher thread): stop it rather than drain it.
            with contextlib.suppress(Exception):
                connection.adbc_cancel()
        if current is not None:
            close = getattr(current, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # cancelled, or running in another thread
                    close()
        if connection is not None:
            with contextlib.suppress(Exception):  # the server may be gone already
                connection.close()


def _split_reader(connect: Connect, read_split: ReadSplit) -> BatchSplitReader[PostgresSourceSplit]:
    connection = _Connection(connect, read_split)
    return BatchSplitReader(connection.read, connection.close)


@final
class PostgresSourceReader(PullingBatchReader[PostgresSourceSplit]):
    """Asks for a chunk at start and after each finished one; reads it on its connection.

    Args:
        context: The reader's context.
        connect: Opens the reader's connection (once, in the fetcher thread).
        read_split: Reads one split after its position.
    """

    def __init__(
        self, context: SourceReaderContext, connect: Connect, read_split: ReadSplit
    ) -> None:
        super().__init__(context, lambda: _split_reader(connect, read_split))
