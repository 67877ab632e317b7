"""`LocalRuntime`: Flink's sink lifecycle, run in process, with a model of what must be visible.

Over 450 lines because `LocalRuntime` models Flink's whole sink lifecycle
(checkpoints, end of input, crashes at each step, restores, clean-up hooks) and what
must be visible after each; the subtask driver and the stream stage are modules of
their own.

The runtime is a local engine for the real commit coordinator
(`sinkv2.runtime.CommitCoordinator`, the one ``sinkv2_spark`` drives), with a
SQLite commit state store of its own: it drives one sink the way Flink's
operators (and ``sinkv2_spark``'s translator) do, without any engine:

- writers, one per subtask, created from a cloudpickled copy of the sink (Spark
  ships sinks that way), with explicit job ids and attempt tokens;
- checkpoint N: on each writer ``flush(False)`` -> ``prepare_commit()`` ->
  ``snapshot_state(N)``; committables and states travel as framed bytes; the
  pre-commit topology (on a `LocalCommittableStream`) and its lineage check; then
  commit N, as Flink commits a checkpoint once it completes, at once or (as Flink's
  late ``notify_checkpoint_complete``) after the writers have written on;
- end of input: ``flush(True)`` -> ``prepare_commit()`` ->
  ``snapshot_state(END_OF_INPUT)`` -> ``close()``, attempt cleanup, commit;
- a completed checkpoint is recorded Pending in the store before it is committed;
- crashes at any step, and restore from the last completed checkpoint into fresh
  writers at any parallelism: the coordinator commits the pending checkpoints and
  cleans up after the dead job (``clean_up_attempts(dead job, ...)``), states are
  redistributed by Flink's rule, as the Spark engine does (`sinkv2.runtime.redistribute`:
  at the same parallelism each subtask gets its own states back, otherwise all states in
  subtask order are cut into contiguous runs), and the elements written after the
  checkpoint are replayed;
- crashes inside the sink's own calls, at each `crash_point` it marks: the call does
  not finish, the job fails where it stands (`LocalRuntime.crashed`);
- the sinkv2 extension hooks: ``clean_up_attempts(job_id, kept tokens)`` when a
  job's writers are done, ``clean_up_attempts(job_id, ())`` once its last epoch is
  committed, ``abort(committables)`` for committables that will never be committed.

Alongside, it keeps the model: which elements completed checkpoints cover and
which of those are committed. `LocalRuntime.check` compares the destination with
it. Every failure message ends with the lifecycle so far.

Why this module is longer than ~450 lines: `LocalRuntime` is one engine whose
steps (start, write, checkpoint, commit, crash, restore, losing attempts,
recommit, abort) all move one job history and its model; split across modules,
one lifecycle would be read in several. What is not that history lives elsewhere:
the writer sequence in `sinkv2.runtime.WriterSubtask`, the model check, log and
store in `KitEngine` (``_engine``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import cloudpickle

from sinkv2._context import BasicWriterInitContext
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._messages import END_OF_INPUT
from sinkv2._pickling import find_unpicklable
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.errors import CommitError, SerializationError, SinkConfigurationError
from sinkv2.runtime import (
    CommitCoordinator,
    CommitOutcome,
    SubtaskStates,
    WriterStates,
    WriterSubtask,
    state_name,
)
from sinkv2.testing._crash_points import CrashPoints, KitCrash
from sinkv2.testing._engine import KitEngine, framed_table, short
from sinkv2.testing._faults import CommitFault, FaultInjectingCommitter, InjectedCommitFailure
from sinkv2.testing._multiset import Multiset, show
from sinkv2.testing._sut import SinkUnderTest

__all__ = [
    "Captured",
    "LocalRuntime",
    "Phase",
    "same",
    "supported_sink",
]


_LATE_COMMIT_HINT = (
    ". A checkpoint here committed only after its writers had written on (Flink notifies "
    "a checkpoint's completion late): a committable must stand for what was written "
    "before its checkpoint, and the committer must commit what the committable names, "
    "not what the writer has written by the time it commits"
)
"""The exactly-once hint's tail (`KitEngine.replayed`) once a late commit happened."""


def _caller(crash: KitCrash) -> str:
    """The function that called `crash_point`, from the crash's traceback."""
    caller = "the sink"
    traceback = crash.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        frame = traceback.tb_frame
        traceback = traceback.tb_next
        if traceback.tb_frame.f_code.co_name == "crash_point":
            code = frame.f_code  # co_qualname from 3.11; the bare name before
            caller = getattr(code, "co_qualname", code.co_name)
    return caller


class Phase(enum.Enum):
    """Where the simulated job is."""

    RUNNING = "running"
    FAILED = "failed"
    FINISHED = "finished"


def _state_of(value: object) -> object:
    if attrs.has(type(value)):
        return attrs.asdict(value, recurse=True)  # type: ignore[arg-type]  # has() checked it
    slots = getattr(type(value), "__slots__", None)
    if slots is not None:
        return {name: getattr(value, name, None) for name in slots}
    return getattr(value, "__dict__", value)


def same(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are equal, by value even for classes without ``__eq__``."""
    if a == b:
        return True
    if type(a) is not type(b) or type(a).__eq__ is not object.__eq__:
        return False
    return bool(_state_of(a) == _state_of(b))


@attrs.define
class Captured:
    """Objects the sink produced, by kind, for the serializer property checks."""

    objects: list[tuple[str, object]] = attrs.field(factory=list)

    def add(self, kind: str, value: object) -> None:
        """Remember one object."""
        self.objects.append((kind, value))


@attrs.define
class _Writer:
    driver: WriterSubtask
    subtask: int
    token: str
    job_id: str
    since_checkpoint: list[object] = attrs.field(factory=list)

    @property
    def writer(self) -> Any:
        """The sink's writer."""
        return self.driver.writer


@attrs.define
class _Checkpoint:
    epoch: int
    checkpoint_id: int
    committables: list[Any]
    states: WriterStates
    covered: list[object]
    job_id: str
    tokens: frozenset[str]
    committed: bool = False

    @property
    def label(self) -> str:
        if self.checkpoint_id == END_OF_INPUT:
            return "END_OF_INPUT"
        return f"checkpoint {self.checkpoint_id}"


class LocalRuntime(KitEngine):
    """One simulated job history of one sink against one fresh destination.

    Args:
        sut: The sink and its destination.
        guarantee: What the sink promises; decides what `check` asserts.
        capture: Where to put every committable, write result and state produced.
    """

    history_title = "lifecycle so far"

    def __init__(
        self,
        sut: SinkUnderTest,
        guarantee: DeliveryGuarantee,
        *,
        capture: Captured | None = None,
    ) -> None:
        super().__init__(sut, guarantee, prefix="sinkv2-kit-")
        sink = self.sink
        self.capture = capture if capture is not None else Captured()
        self.phase = Phase.FAILED  # until start()
        self.writers: list[_Writer] = []
        self.completed: list[_Checkpoint] = []
        self.crash_points = CrashPoints()
        self._shipped: Any = None
        self._jobs = 0
        self._attempts = 0
        self._next_checkpoint = 1
        self._job_id = ""
        self._job_tokens: set[str] = set()
        self._to_abort: list[Any] = []
        self._replay: list[object] = []
        # Completed checkpoints whose notify_checkpoint_complete has not arrived yet.
        self.notify_later: list[_Checkpoint] = []
        self._coordinator: CommitCoordinator | None = None
        caps = self.capabilities
        self._committable_serializer: SimpleVersionedSerializer[Any] | None = (
            sink.get_committable_serializer() if caps.committer else None
        )
        self._write_result_serializer: SimpleVersionedSerializer[Any] | None = (
            sink.get_write_result_serializer() if caps.pre_commit_topology else None
        )
        self._state_serializer: SimpleVersionedSerializer[Any] | None = (
            sink.get_writer_state_serializer() if caps.writer_state else None
        )

    # --- serialization, as between tasks and the driver --------------------------------------

    def _ship(self, kind: str, serializer: SimpleVersionedSerializer[Any], value: Any) -> bytes:
        """``value`` framed with ``serializer``, after checking it reads back equal."""
        framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, value)
        self._check_framed(kind, serializer, value, framed)
        return framed

    def _check_framed(
        self, kind: str, serializer: SimpleVersionedSerializer[Any], value: Any, framed: bytes
    ) -> None:
        """Capture ``value`` and check that ``framed`` reads back equal to it."""
        self.capture.add(kind, value)
        back = SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
        if not same(back, value):
            raise self.fail(
                f"the {kind.replace('_', ' ')} serializer {serializer!r} does not round-trip: "
                f"it serialized {short(value)} and read back {short(back)}; "
                "deserialize(get_version(), serialize(x)) must equal x"
            )

    def _unship(self, serializer: SimpleVersionedSerializer[Any], framed: bytes) -> Any:
        return SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)

    # --- writers -----------------------------------------------------------------------------

    def _new_job(self) -> None:
        """A new job: a fresh copy of the sink, and the coordinator open for it.

        Opening recovers what the previous job left: the coordinator commits its
        pending checkpoints and cleans up after it. Attempts whose state the new
        writers restore are kept (a writer state may refer to what they staged).
        """
        self._jobs += 1
        self._job_id = f"kitjob{self._jobs:04d}"
        self._job_tokens = set()
        try:
            self._shipped = cloudpickle.loads(cloudpickle.dumps(self.sink))
        except Exception as error:
            found = find_unpicklable(self.sink, cloudpickle.dumps)
            culprit = (
                f" ({found[0]}, of type {type(found[1]).__name__}, does not pickle)"
                if found is not None
                else ""
            )
            raise self.fail(
                f"the sink {type(self.sink).__qualname__} does not survive a cloudpickle round "
                f"trip, as Spark ships it to executors{culprit}: {type(error).__name__}: "
                f"{error}. Keep sinks plain data: open connections, clients and files in "
                "writers and committers"
            ) from error
        restored = self.completed[-1] if self.completed else None
        keep = (
            restored.tokens
            if restored is not None
            and self._state_serializer is not None
            and restored.checkpoint_id != END_OF_INPUT
            else frozenset()
        )
        self._coordinator = self.new_coordinator(self._job_id, "kit")
        try:
            recovery = self._coordinator.open(keep_attempt_tokens=keep)
        except CommitError as error:
            raise self.fail(
                f"recovering job {self._job_id}: committing the pending checkpoints of the "
                f"failed job failed: {error}. In this lifecycle nothing outside the sink "
                "interfered; a committer must commit staged output, and recognise committables "
                "it committed before (signal_already_committed), not fail them"
            ) from error
        for epoch, commit in recovery.recommitted.items():
            checkpoint = next(c for c in self.completed if c.epoch == epoch)
            self.note(f"recover: commit {checkpoint.label} (pending) again: {commit.outcome}")
            self._committed(checkpoint, commit.outcome)
        for job_id in recovery.cleaned_jobs:
            if self.capabilities.attempt_cleanup:
                self.note(f"recover: clean_up_attempts({job_id!r}, kept={sorted(keep)})")

    def _create_writer(
        self,
        subtask: int,
        parallelism: int,
        *,
        states: Sequence[bytes] = (),
        restored: int | None = None,
        attempt_number: int = 0,
    ) -> _Writer:
        token = f"{self._job_id}-{subtask:05d}-{self._attempts}"
        self._attempts += 1
        context = BasicWriterInitContext(
            subtask_id=subtask,
            number_of_parallel_subtasks=parallelism,
            attempt_number=attempt_number,
            job_id=self._job_id,
            restored_checkpoint_id=restored,
            attempt_token=token,
        )
        driver = WriterSubtask(
            self._shipped,
            self.capabilities,
            context,
            emits_write_results=self.capabilities.pre_commit_topology,
            on_framed=self._check_framed,
        )
        driver.open(states if restored is not None else None)
        how = (
            f"restore_writer(checkpoint {restored}, {len(states)} state(s))"
            if restored is not None and self.capabilities.writer_state
            else "create_writer()"
        )
        self.note(f"subtask {subtask}/{parallelism}: {how}, attempt token {token!r}")
        return _Writer(driver, subtask, token, self._job_id)

    def start(self, parallelism: int) -> None:
        """A fresh job: ``parallelism`` new writers."""
        self._new_job()
        self.note(f"start job {self._job_id} with {parallelism} writer(s)")
        self.writers = []
        for i in range(parallelism):  # one by one: a crash in a factory drops those made
            self.writers.append(self._create_writer(i, parallelism))
        self.phase = Phase.RUNNING

    @property
    def parallelism(self) -> int:
        """The number of running writers."""
        return len(self.writers)

    def _feed(self, writer: _Writer, elements: Sequence[object], *, record: bool = True) -> None:
        """Write ``elements``; they are recorded first, so a crash halfway replays them."""
        if record:
            writer.since_checkpoint.extend(elements)
        self.written.add(elements)
        writer.driver.write_values(elements)

    def write(self, subtask: int, elements: Sequence[object]) -> None:
        """Write ``elements`` to the writer of ``subtask`` (modulo the parallelism)."""
        writer = self.writers[subtask % self.parallelism]
        self.note(f"subtask {writer.subtask}: write {short(list(elements))}")
        self._feed(writer, elements)

    def _run_checkpoint(
        self, checkpoint_id: int, writers: Sequence[_Writer]
    ) -> tuple[list[tuple[int, int, bytes]], WriterStates]:
        """Every writer's checkpoint sequence; (subtask, index, framed) outputs, states."""
        outputs: list[tuple[int, int, bytes]] = []
        subtasks: list[SubtaskStates] = []
        for writer in writers:
            snapshot = writer.driver.snapshot(checkpoint_id)
            outputs.extend((writer.subtask, i, framed) for i, framed in enumerate(snapshot.outputs))
            subtasks.append(
                SubtaskStates(
                    subtask_id=writer.subtask, attempt_token=writer.token, states=snapshot.states
                )
            )
        states = WriterStates(
            state_name=state_name(self.sink),
            number_of_subtasks=len(writers),
            subtasks=tuple(subtasks),
        )
        return outputs, states

    def _pre_commit(
        self, checkpoint_id: int, parallelism: int, outputs: list[tuple[int, int, bytes]]
    ) -> list[Any]:
        """The committables of a checkpoint, through the pre-commit topology if any."""
        if self._committable_serializer is None:
            return []
        if self._write_result_serializer is None:
            return [self._unship(self._committable_serializer, framed) for _, _, framed in outputs]
        version = self._write_result_serializer.get_version()
        written = framed_table(checkpoint_id, parallelism, version, outputs)
        try:
            committables = self.coordinator.pre_commit(written)
        except (SinkConfigurationError, SerializationError) as error:
            raise self.fail(f"checkpoint {self._label(checkpoint_id)}: {error}") from error
        for committable in committables:
            self._ship("committable", self._committable_serializer, committable)
        self.note(
            f"pre-commit topology: {len(outputs)} write result(s) -> "
            f"{len(committables)} committable(s)"
        )
        return committables

    def _complete(
        self, checkpoint_id: int, outputs: list[tuple[int, int, bytes]], states: WriterStates
    ) -> _Checkpoint:
        """The checkpoint is complete: pre-commit it and record it Pending in the store."""
        covered = [e for w in self.writers for e in w.since_checkpoint]
        committables = self._pre_commit(checkpoint_id, self.parallelism, outputs)
        for writer in self.writers:
            writer.since_checkpoint = []
        tokens = frozenset(w.token for w in self.writers)
        epoch = self._take_checkpoint_id() if checkpoint_id == END_OF_INPUT else checkpoint_id
        checkpoint = _Checkpoint(
            epoch, checkpoint_id, committables, states, covered, self._job_id, tokens
        )
        self.completed.append(checkpoint)
        self.checkpointed.add(covered)
        # The engine's checkpoint completes: from here on, recovery commits it.
        self.coordinator.record_pending(epoch, checkpoint_id, committables, explicit=True)
        if not self.capabilities.committer:
            checkpoint.committed = True
            self.committed.add(covered)
        self.note(
            f"{checkpoint.label} completed: covers {len(covered)} element(s), "
            f"{len(committables)} committable(s), {states.count} writer state(s), "
            "recorded pending"
        )
        return checkpoint

    @property
    def coordinator(self) -> CommitCoordinator:
        """The commit coordinator of the current (or last) job."""
        if self._coordinator is None:
            raise self.fail("the kit used the coordinator before any job started (a kit bug)")
        return self._coordinator

    @staticmethod
    def _label(checkpoint_id: int) -> str:
        return "END_OF_INPUT" if checkpoint_id == END_OF_INPUT else str(checkpoint_id)

    def _take_checkpoint_id(self) -> int:
        checkpoint_id = self._next_checkpoint
        self._next_checkpoint += 1
        return checkpoint_id

    # --- commits -----------------------------------------------------------------------------

    def _committed(self, checkpoint: _Checkpoint, outcome: CommitOutcome[Any]) -> None:
        """Update the model after ``checkpoint`` committed."""
        if self.capabilities.post_commit_topology:
            self.note(f"post-commit topology on {len(outcome.successful)} committed committable(s)")
        if not checkpoint.committed:
            checkpoint.committed = True
            self.committed.add(checkpoint.covered)

    def commit(self, checkpoint: _Checkpoint, fault: CommitFault) -> CommitOutcome[Any] | None:
        """Commit pending ``checkpoint`` through the coordinator and a fault-injecting committer.

        Returns the outcome, or ``None`` if the injected fault failed the commit (the
        job is then failed and must recover; the checkpoint stays pending).
        """
        what = f"{checkpoint.label} (first commit)"
        try:
            commit = self.coordinator.commit_pending(
                checkpoint.epoch,
                checkpoint.checkpoint_id,
                checkpoint.committables,
                wrap_committer=lambda committer: FaultInjectingCommitter(committer, fault),
            )
        except CommitError as error:
            if isinstance(error.__cause__, InjectedCommitFailure):
                self.note(f"commit {what} with {fault!r}: failed as injected")
                self.phase = Phase.FAILED
                return None
            raise self.fail(
                f"the commit failed: {error} (FaultInjectingCommitter is the kit's wrapper "
                "around the sink's committer). In this lifecycle nothing outside the "
                "sink interfered; a committer must commit staged output, and recognise "
                "committables it committed before (signal_already_committed), not fail them"
            ) from error
        outcome = commit.outcome
        self._check_nothing_dropped(what, outcome)
        self.note(f"commit {what} with {fault!r}: {outcome}")
        self._committed(checkpoint, outcome)
        return outcome

    def _check_nothing_dropped(self, what: str, outcome: CommitOutcome[Any]) -> None:
        if outcome.failed_with_known_reason:
            dropped = ", ".join(short(c) for c, _ in outcome.failed_with_known_reason[:3])
            raise self.fail(
                f"committing {what}: the committer dropped committable(s) with a known reason "
                f"({dropped}); nothing outside the sink interfered, so nothing may be dropped"
            )

    def checkpoint(self, fault: CommitFault, *, notify_later: bool = False) -> None:
        """Take checkpoint N on every writer, complete it, and commit it.

        With ``notify_later`` the commit waits: Flink's notify_checkpoint_complete
        arrives after the fact, while the writers go on writing, so a committable must
        cover what was written before the checkpoint and nothing after it. The next
        notification (`notify_complete`), checkpoint or end of input commits it first.
        """
        checkpoint_id = self._take_checkpoint_id()
        self.note(f"checkpoint {checkpoint_id}: flush(False) -> prepare_commit() -> snapshot_state")
        outputs, states = self._run_checkpoint(checkpoint_id, self.writers)
        checkpoint = self._complete(checkpoint_id, outputs, states)
        if notify_later:
            self.notify_later.append(checkpoint)
            self.note(
                f"{checkpoint.label}: its completion is notified later; the writers go on "
                "writing before it commits"
            )
            return
        self.notify_complete()
        self.commit(checkpoint, fault)
        if self.phase is Phase.FAILED:
            self._end_job(close=False)

    def notify_complete(self) -> None:
        """Commit the checkpoints whose completion was notified late, oldest first.

        Without injected faults: the other steps inject them into commits.
        """
        waiting, self.notify_later = self.notify_later, []
        for checkpoint in waiting:
            self.note(f"notify_checkpoint_complete arrives for {checkpoint.label}")
            self.replayed = _LATE_COMMIT_HINT
            self.commit(checkpoint, CommitFault.NONE)

    def end_of_input(self, fault: CommitFault) -> None:
        """Flink's end-of-input sequence on every writer, close, clean up, commit, finish."""
        self.note("end of input: flush(True) -> prepare_commit() -> snapshot_state(END_OF_INPUT)")
        outputs, states = self._run_checkpoint(END_OF_INPUT, self.writers)
        for writer in self.writers:
            writer.writer.close()
        self.note("writers closed")
        checkpoint = self._complete(END_OF_INPUT, outputs, states)
        self.coordinator.clean_up_attempts(checkpoint.tokens)
        if self.capabilities.attempt_cleanup:
            self.note(f"clean_up_attempts({self._job_id!r}, kept={sorted(checkpoint.tokens)})")
        self.writers = []
        self.phase = Phase.FINISHED
        self.notify_complete()
        if self.commit(checkpoint, fault) is None:
            self.coordinator.close()  # the next job recovers the pending checkpoint
            return
        self.coordinator.finish()
        if self.capabilities.attempt_cleanup:
            self.note(f"job finished: clean_up_attempts({self._job_id!r}, kept=[])")

    def recommit_latest(self) -> None:
        """Commit the latest committed checkpoint again; nothing visible may change."""
        checkpoint = next(c for c in reversed(self.completed) if c.committed)
        before = self.visible()
        self.note(f"commit {checkpoint.label} again (idempotence)")
        what = f"{checkpoint.label} (commit again)"
        try:
            outcome = self.coordinator.run_committer(
                checkpoint.committables,
                checkpoint_id=checkpoint.checkpoint_id,
                recovering=True,
                what=what,
            )
        except CommitError as error:
            raise self.fail(
                f"committing {what} failed: {error}; a committer must recognise committables "
                "it committed before (signal_already_committed), not fail them"
            ) from error
        self._check_nothing_dropped(what, outcome)
        if len(outcome.successful) != len(checkpoint.committables):
            raise self.fail(
                f"re-committing {checkpoint.label} returned {outcome}, not every committable "
                "as committed or already committed"
            )
        self.coordinator.run_post_commit(outcome.successful, checkpoint.checkpoint_id)
        self._check_unchanged(before, f"re-committing {checkpoint.label}, committed before,")

    def abort_committed(self) -> None:
        """``abort()`` the committables of the latest committed checkpoint: a no-op."""
        checkpoint = next(c for c in reversed(self.completed) if c.committed)
        before = self.visible()
        self.note(
            f"abort({len(checkpoint.committables)} committed committable(s) of {checkpoint.label})"
        )
        self.sink.abort(list(checkpoint.committables))
        self._check_unchanged(
            before,
            f"abort() of the committed committables of {checkpoint.label} (a crashed run's "
            "epoch that committed before it was recorded; SupportsAbort must leave committed "
            "output alone)",
        )

    def _check_unchanged(self, before: Multiset, what: str) -> None:
        if self.guarantee is DeliveryGuarantee.NONE:
            return
        after = self.visible()
        lost = before.minus(after)
        if lost:
            raise self.fail(f"{what} removed visible elements: {show(lost, 'before', 'after')}")
        if self.guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            added = after.minus(before)
            if added:
                raise self.fail(
                    f"{what} changed what the destination shows: "
                    f"{show(added, 'after', 'before')}. Committer.commit must be idempotent: "
                    "recognise committed committables and call "
                    "request.signal_already_committed()"
                )

    # --- speculative attempts, crashes, recovery ---------------------------------------------

    def losing_attempt(self, subtask: int, close: bool) -> None:
        """Another attempt of ``subtask`` writes the same elements and loses (Spark retries)."""
        winner = self.writers[subtask % self.parallelism]
        loser = self._create_writer(winner.subtask, self.parallelism, attempt_number=1)
        self.note(f"subtask {winner.subtask}: a second attempt {loser.token!r} runs and loses")
        try:
            self._feed(loser, list(winner.since_checkpoint), record=False)
            loser.driver.snapshot(END_OF_INPUT)
        except KitCrash:
            self.abandoned.append(loser.writer)  # the process died with it
            raise
        if close:
            loser.writer.close()
        else:
            self.abandoned.append(loser.writer)
        self.note(
            f"attempt {loser.token!r}: end of input done, committables discarded, "
            + ("closed" if close else "dropped without close()")
        )

    def crash(
        self, *, close: bool, writers_done: int | None = None, completed: bool = False
    ) -> None:
        """Fail the job: while writing, during a checkpoint, or after one completed uncommitted.

        Args:
            close: Whether the dropped writers get ``close()``.
            writers_done: During checkpoint N+1: how many writers ran their checkpoint
                sequence before the crash (the checkpoint never completes).
            completed: The checkpoint completes (states and committables durable) and
                the job fails before committing it.
        """
        if completed:
            checkpoint_id = self._take_checkpoint_id()
            self.note(
                f"checkpoint {checkpoint_id}: flush(False) -> prepare_commit() -> snapshot_state"
            )
            outputs, states = self._run_checkpoint(checkpoint_id, self.writers)
            self._complete(checkpoint_id, outputs, states)
            self.note(f"crash before checkpoint {checkpoint_id} is committed")
        elif writers_done is not None:
            checkpoint_id = self._take_checkpoint_id()
            done = self.writers[: writers_done % (self.parallelism + 1)]
            self.note(
                f"checkpoint {checkpoint_id} on {len(done)} of {self.parallelism} writer(s), "
                "then crash: the checkpoint never completes"
            )
            outputs, _ = self._run_checkpoint(checkpoint_id, done)
            if self._write_result_serializer is None and self._committable_serializer is not None:
                self._to_abort.extend(
                    self._unship(self._committable_serializer, f) for _, _, f in outputs
                )
        else:
            self.note("crash while writing")
        self.phase = Phase.FAILED
        self._end_job(close=close)

    def _end_job(self, *, close: bool) -> None:
        if self.notify_later:  # pending in the store: the next job commits them, late
            self.replayed = _LATE_COMMIT_HINT
            self.notify_later = []
        # Added to what a restore that crashed before replaying had left.
        self._replay.extend(e for w in self.writers for e in w.since_checkpoint)
        if close:
            for writer in self.writers:
                writer.writer.close()
        else:
            self.abandoned.extend(w.writer for w in self.writers)
        self.note(
            f"writers of job {self._job_id} "
            + ("closed" if close else "dropped without close()")
            + "; the driver is gone (the next job cleans up after it)"
        )
        self.coordinator.close()
        self.writers = []

    def restore(self, parallelism: int) -> None:
        """Recover: commit pending checkpoints, clean up, abort, new writers, replay."""
        restored = self.completed[-1] if self.completed else None
        self._new_job()
        self.note(
            f"restore job {self._job_id} from "
            + (restored.label if restored else "nothing (no completed checkpoint)")
            + f" with {parallelism} writer(s)"
        )
        if self._to_abort and self.capabilities.abort:
            self.note(f"abort({len(self._to_abort)} committable(s) of the unfinished checkpoint)")
            self.sink.abort(list(self._to_abort))
        self._to_abort = []
        if restored is not None and restored.checkpoint_id == END_OF_INPUT:
            self.coordinator.finish()
            self.phase = Phase.FINISHED
            return
        runs: list[list[bytes]] = [[] for _ in range(parallelism)]
        if restored is not None and self._state_serializer is not None:
            # As the Spark engine hands them out (see the module doc).
            runs = restored.states.redistribute(parallelism)
        self.writers = []
        for i in range(parallelism):  # one by one: a crash in a factory drops those made
            self.writers.append(
                self._create_writer(
                    i,
                    parallelism,
                    states=runs[i],
                    restored=restored.checkpoint_id if restored else None,
                )
            )
        self.phase = Phase.RUNNING
        replay, self._replay = self._replay, []
        for i, writer in enumerate(self.writers):  # all of it, before a crash can strike
            writer.since_checkpoint = replay[i::parallelism]
        if replay:
            self.note(f"replay {len(replay)} element(s) written after the restored checkpoint")
            for writer in self.writers:
                if writer.since_checkpoint:
                    self._feed(writer, list(writer.since_checkpoint), record=False)

    def arm_crash(self, skip: int) -> None:
        """Let the process die at the crash point the sink reaches after ``skip`` others."""
        self.crash_points.arm(skip)
        seen = ", ".join(repr(name) for name in self.crash_points.seen)
        self.note(
            f"the process will die at crash point number {skip + 1} the sink reaches from "
            f"now on (crash points reached so far: {seen})"
        )

    def crashed(self, crash: KitCrash, step: str) -> None:
        """The process died at a `crash_point` the sink reached during ``step``.

        The call that reached it did not finish, and neither did the step: the job
        fails where it stands. A checkpoint being taken never completes; one being
        committed stays pending, and the next job commits it again; what the
        writers took since the last completed checkpoint is replayed.
        """
        self.crash_points.fired = None
        self.note(
            f"{step}: the process dies at crash point {crash.name!r} in {_caller(crash)}; "
            f"job {self._job_id} fails there"
        )
        self.phase = Phase.FAILED
        if self._coordinator is not None:
            self._end_job(close=False)

    def check_crash_propagated(self, step: str) -> None:
        """Raise if a crash point's crash fired during ``step`` and the sink caught it."""
        crash, self.crash_points.fired = self.crash_points.fired, None
        if crash is not None:
            raise self.fail(
                f"{step}: the kit made the process die at crash point {crash.name!r} in "
                f"{_caller(crash)}, but the sink caught the crash ({type(crash).__name__}, a "
                "BaseException) and went on. A dying process does not go on: catch "
                "Exception, not BaseException, and re-raise from a bare except"
            )

    def close(self) -> None:
        """Release the sink id and delete the kit's commit state store. Idempotent."""
        if self._coordinator is not None:
            self._coordinator.close()
        self.remove_store()

    # --- the invariant -----------------------------------------------------------------------

    def must_be_visible(self) -> tuple[Multiset, str] | None:
        """The committed elements; a stateful writer may keep some in its state until the end."""
        if self.capabilities.writer_state and self.phase is not Phase.FINISHED:
            return None
        return self.committed, "committed"

    def lost_hint(self) -> str:
        """Where committed elements usually go missing."""
        return (
            ". A commit that returns must have made its committables' output visible: "
            "signal_already_committed() only for output already visible, and a committable "
            "the committer was asked to retry (retry_later(), or a failed commit) must "
            "still be committed when it comes again; prepare_commit after flush(True) must "
            "hand over everything written"
            + (", and a writer state everything not handed over" if self._state_serializer else "")
        )

    def describe_model(self) -> str:
        """The model in one line, for notes."""
        return (
            f"{len(self.checkpointed)} element(s) checkpointed, {len(self.committed)} committed, "
            f"phase {self.phase.value}"
        )


def supported_sink(make: Callable[[], SinkUnderTest]) -> SinkUnderTest:
    """Call the factory and check it returned a `SinkUnderTest`."""
    sut = make()
    if not isinstance(sut, SinkUnderTest):
        raise TypeError(
            f"the factory must return a sinkv2.testing.SinkUnderTest (got {type(sut).__name__}); "
            "return SinkUnderTest(sink=..., read_back=..., close=...)"
        )
    return sut
