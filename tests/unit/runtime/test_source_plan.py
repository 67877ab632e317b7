"""`plan_bounded_read`: a bounded source's enumerator run to "no more splits" up front."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))

from flip27_fixtures import ListEnumerator, ListSource, ListSplit

from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2.runtime import BoundedPlan, plan_bounded_read
from sinkv2.source import SourceContractError, SourceEvent
from sinkv2.source.lib import NumberSequenceSource


def split_ids(source: Any, plan: BoundedPlan) -> list[list[str]]:
    serializer = source.get_split_serializer()
    return [
        [
            SimpleVersionedSerialization.read_version_and_deserialize(serializer, f).split_id()
            for f in part
        ]
        for part in plan.splits
    ]


def test_a_lazy_enumerator_is_asked_round_robin_so_splits_spread_evenly():
    source = ListSource(splits=7, per_split=2)
    plan = plan_bounded_read(source, 3)
    assert plan.parallelism == 3
    assert split_ids(source, plan) == [["s0", "s3", "s6"], ["s1", "s4"], ["s2", "s5"]]
    assert plan.split_count == 7


def test_more_subtasks_than_splits_leaves_some_without_splits():
    source = ListSource(splits=2, per_split=2)
    plan = plan_bounded_read(source, 4)
    assert split_ids(source, plan) == [["s0"], ["s1"], [], []]


class EagerEnumerator(ListEnumerator):
    """Assigns everything to subtask 0 in start() and ends every reader at once."""

    def start(self) -> None:
        while self.remaining:
            self.context.assign_split(self.remaining.popleft(), 0)
        for subtask in range(self.context.current_parallelism()):
            self.context.signal_no_more_splits(subtask)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        raise AssertionError("an eager enumerator is never asked")


class EagerSource(ListSource):
    enumerator_class = EagerEnumerator


def test_an_eager_enumerator_is_planned_as_it_assigns():
    source = EagerSource(splits=3)
    assert split_ids(source, plan_bounded_read(source, 2)) == [["s0", "s1", "s2"], []]


class TwiceEnumerator(ListEnumerator):
    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        self.context.assign_split(ListSplit("same", (1,)), subtask_id)


class SilentEnumerator(ListEnumerator):
    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        if self.remaining:
            self.context.assign_split(self.remaining.popleft(), subtask_id)


class LateEnumerator(ListEnumerator):
    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        self.context.signal_no_more_splits(subtask_id)
        if self.remaining:
            self.context.assign_split(self.remaining.popleft(), subtask_id)


class StrangerEnumerator(ListEnumerator):
    def start(self) -> None:
        self.context.assign_split(self.remaining.popleft(), 9)


@pytest.mark.parametrize(
    ("enumerator", "method", "message"),
    [
        (TwiceEnumerator, "assign_split", r"split 'same' was assigned twice \(to subtask 0"),
        (SilentEnumerator, "handle_split_request", r"neither a split nor signal_no_more_splits"),
        (LateEnumerator, "assign_split", r"after signal_no_more_splits\(\) was sent to it"),
        (StrangerEnumerator, "assign_split", r"subtask 9, which is not a registered reader"),
    ],
)
def test_an_enumerator_that_breaks_the_rules_is_named_not_planned(enumerator, method, message):
    source = type("Broken", (ListSource,), {"enumerator_class": enumerator})(splits=2)
    with pytest.raises(SourceContractError, match=message) as raised:
        plan_bounded_read(source, 2)
    assert raised.value.method == method


def test_an_unbounded_source_cannot_be_planned_up_front():
    with pytest.raises(SourceContractError, match="CONTINUOUS_UNBOUNDED; a bounded read"):
        plan_bounded_read(NumberSequenceSource(0, None), 2)


@pytest.mark.parametrize("parallelism", [0, -1, True, 1.5])
def test_parallelism_must_be_a_positive_int(parallelism):
    with pytest.raises(ValueError, match="parallelism must be a positive int"):
        plan_bounded_read(ListSource(), parallelism)


class DiscoveringEnumerator(ListEnumerator):
    """Discovers its splits in a delayed call_async, then sends each reader an event."""

    def __init__(self, context: Any, remaining: Any) -> None:
        super().__init__(context, [])
        self.later = list(remaining)
        self.discovered = False

    def start(self) -> None:
        self.context.call_async(lambda: list(self.later), self.found, initial_delay_ms=20)

    def found(self, splits: list[ListSplit] | None, error: BaseException | None) -> None:
        assert error is None
        assert splits is not None
        self.remaining.extend(splits)
        self.discovered = True
        for subtask in self.context.registered_readers():
            self.context.send_event_to_source_reader(subtask, SourceEvent())

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        if self.remaining:
            self.context.assign_split(self.remaining.popleft(), subtask_id)
        elif self.discovered:
            self.context.signal_no_more_splits(subtask_id)


def test_the_plan_waits_for_the_enumerators_timers_and_keeps_its_events():
    source = type("Discovering", (ListSource,), {"enumerator_class": DiscoveringEnumerator})(3)
    plan = plan_bounded_read(source, 2)
    assert split_ids(source, plan) == [["s0", "s2"], ["s1"]]
    assert [len(events) for events in plan.events] == [1, 1]


def test_a_timer_that_never_ends_the_plan_times_out_clearly():
    class Forever(DiscoveringEnumerator):
        def found(self, splits: Any, error: BaseException | None) -> None:
            self.context.call_async(lambda: None, self.found, initial_delay_ms=10)

    source = type("Forever", (ListSource,), {"enumerator_class": Forever})(2)
    with pytest.raises(SourceContractError, match=r"its timers ran for 0.2 s"):
        plan_bounded_read(source, 2, timeout_s=0.2)


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(-50, 50),
    length=st.integers(0, 300),
    splits=st.one_of(st.none(), st.integers(1, 9)),
    parallelism=st.integers(1, 6),
)
def test_every_split_of_a_sequence_is_planned_once(start, length, splits, parallelism):
    source = NumberSequenceSource(start, start + length - 1, num_splits=splits)
    plan = plan_bounded_read(source, parallelism)
    ids = [split_id for part in split_ids(source, plan) for split_id in part]
    assert len(ids) == len(set(ids)) == plan.split_count
    sizes = [len(part) for part in plan.splits]
    assert max(sizes) - min(sizes) <= 1


def test_the_planning_context_carries_the_source_id_for_source_id_of():
    from sinkv2._metrics import InMemoryMetricGroup
    from sinkv2.runtime._source_plan import PlanningContext
    from sinkv2.source import source_id_of

    assert source_id_of(PlanningContext(2, InMemoryMetricGroup(), "orders")) == "orders"
    assert source_id_of(PlanningContext(2, InMemoryMetricGroup())) is None
    assert source_id_of(object()) is None
