"""The kit's streaming stage (`check_streaming`), and the writer-state rule it shares with Spark.

Correct sinks pass it; broken ones fail with a readable message: writers that drop
or duplicate what they are handed on restore, that keep only their own subtask's
states (lost on a rescale), or a clean-up that removes the staging a restorable
writer state points to. A runtime that hands states out wrongly is reported as a
runtime bug, not the sink's.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import run_state_machine_as_test
from kit_jsonl_sink import (
    ELEMENTS,
    BufferState,
    JsonLinesSink,
    JsonLinesWriter,
    Record,
    make,
)

from sinkv2 import (
    AttrsMsgpackSerializer,
    DeliveryGuarantee,
    Sink,
    SinkWriter,
    StatefulSinkWriter,
    SupportsWriterState,
    WriterInitContext,
)
from sinkv2.runtime import STAGE_EVENTS, CheckpointRunner, WriterStates, redistribute
from sinkv2.testing import SinkUnderTest, check_streaming
from sinkv2.testing._engine import scratch_dir
from sinkv2.testing._runtime import LocalRuntime
from sinkv2.testing._stream import DriverDies, LocalStream, MicroBatch
from sinkv2.testing._stream_machine import streaming_machine

EXACTLY_ONCE = DeliveryGuarantee.EXACTLY_ONCE
AT_LEAST_ONCE = DeliveryGuarantee.AT_LEAST_ONCE


def stream(sink_class: type[JsonLinesSink], **kwargs: Any) -> None:
    check_streaming(
        lambda: make(sink_class),
        guarantee=kwargs.pop("guarantee", EXACTLY_ONCE),
        elements=ELEMENTS,
        max_examples=kwargs.pop("max_examples", 200),
        **kwargs,
    )


def unshrunk_failure(sink_class: type[JsonLinesSink]) -> AssertionError:
    """The first stream that fails `check_streaming`'s state machine, not shrunk.

    Shrinking a stream re-runs it hundreds of times (tens of seconds); the tests
    below only need to see that the machine finds the bug, and what it reports.
    """
    machine = streaming_machine(
        lambda: make(sink_class), guarantee=EXACTLY_ONCE, elements=ELEMENTS, max_parallelism=4
    )
    quick = settings(
        max_examples=500,
        deadline=None,
        stateful_step_count=8,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(machine, settings=quick)
    return caught.value


def checkpoint(
    local: LocalStream, parallelism: int, rows: list[tuple[int, dict[str, Any]]]
) -> None:
    local.run(MicroBatch(parallelism, tuple(rows)))
    local.settle()


# --- correct sinks pass ---------------------------------------------------------------------------


def test_a_correct_exactly_once_sink_with_writer_state_passes() -> None:
    stream(JsonLinesSink, max_examples=300)  # 30 streams


def test_a_correct_sink_also_passes_as_at_least_once_and_none() -> None:
    for guarantee in (AT_LEAST_ONCE, DeliveryGuarantee.NONE):
        stream(JsonLinesSink, guarantee=guarantee, max_examples=50)


def test_a_sink_that_writes_through_at_every_checkpoint_passes() -> None:
    check_streaming(
        lambda: make(JsonLinesSink, threshold=0),
        guarantee=EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=100,
        max_parallelism=2,
    )


@pytest.mark.parametrize("decoupled", [False, True], ids=["inline", "decoupled"])
@pytest.mark.parametrize("event", [e for e in STAGE_EVENTS if e != "job-recorded"])
def test_a_driver_dying_at_each_stage_event_is_recovered_exactly_once(
    event: str, decoupled: bool
) -> None:
    sut = make()
    local = LocalStream(sut, EXACTLY_ONCE)
    first = [(0, {"id": 1, "tag": "a"}), (1, {"id": 2, "tag": "b"})]
    second = [(0, {"id": 3, "tag": "c"}), (0, {"id": 4, "tag": "ab"}), (1, {"id": 5, "tag": ""})]
    try:
        local.start(decoupled=decoupled)
        checkpoint(local, 2, first)
        local.run(MicroBatch(3, tuple(second), DriverDies(event)))
        local.settle()
        fired = any(f"the driver dies at {event!r} of checkpoint 2" in line for line in local.log)
        assert fired is (event != "post-commit-finished")  # no post-commit topology
        assert local.alive is not fired
        on_the_commit_thread = decoupled and event in {"committer-finished", "committed-recorded"}
        # Spark replays the micro-batch whose foreachBatch did not return.
        assert local.next_checkpoint() == (3 if on_the_commit_thread or not fired else 2)
        local.check("after the driver died")
        local.end(1)  # a new driver recovers what is pending, keeps restorable staging
        local.check("at the end of the stream")
        assert local.visible() == local.checkpointed
        assert len(local.checkpointed) == len(first) + len(second)
    finally:
        local.close()
        sut.close()


# A sink without a committer whose writers buffer in their state, as an async sink does:
# the stream ends with a draining stop.


class AppendWriter(StatefulSinkWriter[Record, BufferState]):
    def __init__(self, sink: AppendSink, lines: tuple[str, ...] = ()) -> None:
        self.sink = sink
        self.buffer = list(lines)

    def write(self, element: Record, context: SinkWriter.Context) -> None:
        self.buffer.append(json.dumps(element, sort_keys=True))

    def flush(self, end_of_input: bool) -> None:
        if end_of_input or len(self.buffer) >= self.sink.batch:
            with self.sink.path.open("a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in self.buffer)
            self.buffer = []

    def snapshot_state(self, checkpoint_id: int) -> list[BufferState]:
        return [BufferState(tuple(self.buffer))] if self.buffer else []

    def close(self) -> None:
        pass


class AppendSink(Sink[Record], SupportsWriterState[Record, BufferState]):
    def __init__(self, path: Path, batch: int = 3) -> None:
        self.path = path
        self.batch = batch

    def create_writer(self, context: WriterInitContext) -> AppendWriter:
        return AppendWriter(self)

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[BufferState]
    ) -> AppendWriter:
        return AppendWriter(self, tuple(line for s in recovered_state for line in s.lines))

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[BufferState]:
        return AttrsMsgpackSerializer(BufferState)


def make_append(sink_class: type[AppendSink] = AppendSink) -> SinkUnderTest:
    directory = Path(tempfile.mkdtemp(prefix="kit-append-", dir=scratch_dir()))
    path = directory / "out.jsonl"

    def visible() -> list[Record]:
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    return SinkUnderTest(
        sink_class(path), visible, lambda: shutil.rmtree(directory, ignore_errors=True)
    )


def test_a_buffering_sink_without_a_committer_passes_and_is_drained_at_the_end() -> None:
    check_streaming(make_append, guarantee=AT_LEAST_ONCE, elements=ELEMENTS, max_examples=200)


# --- broken sinks fail ----------------------------------------------------------------------------


class DroppingSink(JsonLinesSink):
    """restore_writer ignores the states it is handed."""

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[BufferState]
    ) -> JsonLinesWriter:
        return self.writer_class(self, context)


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_drops_restored_state_is_caught() -> None:
    with pytest.raises(AssertionError) as caught:
        stream(DroppingSink)
    message = str(caught.value)
    assert "EXACTLY_ONCE violated at the end of the stream" in message, message
    assert "streamed elements are missing from the destination" in message
    assert re.search(r"\(\d+x streamed, 0x visible\)", message), message
    assert "restore_writer must take back every state it is handed" in message
    assert "stream so far (DroppingSink: Sink + SupportsWriterState" in message
    # the stream, step by step
    assert re.search(r"checkpoint \d+: writers 'kitstream\d{4}-00000-", message), message


@pytest.mark.usefixtures("unshrunk")
def test_the_same_loss_is_caught_under_at_least_once() -> None:
    with pytest.raises(AssertionError, match=r"AT_LEAST_ONCE violated .* are missing"):
        stream(DroppingSink, guarantee=AT_LEAST_ONCE)


class DuplicatingSink(JsonLinesSink):
    """restore_writer takes every state twice."""

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[BufferState]
    ) -> JsonLinesWriter:
        lines = tuple(line for state in recovered_state for line in state.lines)
        return self.writer_class(self, context, lines + lines)


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_duplicates_restored_state_is_caught() -> None:
    with pytest.raises(AssertionError) as caught:
        stream(DuplicatingSink)
    message = str(caught.value)
    assert "EXACTLY_ONCE violated" in message
    assert "the destination shows duplicated elements" in message
    # twice, or more if restored twice in a row
    assert re.search(r"\(([2-9]|\d\d+)x visible, 1x in recorded checkpoints\)", message), message


@attrs.frozen
class OwnedState:
    subtask: int
    lines: tuple[str, ...]


class OwnStateWriter(JsonLinesWriter):
    def __init__(
        self, sink: JsonLinesSink, context: WriterInitContext, lines: tuple[str, ...] = ()
    ) -> None:
        super().__init__(sink, context, lines)
        self.subtask = context.get_subtask_id()

    def snapshot_state(self, checkpoint_id: int) -> list[OwnedState]:  # type: ignore[override]
        return [OwnedState(self.subtask, tuple(self.buffer))] if self.buffer else []


class OwnStateOnlySink(JsonLinesSink):
    """Keeps only the states its own subtask snapshotted: right until the stream rescales."""

    writer_class = OwnStateWriter

    def restore_writer(  # type: ignore[override]
        self, context: WriterInitContext, recovered_state: Collection[OwnedState]
    ) -> JsonLinesWriter:
        mine = context.get_subtask_id()
        lines = tuple(line for s in recovered_state if s.subtask == mine for line in s.lines)
        return self.writer_class(self, context, lines)

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[OwnedState]:  # type: ignore[override]
        return AttrsMsgpackSerializer(OwnedState)


def test_a_sink_that_loses_other_subtasks_states_on_a_rescale_is_caught() -> None:
    message = str(unshrunk_failure(OwnStateOnlySink))
    assert "streamed elements are missing from the destination" in message, message
    assert "after a rescale, states other subtasks snapshotted" in message


def test_the_rescale_that_loses_them_step_by_step() -> None:
    sut = make(OwnStateOnlySink)
    local = LocalStream(sut, EXACTLY_ONCE)
    try:
        local.start(decoupled=False)
        # Fewer elements than the threshold: both writers keep theirs in their state.
        checkpoint(local, 2, [(0, {"id": 1, "tag": "a"}), (1, {"id": 2, "tag": "b"})])
        local.check("after checkpoint 1")  # nothing committed yet: nothing missing
        local.end(1)  # one writer restores both states, and keeps only its own
        with pytest.raises(AssertionError) as caught:
            local.check("at the end of the stream")
    finally:
        local.close()
        sut.close()
    message = str(caught.value)
    assert "EXACTLY_ONCE violated at the end of the stream: streamed elements are missing" in (
        message
    )
    assert "{'id': 2, 'tag': 'b'} (1x streamed, 0x visible)" in message
    assert "checkpoint 2: end of input over 1 partition(s)" in message


# Writer states that point into staging: the clean-up must spare the attempts they name.


@attrs.frozen
class HeldFile:
    path: str


class StagedStateWriter(JsonLinesWriter):
    def snapshot_state(self, checkpoint_id: int) -> list[HeldFile]:  # type: ignore[override]
        if not self.buffer:
            return []
        held = self.sink.staging / f"{self.token}-h{checkpoint_id}.jsonl"
        held.parent.mkdir(parents=True, exist_ok=True)
        held.write_text("".join(line + "\n" for line in self.buffer), encoding="utf-8")
        return [HeldFile(str(held))]


class StagedStateSink(JsonLinesSink):
    """Keeps what its writers hold in staged files of their attempt; states name the files."""

    writer_class = StagedStateWriter

    def restore_writer(  # type: ignore[override]
        self, context: WriterInitContext, recovered_state: Collection[HeldFile]
    ) -> JsonLinesWriter:
        lines = tuple(
            line
            for held in recovered_state
            for line in Path(held.path).read_text(encoding="utf-8").splitlines()
        )
        return self.writer_class(self, context, lines)

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[HeldFile]:  # type: ignore[override]
        return AttrsMsgpackSerializer(HeldFile)


class CarelessCleanUpSink(StagedStateSink):
    """Removes everything a job staged, also what restorable writer states point to."""

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        super().clean_up_attempts(job_id, ())


def test_staged_writer_state_survives_restarts_when_the_clean_up_keeps_what_it_is_told() -> None:
    stream(StagedStateSink)


def test_a_clean_up_that_removes_staging_a_writer_state_points_to_is_caught() -> None:
    with pytest.raises((AssertionError, FlakyFailure)) as caught:
        stream(CarelessCleanUpSink)
    # A restored writer misses its held file, or, when the clean-up runs while the commit
    # thread has not yet committed the checkpoint before, the committer its staged file.
    # Which one depends on that thread's timing, so a replayed example can fail the other
    # way (or, on a loaded machine, not at all): hypothesis then reports the failures it
    # saw as flaky, and each of them must still be this bug.
    found = caught.value
    failures = list(found.exceptions) if isinstance(found, FlakyFailure) else [found]
    assert failures, found
    for failure in failures:
        message = str(failure)
        assert isinstance(failure, AssertionError), message
        assert re.search(r"(failed|an unknown failure): FileNotFoundError", message), message
        assert "kitstream0001" in message


# --- the runtime's part: what the kit reports as a runtime bug ------------------------------------


def test_states_redistributed_round_robin_are_reported_as_a_runtime_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def round_robin(self: WriterStates, parallelism: int) -> list[list[bytes]]:
        flat = [state for subtask in self.subtasks for state in subtask.states]
        return [flat[i::parallelism] for i in range(parallelism)]

    monkeypatch.setattr(WriterStates, "redistribute", round_robin)
    message = str(unshrunk_failure(JsonLinesSink))
    assert "not redistributed by Flink's rule" in message, message
    assert "bug in sinkv2's streaming runtime" in message
    assert message.count("stream so far") == 1  # raised in the writer stage, passed through

    sut = make()
    local = LocalStream(sut, EXACTLY_ONCE)
    try:
        local.start(decoupled=False)
        rows = [(0, {"id": 0, "tag": "a"}), (1, {"id": 1, "tag": "b"}), (2, {"id": 2, "tag": ""})]
        checkpoint(local, 3, rows)  # three states, one per writer
        with pytest.raises(AssertionError) as caught:
            checkpoint(local, 2, [])
    finally:
        local.close()
        sut.close()
    message = str(caught.value)
    assert (
        "checkpoint 1's 3 writer state(s) of 3 writer(s), handed to checkpoint 2's 2 writer(s): "
        "not redistributed by Flink's rule (after a rescale all states, in subtask order, are "
        "cut into contiguous runs, the first 1 one longer); by (old subtask, index), the "
        "writers got [['0:0', '2:0'], ['1:0']], expected [['0:0', '1:0'], ['2:0']]"
    ) in message, message


def test_a_state_lost_on_the_way_is_reported_as_a_runtime_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    honest = WriterStates.redistribute

    def losing(self: WriterStates, parallelism: int) -> list[list[bytes]]:
        return [run[1:] for run in honest(self, parallelism)]

    monkeypatch.setattr(WriterStates, "redistribute", losing)
    with pytest.raises(AssertionError) as caught:
        stream(JsonLinesSink)
    message = str(caught.value)
    assert re.search(r"1 state\(s\) lost, 0 handed out more than once", message), message
    assert "bug in sinkv2's streaming runtime" in message


@pytest.mark.usefixtures("unshrunk")
def test_a_runner_that_restores_nothing_is_reported_as_a_runtime_bug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CheckpointRunner, "restore_point", lambda self, epoch: None)
    with pytest.raises(AssertionError) as caught:
        stream(JsonLinesSink)
    message = str(caught.value)
    assert re.search(r"checkpoint \d+'s writers were restored from nothing", message), message


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match=r"guarantee must be a sinkv2\.DeliveryGuarantee"):
        check_streaming(make, guarantee="exactly-once", elements=ELEMENTS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_parallelism must be a positive int"):
        check_streaming(make, guarantee=EXACTLY_ONCE, elements=ELEMENTS, max_parallelism=0)
    with pytest.raises(TypeError, match=r"must return a sinkv2\.testing\.SinkUnderTest"):
        check_streaming(
            lambda: JsonLinesSink("/nonexistent"),  # type: ignore[arg-type, return-value]
            guarantee=EXACTLY_ONCE,
            elements=ELEMENTS,
        )


# --- LocalRuntime restores by the same rule -------------------------------------------------------

RESTORED: list[tuple[int, int, list[str]]] = []


class RecordingSink(JsonLinesSink):
    """Records (subtask, parallelism, lines) of every restored writer."""

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[BufferState]
    ) -> JsonLinesWriter:
        lines = [line for state in recovered_state for line in state.lines]
        RESTORED.append(
            (context.get_subtask_id(), context.get_number_of_parallel_subtasks(), lines)
        )
        return super().restore_writer(context, recovered_state)


def line(subtask: int, tag: str) -> str:
    return json.dumps({"id": subtask, "tag": tag}, sort_keys=True)


A, B, C = line(0, "a"), line(2, "b"), line(2, "c")


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [
        (1, [[A, B, C]]),
        (2, [[A], [B, C]]),
        (3, [[A], [], [B, C]]),  # the same parallelism: each subtask gets its own back
        (4, [[A], [B, C], [], []]),
    ],
)
def test_the_lifecycle_runtime_redistributes_writer_states_as_spark_does(
    parallelism: int, expected: list[list[str]]
) -> None:
    RESTORED.clear()
    sut = make(RecordingSink)
    runtime = LocalRuntime(sut, EXACTLY_ONCE)
    try:
        runtime.start(3)
        # Fewer elements than the threshold: each writer keeps them in one state.
        runtime.write(0, [{"id": 0, "tag": "a"}])
        runtime.write(2, [{"id": 2, "tag": "b"}, {"id": 2, "tag": "c"}])
        runtime.crash(close=True, completed=True)  # checkpoint 1 completes, then the crash
        runtime.restore(parallelism)
    finally:
        runtime.release_abandoned()
        runtime.close()
        sut.close()
    assert [(subtask, p) for subtask, p, _ in RESTORED] == [
        (subtask, parallelism) for subtask in range(parallelism)
    ]
    assert [lines for _, _, lines in RESTORED] == expected
    assert (
        expected
        == [  # the rule of sinkv2.runtime.redistribute, on the two states
            [line for state in run for line in state]
            for run in redistribute([(A,), (B, C)], parallelism)  # type: ignore[list-item]
        ]
        or parallelism == 3
    )
