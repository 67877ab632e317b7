"""The kit's local writer stage: one checkpoint attempt's writers, as Spark's stage runs them.

`LocalStream` hands the real `CheckpointRunner` a `LocalWriterStage` per checkpoint
attempt. It spreads the checkpoint's input over its partitions, redistributes the
restored writer states with `WriterStates.redistribute` (as the Spark engine does),
checks that the runner restored what it recorded and that every state reaches
exactly one writer by Flink's rule, and runs each partition's
`sinkv2.runtime.WriterSubtask` - the sequence Spark's writer tasks run. The faults a
`MicroBatch` carries that strike here: a task that dies (`TaskDies`), after some
elements or after its whole checkpoint sequence without reporting it, retried or not.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import cloudpickle

from sinkv2._capabilities import SinkCapabilities
from sinkv2._context import BasicWriterInitContext
from sinkv2._messages import END_OF_INPUT
from sinkv2.runtime import (
    Restore,
    SubtaskStates,
    WriterStageOutput,
    WriterStates,
    WriterSubtask,
)
from sinkv2.testing._engine import framed_table, short

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DriverDies",
    "Fault",
    "LocalWriterStage",
    "MicroBatch",
    "StageHost",
    "TaskDies",
    "TaskFailed",
]


class TaskFailed(Exception):
    """A writer task died and Spark gave up on it: the micro-batch fails."""


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


class StageHost(Protocol):
    """What a `LocalWriterStage` needs of its stream (`LocalStream`)."""

    sink: Any
    capabilities: SinkCapabilities
    inputs: dict[int, tuple[tuple[int, object], ...]]
    stage_states: dict[int, WriterStates]
    recorded_states: dict[int, WriterStates]
    abandoned: list[Any]

    def fail(self, message: str) -> AssertionError:
        """An AssertionError with ``message`` and the stream so far."""
        ...

    def note(self, line: str) -> None:
        """Add one line to the stream's log."""
        ...

    def attempt_token(self, job_id: str, subtask: int) -> str:
        """A fresh attempt token."""
        ...

    def feed(self, subtask: WriterSubtask, elements: Sequence[object]) -> None:
        """Hand ``elements`` to the subtask's writer as one batch."""
        ...


def _origins(runs: list[list[bytes]], ordered: list[SubtaskStates]) -> list[list[str]]:
    """Each handed-out state as "old subtask:index" (equal states in their order)."""
    where: dict[bytes, collections.deque[str]] = collections.defaultdict(collections.deque)
    for subtask in ordered:
        for index, state in enumerate(subtask.states):
            where[state].append(f"{subtask.subtask_id}:{index}")
    return [[where[state].popleft() for state in run] for run in runs]


class LocalWriterStage:
    """The local `StreamWriterStage` of one checkpoint attempt, as Spark's writer stage runs it."""

    def __init__(
        self, stream: StageHost, checkpoint_id: int, batch: MicroBatch, *, end_of_input: bool
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
        self.check_restore(checkpoint_id, restore)
        self.job_id, self.restore = job_id, restore
        self.runs = [[] for _ in range(parallelism)]
        if restore is not None and restore.states is not None:
            self.runs = restore.states.redistribute(parallelism)  # as the Spark engine does
            self.check_runs(checkpoint_id, restore, self.runs)
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
                    raise TaskFailed(f"the task of partition {subtask} died, no retry left")
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
        recorded = self.stream.recorded_states.get(checkpoint_id - 1)
        if not self.stream.capabilities.writer_state or recorded is None:
            return
        if restore.states is None or restore.states.subtasks != recorded.subtasks:
            raise self._runtime_bug(
                f"the writer states restored at checkpoint {checkpoint_id} are not those "
                f"recorded with checkpoint {checkpoint_id - 1}: recorded "
                f"{short(recorded.subtasks)}, restored "
                f"{short(restore.states.subtasks if restore.states else None)}"
            )

    def check_runs(
        self, checkpoint_id: int, restore: Restore | None, runs: list[list[bytes]]
    ) -> None:
        """Each recorded state reaches exactly one writer, by Flink's redistribution rule."""
        recorded = self.stream.recorded_states.get(checkpoint_id - 1)
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
        return self.stream.fail(
            f"{message}. This is a bug in sinkv2's streaming runtime (CheckpointRunner, "
            "WriterStates), not in the sink; please report it"
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
