"""A local engine for FLIP-27 sources: one enumerator, N readers, checkpoints and failures.

(Over 450 lines: the contexts and outputs it hands the source, its steps, and its
checkpoint checks are one state machine over the same channels and ownership maps;
split apart they would reach into each other's private state.)

It runs a source the way Flink's runtime does, in this process and one thread,
step by step, in an order a seeded random generator picks: messages between the
enumerator and each reader keep their order (one channel per reader and
direction, as Flink's RPC), everything else interleaves. A source without threads
of its own runs the same way for the same seed; a reader's fetcher thread adds its
own timing. What it models:

- a checkpoint: every assignment the enumerator made is delivered first (Flink's
  coordinator checkpoint precedes the readers' barriers), then the enumerator and
  every reader snapshot; the records emitted since the previous checkpoint become
  *committed* (the engine stands for an exactly-once sink), and
  ``notify_checkpoint_complete`` follows;
- a reader failure (Flink's regional failover): its uncommitted records are
  dropped, the enumerator gets back the splits assigned to it since the last
  checkpoint (``add_splits_back``), and a new reader starts from its splits of the
  last checkpoint;
- a restore: a new engine from any checkpoint, with any parallelism; the readers'
  splits are pooled in subtask order and dealt out in contiguous runs.

Every split and checkpoint crosses the source's serializers, with a round-trip
check, and every FLIP-27 rule a source can break here is a `SourceContractError`
naming the split and the method: a split assigned twice, a reader snapshotting a
split it was never given, ``END_OF_INPUT`` before ``notify_no_more_splits``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import enum
import functools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.source import (
    InputStatus,
    ReaderInfo,
    SourceContractError,
    SourceEvent,
    SplitsAssignment,
    check_enumerator,
    check_reader,
    inspect_source,
)

__all__ = ["EmittedRecord", "EngineStep", "LocalSourceEngine", "SourceCheckpoint"]

_HOST: Final = "localhost"
_LOG_LINES: Final = 400


@final
@attrs.frozen
class SourceCheckpoint:
    """A completed checkpoint of a local run: what a restore needs, as bytes.

    Attributes:
        checkpoint_id: Its id.
        enumerator: The enumerator's checkpoint, framed by its serializer.
        readers: For each reader subtask, its splits, each framed by the split serializer.
    """

    checkpoint_id: int
    enumerator: bytes
    readers: tuple[tuple[bytes, ...], ...]

    @property
    def parallelism(self) -> int:
        """How many readers the checkpointed run had."""
        return len(self.readers)


@final
@attrs.frozen
class EmittedRecord:
    """One record a reader emitted, as a dict, with the split it came through (if known)."""

    subtask: int
    split_id: str | None
    record: Mapping[str, Any]


class EngineStep(enum.Enum):
    """What one `LocalSourceEngine.step` did."""

    PROGRESS = "PROGRESS"
    """Something happened."""
    IDLE = "IDLE"
    """Nothing could happen, even after waiting: the source waits for new data."""
    FINISHED = "FINISHED"
    """Every reader reached ``END_OF_INPUT``."""


class _SplitOutput:
    __slots__ = ("_slot", "_split_id")

    def __init__(self, slot: _ReaderSlot, split_id: str | None) -> None:
        self._slot = slot
        self._split_id = split_id

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._slot.emit(self._split_id, record)

    def collect_batch(self, batch: Any) -> None:
        self._slot.emit_batch(self._split_id, batch)


class _ReaderOutput(_SplitOutput):
    __slots__ = ("_splits",)

    def __init__(self, slot: _ReaderSlot) -> None:
        super().__init__(slot, None)
        self._splits: dict[str, _SplitOutput] = {}

    def create_output_for_split(self, split_id: str) -> _SplitOutput:
        found = self._splits.get(split_id)
        if found is None:
            found = self._splits[split_id] = _SplitOutput(self._slot, split_id)
        return found

    def release_output_for_split(self, split_id: str) -> None:
        self._splits.pop(split_id, None)


class _ReaderContext:
    def __init__(
        self, engine: LocalSourceEngine, subtask: int, metrics: InMemoryMetricGroup
    ) -> None:
        self._engine = engine
        self._subtask = subtask
        self._metrics = metrics

    def get_index_of_subtask(self) -> int:
        return self._subtask

    def current_parallelism(self) -> int:
        return self._engine.parallelism

    def send_split_request(self) -> None:
        self._engine._send_to_enumerator(self._subtask, ("request", None))

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        self._engine._send_to_enumerator(self._subtask, ("event", source_event))

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


@attrs.define
class _Timer:
    due_ms: int
    period_ms: int
    callable: Callable[[], Any]
    handler: Callable[[Any, BaseException | None], None]


class _EnumeratorContext:
    def __init__(self, engine: LocalSourceEngine) -> None:
        self._engine = engine
        self._metrics = InMemoryMetricGroup()

    def current_parallelism(self) -> int:
        return self._engine.parallelism

    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        return dict(self._engine._registered)

    def assign_split(self, split: Any, subtask_id: int) -> None:
        self._engine._assign(subtask_id, [split])

    def assign_splits(self, new_split_assignments: SplitsAssignment[Any]) -> None:
        for subtask_id, splits in new_split_assignments.assignment.items():
            self._engine._assign(subtask_id, list(splits))

    def signal_no_more_splits(self, subtask_id: int) -> None:
        self._engine._signal_no_more_splits(subtask_id)

    def call_async(
        self,
        callable: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> None:
        engine = self._engine
        engine._timers.append(
            _Timer(engine.clock_ms + initial_delay_ms, period_ms, callable, handler)
        )

    def send_event_to_source_reader(self, subtask_id: int, event: SourceEvent) -> None:
        self._engine._check_registered(subtask_id, "send_event_to_source_reader")
        self._engine._to_reader[subtask_id].append(("event", event))

    def run_in_coordinator_thread(self, runnable: Callable[[], None]) -> None:
        self._engine._coordinator_tasks.append(runnable)

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


class _ReaderSlot:
    """One reader subtask: the reader, its output, and what the engine knows about it."""

    def __init__(self, engine: LocalSourceEngine, subtask: int) -> None:
        self.engine = engine
        self.subtask = subtask
        self.metrics = InMemoryMetricGroup()
        self.reader: Any = None
        self.output = _ReaderOutput(self)
        self.pending: list[EmittedRecord] = []
        self.given: set[str] = set()
        self.no_more_sent = False
        self.no_more_delivered = False
        self.finished = False
        self.future: concurrent.futures.Future[None] | None = None
        self.emitted = 0
        self.snapshot_ids: list[str] = []

    def runnable(self) -> bool:
        return not self.finished and (self.future is None or self.future.done())

    def emit(self, split_id: str | None, record: Any) -> None:
        self._check_emit(split_id)
        self.pending.append(
            EmittedRecord(self.subtask, split_id, self.engine._as_row(self, record))
        )
        self.emitted += 1

    def emit_batch(self, split_id: str | None, batch: Any) -> None:
        self._check_emit(split_id)
        names = self.engine.column_names
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


@final
class LocalSourceEngine:
    """Runs a FLIP-27 source in this process; see the module docstring.

    Args:
        source: The source (checked with `inspect_source`).
        parallelism: How many readers.
        seed: Seeds the order of steps.
        checkpoint: Restore from this checkpoint instead of starting afresh.
        idle_timeout: Seconds to wait for a reader's ``is_available`` future when
            nothing else can happen, before the step counts as idle.

    Attributes:
        committed: Records of completed checkpoints, in commit order.
        log: The latest steps, numbered, for failure reports.
    """

    def __init__(
        self,
        source: Any,
        parallelism: int,
        *,
        seed: int = 0,
        checkpoint: SourceCheckpoint | None = None,
        idle_timeout: float = 2.0,
    ) -> None:
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise ValueError(f"parallelism must be an int >= 1 (got {describe(parallelism)})")
        self.capabilities = inspect_source(source)
        self.source = source
        self.parallelism = parallelism
        self.column_names: Sequence[str] = list(self.capabilities.produced_type.names)
        self.clock_ms = 0
        self.idle_timeout = idle_timeout
        self.committed: list[EmittedRecord] = []
        self.log: collections.deque[str] = collections.deque(maxlen=_LOG_LINES)
        self._steps = 0
        self._random = random.Random(seed)
        self._split_serializer = source.get_split_serializer()
        self._enum_serializer = source.get_enumerator_checkpoint_serializer()
        self._registered: dict[int, ReaderInfo] = {}
        self._to_reader: list[collections.deque[tuple[str, Any]]] = [
            collections.deque() for _ in range(parallelism)
        ]
        self._to_enumerator: list[collections.deque[tuple[str, Any]]] = [
            collections.deque() for _ in range(parallelism)
        ]
        self._coordinator_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._timers: list[_Timer] = []
        self._owner: dict[str, int] = {}
        self._since_checkpoint: list[list[Any]] = [[] for _ in range(parallelism)]
        self._next_checkpoint_id = 1
        self._closed = False
        context = _EnumeratorContext(self)
        restored: list[list[Any]] = [[] for _ in range(parallelism)]
        if checkpoint is None:
            self.enumerator = source.create_enumerator(context)
            self._last_states: list[tuple[bytes, ...]] = [() for _ in range(parallelism)]
        else:
            self._next_checkpoint_id = checkpoint.checkpoint_id + 1
            state = SimpleVersionedSerialization.read_version_and_deserialize(
                self._enum_serializer, checkpoint.enumerator
            )
            self.enumerator = source.restore_enumerator(context, state)
            pooled = [framed for reader in checkpoint.readers for framed in reader]
            self._last_states = [tuple(part) for part in _deal(pooled, parallelism)]
            restored = [[self._read_split(framed) for framed in part] for part in self._last_states]
        check_enumerator(self.enumerator)
        self._log(f"enumerator {'restored' if checkpoint else 'created'}; start()")
        self.enumerator.start()
        self.readers = [_ReaderSlot(self, subtask) for subtask in range(parallelism)]
        for subtask in range(parallelism):
            self._start_reader(subtask, restored[subtask])

    # --- what the contexts call -----------------------------------------------------

    def _send_to_enumerator(self, subtask: int, message: tuple[str, Any]) -> None:
        self._to_enumerator[subtask].append(message)

    def _check_registered(self, subtask: int, method: str) -> None:
        if subtask not in self._registered:
            raise SourceContractError(
                f"the enumerator called {method}() for subtask {subtask}, which is not a "
                f"registered reader (registered: {sorted(self._registered)}, parallelism "
                f"{self.parallelism}); wait for add_reader() or a split request",
                method=method,
            )

    def _assign(self, subtask: int, splits: list[Any]) -> None:
        self._check_registered(subtask, "assign_splits")
        slot = self.readers[subtask]
        for split in splits:
            split_id = _split_id(split, "assign_splits")
            if slot.no_more_sent:
                raise SourceContractError(
                    f"the enumerator assigned split {split_id!r} to reader {subtask} after "
                    "signal_no_more_splits() for it",
                    method="assign_splits",
                    split_id=split_id,
                )
            owner = self._owner.get(split_id)
            if owner is not None:
                raise SourceContractError(
                    f"the enumerator assigned split {split_id!r} to reader {subtask}, but it "
                    f"already assigned it to reader {owner} and did not get it back through "
                    "add_splits_back(): a split is read by one reader, once",
                    method="assign_splits",
                    split_id=split_id,
                )
            self._owner[split_id] = subtask
            self._since_checkpoint[subtask].append(split)
        self._log(f"enumerator assigns {[_split_id(s, 'assign') for s in splits]} to {subtask}")
        self._to_reader[subtask].append(("splits", list(splits)))

    def _signal_no_more_splits(self, subtask: int) -> None:
        self._check_registered(subtask, "signal_no_more_splits")
        self.readers[subtask].no_more_sent = True
        self._log(f"enumerator signals no more splits to {subtask}")
        self._to_reader[subtask].append(("no_more", None))

    def _as_row(self, slot: _ReaderSlot, record: Any) -> Mapping[str, Any]:
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

    def _read_split(self, framed: bytes) -> Any:
        return SimpleVersionedSerialization.read_version_and_deserialize(
            self._split_serializer, framed
        )

    def _start_reader(self, subtask: int, restored: list[Any]) -> None:
        slot = self.readers[subtask] = _ReaderSlot(self, subtask)
        slot.reader = self.source.create_reader(_ReaderContext(self, subtask, slot.metrics))
        check_reader(slot.reader)
        if restored:
            ids = [_split_id(split, "snapshot_state") for split in restored]
            self._log(f"reader {subtask} created; add_splits({ids}) restored")
            slot.given.update(ids)
            self._owner.update(dict.fromkeys(ids, subtask))
            slot.reader.add_splits(list(restored))
        else:
            self._log(f"reader {subtask} created")
        self._to_enumerator[subtask].append(("register", None))
        slot.reader.start()

    def assigned_since_checkpoint(self) -> list[int]:
        """The readers that were assigned splits since the last checkpoint, in subtask order."""
        return [subtask for subtask, splits in enumerate(self._since_checkpoint) if splits]

    def fail_reader(self, subtask: int) -> None:
        """Fail reader ``subtask`` and restart it from the last checkpoint (regional failover)."""
        slot = self.readers[subtask]
        self._log(f"reader {subtask} FAILS: {len(slot.pending)} uncommitted records dropped")
        try:
            slot.reader.close()
        except Exception as error:  # noqa: BLE001  # a failed reader's close may fail too
            self._log(f"reader {subtask} close() raised {type(error).__name__}: {error}")
        self._to_reader[subtask].clear()
        self._to_enumerator[subtask].clear()
        self._registered.pop(subtask, None)
        back = self._since_checkpoint[subtask]
        self._since_checkpoint[subtask] = []
        for split in back:
            self._owner.pop(_split_id(split, "add_splits_back"), None)
        for split_id in [sid for sid, owner in self._owner.items() if owner == subtask]:
            del self._owner[split_id]
        if back:
            self._log(f"enumerator add_splits_back({[_split_id(s, '') for s in back]}, {subtask})")
            self.enumerator.add_splits_back(list(back), subtask)
        self._start_reader(subtask, [self._read_split(f) for f in self._last_states[subtask]])

    # --- steps -----------------------------------------------------------------------

    def _log(self, line: str) -> None:
        self.log.append(f"{self._steps:>5}. {line}")

    def _deliver_to_reader(self, subtask: int) -> None:
        slot = self.readers[subtask]
        kind, payload = self._to_reader[subtask].popleft()
        if kind == "splits":
            ids = [_split_id(split, "assign_splits") for split in payload]
            self._log(f"reader {subtask} add_splits({ids})")
            slot.given.update(ids)
            slot.reader.add_splits(list(payload))
        elif kind == "no_more":
            self._log(f"reader {subtask} notify_no_more_splits()")
            slot.no_more_delivered = True
            slot.reader.notify_no_more_splits()
        else:
            self._log(f"reader {subtask} handle_source_events({short_repr(payload, 60)})")
            slot.reader.handle_source_events(payload)

    def _deliver_to_enumerator(self, subtask: int) -> None:
        kind, payload = self._to_enumerator[subtask].popleft()
        if kind == "register":
            self._registered[subtask] = ReaderInfo(subtask, _HOST)
            self._log(f"enumerator add_reader({subtask})")
            self.enumerator.add_reader(subtask)
        elif kind == "request":
            self._log(f"enumerator handle_split_request({subtask})")
            self.enumerator.handle_split_request(subtask, _HOST)
        else:
            self._log(f"enumerator handle_source_event({subtask}, {short_repr(payload, 60)})")
            self.enumerator.handle_source_event(subtask, payload)

    def _poll(self, subtask: int) -> None:
        slot = self.readers[subtask]
        before = slot.emitted
        status = slot.reader.poll_next(slot.output)
        if not isinstance(status, InputStatus):
            raise SourceContractError(
                f"reader {subtask}'s poll_next() returned {describe(status)}; return an "
                "InputStatus (MORE_AVAILABLE, NOTHING_AVAILABLE or END_OF_INPUT)",
                method="poll_next",
            )
        self._log(f"reader {subtask} poll_next() -> {status.name} (+{slot.emitted - before})")
        if status is InputStatus.END_OF_INPUT:
            if not slot.no_more_delivered:
                raise SourceContractError(
                    f"reader {subtask} returned END_OF_INPUT before notify_no_more_splits(); "
                    "splits the enumerator assigns later would never be read",
                    method="poll_next",
                )
            slot.finished = True
        elif status is InputStatus.NOTHING_AVAILABLE:
            future = slot.reader.is_available()
            if not isinstance(future, concurrent.futures.Future):
                raise SourceContractError(
                    f"reader {subtask}'s is_available() returned {describe(future)}; return a "
                    "concurrent.futures.Future that completes when data is available",
                    method="is_available",
                )
            slot.future = future
        else:
            slot.future = None

    def _run_coordinator_task(self) -> None:
        self._log("enumerator runs a run_in_coordinator_thread task")
        self._coordinator_tasks.popleft()()

    def _run_timer(self, timer: _Timer) -> None:
        self._log(f"enumerator call_async callable at {self.clock_ms} ms")
        try:
            result, error = timer.callable(), None
        except Exception as failure:  # noqa: BLE001  # handed to the handler, as Flink does
            result, error = None, failure
        timer.handler(result, error)
        if timer.period_ms > 0:
            timer.due_ms = self.clock_ms + timer.period_ms
        else:
            self._timers.remove(timer)

    @property
    def finished(self) -> bool:
        """Whether every reader reached ``END_OF_INPUT``."""
        return all(slot.finished for slot in self.readers)

    def step(self) -> EngineStep:
        """Do one thing, picked at random among what can happen now."""
        if self.finished:
            return EngineStep.FINISHED
        actions: list[Callable[[], None]] = []
        for subtask, slot in enumerate(self.readers):
            if self._to_reader[subtask]:
                actions.append(functools.partial(self._deliver_to_reader, subtask))
            if self._to_enumerator[subtask]:
                actions.append(functools.partial(self._deliver_to_enumerator, subtask))
            if slot.runnable():
                actions.append(functools.partial(self._poll, subtask))
        if self._coordinator_tasks:
            actions.append(self._run_coordinator_task)
        actions.extend(
            functools.partial(self._run_timer, timer)
            for timer in self._timers
            if timer.due_ms <= self.clock_ms
        )
        self._steps += 1
        if actions:
            self._random.choice(actions)()
            return EngineStep.PROGRESS
        if self._timers:
            self.clock_ms = min(timer.due_ms for timer in self._timers)
            return EngineStep.PROGRESS
        return self._wait()

    def _wait(self) -> EngineStep:
        waiting = {
            slot.future: slot
            for slot in self.readers
            if not slot.finished and slot.future is not None
        }
        done, _ = concurrent.futures.wait(
            waiting, self.idle_timeout, concurrent.futures.FIRST_COMPLETED
        )
        if done:
            return EngineStep.PROGRESS
        stuck = [slot.subtask for slot in waiting.values() if slot.no_more_delivered]
        if stuck:
            raise SourceContractError(
                f"reader(s) {stuck} got notify_no_more_splits() but never reached END_OF_INPUT: "
                f"poll_next() returns NOTHING_AVAILABLE and is_available() did not complete in "
                f"{self.idle_timeout} s; once no splits are left, poll_next must return "
                "END_OF_INPUT",
                method="notify_no_more_splits",
            )
        self._log("idle: no reader has data and the enumerator has nothing to do")
        return EngineStep.IDLE

    def run(
        self,
        *,
        until: Callable[[LocalSourceEngine], bool] | None = None,
        checkpoint_every: int | None = None,
        max_steps: int = 200_000,
    ) -> EngineStep:
        """Step until finished, idle or ``until(engine)``, checkpointing every so many steps.

        Returns:
            The last step's outcome (``PROGRESS`` when ``until`` stopped it).

        Raises:
            SourceContractError: The source broke the contract, or a bounded source
                neither finished nor went idle within ``max_steps``.
        """
        for count in range(1, max_steps + 1):
            if until is not None and until(self):
                return EngineStep.PROGRESS
            outcome = self.step()
            if outcome is not EngineStep.PROGRESS and (until is None or self.finished):
                return outcome
            if checkpoint_every and count % checkpoint_every == 0:
                self.checkpoint()
        raise SourceContractError(
            f"the source did not finish in {max_steps} steps; readers not finished: "
            f"{[s.subtask for s in self.readers if not s.finished]}; a reader that keeps "
            "returning MORE_AVAILABLE without records never ends",
            method="poll_next",
        )

    # --- checkpoints -----------------------------------------------------------------

    def checkpoint(self) -> SourceCheckpoint:
        """Take a checkpoint, commit what was emitted before it, and notify its completion."""
        checkpoint_id = self._next_checkpoint_id
        self._next_checkpoint_id += 1
        for subtask in range(self.parallelism):
            while self._to_reader[subtask]:
                self._deliver_to_reader(subtask)
        state = self.enumerator.snapshot_state(checkpoint_id)
        enumerator = SimpleVersionedSerialization.write_version_and_serialize(
            self._enum_serializer, state
        )
        _check_round_trip(
            state,
            SimpleVersionedSerialization.read_version_and_deserialize(
                self._enum_serializer, enumerator
            ),
            "the enumerator checkpoint serializer",
            "get_enumerator_checkpoint_serializer",
            None,
        )
        readers = tuple(self._snapshot_reader(slot, checkpoint_id) for slot in self.readers)
        seen: dict[str, int] = {}
        for slot in self.readers:
            for split_id in slot.snapshot_ids:
                if split_id in seen:
                    raise SourceContractError(
                        f"split {split_id!r} is in the snapshots of readers {seen[split_id]} "
                        f"and {slot.subtask} at checkpoint {checkpoint_id}",
                        method="snapshot_state",
                        split_id=split_id,
                    )
                seen[split_id] = slot.subtask
        committed = sum(len(slot.pending) for slot in self.readers)
        for slot in self.readers:
            self.committed.extend(slot.pending)
            slot.pending = []
        self._since_checkpoint = [[] for _ in range(self.parallelism)]
        self._last_states = list(readers)
        self._log(f"checkpoint {checkpoint_id}: {committed} records committed")
        self.enumerator.notify_checkpoint_complete(checkpoint_id)
        for slot in self.readers:
            slot.reader.notify_checkpoint_complete(checkpoint_id)
        return SourceCheckpoint(checkpoint_id, enumerator, readers)

    def _snapshot_reader(self, slot: _ReaderSlot, checkpoint_id: int) -> tuple[bytes, ...]:
        splits = slot.reader.snapshot_state(checkpoint_id)
        if not isinstance(splits, list | tuple):
            raise SourceContractError(
                f"reader {slot.subtask}'s snapshot_state() returned {describe(splits)}; "
                "return a list of its unfinished splits with their positions",
                method="snapshot_state",
            )
        ids = [_split_id(split, "snapshot_state") for split in splits]
        slot.snapshot_ids = ids
        for split_id in ids:
            if split_id not in slot.given:
                raise SourceContractError(
                    f"reader {slot.subtask}'s snapshot_state({checkpoint_id}) holds split "
                    f"{split_id!r}, which it was never given (it was given {sorted(slot.given)})",
                    method="snapshot_state",
                    split_id=split_id,
                )
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            raise SourceContractError(
                f"reader {slot.subtask}'s snapshot_state({checkpoint_id}) holds splits {twice} "
                "more than once",
                method="snapshot_state",
                split_id=twice[0],
            )
        if slot.finished and ids:
            raise SourceContractError(
                f"reader {slot.subtask} returned END_OF_INPUT but its snapshot_state still "
                f"holds splits {ids}: a finished reader has no unfinished splits",
                method="snapshot_state",
                split_id=ids[0],
            )
        framed = []
        for split_id, split in zip(ids, splits, strict=True):
            data = SimpleVersionedSerialization.write_version_and_serialize(
                self._split_serializer, split
            )
            back = self._read_split(data)
            _check_round_trip(split, back, "the split serializer", "get_split_serializer", split_id)
            framed.append(data)
        return tuple(framed)

    def finish(self) -> SourceCheckpoint:
        """The final checkpoint of a finished bounded run: commits the rest, then closes.

        Raises:
            SourceContractError: A reader has not reached ``END_OF_INPUT``.
        """
        if not self.finished:
            raise SourceContractError(
                "finish() needs every reader at END_OF_INPUT; readers "
                f"{[s.subtask for s in self.readers if not s.finished]} are not",
                method="poll_next",
            )
        checkpoint = self.checkpoint()
        self.close()
        return checkpoint

    def records_in(self) -> dict[int, tuple[int, int | None]]:
        """Per reader: records the engine saw it emit, and its own ``numRecordsIn`` (if counted)."""
        return {
            slot.subtask: (slot.emitted, slot.metrics.touched_counts().get("numRecordsIn"))
            for slot in self.readers
        }

    def close(self) -> None:
        """Close every reader and the enumerator (once)."""
        if self._closed:
            return
        self._closed = True
        for slot in self.readers:
            slot.reader.close()
        self.enumerator.close()


def _deal(items: Sequence[bytes], parts: int) -> list[list[bytes]]:
    """``items`` in ``parts`` contiguous runs whose lengths differ by at most one."""
    size, extra = divmod(len(items), parts)
    result, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        result.append(list(items[start:end]))
        start = end
    return result


def _split_id(split: object, method: str) -> str:
    get = getattr(split, "split_id", None)
    if not callable(get):
        raise SourceContractError(
            f"{describe(split)} is not a SourceSplit (no split_id() method), found in {method}()",
            method=method,
        )
    split_id = get()
    if not isinstance(split_id, str):
        raise SourceContractError(
            f"split_id() of {short_repr(split)} returned {describe(split_id)}; return a str",
            method=method,
        )
    return split_id


def _check_round_trip(
    original: object, back: object, what: str, getter: str, split_id: str | None
) -> None:
    if type(original).__eq__ is object.__eq__:
        return  # no value equality to compare with
    if back != original:
        about = f"split {split_id!r}" if split_id is not None else "the enumerator checkpoint"
        raise SourceContractError(
            f"{what} ({getter}()) does not round-trip {about}: it wrote "
            f"{short_repr(original)} and read back {short_repr(back)}; a restore would not "
            "go on where the snapshot was",
            method=getter,
            split_id=split_id,
        )
