"""A small FLIP-27 source over in-memory lists, built on the reader framework.

`ListSource` holds ``splits`` lists of values; each split is read by a
`SingleThreadMultiplexSourceReaderBase` whose split reader hands out a few records
of every split per fetch (multiplexed), as rows or as Arrow batches. Tests of the
framework, the engine and the kit use it, and derive broken variants from it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

import attrs

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.source import Boundedness, SourceEvent, SourceReaderContext, SplitEnumeratorContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
    SplitsRemoval,
)


@attrs.frozen
class ListSplit:
    id: str
    values: tuple[int, ...]
    position: int = 0

    def split_id(self) -> str:
        return self.id


@attrs.define
class ListSplitState:
    split: ListSplit
    position: int


@attrs.frozen
class ListEnumeratorState:
    remaining: tuple[ListSplit, ...]


class ListSplitReader:
    """Hands out up to ``per_fetch`` records of each split per fetch; rows or Arrow batches."""

    def __init__(self, per_fetch: int = 3, arrow: bool = False) -> None:
        self.per_fetch = per_fetch
        self.arrow = arrow
        self.splits: dict[str, list[Any]] = {}
        self.removed: list[str] = []
        self.fetches = 0
        self.wake_ups = 0
        self.closed = False

    def fetch(self) -> RecordsBySplits[Any]:
        self.fetches += 1
        records: dict[str, list[Any]] = {}
        finished = list(self.removed)
        self.removed.clear()
        for split_id, (split, position) in list(self.splits.items()):
            chunk = split.values[position : position + self.per_fetch]
            self.splits[split_id] = [split, position + len(chunk)]
            if chunk:
                records[split_id] = [self._element(chunk)] if self.arrow else list(chunk)
            if position + len(chunk) >= len(split.values):
                finished.append(split_id)
                del self.splits[split_id]
        return RecordsBySplits(records, finished)

    def _element(self, chunk: Sequence[int]) -> Any:
        import pyarrow

        return pyarrow.record_batch([pyarrow.array(chunk, pyarrow.int64())], ["value"])

    def handle_splits_changes(self, splits_changes: SplitsChange[ListSplit]) -> None:
        if isinstance(splits_changes, SplitsAddition):
            for split in splits_changes.splits:
                self.splits[split.id] = [split, split.position]
        elif isinstance(splits_changes, SplitsRemoval):
            for split in splits_changes.splits:
                self.splits.pop(split.id, None)
                self.removed.append(split.id)

    def wake_up(self) -> None:
        self.wake_ups += 1

    def close(self) -> None:
        self.closed = True


class RowEmitter:
    def emit_record(self, element: int, output: Any, split_state: ListSplitState) -> None:
        output.collect({"value": element})
        split_state.position += 1


class BatchEmitter:
    def emit_record(self, element: Any, output: Any, split_state: ListSplitState) -> None:
        output.collect_batch(element)
        split_state.position += element.num_rows


class ListSourceReader(SingleThreadMultiplexSourceReaderBase[Any, Any, ListSplit, ListSplitState]):
    """Asks for a split at start (unless restored) and whenever one finishes."""

    def __init__(self, context: SourceReaderContext, *, arrow: bool = False, **kwargs: Any):
        self.split_readers: list[ListSplitReader] = []
        self.restored = False

        def supplier() -> ListSplitReader:
            reader = ListSplitReader(arrow=arrow)
            self.split_readers.append(reader)
            return reader

        super().__init__(supplier, BatchEmitter() if arrow else RowEmitter(), context, **kwargs)

    def add_splits(self, splits: list[ListSplit]) -> None:
        self.restored = self.restored or not self._started
        super().add_splits(splits)

    _started = False

    def start(self) -> None:
        self._started = True
        if not self.restored:
            self.context.send_split_request()

    def initialized_state(self, split: ListSplit) -> ListSplitState:
        return ListSplitState(split, split.position)

    def to_split_type(self, split_id: str, split_state: ListSplitState) -> ListSplit:
        return attrs.evolve(split_state.split, position=split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, ListSplitState]) -> None:
        self.context.send_split_request()


class ListEnumerator:
    """Hands out one split per request (Flink's static file enumerator)."""

    def __init__(self, context: SplitEnumeratorContext[ListSplit], remaining: Sequence[ListSplit]):
        self.context = context
        self.remaining = collections.deque(remaining)

    def start(self) -> None:
        pass

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        if self.remaining:
            self.context.assign_split(self.remaining.popleft(), subtask_id)
        else:
            self.context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[ListSplit], subtask_id: int) -> None:
        self.remaining.extend(splits)

    def add_reader(self, subtask_id: int) -> None:
        pass

    def snapshot_state(self, checkpoint_id: int) -> ListEnumeratorState:
        return ListEnumeratorState(tuple(self.remaining))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        pass

    def close(self) -> None:
        pass


class ListSource:
    """``splits`` splits of ``per_split`` values each; values are unique (0, 1, 2, ...)."""

    enumerator_class: type[ListEnumerator] = ListEnumerator
    reader_class: type[ListSourceReader] = ListSourceReader

    def __init__(self, splits: int = 6, per_split: int = 20, *, arrow: bool = False) -> None:
        self.splits = [
            ListSplit(f"s{i}", tuple(range(i * per_split, (i + 1) * per_split)))
            for i in range(splits)
        ]
        self.arrow = arrow

    def expected(self) -> list[dict[str, int]]:
        return [{"value": v} for split in self.splits for v in split.values]

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[ListSplit]) -> ListEnumerator:
        return self.enumerator_class(enum_context, self.splits)

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[ListSplit], checkpoint: ListEnumeratorState
    ) -> ListEnumerator:
        return self.enumerator_class(enum_context, checkpoint.remaining)

    def create_reader(self, reader_context: SourceReaderContext) -> ListSourceReader:
        return self.reader_class(reader_context, arrow=self.arrow)

    def get_split_serializer(self) -> Any:
        return AttrsMsgpackSerializer(ListSplit)

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return AttrsMsgpackSerializer(ListEnumeratorState)

    def get_produced_type(self) -> Any:
        import pyarrow

        return pyarrow.schema([("value", pyarrow.int64())])


class BlockingSplitReader(ListSplitReader):
    """A fetch blocks until `release` or `wake_up`; for the wake-up tests."""

    def __init__(self) -> None:
        super().__init__(per_fetch=1)
        self.gate = threading.Event()
        self.blocked = threading.Event()

    def fetch(self) -> RecordsBySplits[Any]:
        self.blocked.set()
        self.gate.wait(30)
        self.gate.clear()
        return super().fetch()

    def release(self) -> None:
        self.gate.set()

    def wake_up(self) -> None:
        super().wake_up()
        self.gate.set()
