"""`WriterSubtask`: the writer-side checkpoint sequence every engine runs, and the draining stop."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import attrs
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2 import (
    END_OF_INPUT,
    AttrsMsgpackSerializer,
    SimpleVersionedSerialization,
    SupportsCommitter,
    SupportsWriterState,
    inspect_sink,
)
from sinkv2.runtime import (
    BasicWriterInitContext,
    CooperativeProcessingTimeService,
    Restore,
    SubtaskSnapshot,
    SubtaskStates,
    WriterStates,
    WriterSubtask,
    drain_writer_states,
)


@attrs.frozen
class Batch:
    token: str
    elements: list[int]


@attrs.frozen
class Held:
    element: int


class Writer:
    """Holds elements; emits those below ``sink.keep_from`` at each checkpoint."""

    def __init__(self, sink: RecordingSink, context: Any, held: list[int]) -> None:
        self.sink = sink
        self.token = context.get_attempt_token()
        self.held = held
        self.calls = sink.calls

    def write(self, element: int, context: Any) -> None:
        if element in self.sink.bad:
            raise ValueError(f"bad element {element}")
        self.calls.append(f"write({element})")
        self.held.append(element)

    def flush(self, end_of_input: bool) -> None:
        self.calls.append(f"flush({end_of_input})")
        if self.sink.fail_flush:
            raise OSError("disk full")
        if end_of_input:
            self.sink.sent += [e for e in self.held if e not in self.sink.refused]
            self.held = [e for e in self.held if e in self.sink.refused]

    def prepare_commit(self) -> list[Batch]:
        self.calls.append("prepare_commit()")
        return [Batch(self.token, list(self.held))] if self.held else []

    def snapshot_state(self, checkpoint_id: int) -> list[Held]:
        self.calls.append(f"snapshot_state({checkpoint_id})")
        return [Held(e) for e in self.held]

    def write_watermark(self, watermark: Any) -> None:
        pass

    def close(self) -> None:
        self.calls.append("close()")
        if self.sink.fail_close:
            raise OSError("close failed")


class ArrowWriter(Writer):
    def write_arrow_batch(self, batch: pa.RecordBatch, context: Any) -> None:
        self.calls.append(f"write_arrow_batch({batch.num_rows})")
        if batch.num_rows > 2:
            raise ValueError("too many rows")


class RecordingSink(SupportsCommitter[Batch], SupportsWriterState[int, Held]):
    def __init__(self, *, arrow: bool = False) -> None:
        self.arrow = arrow
        self.calls: list[str] = []
        self.bad: set[int] = set()
        self.refused: set[int] = set()
        self.sent: list[int] = []
        self.fail_flush = False
        self.fail_close = False

    def create_writer(self, context: Any) -> Writer:
        self.calls.append("create_writer")
        return (ArrowWriter if self.arrow else Writer)(self, context, [])

    def restore_writer(self, context: Any, recovered_state: Collection[Held]) -> Writer:
        self.calls.append(f"restore_writer({[s.element for s in recovered_state]})")
        return Writer(self, context, [s.element for s in recovered_state])

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[Held]:
        return AttrsMsgpackSerializer(Held)

    def create_committer(self, context: Any) -> Any:
        raise NotImplementedError  # never committed here

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Batch]:
        return AttrsMsgpackSerializer(Batch)


def framed(value: Any) -> bytes:
    serializer = AttrsMsgpackSerializer(type(value))
    return SimpleVersionedSerialization.write_version_and_serialize(serializer, value)


def unframed(cls: type, data: bytes) -> Any:
    return SimpleVersionedSerialization.read_version_and_deserialize(
        AttrsMsgpackSerializer(cls), data
    )


def subtask(sink: RecordingSink, **kwargs: Any) -> WriterSubtask:
    context = BasicWriterInitContext(
        subtask_id=0, number_of_parallel_subtasks=1, job_id="job", attempt_token="job-0"
    )
    return WriterSubtask(sink, inspect_sink(sink), context, **kwargs)


class Failed(Exception):
    def __init__(self, step: str, error: Exception, position: int | None) -> None:
        super().__init__(f"{step} at {position}: {error}")
        self.step, self.error, self.position = step, error, position


def test_a_checkpoint_is_flush_prepare_commit_snapshot_state_framed() -> None:
    sink = RecordingSink()
    writer = subtask(sink)
    writer.open()
    writer.write([1, 2])
    snapshot = writer.snapshot(7)
    writer.close()
    assert sink.calls == [
        "create_writer",
        "write(1)",
        "write(2)",
        "flush(False)",
        "prepare_commit()",
        "snapshot_state(7)",
        "close()",
    ]
    assert [unframed(Batch, b) for b in snapshot.outputs] == [Batch("job-0", [1, 2])]
    assert [unframed(Held, s) for s in snapshot.states] == [Held(1), Held(2)]
    assert (snapshot.output_version, snapshot.state_version) == (1, 1)
    assert writer.records == 2


def test_the_end_of_input_flushes_with_true_and_snapshots_end_of_input() -> None:
    sink = RecordingSink()
    snapshot = subtask(sink).run(None, lambda s: s.write([3]), END_OF_INPUT)
    assert sink.calls[-4:] == [
        "flush(True)",
        "prepare_commit()",
        f"snapshot_state({END_OF_INPUT})",
        "close()",
    ]
    assert snapshot == SubtaskSnapshot(output_version=1, state_version=1)  # all sent
    assert sink.sent == [3]


def test_framed_states_restore_the_writer() -> None:
    sink = RecordingSink()
    snapshot = subtask(sink).run([framed(Held(5)), framed(Held(6))], lambda s: None, 2)
    assert sink.calls[0] == "restore_writer([5, 6])"
    assert [unframed(Held, s) for s in snapshot.states] == [Held(5), Held(6)]


def test_a_sink_without_writer_state_is_created_even_when_states_are_given() -> None:
    class Stateless(RecordingSink):
        pass

    sink = Stateless()
    capabilities = attrs.evolve(inspect_sink(sink), writer_state=False)
    context = BasicWriterInitContext(subtask_id=0, number_of_parallel_subtasks=1)
    snapshot = WriterSubtask(sink, capabilities, context).run([], lambda s: s.write([1]), 1)
    assert sink.calls[0] == "create_writer"
    assert "snapshot_state(1)" not in sink.calls
    assert snapshot.states == ()
    assert snapshot.state_version is None


def test_a_pre_commit_topology_frames_write_results_and_on_framed_sees_every_value() -> None:
    sink = RecordingSink()
    seen: list[tuple[str, Any]] = []
    writer = subtask(
        sink,
        emits_write_results=True,
        on_framed=lambda kind, serializer, value, data: seen.append((kind, value)),
    )
    # RecordingSink has no write-result serializer of its own: the committable one serves.
    sink.get_write_result_serializer = sink.get_committable_serializer  # type: ignore[attr-defined]
    writer.run(None, lambda s: s.write([1]), 4)
    assert seen == [("write_result", Batch("job-0", [1])), ("writer_state", Held(1))]


def test_without_describe_the_writers_own_exception_propagates() -> None:
    sink = RecordingSink()
    sink.bad = {2}
    writer = subtask(sink)
    writer.open()
    with pytest.raises(ValueError, match="bad element 2") as caught:
        writer.write([1, 2, 3])
    assert type(caught.value) is ValueError


def test_describe_names_the_step_and_the_elements_position_across_batches() -> None:
    sink = RecordingSink()
    sink.bad = {12}
    writer = subtask(sink, describe=Failed)
    writer.open()
    writer.write([10, 11])
    with pytest.raises(Failed) as caught:
        writer.write([20, 12, 30])
    assert caught.value.step == "write(12)"
    assert caught.value.position == 3  # the second element of the second batch
    assert isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("fail", "step"),
    [("fail_flush", "flush(end_of_input=False)"), ("fail_close", "close()")],
)
def test_describe_names_flush_and_close(fail: str, step: str) -> None:
    sink = RecordingSink()
    setattr(sink, fail, True)
    with pytest.raises(Failed) as caught:
        subtask(sink, describe=Failed).run(None, lambda s: None, 1)
    assert caught.value.step == step
    assert caught.value.position is None


def test_an_arrow_writer_gets_batches_and_its_failure_names_the_rows() -> None:
    sink = RecordingSink(arrow=True)
    writer = subtask(sink, describe=Failed)
    writer.open()
    assert writer.takes_arrow
    writer.write_values([{"a": 1}, {"a": 2}])
    with pytest.raises(Failed) as caught:
        writer.write_values([{"a": 3}, {"a": 4}, {"a": 5}])
    assert caught.value.step == "write_arrow_batch(rows 2..4)"
    assert sink.calls[1] == "write_arrow_batch(2)"
    assert writer.records == 2


def test_values_that_are_not_rows_go_to_write_even_for_an_arrow_writer() -> None:
    sink = RecordingSink(arrow=True)
    writer = subtask(sink)
    writer.open()
    writer.write_values([1, 2])
    writer.write_values([])
    assert sink.calls[1:] == ["write(1)", "write(2)"]


def test_run_closes_a_failed_writer_and_reports_the_first_failure() -> None:
    sink = RecordingSink()
    sink.fail_flush = True
    sink.fail_close = True
    with pytest.raises(Failed) as caught:
        subtask(sink, describe=Failed).run(None, lambda s: s.write([1]), 1)
    assert caught.value.step == "flush(end_of_input=False)"
    assert sink.calls[-1] == "close()"


def test_a_failing_close_after_success_is_reported() -> None:
    sink = RecordingSink()
    sink.fail_close = True
    with pytest.raises(Failed, match=r"close\(\) at None: close failed"):
        subtask(sink, describe=Failed).run(None, lambda s: s.write([1]), 1)


def test_due_timers_fire_after_each_batch() -> None:
    now = [0]
    timers = CooperativeProcessingTimeService(clock=lambda: now[0])
    fired: list[int] = []
    timers.register_timer(5, fired.append)
    sink = RecordingSink()
    writer = subtask(sink, timers=timers)
    writer.open()
    writer.write([1])
    assert fired == []
    now[0] = 10
    writer.write([2])
    assert fired == [5]


# --- the draining stop ---------------------------------------------------------------------------


def states_of(subtasks: dict[int, list[int]], number: int) -> WriterStates:
    return WriterStates(
        state_name="RecordingSink",
        number_of_subtasks=number,
        subtasks=tuple(
            SubtaskStates(
                subtask_id=i, attempt_token=f"old-{i}", states=tuple(framed(Held(e)) for e in held)
            )
            for i, held in subtasks.items()
        ),
    )


def test_a_drain_sends_every_held_element_and_keeps_only_what_was_refused() -> None:
    sink = RecordingSink()
    sink.refused = {4}
    left = drain_writer_states(
        sink,
        inspect_sink(sink),
        "job",
        Restore(checkpoint_id=3, states=states_of({0: [1, 2], 1: [], 2: [3, 4]}, 3)),
    )
    assert sorted(sink.sent) == [1, 2, 3]
    assert sink.calls.count("close()") == 2  # the subtask without states is not restored
    assert left == WriterStates(
        state_name="RecordingSink",
        number_of_subtasks=3,
        subtasks=(
            SubtaskStates(subtask_id=2, attempt_token="job-drain-00002", states=(framed(Held(4)),)),
        ),
    )


def test_a_drain_of_nothing_leaves_nothing() -> None:
    sink = RecordingSink()
    capabilities = inspect_sink(sink)
    assert (
        drain_writer_states(sink, capabilities, "job", Restore(checkpoint_id=1, states=None))
        is None
    )
    everything = Restore(checkpoint_id=1, states=states_of({0: [1]}, 1))
    assert drain_writer_states(sink, capabilities, "job", everything) is None
    assert sink.sent == [1]


@given(st.lists(st.lists(st.integers(0, 50), max_size=4), min_size=1, max_size=4))
def test_batches_are_written_in_order_and_counted(batches: list[list[int]]) -> None:
    sink = RecordingSink()
    writer = subtask(sink)
    writer.open()
    for batch in batches:
        writer.write_values(batch)
    snapshot = writer.snapshot(1)
    everything = [e for batch in batches for e in batch]
    assert writer.records == len(everything)
    assert [unframed(Held, s).element for s in snapshot.states] == everything
