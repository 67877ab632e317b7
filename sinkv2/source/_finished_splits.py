"""An extension beyond Flink: the engine tells the enumerator which splits are done.

In Flink a reader lives as long as the job: it learns in its
``notify_checkpoint_complete`` which of its finished splits a completed checkpoint
holds, and can tell the enumerator with a source event (Flink's file source cleans
up so). An engine that runs a reader for one task and no longer (Spark: a reader
per task, never told of a commit) cannot: the reader is gone before the commit.
The engine itself knows, though: it decided on the driver which splits each epoch
reads to their end (a split read whole, or a cut with no rest). So it tells the
enumerator, on the driver, once the epoch that finished them is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["SupportsFinishedSplits"]


@runtime_checkable
class SupportsFinishedSplits(Protocol):
    """An enumerator that wants to know which splits are read and committed downstream.

    Extension (not in Flink): implemented by a ``SplitEnumerator`` (not the source)
    that acts on finished splits - archives or deletes a processed file, releases an
    upstream lease - and must not act before their records are committed.

    Required: `notify_splits_finished`.
    """

    def notify_splits_finished(self, checkpoint_id: int, split_ids: Sequence[str]) -> None:
        """The splits ``split_ids`` were read to their end in checkpoints up to ``checkpoint_id``.

        Called on the driver, after the engine committed ``checkpoint_id`` (after
        ``notify_checkpoint_complete`` for it, if that fires), with every split
        finished in a committed checkpoint and not reported yet. At least once:
        after a driver crash the same split id may be reported again (the
        enumerator is restored from a checkpoint taken before the first report),
        so act idempotently; a split id the enumerator does not know is ignored.
        """
        ...
