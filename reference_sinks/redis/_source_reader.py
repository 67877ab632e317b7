"""The `RedisStreamSource` reader: ``XRANGE`` of every split per fetch, in one round trip.

A `StreamSplitReader` (the fetcher thread's half) reads up to ``batch_entries``
entries of each of its splits per fetch, all splits' ``XRANGE`` in one pipeline,
and hands each split's entries on as one Arrow batch with the id reached; a
split with a stop ends once it is read up to it (or its range has no more
entries). With nothing to read it waits ``poll_interval_s``, or until woken.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol, final

import attrs
import pyarrow as pa

from reference_sinks.redis._source_client import connect, read_ranges
from reference_sinks.redis._source_rows import EntryRows
from reference_sinks.redis._source_split import RedisStreamSplit
from sinkv2.source import SourceOutput, SourceReaderContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

__all__ = ["RedisStreamReader", "StreamSplitReader", "StreamSplitState"]


class _ReaderSettings(Protocol):
    """What a reader reads of its `RedisStreamSource`."""

    @property
    def url(self) -> str: ...

    @property
    def client_options(self) -> Mapping[str, Any]: ...

    @property
    def bounded(self) -> bool: ...

    @property
    def batch_entries(self) -> int: ...

    @property
    def poll_interval_s(self) -> float: ...

    def get_produced_type(self) -> pa.Schema: ...


@final
@attrs.define
class StreamSplitState:
    """A split being read: the split, and the id of the last entry emitted from it."""

    split: RedisStreamSplit
    after: str


@final
@attrs.frozen
class _Chunk:
    """Entries of one split read by one fetch, and the id of the last of them."""

    batch: pa.RecordBatch
    last_id: str


@final
class StreamSplitReader:
    """Reads the next entries of every split per fetch (one pipelined ``XRANGE`` each)."""

    def __init__(self, source: _ReaderSettings) -> None:
        self._source = source
        self._rows = EntryRows(source.get_produced_type())
        self._client: Any = connect(source.url, source.client_options)
        self._splits: dict[str, RedisStreamSplit] = {}
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[_Chunk]:
        """The next entries of each split, and the splits read to their stop.

        Raises:
            NotAStreamError: A split's key holds another type than a stream.
            StreamEntryError: An entry does not fit the declared fields.
        """
        splits = list(self._splits.values())
        count = self._source.batch_entries
        replies = read_ranges(self._client, [(s.key, s.after, s.stop, count) for s in splits])
        records: dict[str, list[_Chunk]] = {}
        finished: list[str] = []
        for before, entries in zip(splits, replies, strict=True):
            split = before
            if entries:
                last = entries[-1][0].decode("ascii")
                records[split.key] = [_Chunk(self._rows.batch(split.key, entries), last)]
                split = attrs.evolve(split, after=last, added=None)
                self._splits[split.key] = split
            if split.stop is not None and (len(entries) < count or split.finished()):
                finished.append(split.key)
                del self._splits[split.key]
        if not records and not finished and self._splits:
            self._woken.wait(self._source.poll_interval_s)
        self._woken.clear()
        return RecordsBySplits(records, finished)

    def handle_splits_changes(self, splits_changes: SplitsChange[RedisStreamSplit]) -> None:
        """Add splits (stream splits are never removed)."""
        if isinstance(splits_changes, SplitsAddition):
            for split in splits_changes.splits:
                self._splits[split.key] = split

    def wake_up(self) -> None:
        """End a waiting fetch."""
        self._woken.set()

    def close(self) -> None:
        """Close the client."""
        self._client.close()


@final
class _ChunkEmitter:
    def emit_record(
        self, element: _Chunk, output: SourceOutput[object], split_state: StreamSplitState
    ) -> None:
        output.collect_batch(element.batch)
        split_state.after = element.last_id


@final
class RedisStreamReader(
    SingleThreadMultiplexSourceReaderBase[_Chunk, object, RedisStreamSplit, StreamSplitState]
):
    """Reads the stream splits it is given; a split with a stop ends exactly there.

    Bounded: asks for a split at start (unless splits were restored) and after each
    finished one. Unbounded: splits are pushed, so it never asks.
    """

    def __init__(self, context: SourceReaderContext, source: _ReaderSettings) -> None:
        super().__init__(lambda: StreamSplitReader(source), _ChunkEmitter(), context)
        self._pull = source.bounded
        self._restored = False

    def add_splits(self, splits: list[RedisStreamSplit]) -> None:
        """Take splits (restored ones before `start`, assigned ones after)."""
        self._restored = self._restored or bool(splits)
        super().add_splits(splits)

    def start(self) -> None:
        """A bounded reader asks for its first split, unless splits were restored."""
        if self._pull and not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: RedisStreamSplit) -> StreamSplitState:
        """The split at its position."""
        return StreamSplitState(split, split.after)

    def to_split_type(self, split_id: str, split_state: StreamSplitState) -> RedisStreamSplit:
        """The split at the id reached (how many entries lie before it is not known)."""
        split = split_state.split
        if split_state.after == split.after:
            return split
        return attrs.evolve(split, after=split_state.after, added=None)

    def on_split_finished(self, finished_split_ids: dict[str, StreamSplitState]) -> None:
        """A bounded reader asks for the next split."""
        if self._pull:
            self.context.send_split_request()
