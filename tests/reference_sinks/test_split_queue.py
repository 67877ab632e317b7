"""`SplitQueue`: every split to exactly one waiting reader, failed readers' splits first."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reference_sinks._split_queue import SplitQueue


class Context:
    """Records what an enumerator's context was asked to do."""

    def __init__(self, registered: set[int]) -> None:
        self.registered = registered
        self.assigned: list[tuple[str, int]] = []
        self.no_more: list[int] = []

    def registered_readers(self) -> dict[int, Any]:
        return dict.fromkeys(self.registered)

    def assign_split(self, split: str, subtask: int) -> None:
        self.assigned.append((split, subtask))

    def signal_no_more_splits(self, subtask: int) -> None:
        self.no_more.append(subtask)


def test_a_bounded_queue_assigns_in_order_then_says_no_more_splits():
    context = Context({0, 1})
    queue: SplitQueue[str] = SplitQueue(context, ["a", "b"], continuous=False)  # type: ignore[arg-type]
    for subtask in (1, 0, 1):
        queue.request(subtask, None)
    assert context.assigned == [("a", 1), ("b", 0)]
    assert context.no_more == [1]
    queue.add_back(["b", "c"])
    queue.request(0, None)
    assert context.assigned[-1] == ("b", 0)
    assert queue.remaining == ("c",)


def test_a_continuous_queue_keeps_requests_until_splits_come_and_the_reader_registers():
    context = Context({0})
    queue: SplitQueue[str] = SplitQueue(context, [], continuous=True)  # type: ignore[arg-type]
    queue.request(0, None)
    queue.request(1, None)  # not registered yet
    assert context.no_more == []
    queue.add(["a", "b"])
    assert context.assigned == [("a", 0)]
    context.registered.add(1)
    queue.forget_request(1)  # a new reader of subtask 1 registered: the old request is void
    queue.assign()
    assert context.assigned == [("a", 0)]
    queue.request(1, None)
    assert context.assigned == [("a", 0), ("b", 1)]


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("request"), st.integers(0, 2)),
            st.tuples(st.just("add"), st.integers(0, 3)),
            st.tuples(st.just("fail"), st.integers(0, 2)),
        ),
        max_size=40,
    )
)
def test_every_split_is_held_by_one_reader_or_waits_in_the_queue(ops: list[tuple[str, int]]):
    context = Context({0, 1, 2})
    queue: SplitQueue[str] = SplitQueue(context, [], continuous=True)  # type: ignore[arg-type]
    made = 0
    held: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for kind, value in ops:
        before = len(context.assigned)
        if kind == "request":
            queue.request(value, None)
        elif kind == "add":
            queue.add([f"s{made + i}" for i in range(value)])
            made += value
        else:
            queue.add_back(held[value])
            held[value] = []
            queue.forget_request(value)
        for split, subtask in context.assigned[before:]:
            held[subtask].append(split)
    everywhere = [s for splits in held.values() for s in splits] + list(queue.remaining)
    assert sorted(everywhere) == sorted(f"s{i}" for i in range(made))
