"""`LocalStream`: a sink's checkpoints run by the real `CheckpointRunner`, in process.

The streaming flavour of the kit's local engine. Where `LocalRuntime` drives the
lifecycle of one sink call by call, this drives a *stream* the way ``sinkv2_spark``
drives Structured Streaming, through the same engine-neutral runtime:

- a driver is a `sinkv2.runtime.CommitCoordinator` opened for the stream
  (``open(origin=..., keep_restorable=True)``) and a `sinkv2.runtime.CheckpointRunner`
  on it, inline or ``decoupled`` (commits on the commit thread while the next
  checkpoint writes), on a SQLite commit state store the example keeps;
- checkpoint N is ``runner.run(stage, N)``; the stage is a `LocalWriterStage`
  (``_stream_stage``): one `sinkv2.runtime.WriterSubtask` per partition, created from a
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

import itertools
import logging
from collections.abc import Sequence
from typing import Final

import attrs

from sinkv2._delivery import DeliveryGuarantee
from sinkv2.runtime import (
    CheckpointRunner,
    CommitCoordinator,
    EpochStatus,
    Restore,
    WriterStates,
    WriterSubtask,
    drain_writer_states,
)
from sinkv2.testing._engine import KitEngine
from sinkv2.testing._multiset import Multiset
from sinkv2.testing._stream_stage import (
    DriverDies,
    LocalWriterStage,
    MicroBatch,
    TaskDies,
    TaskFailed,
)
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["DriverDies", "LocalStream", "MicroBatch", "TaskDies"]

_SINK_ID: Final = "kit-stream"
_COMMIT_THREAD_EVENTS: Final = ("committer-finished", "post-commit-finished", "committed-recorded")
_ORIGIN: Final = "the kit's stream"


class _DriverDied(BaseException):
    """The kit kills the driver at a stage event (a BaseException, as a dying process)."""


def _not_the_kits_crash(record: logging.LogRecord) -> bool:
    """Drop the runner's error log of a commit thread the kit killed on purpose."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not any(isinstance(arg, _DriverDied) for arg in args)


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
        self.recorded_states: dict[int, WriterStates] = {}
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
                self.recorded_states[epoch] = self.stage_states[epoch]
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
        stage = LocalWriterStage(self, checkpoint_id, batch, end_of_input=end_of_input)
        try:
            result = driver.runner.run(stage, checkpoint_id)
        except (_DriverDied, TaskFailed) as died:
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
