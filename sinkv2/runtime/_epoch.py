"""What one epoch needs, asked of the coordinator before anything is written.

Every door runs one epoch the same way (`CommitCoordinator`): it asks what the
epoch needs (`CommitCoordinator.plan_epoch` for a batch run,
`CommitCoordinator.plan_checkpoint` for a stream's checkpoint) and gets an
`EpochPlan`:

- `EpochNeed.NOTHING`: the epoch is committed (or was just recommitted, or the
  destination holds it): `CommitCoordinator.settle` reports it; nothing is written;
- `EpochNeed.RECOMMIT`: the epoch is Pending: `settle` commits its stored
  committables; nothing is written again;
- `EpochNeed.WRITE`: writers must run: `CommitCoordinator.write_epoch` runs them,
  removes the losing attempts' output, pre-commits and records the epoch Pending
  (a `PendingEpoch`), and `CommitCoordinator.commit_epoch` commits it - inline, or
  on a stream's commit thread.

A door that plans on one process and writes on others (Spark's data sources)
asks the question at planning time and ships the answer to its tasks.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs

from sinkv2.runtime._result import SinkResult
from sinkv2.runtime._seam import EpochCommit, WriterStageOutput
from sinkv2.runtime._store import EpochRecord

__all__ = ["EpochNeed", "EpochPlan", "PendingEpoch"]


class EpochNeed(enum.Enum):
    """What an epoch needs before it is committed."""

    NOTHING = "nothing"
    """Committed already: a replay writes and commits nothing."""
    RECOMMIT = "recommit"
    """Recorded Pending: commit its stored committables; write nothing."""
    WRITE = "write"
    """Not recorded: writers must write it."""


@final
@attrs.frozen(kw_only=True)
class EpochPlan:
    """The coordinator's answer to "what does this epoch need?".

    Attributes:
        epoch: The epoch in the sink id's history.
        checkpoint_id: The checkpoint id its committables carry (``END_OF_INPUT`` for
            a batch run without one).
        need: What it needs.
        explicit: Whether a later run commits it if this job dies (its data is not
            written again) rather than aborting it.
        base: Its result before anything is done (what recovery did).
        record: Its record in the store, if any.
        recommitted: ``open()`` committed it from the store just now.
        held_by_destination: Not recorded, but the destination marks it committed.
    """

    epoch: int
    checkpoint_id: int
    need: EpochNeed
    explicit: bool
    base: SinkResult
    record: EpochRecord | None = None
    recommitted: EpochCommit | None = None
    held_by_destination: bool = False


@final
@attrs.frozen(kw_only=True)
class PendingEpoch:
    """An epoch its writers wrote, recorded Pending, not committed yet.

    Attributes:
        plan: The plan it was written under.
        committables: What to commit.
        written: What the writer stage returned.
        write_seconds: Wall time per stage up to recording it Pending.
    """

    plan: EpochPlan
    committables: Sequence[Any]
    written: WriterStageOutput
    write_seconds: Mapping[str, float]
