"""A local engine for FLIP-27 sources: one enumerator, N readers, checkpoints and failures.

Over 450 lines because `LocalSourceEngine` models FLIP-27's whole runtime (the
enumerator's context, readers, checkpoints, failures and restores, split hand-back)
in one process; each step is checked against the contract where it happens.


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
  ``notify_checkpoint_complete`` follows - at once, or (``notify=False``) in later
  steps while the readers read on, as Flink's notifications arrive after the fact
  and may be skipped;
- an aborted checkpoint (`LocalSourceEngine.abort_checkpoint`): everyone snapshots,
  nothing is committed, no notification follows;
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
from collections.abc import Callable, Sequence
from typing import Any, Final, final

import attrs

from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.source import (
    InputStatus,
    ReaderInfo,
    SourceContractError,
    check_enumerator,
    check_reader,
    inspect_source,
)
from sinkv2.testing._source_wiring import (
    EmittedRecord,
    EnumeratorContext,
    ReaderContext,
    ReaderSlot,
    Timer,
    Wiring,
    deal,
    split_id_of,
)

__all__ = [
    "EmittedRecord",
    "EngineStep",
    "LocalSourceEngine",
    "SourceCheckpoint",
    "value_difference",
]

_HOST: Final = "localhost"
READING_IDLE_TIMEOUTS: Final = 10
"""Idle timeouts a reader that still has to finish may take for its data (`_wait`),
below the kit's ``BLOCKED_IDLE_TIMEOUTS``, after which a case counts as blocked."""


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


class EngineStep(enum.Enum):
    """What one `LocalSourceEngine.step` did."""

    PROGRESS = "PROGRESS"
    """Something happened."""
    IDLE = "IDLE"
    """Nothing could happen, even after waiting: the source waits for new data."""
    FINISHED = "FINISHED"
    """Every reader reached ``END_OF_INPUT``."""


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
        self.idle_timeout = idle_timeout
        self.committed: list[EmittedRecord] = []
        self._split_serializer = source.get_split_serializer()
        self._wiring = Wiring(
            parallelism, list(self.capabilities.produced_type.names), frame=self._frame_split
        )
        self._random = random.Random(seed)
        self._enum_serializer = source.get_enumerator_checkpoint_serializer()
        self._next_checkpoint_id = 1
        self._closed = False
        self._notices: dict[int | None, list[int]] = {}
        """Completed checkpoints not notified yet, oldest first: ``None`` is the enumerator,
        an int a reader subtask (`checkpoint` with ``notify=False``)."""
        context = EnumeratorContext(self._wiring)
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
            self._last_states = [tuple(part) for part in deal(pooled, parallelism)]
            restored = [[self._read_split(framed) for framed in part] for part in self._last_states]
        self._wiring.readers[:] = [ReaderSlot(self._wiring, i) for i in range(parallelism)]
        try:
            check_enumerator(self.enumerator)
            self._log(f"enumerator {'restored' if checkpoint else 'created'}; start()")
            self.enumerator.start()
            for subtask in range(parallelism):
                self._start_reader(subtask, restored[subtask])
        except BaseException:
            try:
                self.close()  # what started holds resources (a slot's lock, a connection)
            except Exception as error:  # noqa: BLE001  # the start's failure is the one to raise
                self._log(f"close() after a failed start raised {type(error).__name__}: {error}")
            raise

    @property
    def parallelism(self) -> int:
        """How many readers this run has."""
        return self._wiring.parallelism

    @property
    def column_names(self) -> Sequence[str]:
        """The produced schema's column names."""
        return self._wiring.column_names

    @property
    def split_ids(self) -> frozenset[str]:
        """Every split id this run assigned or restored."""
        return frozenset(self._wiring.seen)

    @property
    def readers(self) -> list[ReaderSlot]:
        """The reader subtasks, by index."""
        return self._wiring.readers

    @property
    def log(self) -> collections.deque[str]:
        """The latest steps, numbered, for failure reports."""
        return self._wiring.log

    @property
    def clock_ms(self) -> int:
        """The engine's clock for ``call_async`` timers, in ms; it moves when all else waits."""
        return self._wiring.clock_ms

    @clock_ms.setter
    def clock_ms(self, value: int) -> None:
        self._wiring.clock_ms = value

    # --- readers ---------------------------------------------------------------------

    def _log(self, line: str) -> None:
        self._wiring.log_line(line)

    def _frame_split(self, split: Any) -> bytes:
        return SimpleVersionedSerialization.write_version_and_serialize(
            self._split_serializer, split
        )

    def _read_split(self, framed: bytes) -> Any:
        return SimpleVersionedSerialization.read_version_and_deserialize(
            self._split_serializer, framed
        )

    def _start_reader(self, subtask: int, restored: list[Any]) -> None:
        slot = self.readers[subtask] = ReaderSlot(self._wiring, subtask)
        slot.reader = self.source.create_reader(ReaderContext(self._wiring, subtask, slot.metrics))
        check_reader(slot.reader)
        if restored:
            ids = [split_id_of(split, "snapshot_state") for split in restored]
            self._log(f"reader {subtask} created; add_splits({ids}) restored")
            slot.given.update(ids)
            self._wiring.seen.update(ids)
            self._wiring.owner.update(dict.fromkeys(ids, subtask))
            slot.reader.add_splits(list(restored))
        else:
            self._log(f"reader {subtask} created")
        self._wiring.to_enumerator[subtask].append(("register", None))
        slot.reader.start()

    def assigned_since_checkpoint(self) -> list[int]:
        """The readers that were assigned splits since the last checkpoint, in subtask order."""
        return [subtask for subtask, splits in enumerate(self._wiring.since_checkpoint) if splits]

    def fail_reader(self, subtask: int) -> None:
        """Fail reader ``subtask`` and restart it from the last checkpoint (regional failover)."""
        slot = self.readers[subtask]
        self._log(f"reader {subtask} FAILS: {len(slot.pending)} uncommitted records dropped")
        try:
            slot.reader.close()
        except Exception as error:  # noqa: BLE001  # a failed reader's close may fail too
            self._log(f"reader {subtask} close() raised {type(error).__name__}: {error}")
        self._wiring.to_reader[subtask].clear()
        self._wiring.to_enumerator[subtask].clear()
        self._wiring.registered.pop(subtask, None)
        self._notices.pop(subtask, None)  # a notice for the failed reader is lost with it
        back = self._wiring.since_checkpoint[subtask]
        self._wiring.since_checkpoint[subtask] = []
        for split in back:
            split_id = split_id_of(split, "add_splits_back")
            self._wiring.owner.pop(split_id, None)
            self._wiring.given_back[split_id] = subtask
        for split_id in [sid for sid, owner in self._wiring.owner.items() if owner == subtask]:
            del self._wiring.owner[split_id]
        if back:
            self._log(
                f"enumerator add_splits_back({[split_id_of(s, '') for s in back]}, {subtask})"
            )
            self.enumerator.add_splits_back(list(back), subtask)
        self._start_reader(subtask, [self._read_split(f) for f in self._last_states[subtask]])

    # --- steps -----------------------------------------------------------------------

    def _deliver_to_reader(self, subtask: int) -> None:
        slot = self.readers[subtask]
        kind, payload = self._wiring.to_reader[subtask].popleft()
        if kind == "splits":
            ids = [split_id_of(split, "assign_splits") for split, _ in payload]
            copies = []
            for split_id, (split, framed) in zip(ids, payload, strict=True):
                copy = self._read_split(framed)  # the reader's own copy, as over Flink's RPC
                _check_round_trip(
                    split, copy, "the split serializer", "get_split_serializer", split_id
                )
                _check_same_id(split_id, copy)
                copies.append(copy)
            self._log(f"reader {subtask} add_splits({ids})")
            slot.given.update(ids)
            for split_id in ids:
                slot.left_out.pop(split_id, None)
            slot.reader.add_splits(copies)
        elif kind == "no_more":
            self._log(f"reader {subtask} notify_no_more_splits()")
            slot.no_more_delivered = True
            slot.reader.notify_no_more_splits()
        else:
            self._log(f"reader {subtask} handle_source_events({short_repr(payload, 60)})")
            handle = getattr(slot.reader, "handle_source_events", None)
            if callable(handle):  # optional in FLIP-27: a reader without it ignores events
                handle(payload)

    def _deliver_to_enumerator(self, subtask: int) -> None:
        kind, payload = self._wiring.to_enumerator[subtask].popleft()
        if kind == "register":
            self._wiring.registered[subtask] = ReaderInfo(subtask, _HOST)
            self._log(f"enumerator add_reader({subtask})")
            self.enumerator.add_reader(subtask)
        elif kind == "request":
            self._log(f"enumerator handle_split_request({subtask})")
            self.enumerator.handle_split_request(subtask, _HOST)
        else:
            self._log(f"enumerator handle_source_event({subtask}, {short_repr(payload, 60)})")
            handle = getattr(self.enumerator, "handle_source_event", None)
            if callable(handle):  # optional, as the reader's
                handle(subtask, payload)

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
        slot.empty_polls = 0 if slot.emitted > before else slot.empty_polls + 1
        slot.last_status = status.name
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
        self._wiring.coordinator_tasks.popleft()()

    def _run_timer(self, timer: Timer) -> None:
        self._log(f"enumerator call_async callable at {self.clock_ms} ms")
        try:
            result, error = timer.callable(), None
        except Exception as failure:  # noqa: BLE001  # handed to the handler, as Flink does
            result, error = None, failure
        timer.handler(result, error)
        if timer.period_ms > 0:
            timer.due_ms = self.clock_ms + timer.period_ms
        else:
            self._wiring.timers.remove(timer)

    def waiting(self) -> list[int]:
        """The readers waiting for data: unfinished, their ``is_available`` future not done."""
        return [
            slot.subtask
            for slot in self.readers
            if not slot.finished and slot.future is not None and not slot.future.done()
        ]

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
            if self._wiring.to_reader[subtask]:
                actions.append(functools.partial(self._deliver_to_reader, subtask))
            if self._wiring.to_enumerator[subtask]:
                actions.append(functools.partial(self._deliver_to_enumerator, subtask))
            if slot.runnable():
                actions.append(functools.partial(self._poll, subtask))
        if self._wiring.coordinator_tasks:
            actions.append(self._run_coordinator_task)
        actions.extend(
            functools.partial(self._deliver_notice, target)
            for target, ids in self._notices.items()
            if ids
        )
        actions.extend(
            functools.partial(self._run_timer, timer)
            for timer in self._wiring.timers
            if timer.due_ms <= self.clock_ms
        )
        self._wiring.steps += 1
        if actions:
            self._random.choice(actions)()
            return EngineStep.PROGRESS
        if self._wiring.timers:
            self.clock_ms = min(timer.due_ms for timer in self._wiring.timers)
            return EngineStep.PROGRESS
        return self._wait()

    def _wait(self) -> EngineStep:
        """Wait for a reader's data; ``IDLE`` once none came within ``idle_timeout``.

        A reader that still has to finish (it holds splits of a bounded source, or
        heard that no more come) may take up to ``READING_IDLE_TIMEOUTS`` timeouts: a
        slow fetch on a loaded machine slows the engine, it does not end a bounded
        run early or fail a reader as one that never reaches END_OF_INPUT.
        """
        waiting = {
            slot.future: slot
            for slot in self.readers
            if not slot.finished and slot.future is not None
        }
        reading = any(
            slot.no_more_delivered or (slot.given and self.capabilities.bounded)
            for slot in waiting.values()
        )
        for _ in range(READING_IDLE_TIMEOUTS if reading else 1):
            done, _ = concurrent.futures.wait(
                waiting, self.idle_timeout, concurrent.futures.FIRST_COMPLETED
            )
            if done or self._wiring.coordinator_tasks:
                return EngineStep.PROGRESS
        stuck = [slot.subtask for slot in waiting.values() if slot.no_more_delivered]
        if stuck:
            never_woke = self.poll_anyway(stuck)
            if never_woke:
                raise SourceContractError(never_woke, method="is_available")
            raise SourceContractError(
                f"reader(s) {stuck} got notify_no_more_splits() but never reached END_OF_INPUT: "
                f"poll_next() returns NOTHING_AVAILABLE and is_available() did not complete in "
                f"{READING_IDLE_TIMEOUTS * self.idle_timeout:g} s; once no splits are left, "
                "poll_next must return END_OF_INPUT (a reader that needs longer for its data "
                "may be given a longer idle_timeout)",
                method="notify_no_more_splits",
            )
        self._log("idle: no reader has data and the enumerator has nothing to do")
        return EngineStep.IDLE

    def poll_anyway(self, subtasks: list[int]) -> str:
        """Diagnose readers whose ``is_available()`` future never completed, before failing.

        Flink polls a reader only once that future completes; the kit polls each of
        ``subtasks`` once more anyway. A reader that then emits records or returns
        END_OF_INPUT had something all along: its future is what is wrong.

        Returns:
            The problem, or ``""`` if every poll still had nothing (or broke otherwise).
        """
        found = []
        for subtask in subtasks:
            slot = self.readers[subtask]
            future = slot.future
            if future is None or future.done():
                continue  # it completed late: not this problem
            before = slot.emitted
            try:
                self._poll(subtask)
            except SourceContractError:
                continue  # another problem; the caller reports the idle readers
            if future.done():
                continue  # a fetcher thread's data arrived just now, as the future says
            if slot.emitted > before or slot.last_status != InputStatus.NOTHING_AVAILABLE.name:
                found.append(
                    f"reader {subtask} emitted {slot.emitted - before} record(s) and returned "
                    f"{slot.last_status}"
                )
        if not found:
            return ""
        return (
            f"a reader's is_available() future never completed although the reader had "
            f"something to return: after it did not complete in "
            f"{READING_IDLE_TIMEOUTS * self.idle_timeout:g} s the "
            f"kit polled anyway, and {'; '.join(found)}. Flink polls a reader only once "
            "that future completes, so this reader would wait for ever: complete the future "
            "(set_result(None)) when the reader gets splits (add_splits), "
            "notify_no_more_splits() or data, and hand out a new one only with "
            "NOTHING_AVAILABLE"
        )

    def run(
        self,
        *,
        until: Callable[[LocalSourceEngine], bool] | None = None,
        checkpoint_every: int | None = None,
        max_steps: int = 200_000,
        max_idle: int | None = None,
    ) -> EngineStep:
        """Step until finished, idle or ``until(engine)``, checkpointing every so many steps.

        With ``until``, an idle engine goes on stepping (an unbounded source waits for
        data), ``max_idle`` consecutive idle steps at most (each waits ``idle_timeout``
        for a reader), then returns ``IDLE``; ``None`` waits for ever.

        Returns:
            The last step's outcome (``PROGRESS`` when ``until`` stopped it).

        Raises:
            SourceContractError: The source broke the contract, or a bounded source
                neither finished nor went idle within ``max_steps``.
        """
        idle = 0
        for count in range(1, max_steps + 1):
            if until is not None and until(self):
                return EngineStep.PROGRESS
            outcome = self.step()
            if outcome is not EngineStep.PROGRESS and (until is None or self.finished):
                return outcome
            idle = idle + 1 if outcome is EngineStep.IDLE else 0
            if max_idle is not None and idle >= max_idle:
                if never_woke := self.poll_anyway(self.waiting()):
                    raise SourceContractError(never_woke, method="is_available")
                return outcome
            if checkpoint_every and count % checkpoint_every == 0:
                self.checkpoint()
        spinning = [
            f"reader {slot.subtask} returned {slot.last_status} {slot.empty_polls} times in a "
            "row without a record"
            for slot in self.readers
            if not slot.finished and slot.empty_polls > 1
        ]
        raise SourceContractError(
            f"the source did not finish in {max_steps} steps; readers not finished: "
            f"{[s.subtask for s in self.readers if not s.finished]}"
            + (f" ({'; '.join(spinning)})" if spinning else "")
            + "; a reader that keeps returning MORE_AVAILABLE, or NOTHING_AVAILABLE with an "
            "is_available() future that is already done, without records never ends: once "
            "its splits are read and notify_no_more_splits() came, return END_OF_INPUT",
            method="poll_next",
        )

    # --- checkpoints -----------------------------------------------------------------

    def checkpoint(self, *, notify: bool = True) -> SourceCheckpoint:
        """Take a checkpoint, commit what was emitted before it, and notify its completion.

        Args:
            notify: ``False`` leaves ``notify_checkpoint_complete`` for later steps, one
                step for the enumerator and one for each reader, in random order with the
                rest, as Flink's notifications arrive: after the fact, while the readers
                read on. A later checkpoint's notification subsumes an earlier one that
                has not arrived (the earlier is skipped), and a failed reader never gets
                the notices it had pending: Flink's notifications are best effort.
        """
        checkpoint_id, enumerator, readers = self._snapshot()
        committed = sum(len(slot.pending) for slot in self.readers)
        for slot in self.readers:
            self.committed.extend(slot.pending)
            slot.pending = []
        self._wiring.since_checkpoint = [[] for _ in range(self.parallelism)]
        self._last_states = list(readers)
        targets: list[int | None] = [None, *range(self.parallelism)]
        if notify:
            self._log(f"checkpoint {checkpoint_id}: {committed} records committed")
            self._notices.clear()  # subsumed by this one
            for target in targets:
                self._notify(target, checkpoint_id)
        else:
            self._log(
                f"checkpoint {checkpoint_id}: {committed} records committed; its completion "
                "is notified later"
            )
            for target in targets:
                self._notices.setdefault(target, []).append(checkpoint_id)
        return SourceCheckpoint(checkpoint_id, enumerator, readers)

    def abort_checkpoint(self) -> int:
        """Take a checkpoint that never completes: everyone snapshots, nothing is committed.

        As when a Flink checkpoint times out or one task fails to acknowledge it: the
        enumerator and every reader ran ``snapshot_state``, but no
        ``notify_checkpoint_complete`` follows, the records stay uncommitted, and a
        failure or restore goes back to the last completed checkpoint.

        Returns:
            The aborted checkpoint's id (ids keep increasing).
        """
        checkpoint_id, _, _ = self._snapshot()
        self._log(f"checkpoint {checkpoint_id} ABORTED after every snapshot: nothing committed")
        return checkpoint_id

    def _notify(self, target: int | None, checkpoint_id: int) -> None:
        if target is None:
            self._log(f"enumerator notify_checkpoint_complete({checkpoint_id})")
            notify = getattr(self.enumerator, "notify_checkpoint_complete", None)
        else:
            self._log(f"reader {target} notify_checkpoint_complete({checkpoint_id})")
            notify = getattr(self.readers[target].reader, "notify_checkpoint_complete", None)
        if callable(notify):  # optional in FLIP-27: a source without it ignores checkpoints
            notify(checkpoint_id)

    def _deliver_notice(self, target: int | None) -> None:
        self._notify(target, self._notices[target].pop(0))

    def _snapshot(self) -> tuple[int, bytes, tuple[tuple[bytes, ...], ...]]:
        """The snapshots of one checkpoint: its id, the enumerator's bytes, each reader's."""
        checkpoint_id = self._next_checkpoint_id
        self._next_checkpoint_id += 1
        for subtask in range(self.parallelism):
            while self._wiring.to_reader[subtask]:
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
        return checkpoint_id, enumerator, readers

    def _snapshot_reader(self, slot: ReaderSlot, checkpoint_id: int) -> tuple[bytes, ...]:
        splits = slot.reader.snapshot_state(checkpoint_id)
        if not isinstance(splits, list | tuple):
            raise SourceContractError(
                f"reader {slot.subtask}'s snapshot_state() returned {describe(splits)}; "
                "return a list of its unfinished splits with their positions",
                method="snapshot_state",
            )
        ids = [split_id_of(split, "snapshot_state") for split in splits]
        slot.snapshot_ids = ids
        for split_id in slot.given.difference(ids, slot.left_out):
            slot.left_out[split_id] = checkpoint_id  # finished, as far as a restore knows
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
            _check_same_id(split_id, back)
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
                f"{[s.subtask for s in self.readers if not s.finished]} are not (a bounded "
                "reader ends once its splits are read and the enumerator called "
                "signal_no_more_splits for its subtask: did it?)",
                method="poll_next",
            )
        if self._wiring.given_back:
            lost = sorted(self._wiring.given_back.items())
            raise SourceContractError(
                "every reader reached END_OF_INPUT, but the enumerator never assigned again "
                "the splits it got back through add_splits_back() when a reader failed: "
                + ", ".join(f"{split_id!r} (from reader {subtask})" for split_id, subtask in lost)
                + "; the failed reader had them after the last checkpoint, so no checkpoint "
                "holds them and their records are lost: keep splits given back and assign "
                "them again (to the restarted reader when it registers, or to any reader)",
                method="add_splits_back",
                split_id=lost[0][0],
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
        self._notices.clear()
        closers = [slot.reader.close for slot in self.readers if slot.reader is not None]
        first: BaseException | None = None
        for close in [*closers, self.enumerator.close]:  # each, even after one raised
            try:
                close()
            except BaseException as error:  # noqa: BLE001  # raised below, after the rest
                first = first or error
        if first is not None:
            raise first


_UNKNOWN: Final = object()


def _fields_of(value: object) -> dict[str, object] | None:
    """An object's fields: attrs fields, else ``__dict__`` and slots; None when it has none."""
    kind: Any = type(value)
    if attrs.has(kind):
        return {field.name: getattr(value, field.name) for field in attrs.fields(kind)}
    fields = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                fields[name] = getattr(value, name)
    return fields or None


def _where_different(a: object, b: object, path: str = "") -> object:
    """Where ``a`` and ``b`` differ as values: ``(path, a's part, b's part)``, or None.

    `_UNKNOWN` when a part has no value equality and no fields to compare by.
    Objects without ``__eq__`` (a plain class, ``@attrs.define(eq=False)``) and attrs
    classes are compared field by field (only the fields both have: a cache filled
    later does not count), so an attrs checkpoint holding plain-class splits is
    compared by value too.
    """
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return (f"{path} (length)", len(a), len(b))
        pairs = [(f"{path}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    elif isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return (f"{path} (keys)", sorted(map(repr, a)), sorted(map(repr, b)))
        pairs = [(f"{path}[{key!r}]", a[key], b[key]) for key in a]
    elif type(a) is type(b) and (attrs.has(type(a)) or type(a).__eq__ is object.__eq__):
        fields_a, fields_b = _fields_of(a), _fields_of(b)
        if fields_a is None or fields_b is None:
            return None if a is b else _UNKNOWN
        shared = sorted(fields_a.keys() & fields_b.keys())
        pairs = [(f"{path}.{name}", fields_a[name], fields_b[name]) for name in shared]
    else:
        return None if a == b else (path, a, b)
    unknown = False
    for where, x, y in pairs:
        found = _where_different(x, y, where)
        if found is _UNKNOWN:
            unknown = True
        elif found is not None:
            return found
    return _UNKNOWN if unknown else None


def value_difference(original: object, back: object) -> str | None:
    """How a value read back differs from the one written, or None if it does not."""
    plain = type(original).__eq__ is object.__eq__
    if not plain and back == original:
        return None
    found = _where_different(original, back)
    if found is None or (found is _UNKNOWN and plain):
        return None  # equal by value, or nothing to compare a plain object by
    described = f"it wrote {short_repr(original)} and read back {short_repr(back)}"
    if isinstance(found, tuple):
        path, before, after = found
        return f"{described} ({path or 'the value'}: {short_repr(before)} != {short_repr(after)})"
    return described


def _check_same_id(split_id: str, back: object) -> None:
    """A split read back through the split serializer must keep its id."""
    again = split_id_of(back, "get_split_serializer")
    if again != split_id:
        raise SourceContractError(
            f"split {split_id!r} read back through the split serializer says its split_id() "
            f"is {again!r}: a split's id must be the same in every copy, in every process "
            "and after every restart (a restore finds splits by id); derive it from the "
            "split's own fields, never from id(), hash() of a str (salted per process), "
            "a random number or the clock",
            method="split_id",
            split_id=split_id,
        )


def _check_round_trip(
    original: object, back: object, what: str, getter: str, split_id: str | None
) -> None:
    difference = value_difference(original, back)
    if difference is not None:
        about = f"split {split_id!r}" if split_id is not None else "the enumerator checkpoint"
        raise SourceContractError(
            f"{what} ({getter}()) does not round-trip {about}: {difference}; a reader "
            "given it, or restored from it, would not go on where it was",
            method=getter,
            split_id=split_id,
        )
