"""The contract kit's cases for a source: Flink's fixed ones, random schedules, re-runs.

A case (`Plan`) is a starting parallelism, a seed and the operations before the run
ends (`Op`: steps, checkpoints notified at once or late, aborted checkpoints, reader
failures, restores with another parallelism). `check_source` carries each out on the
local engine; when one fails, `hints` says what its rarer events usually mean and
`reproduction` writes the Python that runs it alone.
"""

from __future__ import annotations

from typing import Final

import attrs
from hypothesis import strategies as st

__all__ = [
    "FINAL_CHECKPOINT_EVERY",
    "MAX_IDLE_STEPS",
    "MOST_READERS",
    "WAIT_FOR_AN_ASSIGNMENT",
    "Op",
    "Plan",
    "fixed_plans",
    "hints",
    "reproduction",
    "schedules",
]

FINAL_CHECKPOINT_EVERY: Final = 7
MAX_IDLE_STEPS: Final = 2 * FINAL_CHECKPOINT_EVERY
"""An unbounded source idle this many steps in a row (two checkpoints among them) has
stopped: the run ends and reports what it read, instead of waiting for ever."""
WAIT_FOR_AN_ASSIGNMENT: Final = 300  # steps; a source may assign every split up front
MOST_READERS: Final = 17
"""The most readers ``testIdleReader`` runs (one more than splits, up to this)."""


@attrs.frozen
class Op:
    kind: str  # "steps", "checkpoint", "checkpoint-late", "abort", "fail", "fail-assigned",
    # "restore"
    value: int = 0

    def __str__(self) -> str:
        return {
            "steps": f"{self.value} steps",
            "checkpoint": "checkpoint",
            "checkpoint-late": "checkpoint, its completion notified later",
            "abort": "checkpoint aborted after every snapshot",
            "fail": f"fail reader {self.value}",
            "fail-assigned": "fail a reader that got splits since the last checkpoint",
            "restore": f"restore from the last checkpoint with parallelism {self.value}",
        }[self.kind]


@attrs.frozen
class Plan:
    """One run: a starting parallelism, a seed, and what happens before the run ends."""

    name: str
    parallelism: int
    seed: int
    ops: tuple[Op, ...] = ()

    def __str__(self) -> str:
        ops = "; ".join(map(str, self.ops)) or "nothing"
        return f"{self.name} (parallelism {self.parallelism}, seed {self.seed}; then {ops})"


def hints(plan: Plan, problem: str) -> list[str]:
    """What a failure under this plan's rarer events usually means."""
    kinds = {op.kind for op in plan.ops}
    lost = "missing:" in problem or "never arrived" in problem or "without gaps" in problem
    hints = []
    if lost and "checkpoint-late" in kinds:
        hints.append(
            "This case notified a checkpoint's completion late, after the readers had read "
            "on. A source that acknowledges, deletes or commits what it read in "
            "notify_checkpoint_complete(checkpoint_id) must do so up to the positions of "
            "that checkpoint's snapshot (keep them by checkpoint id, as Flink's "
            "KafkaSourceReader keeps its offsets to commit), not up to where it is now."
        )
    restarted = bool(kinds & {"restore", "fail", "fail-assigned"})
    if lost and restarted:
        hints.append(
            "This case restarted readers from a checkpoint. At a checkpoint every unfinished "
            "split must be in exactly one snapshot: the enumerator's (not assigned yet, or set "
            "aside for a reader whose registration has not arrived: a split is assigned only "
            "once assign_split() was called for it) or one reader's (with the position after "
            "its last emitted record). A split in neither is lost on restore, and a restored "
            "reader that starts past the position its split carries skips records."
        )
    if "extra or repeated:" in problem and restarted:
        hints.append(
            "This case restarted readers from a checkpoint. A record committed twice usually "
            "means a snapshot held a split behind the records emitted before it (snapshot_state "
            "must hold the position after the last record emitted, moved in the same poll_next "
            "call that emitted it), or a restored reader started before the position its "
            "split carries."
        )
    if lost and "abort" in kinds:
        hints.append(
            "This case aborted a checkpoint after every snapshot_state: a snapshot must not "
            "acknowledge, delete or commit anything, since the job may go back to an "
            "earlier checkpoint; do it in notify_checkpoint_complete, which an aborted "
            "checkpoint never gets."
        )
    return hints


def reproduction(plan: Plan, *, bounded: bool, records_to_read: int) -> str:
    """Python that drives `LocalSourceEngine` through ``plan``, as the kit did."""
    lines = [
        "from sinkv2.testing import EngineStep, LocalSourceEngine",
        "source = source_factory()",
        f"engine = LocalSourceEngine(source, {plan.parallelism}, seed={plan.seed})",
        "committed, last = [], None",
    ]
    for index, op in enumerate(plan.ops):
        if op.kind == "steps":
            lines.append(
                f"for _ in range({op.value}):\n"
                "    if engine.step() is not EngineStep.PROGRESS:\n        break"
            )
        elif op.kind in ("checkpoint", "checkpoint-late"):
            late = "notify=False" if op.kind == "checkpoint-late" else ""
            lines.append(f"last = engine.checkpoint({late})")
        elif op.kind == "abort":
            lines.append("engine.abort_checkpoint()")
        elif op.kind == "fail":
            lines.append(f"engine.fail_reader({op.value} % engine.parallelism)")
        elif op.kind == "fail-assigned":
            lines.append(
                f"for _ in range({WAIT_FOR_AN_ASSIGNMENT}):\n"
                "    if engine.assigned_since_checkpoint() or engine.step() is not "
                "EngineStep.PROGRESS:\n        break\n"
                "engine.fail_reader((engine.assigned_since_checkpoint() or [0])[0])"
            )
        else:
            lines.append(
                "committed += engine.committed\nengine.close()\n"
                f"engine = LocalSourceEngine(source, {op.value}, "
                f"seed={plan.seed + index + 1}, checkpoint=last)"
            )
    if bounded:
        lines.append("engine.run()\nengine.finish()")
    else:
        lines.append(
            f"engine.run(until=lambda e: len(committed) + len(e.committed) >= "
            f"{records_to_read}, checkpoint_every={FINAL_CHECKPOINT_EVERY}, "
            f"max_idle={MAX_IDLE_STEPS})\nengine.checkpoint()\nengine.close()"
        )
    lines.append("committed += engine.committed  # EmittedRecord(subtask, split_id, record)")
    return "\n".join(lines)


def fixed_plans(max_parallelism: int, *, splits: int = 0) -> list[Plan]:
    """Flink's fixed cases, then sinkv2's.

    ``splits`` (as many as the first case saw) sizes ``testIdleReader``: one reader
    more than splits, so that a reader gets none.
    """
    several = min(4, max_parallelism)
    fewer = max(1, several // 2)
    middle = [Op("steps", 25), Op("checkpoint"), Op("steps", 25)]
    idle = max(max_parallelism, min(splits, MOST_READERS - 1)) + 1
    return [
        Plan("testSourceSingleSplit", 1, 0),
        Plan("testMultipleSplits", several, 1),
        Plan("testIdleReader", idle, 2),
        Plan("testSavepoint", several, 3, (*middle, Op("restore", several))),
        Plan("testScaleUp", fewer, 4, (*middle, Op("restore", several))),
        Plan("testScaleDown", several, 5, (*middle, Op("restore", fewer))),
        Plan(
            "testTaskManagerFailure",
            several,
            6,
            (*middle, Op("fail-assigned"), Op("steps", 20)),
        ),
        Plan("metrics", several, 7, (Op("steps", 30),)),
        # Two sinkv2 cases: Flink notifies a completed checkpoint after the fact (the
        # readers have read on) or never, and a checkpoint can abort after every snapshot.
        Plan(
            "late checkpoint notification",
            several,
            8,
            (
                Op("steps", 20),
                Op("checkpoint-late"),
                Op("steps", 30),
                Op("fail-assigned"),
                Op("steps", 10),
                Op("restore", fewer),
            ),
        ),
        # A checkpoint while some readers' registrations are still on their way to the
        # enumerator: splits it planned for them must be in its checkpoint.
        Plan(
            "checkpoint before every reader registered",
            several,
            10,
            (Op("steps", 2), Op("checkpoint"), Op("steps", 20), Op("restore", several)),
        ),
        Plan(
            "aborted checkpoint",
            several,
            9,
            (
                Op("steps", 20),
                Op("checkpoint"),
                Op("steps", 20),
                Op("abort"),
                Op("steps", 10),
                Op("fail-assigned"),
                Op("steps", 10),
                Op("restore", fewer),
            ),
        ),
    ]


def schedules(max_parallelism: int) -> st.SearchStrategy[Plan]:
    parallelism = st.integers(1, max_parallelism)
    op = st.one_of(
        st.builds(Op, st.just("steps"), st.integers(1, 40)),
        st.just(Op("checkpoint")),
        st.just(Op("checkpoint-late")),
        st.just(Op("abort")),
        st.builds(Op, st.just("fail"), st.integers(0, max_parallelism - 1)),
        st.just(Op("fail-assigned")),
        st.builds(Op, st.just("restore"), parallelism),
    )
    return st.builds(
        Plan,
        st.just("random schedule"),
        parallelism,
        st.integers(0, 2**16),
        st.lists(op, max_size=12).map(tuple),
    )
