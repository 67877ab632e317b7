"""The source kit catches real bugs: each deliberately broken source fails with a clear report.

Every broken source is `ListSource` (tests/unit/source/flip27_fixtures.py) with one
planted bug, a class of mistake FLIP-27 sources make in practice.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))

from flip27_fixtures import (  # the shared fixtures live beside the source tests
    ListEnumerator,
    ListEnumeratorState,
    ListSource,
    ListSourceReader,
    ListSplit,
    ListSplitState,
)

from sinkv2 import AttrsMsgpackSerializer, DeliveryGuarantee
from sinkv2.source import SourceContractError, SourceDefinitionError
from sinkv2.testing import LocalSourceEngine, check_source


def check(source_class: type[ListSource], **kwargs: Any) -> None:
    check_source(
        lambda: source_class(splits=8, per_split=15),
        expected=ListSource(splits=8, per_split=15).expected(),
        max_examples=kwargs.pop("max_examples", 30),
        **kwargs,
    )


def fails(source_class: type[ListSource], *patterns: str, **kwargs: Any) -> str:
    with pytest.raises(AssertionError) as info:
        check(source_class, **kwargs)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, message
    assert "The engine's last steps:" in message or "does not pickle" in message
    return message


def test_the_correct_source_passes():
    check(ListSource)


# 1. The enumerator's snapshot drops the splits it has not assigned yet.
class ForgetsRemaining(ListEnumerator):
    def snapshot_state(self, checkpoint_id: int) -> ListEnumeratorState:
        return ListEnumeratorState(())


class LostSplitOnRestore(ListSource):
    enumerator_class = ForgetsRemaining


def test_a_split_lost_on_restore():
    fails(LostSplitOnRestore, "the committed records differ from the source's", "missing: ")


# 2. The reader snapshots its splits where they started, not where it is.
class StaleSnapshot(ListSourceReader):
    def to_split_type(self, split_id: str, split_state: ListSplitState) -> ListSplit:
        return split_state.split


class PositionNotAdvanced(ListSource):
    reader_class = StaleSnapshot


def test_a_position_not_advanced_in_the_snapshot():
    fails(PositionNotAdvanced, "the committed records differ", "extra or repeated: ")


# 3. The enumerator hands one split to two readers.
class AssignsTwice(ListEnumerator):
    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        if self.remaining:
            split = self.remaining[0]
            super().handle_split_request(subtask_id, requester_hostname)
            for other in self.context.registered_readers():
                if other != subtask_id:
                    self.context.assign_split(split, other)
                    return
        else:
            super().handle_split_request(subtask_id, requester_hostname)


class SplitAssignedTwice(ListSource):
    enumerator_class = AssignsTwice


def test_a_split_assigned_twice():
    fails(SplitAssignedTwice, "SourceContractError", "already assigned it to reader")


# 4. The reader never ends although it was told no more splits will come.
class NeverEnds(ListSourceReader):
    def notify_no_more_splits(self) -> None:
        pass


class IgnoresNoMoreSplits(ListSource):
    reader_class = NeverEnds


def test_a_reader_ignoring_notify_no_more_splits():
    fails(IgnoresNoMoreSplits, "got notify_no_more_splits() but never reached END_OF_INPUT")


# 5. The split serializer drops a field (the position).
@attrs.frozen
class SplitWithoutPosition:
    id: str
    values: tuple[int, ...]


class DropsPosition:
    def get_version(self) -> int:
        return 1

    def serialize(self, obj: ListSplit) -> bytes:
        return AttrsMsgpackSerializer(SplitWithoutPosition).serialize(
            SplitWithoutPosition(obj.id, obj.values)
        )

    def deserialize(self, version: int, serialized: bytes) -> ListSplit:
        back = AttrsMsgpackSerializer(SplitWithoutPosition).deserialize(version, serialized)
        return ListSplit(back.id, back.values)


class SerializerDropsAField(ListSource):
    def get_split_serializer(self) -> Any:
        return DropsPosition()


def test_a_serializer_that_drops_a_field():
    fails(
        SerializerDropsAField,
        "the split serializer (get_split_serializer()) does not round-trip split",
    )


# 6. The reader snapshots a split it was never given.
class InventsSplits(ListSourceReader):
    def snapshot_state(self, checkpoint_id: int) -> list[ListSplit]:
        return [*super().snapshot_state(checkpoint_id), ListSplit("phantom", (1,))]


class SnapshotsForeignSplit(ListSource):
    reader_class = InventsSplits


def test_a_reader_snapshotting_a_split_it_never_got():
    fails(SnapshotsForeignSplit, "holds split 'phantom', which it was never given")


# 7. The enumerator ignores the splits a failed reader gives back.
class DropsSplitsBack(ListEnumerator):
    def add_splits_back(self, splits: list[ListSplit], subtask_id: int) -> None:
        pass


class LosesSplitsOfAFailedReader(ListSource):
    enumerator_class = DropsSplitsBack


def test_splits_given_back_after_a_reader_failure_are_lost():
    fails(
        LosesSplitsOfAFailedReader,
        "testTaskManagerFailure",
        "the enumerator never assigned again the splits it got back through add_splits_back()",
    )


# 8. The reader ends as soon as it runs out of splits, before it was told no more will come.
class EndsEarly(ListSourceReader):
    def poll_next(self, output: Any) -> Any:
        from sinkv2.source import InputStatus

        status = super().poll_next(output)
        if status is InputStatus.NOTHING_AVAILABLE and not self._states:
            return InputStatus.END_OF_INPUT
        return status


class EndOfInputTooEarly(ListSource):
    reader_class = EndsEarly


def test_end_of_input_before_notify_no_more_splits():
    fails(EndOfInputTooEarly, "returned END_OF_INPUT before notify_no_more_splits()")


# 9. The source holds a lock, so no engine can ship it.
class HoldsALock(ListSource):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = threading.Lock()


def test_a_source_that_does_not_pickle_is_named():
    fails(HoldsALock, "the source does not pickle", "source.guard")


# 10. The reader emits each fetched record twice.
class Stutters(ListSourceReader):
    def __init__(self, context: Any, **kwargs: Any) -> None:
        super().__init__(context, **kwargs)
        inner = self._emitter

        class Twice:
            def emit_record(self, element: Any, output: Any, state: Any) -> None:
                inner.emit_record(element, output, state)
                output.collect({"value": element})

        self._emitter = Twice()


class EmitsDuplicates(ListSource):
    reader_class = Stutters


def test_duplicates_fail_exactly_once_and_pass_at_least_once():
    fails(EmitsDuplicates, "the committed records differ from the source's")
    check(EmitsDuplicates, guarantee=DeliveryGuarantee.AT_LEAST_ONCE, max_examples=5)


# 11. The enumerator snapshot keeps split ids but not positions (Flink's FLINK-38453).
class IdsOnly(ListEnumerator):
    def add_splits_back(self, splits: list[ListSplit], subtask_id: int) -> None:
        self.remaining.extend(ListSplit(s.id, s.values) for s in splits)

    def snapshot_state(self, checkpoint_id: int) -> ListEnumeratorState:
        return ListEnumeratorState(tuple(ListSplit(s.id, s.values) for s in self.remaining))


class StartedSplitReturnedWithoutPosition(ListSourceReader):
    """Readers hand half-read splits back: the enumerator must keep their positions."""


class EnumeratorDropsPositions(ListSource):
    enumerator_class = IdsOnly

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.splits = [attrs.evolve(s, position=3) for s in self.splits]

    def expected(self) -> list[dict[str, int]]:
        return [{"value": v} for s in self.splits for v in s.values[3:]]


def test_an_enumerator_snapshot_without_positions():
    with pytest.raises(AssertionError, match="the committed records differ"):
        check_source(
            lambda: EnumeratorDropsPositions(splits=8, per_split=15),
            expected=EnumeratorDropsPositions(splits=8, per_split=15).expected(),
            max_examples=10,
        )


def test_a_half_implemented_source_is_refused_before_any_case():
    class NoReader(ListSource):
        create_reader = None  # type: ignore[assignment]

    with pytest.raises(SourceDefinitionError, match="create_reader"):
        check(NoReader)


def test_corrupt_and_newer_checkpoint_bytes_are_clear_errors():
    from sinkv2.errors import CorruptDataError, UnsupportedVersionError

    engine = LocalSourceEngine(ListSource(), 2)
    engine.run(until=lambda e: sum(s.emitted for s in e.readers) > 10)
    checkpoint = engine.checkpoint()
    engine.close()
    framed = checkpoint.readers[0][0]
    newer = (99).to_bytes(4, "big") + framed[4:]
    with pytest.raises(UnsupportedVersionError, match="cannot read version 99"):
        LocalSourceEngine(
            ListSource(), 2, checkpoint=attrs.evolve(checkpoint, readers=((newer,), ()))
        )
    with pytest.raises(CorruptDataError, match="truncated"):
        LocalSourceEngine(
            ListSource(), 2, checkpoint=attrs.evolve(checkpoint, readers=((framed[:-3],), ()))
        )
    assert SourceContractError  # the engine's own errors are covered in test_source_engine.py
