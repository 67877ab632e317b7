"""How a local source engine's enumerator and readers are wired: channels, contexts, outputs.

The contexts and outputs a source gets from `LocalSourceEngine` call into one
`Wiring`, which keeps the FLIP-27 rules that hold the moment a source calls: an
assignment goes to a registered reader, once per split, never after
``signal_no_more_splits``; a record matches the produced schema; a reader emits
only through splits it was given. The engine (``_source_engine``) schedules and
checkpoints over the same wiring.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._text import describe, short_repr
from sinkv2.runtime._source_plan import split_id_of
from sinkv2.source import ReaderInfo, SourceContractError, SourceEvent, SplitsAssignment

__all__ = [
    "EmittedRecord",
    "EnumeratorContext",
    "ReaderContext",
    "ReaderSlot",
    "Timer",
    "Wiring",
    "deal",
    "split_id_of",
]

_LOG_LINES: Final = 400


@final
@attrs.frozen
class EmittedRecord:
    """One record a reader emitted, as a dict, with the split it came through (if known)."""

    subtask: int
    split_id: str | None
    record: Mapping[str, Any]


class SplitOutput:
    """A split's `SourceOutput`: records go to the reader's uncommitted ones, tagged by split."""

    __slots__ = ("_slot", "_split_id")

    def __init__(self, slot: ReaderSlot, split_id: str | None) -> None:
        self._slot = slot
        self._split_id = split_id

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._slot.emit(self._split_id, record)

    def collect_batch(self, batch: Any) -> None:
        self._slot.emit_batch(self._split_id, batch)


class SlotOutput(SplitOutput):
    """A reader's `ReaderOutput`: untagged records, and one `SplitOutput` per split."""

    __slots__ = ("_splits",)

    def __init__(self, slot: ReaderSlot) -> None:
        super().__init__(slot, None)
        self._splits: dict[str, SplitOutput] = {}

    def create_output_for_split(self, split_id: str) -> SplitOutput:
        found = self._splits.get(split_id)
        if found is None:
            found = self._splits[split_id] = SplitOutput(self._slot, split_id)
        return found

    def release_output_for_split(self, split_id: str) -> None:
        self._splits.pop(split_id, None)


class ReaderContext:
    """A reader's `SourceReaderContext`: requests and events go into its channel."""

    def __init__(self, wiring: Wiring, subtask: int, metrics: InMemoryMetricGroup) -> None:
        self._wiring = wiring
        self._subtask = subtask
        self._metrics = metrics

    def get_index_of_subtask(self) -> int:
        return self._subtask

    def current_parallelism(self) -> int:
        return self._wiring.parallelism

    def send_split_request(self) -> None:
        self._wiring.send_to_enumerator(self._subtask, ("request", None))

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        self._wiring.send_to_enumerator(self._subtask, ("event", source_event))

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


@attrs.define
class Timer:
    """A ``call_async`` of the enumerator: due on the engine's clock, repeated if periodic."""

    due_ms: int
    period_ms: int
    callable: Callable[[], Any]
    handler: Callable[[Any, BaseException | None], None]


class EnumeratorContext:
    """The enumerator's `SplitEnumeratorContext`: assignments go through the wiring's rules."""

    def __init__(self, wiring: Wiring) -> None:
        self._wiring = wiring
        self._metrics = InMemoryMetricGroup()

    def current_parallelism(self) -> int:
        return self._wiring.parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return dict(self._wiring.registered)

    def assign_split(self, split: Any, subtask_id: int) -> None:
        self._wiring.assign(subtask_id, [split])

    def assign_splits(self, new_split_assignments: SplitsAssignment[Any]) -> None:
        for subtask_id, splits in new_split_assignments.assignment.items():
            self._wiring.assign(subtask_id, list(splits))

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self._wiring.signal_no_more_splits(subtask_id)

    def call_async(
        self,
        callable: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> None:
        wiring = self._wiring
        wiring.timers.append(
            Timer(wiring.clock_ms + initial_delay_ms, period_ms, callable, handler)
        )

    def send_event_to_source_reader(self, subtask_id: int, event: SourceEvent) -> None:
        self._wiring.check_registered(subtask_id, "send_event_to_source_reader")
        self._wiring.to_reader[subtask_id].append(("event", event))

    def run_in_coordinator_thread(self, runnable: Callable[[], None]) -> None:
        self._wiring.coordinator_tasks.append(runnable)

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


class ReaderSlot:
    """One reader subtask: the reader, its output, and what the engine knows about it."""

    def __init__(self, wiring: Wiring, subtask: int) -> None:
        self.wiring = wiring
        self.subtask = subtask
        self.metrics = InMemoryMetricGroup()
        self.reader: Any = None
        self.output = SlotOutput(self)
        self.pending: list[EmittedRecord] = []
        self.given: set[str] = set()
        self.no_more_sent = False
        self.no_more_delivered = False
        self.finished = False
        self.future: concurrent.futures.Future[None] | None = None
        self.emitted = 0
        self.snapshot_ids: list[str] = []
        self.left_out: dict[str, int] = {}
        """Splits given to this reader that a snapshot left out (finished, to a restore):
        split id -> that checkpoint's id."""
        self.empty_polls = 0  # poll_next calls in a row that emitted nothing
        self.last_status: str | None = None

    def runnable(self) -> bool:
        return not self.finished and (self.future is None or self.future.done())

    def emit(self, split_id: str | None, record: Any) -> None:
        self._check_emit(split_id)
        self.pending.append(EmittedRecord(self.subtask, split_id, self.wiring.as_row(self, record)))
        self.emitted += 1

    def emit_batch(self, split_id: str | None, batch: Any) -> None:
        self._check_emit(split_id)
        names = self.wiring.column_names
        got = list(getattr(getattr(batch, "schema", None), "names", None) or [])
        if sorted(got) != sorted(names):
            raise SourceContractError(
                f"reader {self.subtask} emitted a batch with columns {got} through "
                f"collect_batch, but get_produced_type() has {list(names)}; emit batches of "
                "the produced schema",
                method="collect_batch",
                split_id=split_id,
            )
        rows = batch.to_pylist()
        self.pending.extend(EmittedRecord(self.subtask, split_id, row) for row in rows)
        self.emitted += len(rows)

    def _check_emit(self, split_id: str | None) -> None:
        if self.finished:
            raise SourceContractError(
                f"reader {self.subtask} emitted a record after poll_next returned END_OF_INPUT",
                method="poll_next",
                split_id=split_id,
            )
        if split_id is not None and split_id not in self.given:
            raise SourceContractError(
                f"reader {self.subtask} emitted a record through the output of split "
                f"{split_id!r}, which it was never given",
                method="create_output_for_split",
                split_id=split_id,
            )
        if split_id is not None and split_id in self.left_out:
            raise SourceContractError(
                f"reader {self.subtask} emitted a record of split {split_id!r} after its "
                f"snapshot_state({self.left_out[split_id]}) left that split out, as if it "
                "were finished: a restore from that checkpoint would never read the split's "
                "remaining records again; snapshot_state must hold every split with records "
                "still to emit (the split in progress too, and one whose last records are "
                "fetched but not yet emitted), and a finished split emits nothing more",
                method="snapshot_state",
                split_id=split_id,
            )


class Wiring:
    """The channels between the enumerator and the readers, and the rules they keep.

    State shared by the contexts the source calls and the engine that schedules:
    one FIFO channel per reader and direction, timers, coordinator tasks, which
    reader registered, and which reader owns each assigned split.
    """

    def __init__(
        self,
        parallelism: int,
        column_names: Sequence[str],
        frame: Callable[[Any], bytes] | None = None,
    ) -> None:
        self.parallelism = parallelism
        self.column_names = column_names
        self.frame = frame
        """Frames a split with the split serializer, as Flink's ``AddSplitEvent`` does the
        moment the enumerator assigns it: the reader gets a copy, never the object."""
        self.clock_ms = 0
        self.steps = 0
        self.log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self.registered: dict[int, ReaderInfo] = {}
        self.to_reader: list[collections.deque[tuple[str, Any]]] = [
            collections.deque() for _ in range(parallelism)
        ]
        self.to_enumerator: list[collections.deque[tuple[str, Any]]] = [
            collections.deque() for _ in range(parallelism)
        ]
        self.coordinator_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self.timers: list[Timer] = []
        self.owner: dict[str, int] = {}
        self.since_checkpoint: list[list[Any]] = [[] for _ in range(parallelism)]
        self.readers: list[ReaderSlot] = []
        self.seen: set[str] = set()  # every split id assigned or restored in this run
        self.given_back: dict[str, int] = {}
        """Splits handed to ``add_splits_back`` and not assigned since: id -> failed subtask."""

    def log_line(self, line: str) -> None:
        """Add a numbered line to the log."""
        self.log.append(f"{self.steps:>5}. {line}")

    def send_to_enumerator(self, subtask: int, message: tuple[str, Any]) -> None:
        self.to_enumerator[subtask].append(message)

    def check_registered(self, subtask: int, method: str) -> None:
        if subtask not in self.registered:
            raise SourceContractError(
                f"the enumerator called {method}() for subtask {subtask}, which is not a "
                f"registered reader (registered: {sorted(self.registered)}, parallelism "
                f"{self.parallelism}); wait for add_reader() or a split request",
                method=method,
            )

    def assign(self, subtask: int, splits: list[Any]) -> None:
        self.check_registered(subtask, "assign_splits")
        slot = self.readers[subtask]
        for split in splits:
            split_id = split_id_of(split, "assign_splits")
            if slot.no_more_sent:
                raise SourceContractError(
                    f"the enumerator assigned split {split_id!r} to reader {subtask} after "
                    "signal_no_more_splits() for it",
                    method="assign_splits",
                    split_id=split_id,
                )
            owner = self.owner.get(split_id)
            if owner is not None:
                raise SourceContractError(
                    f"the enumerator assigned split {split_id!r} to reader {subtask}, but it "
                    f"already assigned it to reader {owner} and did not get it back through "
                    "add_splits_back(): a split is read by one reader, once",
                    method="assign_splits",
                    split_id=split_id,
                )
            self.owner[split_id] = subtask
            self.given_back.pop(split_id, None)
            self.seen.add(split_id)
            self.since_checkpoint[subtask].append(split)
        self.log_line(
            f"enumerator assigns {[split_id_of(s, 'assign') for s in splits]} to {subtask}"
        )
        frame = self.frame
        shipped = [(split, None if frame is None else frame(split)) for split in splits]
        self.to_reader[subtask].append(("splits", shipped))

    def signal_no_more_splits(self, subtask: int) -> None:
        self.check_registered(subtask, "signal_no_more_splits")
        self.readers[subtask].no_more_sent = True
        self.log_line(f"enumerator signals no more splits to {subtask}")
        self.to_reader[subtask].append(("no_more", None))

    def as_row(self, slot: ReaderSlot, record: Any) -> Mapping[str, Any]:
        names = self.column_names
        if isinstance(record, Mapping):
            if sorted(record) != sorted(names):
                raise SourceContractError(
                    f"reader {slot.subtask} emitted {short_repr(record)}, whose keys differ "
                    f"from get_produced_type()'s columns {list(names)}",
                    method="collect",
                )
            return dict(record)
        if isinstance(record, tuple | list) and len(record) == len(names):
            return dict(zip(names, record, strict=True))
        raise SourceContractError(
            f"reader {slot.subtask} emitted {describe(record)}; a record is a dict keyed by "
            f"get_produced_type()'s columns {list(names)} or a tuple in their order",
            method="collect",
        )

    # --- readers ---------------------------------------------------------------------


def deal(items: Sequence[bytes], parts: int) -> list[list[bytes]]:
    """``items`` in ``parts`` contiguous runs whose lengths differ by at most one."""
    size, extra = divmod(len(items), parts)
    result, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        result.append(list(items[start:end]))
        start = end
    return result
