"""The streaming state machine: hypothesis chooses streams, `LocalStream` runs them.

Each rule is something that happens to a stream: micro-batches (checkpoints, each
at a chosen parallelism, some with a fault; a query that failed is started again
first), or a restart (after a clean stop, or after the driver died between
micro-batches; the new driver may die again while it recovers). The invariant
compares the destination with the model after every rule. At the end of each
example the stream is restarted if needed, the interrupted checkpoint replayed, the
input ended, and the destination must show exactly the stream's elements
(exactly-once) or at least all of them (at-least-once).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sinkv2._delivery import DeliveryGuarantee
from sinkv2.runtime import STAGE_EVENTS
from sinkv2.testing._runtime import supported_sink
from sinkv2.testing._stream import DriverDies, LocalStream, MicroBatch, TaskDies
from sinkv2.testing._sut import SinkUnderTest

__all__ = ["Stop", "streaming_machine"]

_MAX_ROWS: Final = 5
_MAX_BATCHES_PER_STEP: Final = 3
_CHECKPOINT_EVENTS: Final = tuple(e for e in STAGE_EVENTS if e != "job-recorded")
_OPENING_EVENTS: Final = ("job-recorded", "committer-finished", "committed-recorded")


class Stop(enum.Enum):
    """How a running driver ends before the stream is started again."""

    CLEAN = "the query is stopped"
    DIES = "the driver dies between micro-batches"
    DIES_BEFORE_SPARK_LOGS_THE_LAST = "the driver dies before Spark logs the last micro-batch done"

    def __repr__(self) -> str:
        return f"Stop.{self.name}"


def streaming_machine(
    make: Callable[[], SinkUnderTest],
    *,
    guarantee: DeliveryGuarantee,
    elements: st.SearchStrategy[object],
    max_parallelism: int,
) -> type[RuleBasedStateMachine]:
    """A `RuleBasedStateMachine` class that runs streams into sinks made by ``make``."""
    parallelisms = st.integers(1, max_parallelism)
    rows = st.lists(
        st.tuples(st.integers(0, max_parallelism - 1), elements), max_size=_MAX_ROWS
    ).map(tuple)
    tasks = st.builds(
        TaskDies,
        subtask=st.integers(0, max_parallelism - 1),
        after=st.integers(0, _MAX_ROWS + 1),
        close=st.booleans(),
        retried=st.booleans(),
    )
    # Mostly clean checkpoints, so that streams get far between failures; None first, so
    # that shrinking removes faults that do not matter.
    faults = st.one_of(
        st.none(),
        st.none(),
        st.none(),
        st.builds(DriverDies, at=st.sampled_from(_CHECKPOINT_EVENTS)),
        tasks,
    )
    batches = st.lists(
        st.builds(MicroBatch, parallelism=parallelisms, rows=rows, fault=faults),
        min_size=1,
        max_size=_MAX_BATCHES_PER_STEP,
    )

    class StreamingCheckpoints(RuleBasedStateMachine):
        """Checkpoints, restarts, rescales and crashes of one stream into one sink."""

        def __init__(self) -> None:
            super().__init__()
            self.sut = supported_sink(make)
            self.stream = LocalStream(self.sut, guarantee)
            self.broken = False
            self.steps = 0
            self.decoupled = False

        @contextmanager
        def step(self, *, counts: bool = True) -> Iterator[None]:
            self.steps += counts
            try:
                yield
            except BaseException:
                self.broken = True
                raise

        @initialize(decoupled=st.booleans())
        def start(self, decoupled: bool) -> None:
            with self.step():
                self.decoupled = decoupled
                self.stream.start(decoupled=decoupled)

        @rule(batches=batches)
        def micro_batches(self, batches: list[MicroBatch]) -> None:
            with self.step():
                if not self.stream.alive:  # the query failed before: it is started again
                    self.stream.start(decoupled=self.decoupled)
                for batch in batches:
                    if not self.stream.alive:
                        break  # the stream failed; the rest never arrives
                    self.stream.run(batch)
                self.stream.settle()

        @rule(
            stop=st.sampled_from(Stop),
            decoupled=st.booleans(),
            dies_at=st.none() | st.sampled_from(_OPENING_EVENTS),
        )
        def restart(self, stop: Stop, decoupled: bool, dies_at: str | None) -> None:
            with self.step():
                if self.stream.alive and stop is Stop.CLEAN:
                    self.stream.stop()
                elif self.stream.alive:
                    self.stream.die(replay_last=stop is Stop.DIES_BEFORE_SPARK_LOGS_THE_LAST)
                self.decoupled = decoupled
                self.stream.start(decoupled=decoupled, dies_at=dies_at)

        @invariant()
        def destination_matches_the_model(self) -> None:
            with self.step(counts=False):
                self.stream.check(f"after step {self.steps}")

        def teardown(self) -> None:
            stream = self.stream
            try:
                if not self.broken and stream.log:
                    stream.note("(the kit ends the stream: restart if needed, replay, end input)")
                    stream.end(1)  # one writer: every state left meets in it
                    stream.check("at the end of the stream")
                    if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
                        visible = stream.visible()
                        if visible != stream.checkpointed:
                            raise stream.fail(
                                "EXACTLY_ONCE violated at the end of the stream: the "
                                f"destination shows {len(visible)} element(s), the stream "
                                f"had {len(stream.checkpointed)}"
                            )
                    stream.stop()
            finally:
                stream.close()
                self.sut.close()

        def __repr__(self) -> str:
            return f"StreamingCheckpoints({self.stream.capabilities.sink_type})"

    StreamingCheckpoints.__name__ = "StreamingCheckpoints"
    StreamingCheckpoints.__qualname__ = "StreamingCheckpoints"
    return StreamingCheckpoints
