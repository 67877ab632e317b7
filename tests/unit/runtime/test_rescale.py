"""The two rescale rules: Flink's, and the rule by subtask id of the streaming data source.

Flink's (``RoundRobinOperatorStateRepartitioner``): same parallelism, each subtask its
own states; otherwise all states in old subtask order cut into contiguous runs, the
first ``total % parallelism`` one longer. By subtask id: writer i restores what is
recorded under i; the states of subtasks j >= n are recorded again under j mod n and
restored one checkpoint later. Both hand every state to exactly one writer.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2.runtime import SubtaskStates, WriterStates, redistribute
from sinkv2.runtime._rescale import carry_target, restore_by_flink_rule, restore_by_subtask_id

# --- Flink's split of list state ------------------------------------------------------------------


@given(states=st.lists(st.binary(max_size=4), max_size=30), parallelism=st.integers(1, 9))
def test_redistribute_hands_out_every_state_once_in_order_in_contiguous_runs(states, parallelism):
    runs = redistribute(states, parallelism)
    assert len(runs) == parallelism
    assert [s for run in runs for s in run] == states  # each once, in order, contiguous
    base, extra = divmod(len(states), parallelism)
    assert [len(run) for run in runs] == [base + 1] * extra + [base] * (parallelism - extra)


@pytest.mark.parametrize(
    ("total", "parallelism", "sizes"),
    [(7, 4, [2, 2, 2, 1]), (10, 3, [4, 3, 3]), (2, 4, [1, 1, 0, 0]), (0, 2, [0, 0]), (5, 1, [5])],
)
def test_redistribute_makes_the_first_runs_one_longer(total, parallelism, sizes):
    assert [len(run) for run in redistribute([bytes([i]) for i in range(total)], parallelism)] == (
        sizes
    )


@pytest.mark.parametrize("parallelism", [0, -1])
def test_every_rule_refuses_a_parallelism_below_one(parallelism):
    for rule in (
        lambda: redistribute([b"a"], parallelism),
        lambda: restore_by_flink_rule([[b"a"]], parallelism),
        lambda: carry_target(0, parallelism),
    ):
        with pytest.raises(ValueError, match=rf"at least 1 \(got {parallelism}\)"):
            rule()
    with pytest.raises(ValueError, match=r"subtask_id must be at least 0 \(got -1\)"):
        restore_by_subtask_id([[b"a"]], -1)


def test_the_docs_example():  # docs/streaming.md, "Writer states on a rescale"
    a1, a2, b1, c1, c2, c3 = (bytes([i]) for i in range(6))
    old = [[a1, a2], [b1], [c1, c2, c3]]
    assert restore_by_flink_rule(old, 3) == old
    assert restore_by_flink_rule(old, 2) == [[a1, a2, b1], [c1, c2, c3]]
    assert restore_by_flink_rule(old, 4) == [[a1, a2], [b1, c1], [c2], [c3]]
    assert restore_by_flink_rule(old, 8) == [[a1], [a2], [b1], [c1], [c2], [c3], [], []]
    # By subtask id, 2 writers: a's and b's now, c's (subtask 2) at 2 mod 2 = 0 one later.
    assert [restore_by_subtask_id(old, i) for i in range(2)] == [[a1, a2], [b1]]
    assert [carry_target(i, 2) for i in range(3)] == [None, None, 0]
    # 4 writers: each its own, subtask 3 none.
    assert [restore_by_subtask_id(old, i) for i in range(4)] == [*old, []]


# --- every state exactly once, over any sequence of rescales --------------------------------------

parallelisms = st.lists(st.integers(1, 6), min_size=1, max_size=8)


def _record(writers: list[list[bytes]], checkpoint: int) -> list[list[bytes]]:
    """Each writer snapshots what it restored plus one state of its own (a mark)."""
    return [[*restored, f"{checkpoint}/{i}".encode()] for i, restored in enumerate(writers)]


@given(first=st.integers(1, 6), then=parallelisms)
def test_flinks_rule_hands_every_state_to_exactly_one_writer_of_the_next_checkpoint(first, then):
    recorded = _record([[] for _ in range(first)], 0)
    for checkpoint, parallelism in enumerate(then, start=1):
        writers = restore_by_flink_rule(recorded, parallelism)
        assert sorted(s for w in writers for s in w) == sorted(s for r in recorded for s in r)
        recorded = _record(writers, checkpoint)


@given(first=st.integers(1, 6), then=parallelisms)
def test_by_subtask_id_every_state_is_restored_once_or_carried_once(first, then):
    """At each checkpoint, the states restored and those carried are all recorded, once."""
    made = [[f"0/{i}".encode()] for i in range(first)]
    recorded = made
    states = WriterStates(
        state_name="s",
        number_of_subtasks=first,
        subtasks=tuple(
            SubtaskStates(subtask_id=i, attempt_token=f"0/{i}", states=tuple(run))
            for i, run in enumerate(made)
        ),
    )
    for checkpoint, n in enumerate(then, start=1):
        writers = [list(states.restore_by_subtask_id(i)) for i in range(n)]
        carried = [
            s for j, run in enumerate(recorded) if carry_target(j, n) is not None for s in run
        ]
        before = sorted(s for run in recorded for s in run)
        assert sorted([*(s for w in writers for s in w), *carried]) == before  # none lost or twice
        own = WriterStates(
            state_name="s",
            number_of_subtasks=n,
            subtasks=tuple(
                SubtaskStates(subtask_id=i, attempt_token=f"{checkpoint}/{i}", states=tuple(run))
                for i, run in enumerate(_record(writers, checkpoint))
            ),
        )
        states = own.with_carried(states)
        recorded = states.by_subtask()
        assert len(recorded) == n
        marks = [f"{checkpoint}/{i}".encode() for i in range(n)]
        assert sorted(s for run in recorded for s in run) == sorted([*before, *marks])


def test_a_carried_state_arrives_one_checkpoint_late():
    three = [[b"a"], [b"b"], [b"c"]]
    assert restore_by_subtask_id(three, 0) == [b"a"]  # 3 -> 1: only subtask 0's now
    assert [carry_target(j, 1) for j in range(3)] == [None, 0, 0]  # the rest at the next one
