"""Which restored writer gets which writer state after a rescale: the two rules, in one place.

A checkpoint's writer states are recorded per subtask (`WriterStates`). When the
next checkpoint has another number of writers, its writers get them by one of two
rules, depending on whether the engine knows that number when the writers start.

**Flink's rule** (`restore_by_flink_rule`; ``apply()`` on Spark, the kit): the
parallelism is known when the writers restore. As Flink redistributes operator list
state (``RoundRobinOperatorStateRepartitioner``):

- same number of writers: each subtask gets back exactly the states it snapshotted;
- otherwise: all states, in old subtask order, are cut into contiguous runs, one per
  new subtask, the first ``total % new`` runs one state longer than the rest
  (`redistribute`).

Every state reaches exactly one writer of the very next checkpoint.

**The rule by subtask id** (`restore_by_subtask_id` + `carry_target`;
``writeStream.format("sinkv2")``): Spark's Python data-source writer tasks are not
told how many partitions their micro-batch has - not in the task, not in the planner,
which runs before the partitions are known - so a writer can only restore by its own
id:

- subtask ``i`` restores the states recorded under subtask ``i`` (none if the
  checkpoint before had no subtask ``i``);
- at commit, when the micro-batch has ``n`` writers, the states recorded under a
  subtask ``j >= n`` (no writer restored them) are recorded again with this
  checkpoint under subtask ``j mod n``, with their attempt token, and restored by that
  subtask at the next checkpoint.

Every state reaches exactly one writer; those of subtasks a smaller micro-batch
lacks arrive one checkpoint late (one more per further shrink before they are
restored). With an unchanged number of partitions both rules give the same states.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["carry_target", "redistribute", "restore_by_flink_rule", "restore_by_subtask_id"]


def redistribute(states: Sequence[bytes], parallelism: int) -> list[list[bytes]]:
    """``states`` cut into ``parallelism`` contiguous runs, as Flink splits list state.

    The first ``len(states) % parallelism`` runs hold one state more than the others.

    Raises:
        ValueError: ``parallelism`` is not positive.
    """
    _check_parallelism(parallelism)
    base, extra = divmod(len(states), parallelism)
    runs: list[list[bytes]] = []
    start = 0
    for subtask in range(parallelism):
        size = base + (1 if subtask < extra else 0)
        runs.append(list(states[start : start + size]))
        start += size
    return runs


def restore_by_flink_rule(
    by_old_subtask: Sequence[Sequence[bytes]], parallelism: int
) -> list[list[bytes]]:
    """The states each of ``parallelism`` new writers restores, by Flink's rule.

    Args:
        by_old_subtask: The recorded states, indexed by the subtask that recorded them.
        parallelism: The new number of writers.

    Raises:
        ValueError: ``parallelism`` is not positive.
    """
    _check_parallelism(parallelism)
    if parallelism == len(by_old_subtask):
        return [list(states) for states in by_old_subtask]
    return redistribute([state for states in by_old_subtask for state in states], parallelism)


def restore_by_subtask_id(
    by_old_subtask: Sequence[Sequence[bytes]], subtask_id: int
) -> list[bytes]:
    """The states new writer ``subtask_id`` restores by the rule by subtask id.

    Args:
        by_old_subtask: The recorded states, indexed by the subtask they are recorded
            under (carried states included).
        subtask_id: The new writer's subtask; it need not know how many there are.

    Raises:
        ValueError: ``subtask_id`` is negative.
    """
    if subtask_id < 0:
        raise ValueError(f"subtask_id must be at least 0 (got {subtask_id})")
    return list(by_old_subtask[subtask_id]) if subtask_id < len(by_old_subtask) else []


def carry_target(old_subtask: int, parallelism: int) -> int | None:
    """Under which subtask the rule by subtask id records ``old_subtask``'s states again.

    ``None`` if a writer of the new checkpoint restored them (``old_subtask`` is below
    ``parallelism``); else ``old_subtask mod parallelism``.

    Raises:
        ValueError: ``parallelism`` is not positive.
    """
    _check_parallelism(parallelism)
    return None if old_subtask < parallelism else old_subtask % parallelism


def _check_parallelism(parallelism: int) -> None:
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1 (got {parallelism})")
