"""What the engine hands the enumerator and the readers (Flink's contexts).

Both are implemented by engines (the local engine of `sinkv2.testing`, the Spark
runtime); a source only calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from sinkv2._metrics import MetricGroup
from sinkv2.source._event import SourceEvent
from sinkv2.source._split import ReaderInfo, SplitsAssignment

__all__ = ["SourceReaderContext", "SplitEnumeratorContext", "source_id_of"]

SplitT = TypeVar("SplitT")
R = TypeVar("R")


class SplitEnumeratorContext(Protocol[SplitT]):
    """The enumerator's view of the job (Flink's ``SplitEnumeratorContext``).

    Every method is called from the coordinator thread (the thread that calls the
    enumerator's own methods), except `call_async`'s callable, which the engine may
    run elsewhere; its handler runs in the coordinator thread again.
    """

    def current_parallelism(self) -> int:
        """The number of reader subtasks of this run of the job."""
        ...

    def registered_readers(self) -> Mapping[int, ReaderInfo]:
        """The readers that registered so far, by subtask id."""
        ...

    def assign_split(self, split: SplitT, subtask_id: int) -> None:
        """Give one split to one registered reader."""
        ...

    def assign_splits(self, new_split_assignments: SplitsAssignment[SplitT]) -> None:
        """Give splits to several registered readers at once.

        Raises:
            SourceContractError: A subtask is not a registered reader.
        """
        ...

    def signal_no_more_splits(self, subtask_id: int) -> None:
        """Tell a reader it will get no more splits: once its splits end, it ends."""
        ...

    def call_async(
        self,
        callable: Callable[[], R],
        handler: Callable[[R | None, BaseException | None], None],
        initial_delay_ms: int = 0,
        period_ms: int = 0,
    ) -> None:
        """Run ``callable``, then ``handler(result, error)`` in the coordinator thread.

        ``callable`` may run on another thread; with ``period_ms > 0`` both repeat
        every ``period_ms`` after ``initial_delay_ms``. The usual way to discover
        splits periodically (Flink's continuous file source lists its directory here).
        """
        ...

    def send_event_to_source_reader(self, subtask_id: int, event: SourceEvent) -> None:
        """Deliver ``event`` to the reader of ``subtask_id`` (its `handle_source_events`)."""
        ...

    def run_in_coordinator_thread(self, runnable: Callable[[], None]) -> None:
        """Run ``runnable`` in the coordinator thread, after what is already queued."""
        ...

    def metric_group(self) -> MetricGroup:
        """Where the enumerator registers its metrics."""
        ...


class SourceReaderContext(Protocol):
    """A reader's view of its subtask (Flink's ``SourceReaderContext``)."""

    def get_index_of_subtask(self) -> int:
        """This reader's subtask index, from 0."""
        ...

    def current_parallelism(self) -> int:
        """The number of reader subtasks of this run of the job."""
        ...

    def send_split_request(self) -> None:
        """Ask the enumerator for a split (its `handle_split_request` is called)."""
        ...

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        """Deliver ``source_event`` to the enumerator (its `handle_source_event`)."""
        ...

    def metric_group(self) -> MetricGroup:
        """Where the reader registers its metrics (``numRecordsIn`` is counted for it)."""
        ...


SOURCE_ID_ATTRIBUTE = "_sinkv2_source_id"
"""Where an engine's enumerator context keeps the source id it plans for."""


def source_id_of(context: object) -> str | None:
    """The source id an engine plans this enumerator for, or None (an extension).

    Not in Flink: a Flink enumerator never knows its operator's id. Here a stream is
    read under a ``source_id`` (``from_source(..., source_id=...)``, the stream door's
    ``source_id`` option) that names its position history, and the engine's enumerator
    context carries it. A source that keeps something outside its checkpoints - a
    replication slot, a consumer group - derives that thing's name from it, so that a
    crash after making it and before the first checkpoint is recorded leaves nothing
    the next run under the same id cannot find and take over.

    None when the engine reads without an id (a bounded read, the local engine of
    `sinkv2.testing`) or when ``context`` is not an engine's.
    """
    found = getattr(context, SOURCE_ID_ATTRIBUTE, None)
    return found if isinstance(found, str) and found else None
