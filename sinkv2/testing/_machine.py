"""The lifecycle state machine: hypothesis generates lifecycles, the runtime runs them.

Each rule is one lifecycle step of `LocalRuntime`; the invariant compares the
destination with the model after every step. Once the sink has reached a
`crash_point`, a rule may arm a crash at a coming one: the step that reaches it
fails the job there. At the end of each example the
machine recovers if needed, finishes the input and checks that exactly the input
(exactly-once) or at least all of it (at-least-once) is visible.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sinkv2._delivery import DeliveryGuarantee
from sinkv2.testing._crash_points import KitCrash
from sinkv2.testing._faults import CommitFault
from sinkv2.testing._runtime import LocalRuntime, Phase, supported_sink
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["CrashPoint", "lifecycle_machine"]


class CrashPoint(enum.Enum):
    """Where in the lifecycle the job fails."""

    WHILE_WRITING = "while writing"
    DURING_CHECKPOINT = "during a checkpoint (some writers snapshotted, never completed)"
    BEFORE_COMMIT = "after a checkpoint completed, before its commit"

    def __repr__(self) -> str:
        return f"CrashPoint.{self.name}"


_MAX_BATCH = 4
_MAX_CRASH_POINTS_SKIPPED = 3
_STEPS_BEFORE_END = 8


def lifecycle_machine(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_parallelism: int,
) -> type[RuleBasedStateMachine]:
    """A `RuleBasedStateMachine` class that drives sinks made by ``make``."""
    subtasks = st.integers(0, max_parallelism - 1)
    parallelisms = st.integers(1, max_parallelism)
    batches = st.lists(elements, min_size=1, max_size=_MAX_BATCH)
    # Mostly clean commits, so that lifecycles get far between failures; NONE first so
    # that shrinking removes faults that do not matter.
    faults = st.sampled_from(
        [CommitFault.NONE] * 3 + [f for f in CommitFault if f is not CommitFault.NONE]
    )
    crash_points = st.sampled_from(list(CrashPoint))
    every_subtask = st.lists(batches, min_size=max_parallelism, max_size=max_parallelism)
    flags = st.booleans()

    def running(self: SinkLifecycle) -> bool:
        return self.runtime.phase is Phase.RUNNING

    def failed(self: SinkLifecycle) -> bool:
        return self.runtime.phase is Phase.FAILED

    def has_new_elements(self: SinkLifecycle) -> bool:
        return running(self) and any(w.since_checkpoint for w in self.runtime.writers)

    def long_enough(self: SinkLifecycle) -> bool:
        # Ending the input early wastes the rest of the example on a finished job.
        return running(self) and self.steps >= _STEPS_BEFORE_END

    def committed_before(self: SinkLifecycle) -> bool:
        return (
            self.runtime.phase is not Phase.FAILED
            and any(c.committed for c in self.runtime.completed)
            and self.runtime.capabilities.committer
        )

    class SinkLifecycle(RuleBasedStateMachine):
        """Writers, checkpoints, commits, crashes and restores of one sink."""

        def __init__(self) -> None:
            super().__init__()
            self.sut = supported_sink(make)
            self.runtime = LocalRuntime(self.sut, guarantee)
            self.broken = False
            self.steps = 0
            self.last = ""

        @contextmanager
        def step(self, name: str) -> Iterator[None]:
            self.steps += 1
            self.last = name
            try:
                try:
                    with self.runtime.crash_points.active():
                        yield
                except KitCrash as crash:  # the process died at a crash point
                    self.runtime.crashed(crash, f"step {self.steps} ({name})")
                else:
                    self.runtime.check_crash_propagated(f"step {self.steps} ({name})")
            except BaseException:
                self.broken = True
                raise

        @initialize(parallelism=parallelisms)
        def start(self, parallelism: int) -> None:
            with self.step("start"):
                self.runtime.start(parallelism)

        @precondition(running)
        @rule(subtask=subtasks, elements=batches)
        def write(self, subtask: int, elements: list[Any]) -> None:
            with self.step("write"):
                self.runtime.write(subtask, elements)

        @precondition(has_new_elements)
        @rule(fault=faults)
        def checkpoint_and_commit(self, fault: CommitFault) -> None:
            with self.step("checkpoint_and_commit"):
                self.runtime.checkpoint(fault)

        @precondition(lambda self: has_new_elements(self) and self.runtime.capabilities.committer)
        @rule()
        def checkpoint_notified_later(self) -> None:
            with self.step("checkpoint_notified_later"):
                self.runtime.checkpoint(CommitFault.NONE, notify_later=True)

        @precondition(lambda self: running(self) and self.runtime.notify_later)
        @rule()
        def notify_checkpoint_complete(self) -> None:
            with self.step("notify_checkpoint_complete"):
                self.runtime.notify_complete()

        @precondition(long_enough)
        @rule(fault=faults)
        def end_of_input(self, fault: CommitFault) -> None:
            with self.step("end_of_input"):
                self.runtime.end_of_input(fault)

        @precondition(running)
        @rule(subtask_elements=every_subtask)
        def write_to_every_subtask(self, subtask_elements: list[list[Any]]) -> None:
            with self.step("write_to_every_subtask"):
                for subtask in range(self.runtime.parallelism):
                    self.runtime.write(subtask, subtask_elements[subtask])

        @precondition(running)
        @rule(
            at=crash_points,
            close_writers=flags,
            writers_done=st.integers(0, max_parallelism),
        )
        def crash(self, at: CrashPoint, close_writers: bool, writers_done: int) -> None:
            with self.step(f"crash {at.value}"):
                if at is CrashPoint.WHILE_WRITING:
                    self.runtime.crash(close=close_writers)
                elif at is CrashPoint.DURING_CHECKPOINT:
                    self.runtime.crash(close=close_writers, writers_done=writers_done)
                else:
                    self.runtime.crash(close=close_writers, completed=True)

        @precondition(failed)
        @rule(parallelism=parallelisms)
        def restore_from_last_checkpoint(self, parallelism: int) -> None:
            with self.step("restore_from_last_checkpoint"):
                self.runtime.restore(parallelism)

        @precondition(lambda self: running(self) and self.runtime.capabilities.committer)
        @rule(subtask=subtasks, close_writer=flags)
        def losing_task_attempt(self, subtask: int, close_writer: bool) -> None:
            with self.step("losing_task_attempt"):
                self.runtime.losing_attempt(subtask, close_writer)

        @precondition(committed_before)
        @rule()
        def commit_latest_checkpoint_again(self) -> None:
            with self.step("commit_latest_checkpoint_again"):
                self.runtime.recommit_latest()

        @precondition(lambda self: committed_before(self) and self.runtime.capabilities.abort)
        @rule()
        def abort_committed_checkpoint(self) -> None:
            with self.step("abort_committed_checkpoint"):
                self.runtime.abort_committed()

        @precondition(
            lambda self: self.runtime.crash_points.seen and not self.runtime.crash_points.armed
        )
        @rule(skip=st.integers(0, _MAX_CRASH_POINTS_SKIPPED))
        def crash_at_a_coming_crash_point(self, skip: int) -> None:
            with self.step("crash_at_a_coming_crash_point"):
                self.runtime.arm_crash(skip)

        @precondition(lambda self: self.runtime.phase is Phase.FINISHED)
        @rule()
        def read_the_finished_output_again(self) -> None:
            # Every sink gets a rule once the input ended (sinks without a committer
            # had none, and hypothesis stops an example that cannot move). It checks
            # something real: nothing changes at the destination after the job ended,
            # e.g. no request of a closed async writer lands late.
            with self.step("read_the_finished_output_again"):
                before = self.runtime.visible()
                after = self.runtime.visible()
                if before != after:
                    raise self.runtime.fail(
                        "the destination changed after the job had finished: "
                        f"{len(before)} element(s), then {len(after)}"
                    )

        @invariant()
        def destination_matches_the_model(self) -> None:
            if self.runtime.log:
                try:
                    self.runtime.check(f"after step {self.steps} ({self.last})")
                except BaseException:
                    self.broken = True
                    raise

        def teardown(self) -> None:
            try:
                if not self.broken and self.runtime.log:
                    self.finish()
            finally:
                if self.broken:  # the writers of a failed example are never closed
                    self.runtime.abandoned.extend(w.writer for w in self.runtime.writers)
                    # Only `abandoned` holds them now: hypothesis keeps the failing
                    # machine, and they must go (silently) in release_abandoned().
                    self.runtime.writers = []
                self.runtime.release_abandoned()
                self.runtime.close()
                self.sut.close()

        def finish(self) -> None:
            runtime = self.runtime
            runtime.note("(the kit finishes the example: recover if needed, end the input)")
            runtime.crash_points.disarm()  # no crash points are active from here on
            if runtime.phase is Phase.FAILED:
                runtime.restore(min(2, max_parallelism))
            if runtime.phase is Phase.RUNNING:
                runtime.end_of_input(CommitFault.NONE)
            if runtime.phase is Phase.FAILED:
                runtime.restore(1)
            runtime.check("once the input ended and everything was committed")
            if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
                everything = runtime.checkpointed
                visible = runtime.visible()
                if visible != everything:
                    raise runtime.fail(
                        "EXACTLY_ONCE violated at the end: the destination shows "
                        f"{len(visible)} element(s), the input had {len(everything)}"
                    )

        def __repr__(self) -> str:
            return f"SinkLifecycle({self.runtime.capabilities.sink_type})"

    SinkLifecycle.__name__ = "SinkLifecycle"
    SinkLifecycle.__qualname__ = "SinkLifecycle"
    return SinkLifecycle
