"""The split enumerator: discovers splits and hands them to readers (Flink's ``SplitEnumerator``).

Call order, as Flink's source coordinator makes it::

    create_enumerator(ctx) | restore_enumerator(ctx, checkpoint)
    start()
    ( add_reader(i) | handle_split_request(i, host) | add_splits_back(splits, i)
      | handle_source_event(i, event) | snapshot_state(cp) | notify_checkpoint_complete(cp) )*
    close()                 always, also after a failure

All of these run in one thread, the coordinator thread; so do the handlers of
`SplitEnumeratorContext.call_async`.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from sinkv2.source._event import SourceEvent

__all__ = ["SplitEnumerator"]

SplitT = TypeVar("SplitT")
CheckpointT_co = TypeVar("CheckpointT_co", covariant=True)


class SplitEnumerator(Protocol[SplitT, CheckpointT_co]):
    """Discovers splits and assigns them to readers; one per source, for the whole job.

    Required: `start`, `handle_split_request`, `add_splits_back`, `add_reader`,
    `snapshot_state`, `close`. Optional: `notify_checkpoint_complete`,
    `handle_source_event` (defaults: do nothing; subclass to get them).
    """

    def start(self) -> None:
        """Begin work: e.g. schedule periodic discovery with `call_async`."""
        ...

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """A reader asked for a split: assign one, or signal it that there are no more."""
        ...

    def add_splits_back(self, splits: list[SplitT], subtask_id: int) -> None:
        """Take back splits assigned to ``subtask_id`` after its last checkpoint.

        Called when that reader failed: the splits carry the positions they had when
        they were assigned, and must be assigned again (to any reader).
        """
        ...

    def add_reader(self, subtask_id: int) -> None:
        """A reader registered (at start, or after it was restored)."""
        ...

    def snapshot_state(self, checkpoint_id: int) -> CheckpointT_co:
        """The enumerator's state at checkpoint ``checkpoint_id``.

        Contract: every split not yet assigned must be in it, *with its position*
        (an id alone re-reads or skips data on restore: Flink's FLINK-38453); splits
        already assigned to readers are in the readers' snapshots instead and must
        not be here. Whatever else decides future assignments (paths already seen, a
        discovery cursor) belongs here too.
        """
        ...

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable everywhere; a safe point to ack upstream.

        Not guaranteed to be called for every checkpoint (a later one may complete
        first): treat it as "everything up to this checkpoint is done".
        """
        return

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """A reader sent ``source_event`` (default: ignore it)."""
        return

    def close(self) -> None:
        """Release resources; called once, also after a failure."""
        ...
