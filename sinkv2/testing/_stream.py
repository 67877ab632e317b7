"""`LocalStream`: a sink's checkpoints run by the real `CheckpointRunner`, in process.

The streaming flavour of the kit's local engine. Where `LocalRuntime` drives the
lifecycle of one sink call by call, this drives a *stream* the way ``sinkv2_spark``
drives Structured Streaming, through the same engine-neutral runtime:

- a driver is a `sinkv2.runtime.CommitCoordinator` opened for the stream
  (``open(origin=..., keep_restorable=True)``) and a `sinkv2.runtime.CheckpointRunner`
  on it, inline or ``decoupled`` (commits on the commit thread while the next
  checkpoint writes), on a SQLite commit state store the example keeps;
- checkpoint N is ``runner.run(stage, N)``; the stage is a local
  `sinkv2.runtime.StreamWriterStage`: one writer per partition, created from a
  cloudpickled copy of the sink (as each Spark task unpickles its own), restored
  from the states the runner hands it - redistributed with
  `WriterStates.redistribute` when the number of partitions changed - then fed its
  partition and ended with ``flush(False)`` -> ``prepare_commit()`` ->
  ``snapshot_state(N)`` -> ``close()``;
- a driver dies at a stage event (the listener raises), or its micro-batch fails
  because a task died; a task may also die and be retried, leaving a losing
  attempt behind. The next driver is a new coordinator and runner on the same
  store, and the checkpoint that was interrupted is run again with the same input,
  as Spark replays a micro-batch whose ``foreachBatch`` did not return;
- the stream ends with a last checkpoint whose writers end their input
  (``flush(True)``), or, for a sink without a committer, with the runner's
  draining stop.

Alongside, the model: which checkpoints are recorded (their input will become
visible) and committed, and which writer states each recorded checkpoint holds.
`LocalStream.check` compares the destination with it; the stage checks that every
state recorded at checkpoint N - 1 reaches checkpoint N's writers exactly once, by
Flink's redistribution rule.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs
import cloudpickle

from sinkv2._context import BasicWriterInitContext
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._messages import END_OF_INPUT
from sinkv2._text import short_repr
from sinkv2.runtime import (
    CheckpointRunner,
    CommitCoordinator,
    EpochStatus,
    Restore,
    SubtaskStates,
    WriterStageOutput,
    WriterStates,
    WriterSubtask,
    drain_writer_states,
)
from sinkv2.testing._engine import KitEngine, framed_table
from sinkv2.testing._multiset import Multiset
from sinkv2.testing._sut import SinkUnderTest

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DriverDies", "LocalStream", "MicroBatch", "TaskDies"]

_SINK_ID: Final = "kit-stream"
_COMMIT_THREAD_EVENTS: Final = ("committer-finished", "post-commit-finished", "committed-recorded")
_ORIGIN: Final = "the kit's stream"
_MAX_REPR: Final = 120


def _short(value: object) -> str:
    return short_repr(value, _MAX_REPR)


class _DriverDied(BaseException):
    """The kit kills the driver at a stage event (a BaseException, as a dying process)."""


class _TaskFailed(Exception):
    """A writer task died and Spark gave up on it: the micro-batch fails."""


def _not_the_kits_crash(record: logging.LogRecord) -> bool:
    """Drop the runner's error log of a commit thread the kit killed on purpose."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not any(isinstance(arg, _DriverDied) for arg in args)


@attrs.frozen
class DriverDies:
    """The driver dies when the checkpoint reaches the stage event ``at``.

    ``"committer-finished"`` and later events of a decoupled runner happen on its
    commit thread: the stream then fails at its next checkpoint boundary.
    """

    at: str


@attrs.frozen
class TaskDies:
    """The task of partition ``subtask`` (modulo the parallelism) dies.

    Attributes:
        subtask: The partition.
        after: Elements its writer takes before it dies; more than the partition
            holds means after its whole checkpoint sequence (staged, not reported).
        close: Whether the dying writer gets ``close()`` (the task failed) or is
            simply dropped (its executor was lost).
        retried: Spark retries the task and the retry wins; otherwise the
            micro-batch fails and so does the stream.
    """

    subtask: int
    after: int
    close: bool
    retried: bool


Fault = DriverDies | TaskDies | None


@attrs.frozen
class MicroBatch:
    """One checkpoint of the stream, as hypothesis chooses it.

    Attributes:
        parallelism: Partitions (writers) the checkpoint runs with.
        rows: Its input: (partition tag, element); element ``i`` goes to partition
            ``tag % parallelism``. A replay keeps the input of the first attempt
            and spreads it over its own parallelism.
        fault: What goes wrong, if anything.
    """

    parallelism: int
    rows: tuple[tuple[int, object], ...]
    fault: Fault = None


@attrs.define
class _PayloadColumn:
    payloads: list[bytes]

    def to_pylist(self) -> list[bytes]:
        return list(self.payloads)


@attrs.define
class _Payloads:
    """A writer stage's committable table, for a sink without a pre-commit topology.

    The coordinator reads only the ``payload`` column of such a table (the framed
    committables); this stands in for the Arrow table so that the kit needs no
    pyarrow for sinks without topologies, as `LocalRuntime` needs none.
    """

    payloads: list[bytes]

    def column(self, name: str) -> _PayloadColumn:
        if name != "payload":
            raise KeyError(f"the kit's committable stand-in has no column {name!r}")
        return _PayloadColumn(self.payloads)


@attrs.define
class _Driver:
    coordinator: CommitCoordinator
    runner: CheckpointRunner


class LocalStream(KitEngine):
    """One stream of one sink against one fresh destination, with its model.

    Args:
        sut: The sink and its destination.
        guarantee: What the sink promises; decides what `check` asserts.
    """

    history_title = "stream so far"
    uncovered = "elements of no recorded checkpoint (their micro-batch failed)"
    covered = "recorded checkpoints"
    replayed = ", however often a micro-batch is replayed"

    def __init__(self, sut: SinkUnderTest, guarantee: DeliveryGuarantee) -> None:
        super().__init__(sut, guarantee, prefix="sinkv2-kit-stream-")
        self.driver: _Driver | None = None
        self.inputs: dict[int, tuple[tuple[int, object], ...]] = {}
        self.recorded: set[int] = set()
        self.committed_epochs: set[int] = set()
        self.ended = False
        self._verdicts: list[AssertionError] = []
        self._interrupted: int | None = None
        self._last_returned = 0
        self._armed: set[tuple[str, int | None]] = set()
        self.stage_states: dict[int, WriterStates] = {}
        self._recorded_states: dict[int, WriterStates] = {}
        self._jobs = 0
        self._attempts = itertools.count()
        logging.getLogger("sinkv2.coordinator").addFilter(_not_the_kits_crash)

    # --- reporting ---------------------------------------------------------------------------

    def fail(self, message: str) -> AssertionError:
        """An AssertionError with ``message`` and the stream that led there."""
        verdict = AssertionError(f"{message}\n\n{self.history()}")
        self._verdicts.append(verdict)  # passes through the runner unchanged
        return verdict

    # --- drivers -----------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether a driver runs the stream now."""
        return self.driver is not None

    def start(self, *, decoupled: bool, dies_at: str | None = None) -> None:
        """A new driver: a coordinator opened for the stream, and a runner on it.

        Opening commits what dead drivers left pending and cleans up after them
        (keeping the attempts the latest writer states refer to). With
        ``dies_at``, the driver dies when opening reaches that stage event.
        """
        self._jobs += 1
        job_id = f"kitstream{self._jobs:04d}"
        mode = "decoupled commits" if decoupled else "inline commits"
        self.note(f"driver {job_id} starts the stream ({mode})")
        coordinator = self.new_coordinator(job_id, _SINK_ID, on_stage=self._on_stage)
        if dies_at is not None:
            self._armed.add((dies_at, None))
        try:
            recovery = coordinator.open(origin=_ORIGIN, keep_restorable=True)
        except _DriverDied:
            self._armed.clear()
            self.note(f"driver {job_id} is gone; the next one recovers again")
            return
        except Exception as error:
            raise self.fail(
                f"driver {job_id}: opening the commit coordinator failed: "
                f"{type(error).__name__}: {error}. It commits the checkpoints dead drivers "
                "left pending; nothing outside the sink interfered, so a committer must "
                "commit them, recognising what it committed before (signal_already_committed)"
            ) from error
        self._armed.clear()
        if recovery.recommitted:
            self.note(f"recovery committed pending checkpoint(s) {sorted(recovery.recommitted)}")
        if recovery.cleaned_jobs and self.capabilities.attempt_cleanup:
            self.note(
                f"recovery: clean_up_attempts of dead driver(s) {list(recovery.cleaned_jobs)}"
            )
        runner = CheckpointRunner(coordinator, decoupled=decoupled)
        self.driver = _Driver(coordinator, runner)

    def _on_stage(self, event: str, epoch: int) -> None:
        """The coordinator's progress: update the model, then die here if armed."""
        if event == "pending-recorded" and epoch not in self.recorded:
            self.recorded.add(epoch)
            self.checkpointed.add(element for _, element in self.inputs.get(epoch, ()))
            if epoch in self.stage_states:
                self._recorded_states[epoch] = self.stage_states[epoch]
        elif event == "committed-recorded" and epoch not in self.committed_epochs:
            self.committed_epochs.add(epoch)
            self.committed.add(element for _, element in self.inputs.get(epoch, ()))
        for armed in ((event, epoch), (event, None)):
            if armed in self._armed:
                self._armed.discard(armed)
                where = f"checkpoint {epoch}" if epoch else "opening"
                self.note(f"the driver dies at {event!r} of {where}")
                raise _DriverDied(f"{event} of epoch {epoch}")

    def die(self, *, replay_last: bool) -> None:
        """The driver dies between checkpoints; Spark may replay the last one anyway.

        ``replay_last``: the driver died before Spark logged the last micro-batch
        as done, so the next run replays it (its checkpoint is recorded, so the
        runner commits or skips it).
        """
        if replay_last and self._interrupted is None and self._last_returned:
            self._interrupted = self._last_returned
        replayed = self._interrupted
        self._gone(
            "the driver dies between checkpoints"
            + (f"; Spark will replay checkpoint {replayed}" if replayed is not None else "")
        )

    def _gone(self, why: str) -> None:
        """The driver is gone: its runner and coordinator closed, nothing finished."""
        driver = self.driver
        self.driver = None
        if driver is not None:
            driver.runner.close()  # a decoupled commit in flight finishes first
            driver.coordinator.close()
        self._armed.clear()
        self.note(f"{why}; the next driver cleans up after this one")

    def stop(self) -> None:
        """Stop the stream cleanly, as `SinkStreamingQuery.stop` ends its job."""
        driver = self.driver
        assert driver is not None
        driver.runner.close()
        try:
            driver.runner.raise_commit_failure()
        except _DriverDied:
            self._gone("the stream failed on its commit thread")
            return
        except Exception as error:
            raise self._commit_failed(error) from error
        self.driver = None
        coordinator = driver.coordinator
        if coordinator.lease.epochs(EpochStatus.PENDING):
            coordinator.close()
            self.note("stream stopped with a checkpoint pending (the next driver commits it)")
            return
        keep = driver.runner.referenced_attempts()
        coordinator.finish(keep_attempt_tokens=keep)
        self.note(f"stream stopped; attempts its writer states refer to kept: {sorted(keep)}")

    # --- checkpoints -------------------------------------------------------------------------

    def next_checkpoint(self) -> int:
        """The checkpoint Spark runs next: the interrupted one again, or a new one."""
        return self._interrupted if self._interrupted is not None else self._last_returned + 1

    def run(self, batch: MicroBatch, *, end_of_input: bool = False) -> None:
        """Run the next checkpoint (a replay keeps its first input) with ``batch``'s fault."""
        driver = self.driver
        assert driver is not None
        checkpoint_id = self.next_checkpoint()
        replay = checkpoint_id in self.inputs
        rows = self.inputs.setdefault(checkpoint_id, () if end_of_input else batch.rows)
        fault = batch.fault
        what = "end of input" if end_of_input else f"{len(rows)} element(s)"
        self.note(
            f"checkpoint {checkpoint_id}{' (replayed)' if replay else ''}: {what} over "
            f"{batch.parallelism} partition(s)" + (f", {fault!r}" if fault is not None else "")
        )
        if isinstance(fault, DriverDies):
            self._armed.add((fault.at, checkpoint_id))
        stage = _Stage(self, checkpoint_id, batch, end_of_input=end_of_input)
        try:
            result = driver.runner.run(stage, checkpoint_id)
        except (_DriverDied, _TaskFailed) as died:
            self._interrupted = checkpoint_id
            self._gone(f"checkpoint {checkpoint_id} failed ({died}); the stream fails")
            return
        except Exception as error:
            if any(error is verdict for verdict in self._verdicts):
                raise  # the kit's own finding, raised in the writer stage
            raise self._commit_failed(error, f"checkpoint {checkpoint_id}") from error
        self._interrupted = None
        self._last_returned = checkpoint_id
        if isinstance(fault, DriverDies) and fault.at in _COMMIT_THREAD_EVENTS:
            # Dying on the commit thread: let it happen before the next checkpoint starts,
            # so that the example fails the stream at the same boundary every time it runs.
            driver.runner.wait()
        if result is None:
            self.note(f"checkpoint {checkpoint_id}: recorded; its commit runs on the commit thread")
        else:
            self.note(f"checkpoint {checkpoint_id}: {result.status.value}")

    def settle(self) -> None:
        """Wait for the commit thread; a failure there fails the stream (no replay)."""
        driver = self.driver
        if driver is None:
            return
        driver.runner.wait()
        self._armed.clear()  # a death at an event that did not come (no post-commit topology)
        try:
            driver.runner.raise_commit_failure()
        except _DriverDied:
            self._gone("the stream failed on its commit thread")
        except Exception as error:
            raise self._commit_failed(error) from error

    def _commit_failed(self, error: Exception, where: str = "the stream") -> AssertionError:
        return self.fail(
            f"{where} failed: {type(error).__name__}: {error}. The kit injected no fault "
            "there: writers must write and restore what they are handed, and a committer "
            "must commit staged output and recognise committables it committed before "
            "(signal_already_committed)"
        )

    def end(self, parallelism: int) -> None:
        """End the stream: replay what was interrupted, then end the input; wait."""
        if not self.alive:
            self.start(decoupled=False)
        if self._interrupted is not None:
            self.run(MicroBatch(parallelism, ()))
        if self.capabilities.committer:
            self.run(MicroBatch(parallelism, ()), end_of_input=True)
            self.settle()
        else:
            self._drain()
        if not self.alive:
            raise self.fail("the kit's driver died while ending the stream (a kit bug)")
        self.ended = True

    def _drain(self) -> None:
        """A draining stop: the newest states' writers end their input on the driver."""
        driver = self.driver
        assert driver is not None
        drained = driver.runner.drain(self._drain_writers)
        self.note(f"draining stop: {drained} writer state(s) sent")

    def _drain_writers(self, job_id: str, restore: Restore) -> WriterStates | None:
        return drain_writer_states(self.sink, self.capabilities, job_id, restore)

    # --- writers -----------------------------------------------------------------------------

    def attempt_token(self, job_id: str, subtask: int) -> str:
        """A fresh attempt token, as Spark's writer stage names its task attempts."""
        return f"{job_id}-{subtask:05d}-{next(self._attempts)}"

    def feed(self, subtask: WriterSubtask, elements: Sequence[object]) -> None:
        """Hand ``elements`` to the subtask's writer as one batch, as the Spark engine does."""
        if not elements:
            return
        self.written.add(elements)
        subtask.write_values(elements)

    def close(self) -> None:
        """Release the driver, drop the dropped writers, delete the store. Idempotent."""
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.runner.close()
            driver.coordinator.close()
        self.release_abandoned()
        logging.getLogger("sinkv2.coordinator").removeFilter(_not_the_kits_crash)
        self.remove_store()

    # --- the model ---------------------------------------------------------------------------

    def must_be_visible(self) -> tuple[Multiset, str] | None:
        """Everything streamed once ended; before, what committed (unless states hold some)."""
        if self.ended:
            return self.checkpointed, "streamed"
        if self.capabilities.writer_state:
            return None
        return self.committed, "committed"

    def lost_hint(self) -> str:
        """For a stateful sink: where the missing elements were held."""
        if not self.capabilities.writer_state:
            return "."
        return (
            ". A writer state holds what the writers have not emitted yet: "
            "restore_writer must take back every state it is handed (after a rescale, "
            "states other subtasks snapshotted), and keep or emit all of it."
        )

    # --- what the stage checks ---------------------------------------------------------------

    def check_restore(self, checkpoint_id: int, restore: Restore | None) -> None:
        """The runner restores checkpoint N's writers from N - 1's recorded states."""
        if checkpoint_id == 1:
            if restore is not None:
                raise self._runtime_bug(
                    f"checkpoint 1 was restored from checkpoint {restore.checkpoint_id}, but "
                    "it is the stream's first"
                )
            return
        if restore is None or restore.checkpoint_id != checkpoint_id - 1:
            got = "nothing" if restore is None else f"checkpoint {restore.checkpoint_id}"
            raise self._runtime_bug(
                f"checkpoint {checkpoint_id}'s writers were restored from {got}, not from "
                f"checkpoint {checkpoint_id - 1}, the last one recorded"
            )
        recorded = self._recorded_states.get(checkpoint_id - 1)
        if not self.capabilities.writer_state or recorded is None:
            return
        if restore.states is None or restore.states.subtasks != recorded.subtasks:
            raise self._runtime_bug(
                f"the writer states restored at checkpoint {checkpoint_id} are not those "
                f"recorded with checkpoint {checkpoint_id - 1}: recorded "
                f"{_short(recorded.subtasks)}, restored "
                f"{_short(restore.states.subtasks if restore.states else None)}"
            )

    def check_runs(
        self, checkpoint_id: int, restore: Restore | None, runs: list[list[bytes]]
    ) -> None:
        """Each recorded state reaches exactly one writer, by Flink's redistribution rule."""
        recorded = self._recorded_states.get(checkpoint_id - 1)
        if restore is None or restore.states is None or recorded is None:
            return
        ordered = sorted(recorded.subtasks, key=lambda s: s.subtask_id)
        snapshotted = [state for subtask in ordered for state in subtask.states]
        handed = [state for run in runs for state in run]
        where = (
            f"checkpoint {checkpoint_id - 1}'s {len(snapshotted)} writer state(s) of "
            f"{recorded.number_of_subtasks} writer(s), handed to checkpoint {checkpoint_id}'s "
            f"{len(runs)} writer(s)"
        )
        counts = collections.Counter(handed)
        counts.subtract(snapshotted)
        lost = sum(-n for n in counts.values() if n < 0)
        duplicated = sum(n for n in counts.values() if n > 0)
        if lost or duplicated:
            raise self._runtime_bug(
                f"{where}: {lost} state(s) lost, {duplicated} handed out more than once"
            )
        if len(runs) == recorded.number_of_subtasks:
            expected = [list(subtask.states) for subtask in ordered]
            rule = "at the same parallelism each writer gets its own states back"
        else:
            base, extra = divmod(len(snapshotted), len(runs))
            sizes = [base + (1 if i < extra else 0) for i in range(len(runs))]
            starts = [sum(sizes[:i]) for i in range(len(runs))]
            expected = [snapshotted[s : s + n] for s, n in zip(starts, sizes, strict=True)]
            rule = (
                "after a rescale all states, in subtask order, are cut into contiguous runs, "
                f"the first {extra} one longer"
            )
        if runs != expected:
            raise self._runtime_bug(
                f"{where}: not redistributed by Flink's rule ({rule}); by (old subtask, "
                f"index), the writers got {_origins(runs, ordered)}, expected "
                f"{_origins(expected, ordered)}"
            )

    def _runtime_bug(self, message: str) -> AssertionError:
        return self.fail(
            f"{message}. This is a bug in sinkv2's streaming runtime (CheckpointRunner, "
            "WriterStates), not in the sink; please report it"
        )


def _origins(runs: list[list[bytes]], ordered: list[SubtaskStates]) -> list[list[str]]:
    """Each handed-out state as "old subtask:index" (equal states in their order)."""
    where: dict[bytes, collections.deque[str]] = collections.defaultdict(collections.deque)
    for subtask in ordered:
        for index, state in enumerate(subtask.states):
            where[state].append(f"{subtask.subtask_id}:{index}")
    return [[where[state].popleft() for state in run] for run in runs]


class _Stage:
    """The local `StreamWriterStage` of one checkpoint attempt, as Spark's writer stage runs it."""

    def __init__(
        self, stream: LocalStream, checkpoint_id: int, batch: MicroBatch, *, end_of_input: bool
    ) -> None:
        self.stream = stream
        self.checkpoint_id = checkpoint_id
        self.batch = batch
        self.end_of_input = end_of_input
        self.job_id = ""
        self.restore: Restore | None = None
        self.runs: list[list[bytes]] = []

    def __call__(
        self, job_id: str, checkpoint_id: int, restore: Restore | None
    ) -> WriterStageOutput:
        stream = self.stream
        parallelism = self.batch.parallelism
        partitions: list[list[object]] = [[] for _ in range(parallelism)]
        for tag, element in stream.inputs[checkpoint_id]:
            partitions[tag % parallelism].append(element)
        stream.check_restore(checkpoint_id, restore)
        self.job_id, self.restore = job_id, restore
        self.runs = [[] for _ in range(parallelism)]
        if restore is not None and restore.states is not None:
            self.runs = restore.states.redistribute(parallelism)  # as the Spark engine does
            stream.check_runs(checkpoint_id, restore, self.runs)
        shipped = self._ship()
        fault = self.batch.fault
        outputs: list[tuple[int, int, bytes]] = []
        version: int | None = None
        subtasks: list[SubtaskStates] = []
        for subtask in range(parallelism):
            attempt_number = 0
            if isinstance(fault, TaskDies) and fault.subtask % parallelism == subtask:
                self._dying_attempt(subtask, fault, partitions[subtask], shipped)
                if not fault.retried:
                    raise _TaskFailed(f"the task of partition {subtask} died, no retry left")
                attempt_number = 1
            token = stream.attempt_token(job_id, subtask)
            snapshot = self._subtask(shipped, subtask, token, attempt_number).run(
                self._restored(subtask),
                functools.partial(stream.feed, elements=partitions[subtask]),
                self._snapshot_id,
            )
            outputs.extend((subtask, i, framed) for i, framed in enumerate(snapshot.outputs))
            version = snapshot.output_version
            subtasks.append(
                SubtaskStates(subtask_id=subtask, attempt_token=token, states=snapshot.states)
            )
        # As Spark's engine reports them: every subtask (without states for stateless sinks);
        # the runner names them after the sink.
        written = WriterStates(
            state_name="", number_of_subtasks=parallelism, subtasks=tuple(subtasks)
        )
        stream.stage_states[checkpoint_id] = written
        tokens = ", ".join(repr(s.attempt_token) for s in subtasks)
        stream.note(
            f"checkpoint {checkpoint_id}: writers {tokens} done: {len(outputs)} output(s), "
            f"{written.count} writer state(s)"
        )
        return WriterStageOutput(
            table=self._table(checkpoint_id, outputs, version),
            attempt_tokens=frozenset(s.attempt_token for s in subtasks),
            records=sum(map(len, partitions)),
            subtasks=parallelism,
            states=written,
        )

    def _ship(self) -> bytes:
        sink = self.stream.sink
        try:
            shipped: bytes = cloudpickle.dumps(sink)
        except Exception as error:
            raise self.stream.fail(
                f"the sink {type(sink).__qualname__} does not survive cloudpickle, as Spark "
                f"ships it to each task: {type(error).__name__}: {error}. Keep sinks plain "
                "data: open connections, clients and files in writers and committers"
            ) from error
        return shipped

    @property
    def _snapshot_id(self) -> int:
        return END_OF_INPUT if self.end_of_input else self.checkpoint_id

    def _restored(self, subtask: int) -> list[bytes] | None:
        """The framed states ``subtask`` restores, or ``None`` to create its writer."""
        if self.restore is None or not self.stream.capabilities.writer_state:
            return None
        return self.runs[subtask]

    def _subtask(
        self, shipped: bytes, subtask: int, token: str, attempt_number: int
    ) -> WriterSubtask:
        """A task attempt's subtask, with its own copy of the sink (as each task unpickles)."""
        stream, restore = self.stream, self.restore
        context = BasicWriterInitContext(
            subtask_id=subtask,
            number_of_parallel_subtasks=self.batch.parallelism,
            attempt_number=attempt_number,
            job_id=self.job_id,
            attempt_token=token,
            restored_checkpoint_id=restore.checkpoint_id if restore is not None else None,
        )
        return WriterSubtask(
            cloudpickle.loads(shipped),
            stream.capabilities,
            context,
            emits_write_results=stream.capabilities.pre_commit_topology,
        )

    def _dying_attempt(
        self, subtask: int, fault: TaskDies, elements: list[object], shipped: bytes
    ) -> None:
        """An attempt of ``subtask`` that dies partway; what it staged stays behind."""
        stream = self.stream
        token = stream.attempt_token(self.job_id, subtask)
        dying = self._subtask(shipped, subtask, token, 0)
        dying.open(self._restored(subtask))
        staged_all = fault.after > len(elements)
        stream.feed(dying, elements[: fault.after])
        if staged_all:
            dying.snapshot(self._snapshot_id)  # everything staged; the task dies before reporting
        if fault.close:
            dying.close()
        else:
            stream.abandoned.append(dying.writer)
        done = "its checkpoint sequence" if staged_all else f"{fault.after} element(s)"
        stream.note(
            f"checkpoint {self.checkpoint_id}: attempt {token!r} dies after {done}, "
            + ("closed" if fault.close else "dropped without close()")
        )

    def _table(
        self, checkpoint_id: int, outputs: list[tuple[int, int, bytes]], version: int | None
    ) -> pa.Table:
        if not self.stream.capabilities.pre_commit_topology:
            return _Payloads([framed for *_, framed in outputs])
        assert version is not None  # a pre-commit topology needs a committer
        return framed_table(checkpoint_id, self.batch.parallelism, version, outputs)
