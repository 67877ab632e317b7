"""What the kit's two local engines share: the model, the log, the scratch store.

`LocalRuntime` (the lifecycle, call by call) and `LocalStream` (checkpoints
through the real `CheckpointRunner`) are both a `KitEngine`: a sink under test,
the guarantee it declares, a numbered log that ends every failure message, and the
model of what the destination must show (`checked_visible`). The writers in both
run through `sinkv2.runtime.WriterSubtask`, the sequence Spark's writer tasks run.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._text import short_repr
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    CommitCoordinator,
    CommitRetryPolicy,
    SqliteCommitStateStore,
    StageListener,
)
from sinkv2.testing._multiset import Multiset, show
from sinkv2.testing._owned import owned_temp_dir
from sinkv2.testing._sut import SinkUnderTest

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ZERO_BACKOFF",
    "KitEngine",
    "LocalStreams",
    "framed_table",
    "kit_state_dir",
    "numbered_tail",
    "scratch_dir",
    "short",
]

ZERO_BACKOFF: Final = CommitRetryPolicy(
    max_retries=3, initial_backoff_s=0.0, max_backoff_s=0.0, jitter=0.0
)
_LOG_TAIL: Final = 40
_MAX_REPR: Final = 120


def short(value: object) -> str:
    """``value``'s repr, cut to a length a failure message can show."""
    return short_repr(value, _MAX_REPR)


def numbered_tail(log: Sequence[str]) -> str:
    """The lines of ``log``, numbered, only the last ones if it is long."""
    start = max(0, len(log) - _LOG_TAIL)
    lines = [f"  {i + 1:3d}. {line}" for i, line in enumerate(log) if i >= start]
    skipped = f"  ... {start} earlier step(s)\n" if start else ""
    return skipped + "\n".join(lines)


def scratch_dir() -> str | None:
    """Memory-backed scratch space if there is some: the kit's store is thrown away."""
    shm = "/dev/shm"  # a private mkdtemp inside it, removed by close()
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def kit_state_dir(prefix: str) -> Path:
    """A new private directory for a kit run's commit state, named by this process.

    A run's ``close()`` removes its directory; what a killed run left is removed
    by the next one (`owned_temp_dir`).
    """
    return owned_temp_dir(prefix, base=scratch_dir())


class LocalStreams:
    """The kit's committable streams: `LocalCommittableStream`s, for the coordinator."""

    def to_stream(self, table: pa.Table) -> Any:
        from sinkv2.runtime.committables import LocalCommittableStream  # noqa: PLC0415  # pyarrow

        return LocalCommittableStream(table)

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        from sinkv2.runtime.committables import (  # noqa: PLC0415  # loads pyarrow
            COMMITTABLE_COLUMNS,
            COMMITTABLE_SCHEMA,
        )

        if not callable(getattr(stream, "toArrow", None)):
            raise SinkConfigurationError(
                f"{produced_by} must return the committable stream it received, transformed "
                f"(got {type(stream).__name__}). In the kit the stream is a "
                "sinkv2.testing.LocalCommittableStream; build topologies with the helpers of "
                "sinkv2_spark.committables, which accept it"
            )
        selected: Any = stream.select(*COMMITTABLE_COLUMNS)  # type: ignore[attr-defined]  # checked above
        return selected.toArrow().cast(COMMITTABLE_SCHEMA)


def framed_table(
    checkpoint_id: int, parallelism: int, version: int, outputs: Sequence[tuple[int, int, bytes]]
) -> pa.Table:
    """Framed write results as the writer stage's table: (subtask, index, framed) each."""
    import pyarrow as pa  # noqa: PLC0415  # only topologies need it

    from sinkv2.runtime.committables import COMMITTABLE_SCHEMA  # noqa: PLC0415  # pyarrow

    return pa.Table.from_pylist(
        [
            {
                "checkpoint_id": checkpoint_id,
                "subtask_id": subtask,
                "number_of_subtasks": parallelism,
                "serializer_version": version,
                "payload": framed,
                "lineage": [f"{subtask}:{index}"],
            }
            for subtask, index, framed in outputs
        ],
        schema=COMMITTABLE_SCHEMA,
    )


def _weak(writer: object) -> Callable[[], object]:
    """A weak reference to ``writer``; without one, a stand-in that says it is alive."""
    try:
        return weakref.ref(writer)
    except TypeError:  # no weak references to it (slots): it may be in a cycle
        return lambda: writer


class KitEngine:
    """A kit engine: one sink against one fresh destination, with its model and log.

    Args:
        sut: The sink and its destination.
        guarantee: What the sink promises; decides what `check` asserts.
        prefix: Names the private directory of its commit state store.

    Attributes:
        checkpointed: Elements of completed (recorded) checkpoints: will be visible.
        committed: Elements of committed checkpoints: are visible.
        written: Every element handed to a writer, for value-change diffs.
        abandoned: Writers dropped without ``close()``, as a crashed process drops them.
    """

    history_title = "history so far"
    uncovered = "elements that no completed checkpoint covers"
    """What extra visible elements that are no duplicates are called."""
    covered = "completed checkpoints"
    """What `checkpointed` is called in messages."""
    replayed = ""
    """Appended to the exactly-once hint."""

    def __init__(self, sut: SinkUnderTest, guarantee: DeliveryGuarantee, *, prefix: str) -> None:
        self.sut = sut
        self.sink: Any = sut.sink
        self.guarantee = guarantee
        self.capabilities: SinkCapabilities = inspect_sink(self.sink)
        self.log: list[str] = []
        self.checkpointed = Multiset()
        self.committed = Multiset()
        self.written = Multiset()
        self.abandoned: list[Any] = []
        self._rng = random.Random(0)
        self._state_dir = kit_state_dir(prefix)
        self._store = SqliteCommitStateStore(self._state_dir / "commit_state.sqlite")

    def new_coordinator(
        self, job_id: str, sink_id: str, on_stage: StageListener | None = None
    ) -> CommitCoordinator:
        """A commit coordinator for a new job (driver) on the engine's store; not opened."""
        return CommitCoordinator(
            self.sink,
            sink_id=sink_id,
            store=self._store,
            streams=LocalStreams(),
            job_id=job_id,
            retry_policy=ZERO_BACKOFF,
            on_stage=on_stage,
            capabilities=self.capabilities,
            sleep=lambda seconds: None,
            rng=self._rng,
        )

    def remove_store(self) -> None:
        """Delete the engine's commit state store and its directory. Idempotent."""
        shutil.rmtree(self._state_dir, ignore_errors=True)

    def note(self, line: str) -> None:
        """Add one line to the log."""
        self.log.append(line)

    def history(self) -> str:
        """The log so far, numbered, the last lines if it is long."""
        return f"{self.history_title} ({self.capabilities}):\n{numbered_tail(self.log)}"

    def fail(self, message: str) -> AssertionError:
        """An AssertionError with ``message`` and the history that led there."""
        return AssertionError(f"{message}\n\n{self.history()}")

    def visible(self) -> Multiset:
        """What the destination shows now."""
        return Multiset(self.sut.read_back())

    def release_abandoned(self) -> None:
        """Let go of writers dropped without ``close()``, as a crashed process would.

        Their open files and connections are reclaimed here, at the end of the example,
        with the ``ResourceWarning`` that Python gives for an unclosed file silenced: a
        crashed process does not close its files either, but the operating system does
        at its exit. So must the kit: a writer in a reference cycle (a connection whose
        callbacks hold the writer) outlives ``clear()`` until the cyclic collector runs,
        and a database connection left in the middle of a ``COPY`` holds its table's
        lock, so that a test's ``DROP TABLE`` after the example waited for ever.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            alive = [_weak(writer) for writer in self.abandoned]
            self.abandoned.clear()
            if any(ref() is not None for ref in alive):  # a cycle holds one: collect
                gc.collect()

    def must_be_visible(self) -> tuple[Multiset, str] | None:
        """What must be visible now, and what it is called; ``None``: nothing yet."""
        return self.committed, "committed"

    def lost_hint(self) -> str:
        """Appended to the message about elements missing from the destination."""
        return ""

    def check(self, when: str) -> None:
        """Compare the destination with the model; raise a readable AssertionError if wrong.

        No value changed, nothing (exactly-once) is extra, and nothing that must be
        visible (`must_be_visible`) is missing. Under ``DeliveryGuarantee.NONE`` the
        destination is read, nothing is checked.

        Raises:
            AssertionError: `fail`'s, naming what is wrong.
        """
        visible = self.visible()
        guarantee = self.guarantee
        if guarantee is DeliveryGuarantee.NONE:
            return
        changed = visible.describe_value_changes(self.checkpointed, written=self.written)
        if changed:
            raise self.fail(f"{guarantee.name} violated {when}: {changed}")
        if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            extra = visible.minus(self.checkpointed)
            if extra:
                kind = "duplicated elements" if any(n > 0 for *_, n in extra) else self.uncovered
                raise self.fail(
                    f"EXACTLY_ONCE violated {when}: the destination shows {kind}: "
                    f"{show(extra, 'visible', f'in {self.covered}')}. Output must stay "
                    f"invisible until its checkpoint commits, and show up once{self.replayed}"
                )
        must = self.must_be_visible()
        if must is None:
            return
        expected, which = must
        lost = expected.minus(visible)
        if lost:
            raise self.fail(
                f"{guarantee.name} violated {when}: {which} elements are missing from "
                f"the destination: {show(lost, which, 'visible')}{self.lost_hint()}"
            )
