"""The source kit on a hand-written source over a SQLite table: docs/examples/sqlite_source.py.

The example passes, plain and as a queue that deletes what completed checkpoints
hold. Then FLIP-27 behaviour Flink allows must pass (a reader that moves the
position of the split objects it was given, a reader without the optional
``notify_checkpoint_complete``), and bugs that only late checkpoint notifications,
aborted checkpoints or split copies show must fail with a report that says what to
fix and how to run the case again.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from sinkv2.source import InputStatus, SourceContractError
from sinkv2.testing import LocalSourceEngine, check_source

ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location(
    "sqlite_source_example", ROOT / "docs" / "examples" / "sqlite_source.py"
)
assert _SPEC is not None
assert _SPEC.loader is not None
example = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = example  # classes pickle by reference to their module
_SPEC.loader.exec_module(example)

ROWS = 50


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    template = tmp_path / "orders.sqlite"
    return template, example.make_table(template, ROWS)


def with_reader(reader_class: type, **options: Any) -> Any:
    """A factory of SqliteTableSource over fresh table copies, with another reader class."""

    class Source(example.SqliteTableSource):
        def create_reader(self, reader_context: Any) -> Any:
            return reader_class(reader_context, self)

    Source.__qualname__ = f"SqliteTableSource[{reader_class.__name__}]"
    return lambda template: example.fresh_copies(
        template, lambda path: Source(path, "orders", example.ORDERS, **options)
    )


def test_the_example_passes_plain_and_as_a_queue(tmp_path: Path) -> None:
    example.check(tmp_path, max_examples=5)


# --- behaviour Flink allows ------------------------------------------------------


class MovesItsSplitsInPlace(example.RangeReader):
    """Keeps the split objects it was given and moves their position in place.

    Legal in Flink: an assigned split reaches the reader serialized (AddSplitEvent),
    so the reader's object is its own; the enumerator gets its own objects back
    through add_splits_back after a reader failure.
    """

    def poll_next(self, output: Any) -> InputStatus:
        if not self.ranges:
            return super().poll_next(output)
        split = self.ranges[0]
        status = super().poll_next(output)
        if self.ranges and self.ranges[0] is not split and self.ranges[0].first == split.first:
            object.__setattr__(split, "after", self.ranges[0].after)  # a mutable split
            self.ranges[0] = split
        return status


def test_a_reader_that_moves_the_splits_it_was_given_passes(table: Any, unshrunk: None) -> None:
    template, expected = table
    check_source(with_reader(MovesItsSplitsInPlace)(template), expected=expected, max_examples=5)


NoOptionalMethods = type(
    "NoOptionalMethods",
    (),
    {
        name: value
        for name, value in vars(example.RangeReader).items()
        if name not in ("notify_checkpoint_complete", "__dict__", "__weakref__")
    },
)


class Greets(example.RangeEnumerator):
    """Sends every reader an event when it registers (which this reader ignores)."""

    def add_reader(self, subtask_id: int) -> None:
        self.context.send_event_to_source_reader(subtask_id, {"hello": subtask_id})


def test_a_reader_without_the_optional_methods_passes(table: Any) -> None:
    template, expected = table
    factory = with_reader(NoOptionalMethods)(template)

    def greeting() -> Any:
        source = factory()
        create = source.create_enumerator
        source.create_enumerator = lambda context: Greets(context, create(context).unassigned)
        source.restore_enumerator = lambda context, state: Greets(context, state.splits)
        return source

    assert not hasattr(NoOptionalMethods, "handle_source_events")
    check_source(greeting, expected=expected, max_examples=3)


# --- bugs only late notifications and aborted checkpoints show -------------------


class DeletesUpToWhereItIs(example.RangeReader):
    """BUG: on notify_checkpoint_complete, deletes what it has read by now."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.to_delete.clear()
        self.delete([*self.read_whole, *self.ranges])
        self.read_whole = []


class DeletesOnSnapshot(example.RangeReader):
    """BUG: deletes what a snapshot holds when it takes it, before the checkpoint completes."""

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        state = super().snapshot_state(checkpoint_id)
        self.delete(self.to_delete.pop(checkpoint_id))
        return state


def fails(factory: Any, expected: Any) -> str:
    with pytest.raises(AssertionError) as info:
        check_source(factory, expected=expected, max_examples=20)
    return str(info.value)


def test_deleting_past_the_completed_checkpoint_is_caught_and_reproducible(
    table: Any, unshrunk: None
) -> None:
    template, expected = table
    factory = with_reader(DeletesUpToWhereItIs, delete_read=True)(template)
    message = fails(factory, expected)
    assert "missing: " in message, message
    assert "notified a checkpoint's completion late" in message, message
    assert "notify_checkpoint_complete(" in message, message  # the steps show it
    # The report's snippet runs the case again, alone, and loses the same rows.
    snippet = message.split("To run this case alone", 1)[1].split(":\n", 1)[1]
    scope: dict[str, Any] = {"source_factory": factory}
    exec(snippet, scope)  # the kit's own report, run as its reader would
    got = sorted(record.record["id"] for record in scope["committed"])
    assert got != sorted(row["id"] for row in expected)


def test_deleting_in_snapshot_state_is_caught(table: Any, unshrunk: None) -> None:
    template, expected = table
    message = fails(with_reader(DeletesOnSnapshot, delete_read=True)(template), expected)
    assert "missing: " in message, message
    assert "aborted a checkpoint after every snapshot_state" in message, message
    assert "checkpoint aborted after every snapshot" in message, message  # in the schedule


def test_late_notifications_arrive_in_later_steps_and_a_failed_reader_loses_its_own(
    table: Any,
) -> None:
    template, _ = table
    source = with_reader(DeletesUpToWhereItIs, delete_read=True)(template)()
    engine = LocalSourceEngine(source, 2, seed=4)
    try:
        engine.run(until=lambda e: len([s for s in e.readers if s.emitted]) == 2)
        checkpoint = engine.checkpoint(notify=False)
        assert not any("notify_checkpoint_complete" in line for line in engine.log)
        engine.fail_reader(1)
        engine.run()
        notified = [line for line in engine.log if "notify_checkpoint_complete" in line]
        assert any("enumerator notify_checkpoint_complete(1)" in n for n in notified)
        assert any("reader 0 notify_checkpoint_complete(1)" in n for n in notified)
        assert not any("reader 1 notify_checkpoint_complete" in n for n in notified)
        assert engine.abort_checkpoint() == checkpoint.checkpoint_id + 1
        assert engine.checkpoint().checkpoint_id == checkpoint.checkpoint_id + 2
    finally:
        engine.close()


# --- a split class without __eq__, and a slow reader -----------------------------


@attrs.define(eq=False)
class PlainRange:
    table: str
    first: int
    last: int
    after: int

    def split_id(self) -> str:
        return f"{self.table}({self.first},{self.last}]"


class KeepsPosition:
    """A split serializer for `PlainRange`, as text."""

    def get_version(self) -> int:
        return 1

    def serialize(self, obj: Any) -> bytes:
        return f"{obj.table},{obj.first},{obj.last},{obj.after}".encode()

    def deserialize(self, version: int, serialized: bytes) -> Any:
        table, first, last, after = serialized.decode().split(",")
        return PlainRange(table, int(first), int(last), int(after))


class ForgetsPosition(KeepsPosition):
    """BUG: writes every field but the position (``after``)."""

    def serialize(self, obj: Any) -> bytes:
        return f"{obj.table},{obj.first},{obj.last},{obj.first}".encode()


class PlainRangeReader(example.RangeReader):
    def add_splits(self, splits: list[Any]) -> None:
        super().add_splits([example.RowidRange(s.table, s.first, s.last, s.after) for s in splits])

    def snapshot_state(self, checkpoint_id: int) -> list[Any]:
        return [PlainRange(s.table, s.first, s.last, s.after) for s in super().snapshot_state(0)]


def plain_range_source(template: Path, serializer: Any) -> Any:
    """The example with splits of a class without ``__eq__``, in an attrs enumerator state."""

    class Source(example.SqliteTableSource):
        def create_enumerator(self, enum_context: Any) -> Any:
            enumerator = super().create_enumerator(enum_context)
            enumerator.unassigned = type(enumerator.unassigned)(
                PlainRange(s.table, s.first, s.last, s.after) for s in enumerator.unassigned
            )
            return enumerator

        def create_reader(self, reader_context: Any) -> Any:
            return PlainRangeReader(reader_context, self)

        def get_split_serializer(self) -> Any:
            return serializer

        def get_enumerator_checkpoint_serializer(self) -> Any:
            return _PickledState()

    return lambda: Source(str(template), "orders", example.ORDERS)


def test_splits_without_eq_pass_and_a_serializer_dropping_their_position_is_named(
    table: Any, unshrunk: None
) -> None:
    template, expected = table
    # The enumerator's attrs state holds PlainRange objects: compared by their fields.
    check_source(plain_range_source(template, KeepsPosition()), expected=expected, max_examples=3)
    message = fails(plain_range_source(template, ForgetsPosition()), expected)
    assert "the split serializer (get_split_serializer()) does not round-trip split" in message
    assert re.search(r"\(\.after: \d+ != \d+\)", message), message


class _PickledState:
    def get_version(self) -> int:
        return 1

    def serialize(self, obj: Any) -> bytes:
        import cloudpickle

        return bytes(cloudpickle.dumps(obj))

    def deserialize(self, version: int, serialized: bytes) -> Any:
        import pickle

        return pickle.loads(serialized)  # bytes this test wrote


class WaitsForItsQuery(example.RangeReader):
    """Its rows arrive 60 s after it asks (a slow query in another thread).

    Far beyond the kit's ``idle_timeout``: a loaded machine cannot make them arrive
    before the kit gives up (they did, with 0.5 s, when the kit ran 0.4 s late).
    """

    def poll_next(self, output: Any) -> InputStatus:
        if self.ranges and not getattr(self, "ready", False):
            if not hasattr(self, "timer"):
                import threading

                self.available = type(self.available)()

                def arrive() -> None:
                    self.ready = True
                    self.wake_up()

                self.timer = threading.Timer(60, arrive)
                self.timer.daemon = True  # never holds the test process at exit
                self.timer.start()
            return InputStatus.NOTHING_AVAILABLE
        return super().poll_next(output)

    def close(self) -> None:
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()
        super().close()


def test_a_slow_reader_is_told_apart_from_an_enumerator_that_never_answers(table: Any) -> None:
    template, expected = table
    with pytest.raises(AssertionError) as info:
        check_source(with_reader(WaitsForItsQuery)(template), expected=expected, idle_timeout=0.1)
    message = str(info.value)
    assert "returned NOTHING_AVAILABLE and their is_available() future did not" in message
    assert "idle_timeout=" in message


class NeverEnds(example.RangeReader):
    """BUG: at its end, NOTHING_AVAILABLE (with a future already done) for END_OF_INPUT."""

    def poll_next(self, output: Any) -> InputStatus:
        status = super().poll_next(output)
        return InputStatus.NOTHING_AVAILABLE if status is InputStatus.END_OF_INPUT else status


def test_a_reader_that_never_ends_is_named_with_what_it_keeps_returning(table: Any) -> None:
    template, _ = table
    engine = LocalSourceEngine(with_reader(NeverEnds)(template)(), 1)
    try:
        with pytest.raises(SourceContractError) as info:
            engine.run(max_steps=2_000)
    finally:
        engine.close()
    message = str(info.value)
    assert re.search(r"reader 0 returned NOTHING_AVAILABLE \d+ times in a row", message), message
    assert "is_available() future that is already done" in message


class StopsReading(example.RangeReader):
    """BUG: once it has read a batch of a range, it waits for ever (a lost wake-up)."""

    def poll_next(self, output: Any) -> InputStatus:
        if self.ranges and self.ranges[0].after > self.ranges[0].first:
            if self.available.done():
                self.available = type(self.available)()
            return InputStatus.NOTHING_AVAILABLE
        return super().poll_next(output)


def test_an_unbounded_run_that_stops_short_names_the_splits_left_unread(table: Any) -> None:
    template, expected = table

    class Unbounded(example.SqliteTableSource):
        def get_boundedness(self) -> Any:
            from sinkv2.source import Boundedness

            return Boundedness.CONTINUOUS_UNBOUNDED

        def create_reader(self, reader_context: Any) -> Any:
            return StopsReading(reader_context, self)

    def split_records(split_id: str) -> list[dict[str, Any]]:
        first, last = map(int, split_id[split_id.index("(") + 1 : -1].split(","))
        return [row for row in expected if first < 3 * row["id"] + 1 <= last]

    with pytest.raises(AssertionError) as info:
        check_source(
            lambda: Unbounded(str(template), "orders", example.ORDERS, rows_per_split=30),
            split_records=split_records,
            records_to_read=ROWS,
            idle_timeout=0.05,
            max_examples=1,
        )
    message = str(info.value)
    assert "fewer than the 50 asked for" in message, message
    assert re.search(r"never committed: 'orders\(0,30\]' \(4 committed, next \{", message), message


class BreaksOnARow(example.RangeReader):
    """The source's own error: a row it cannot read."""

    def poll_next(self, output: Any) -> InputStatus:
        if self.ranges and self.ranges[0].first >= 20:
            raise ValueError(f"orders: cannot read rowid {self.ranges[0].after + 1}")
        return super().poll_next(output)


def test_the_sources_own_error_keeps_its_type_and_says_where_the_kit_was(table: Any) -> None:
    template, expected = table
    with pytest.raises(ValueError, match="cannot read rowid") as info:
        check_source(with_reader(BreaksOnARow)(template), expected=expected, max_examples=1)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "check_source: case testSourceSingleSplit" in notes, notes
    assert "the source raised ValueError" in notes
    assert "To run this case alone" in notes
