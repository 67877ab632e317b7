"""An unbounded FLIP-27 source over in-memory logs that grow: `SupportsEndPositions` in small.

`LogSource` reads the partitions of a named log in `LOGS` (lists that tests append
to). Each partition is one split that never ends; its position is the index of the
next value, and a cut split carries the index it stops at. The enumerator assigns
every partition once, to subtask ``partition % parallelism``, as readers register
(Kafka's enumerator does the same), and keeps the assigned partitions in its
checkpoint. Completed checkpoints are recorded in `NOTIFIED`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.source import (
    Boundedness,
    SourceEvent,
    SourceReaderContext,
    SplitCut,
    SplitEnumeratorContext,
)
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsAddition,
    SplitsChange,
)

LOGS: dict[str, list[list[int]]] = {}
"""Log name -> partitions -> values appended so far."""

NOTIFIED: dict[str, list[int]] = {}
"""Log name -> the checkpoints whose completion the enumerator was told, in order."""


@attrs.frozen
class LogSplit:
    partition: int
    position: int
    stop: int | None = None

    def split_id(self) -> str:
        return f"p{self.partition}"


@attrs.frozen
class LogEnumeratorState:
    assigned: tuple[int, ...]


@attrs.define
class _SplitState:
    split: LogSplit
    position: int


class LogSplitReader:
    def __init__(self, log: str, per_fetch: int) -> None:
        self.log = log
        self.per_fetch = per_fetch
        self.splits: dict[str, list[Any]] = {}

    def fetch(self) -> RecordsBySplits[Any]:
        records: dict[str, list[int]] = {}
        finished = []
        for split_id, (split, position) in list(self.splits.items()):
            values = LOGS[self.log][split.partition]
            end = min(split.stop if split.stop is not None else len(values), len(values))
            chunk = values[position : min(position + self.per_fetch, end)]
            self.splits[split_id][1] = position + len(chunk)
            if chunk:
                records[split_id] = chunk
            if split.stop is not None and position + len(chunk) >= split.stop:
                finished.append(split_id)
                del self.splits[split_id]
        return RecordsBySplits(records, finished)

    def handle_splits_changes(self, splits_changes: SplitsChange[LogSplit]) -> None:
        if isinstance(splits_changes, SplitsAddition):
            for split in splits_changes.splits:
                self.splits[split.split_id()] = [split, split.position]

    def wake_up(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Emitter:
    def emit_record(self, element: int, output: Any, split_state: _SplitState) -> None:
        output.collect({"partition": split_state.split.partition, "value": element})
        split_state.position += 1


class LogReader(SingleThreadMultiplexSourceReaderBase[Any, Any, LogSplit, _SplitState]):
    def __init__(self, context: SourceReaderContext, log: str, per_fetch: int) -> None:
        super().__init__(lambda: LogSplitReader(log, per_fetch), _Emitter(), context)

    def start(self) -> None:
        pass

    def initialized_state(self, split: LogSplit) -> _SplitState:
        return _SplitState(split, split.position)

    def to_split_type(self, split_id: str, split_state: _SplitState) -> LogSplit:
        return attrs.evolve(split_state.split, position=split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, _SplitState]) -> None:
        pass


class LogEnumerator:
    def __init__(
        self, log: str, context: SplitEnumeratorContext[LogSplit], assigned: Sequence[int]
    ) -> None:
        self.log = log
        self.context = context
        self.assigned = set(assigned)

    def start(self) -> None:
        pass

    def add_reader(self, subtask_id: int) -> None:
        parallelism = self.context.current_parallelism()
        for partition in range(len(LOGS[self.log])):
            if partition % parallelism == subtask_id and partition not in self.assigned:
                self.assigned.add(partition)
                self.context.assign_split(LogSplit(partition, 0), subtask_id)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        pass

    def add_splits_back(self, splits: list[LogSplit], subtask_id: int) -> None:
        for split in splits:
            self.context.assign_split(split, subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> LogEnumeratorState:
        return LogEnumeratorState(tuple(sorted(self.assigned)))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        NOTIFIED.setdefault(self.log, []).append(checkpoint_id)

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        pass

    def close(self) -> None:
        pass


class LogSource:
    """The partitions of ``LOGS[log]``, for ever; cut at their current length."""

    def __init__(self, log: str, *, per_fetch: int = 4) -> None:
        self.log = log
        self.per_fetch = per_fetch

    def get_boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[LogSplit]) -> LogEnumerator:
        return LogEnumerator(self.log, enum_context, ())

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[LogSplit], checkpoint: LogEnumeratorState
    ) -> LogEnumerator:
        return LogEnumerator(self.log, enum_context, checkpoint.assigned)

    def create_reader(self, reader_context: SourceReaderContext) -> LogReader:
        return LogReader(reader_context, self.log, self.per_fetch)

    def get_split_serializer(self) -> Any:
        return AttrsMsgpackSerializer(LogSplit)

    def get_enumerator_checkpoint_serializer(self) -> Any:
        return AttrsMsgpackSerializer(LogEnumeratorState)

    def get_produced_type(self) -> Any:
        import pyarrow

        return pyarrow.schema(
            [
                pyarrow.field("partition", pyarrow.int64(), nullable=False),
                pyarrow.field("value", pyarrow.int64(), nullable=False),
            ]
        )

    # -- SupportsEndPositions -------------------------------------------------------

    def end_positions(self, splits: Sequence[LogSplit]) -> list[int]:
        return [len(LOGS[self.log][split.partition]) for split in splits]

    def cut_split(
        self, split: LogSplit, end: object, max_records: int | None
    ) -> SplitCut[LogSplit]:
        assert isinstance(end, int)
        stop = end if max_records is None else min(end, split.position + max_records)
        if stop <= split.position:
            return SplitCut(None, split, 0)
        return SplitCut(
            attrs.evolve(split, stop=stop),
            attrs.evolve(split, position=stop),
            stop - split.position,
        )
