"""The `IcebergSource` enumerator: Iceberg's static and continuous split enumerators in one.

Bounded (Iceberg's ``StaticIcebergEnumerator``): the file scan tasks of one
snapshot, planned when the job starts, are handed out one per split request; a
request when none is left is answered with "no more splits".

Continuous (Iceberg's ``ContinuousIcebergEnumerator`` with its
``ContinuousSplitPlannerImpl``): every ``interval`` a ``call_async`` loads the table
again and walks from its current snapshot back to the last snapshot already
turned into splits (the enumerator's position, in its checkpoint). Each snapshot in
between, oldest first, is handled by its operation:

- ``append``: its *added* data files become splits, once (the position moves past
  the snapshot in the same step that queues its splits, so a checkpoint holds both
  or neither);
- ``replace`` (a compaction: the same rows in other files): nothing to read;
- ``overwrite`` and ``delete``: the rows they remove or rewrite cannot be told to a
  reader of appends, so the source fails naming the snapshot, or skips it when
  ``skip_overwrites`` is set (Iceberg's ``streaming-skip-overwrite-snapshots`` and
  ``streaming-skip-delete-snapshots``).

If the walk back does not reach the position (its successors were expired, or the
table was rolled back to another lineage) the source fails naming the snapshot; it
never jumps silently. A discovery computed for an older position (a restore
happened meanwhile) is dropped, as Iceberg's enumerator does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

import attrs

from reference_sinks._split_queue import SplitQueue
from reference_sinks.iceberg._source_errors import IcebergSourceError
from reference_sinks.iceberg._source_split import IcebergEnumeratorState, IcebergSourceSplit
from sinkv2.source import SplitEnumeratorContext

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["Discovered", "IcebergSplitEnumerator", "Planner", "walk_new_snapshots"]


@final
@attrs.frozen
class Discovered:
    """What one discovery found: the position it started from, the splits, the new position."""

    started: bool
    from_snapshot_id: int | None
    splits: tuple[IcebergSourceSplit, ...]
    to_snapshot_id: int | None
    table_uuid: str | None = None


Planner = Callable[[IcebergEnumeratorState], Discovered]
"""Plans the splits after a state's position (runs off the coordinator thread)."""


def walk_new_snapshots(
    table: Table, head: Snapshot | None, last_snapshot_id: int | None, name: str
) -> list[Snapshot]:
    """The snapshots after ``last_snapshot_id`` up to ``head``, oldest first.

    ``last_snapshot_id`` ``None``: every ancestor of ``head`` still in the table's
    metadata (the oldest ones may have been expired; reading starts at the oldest kept).

    Raises:
        IcebergSourceError: ``last_snapshot_id`` is not reached walking back from
            ``head`` (named ``name`` in the message): the snapshots after it were
            expired, or the table was rolled back to another lineage.
    """
    found: list[Snapshot] = []
    snapshot = head
    while snapshot is not None and snapshot.snapshot_id != last_snapshot_id:
        found.append(snapshot)
        parent = snapshot.parent_snapshot_id
        if parent is not None and parent == last_snapshot_id:
            break
        snapshot = None if parent is None else table.snapshot_by_id(parent)
        if snapshot is None and last_snapshot_id is not None:
            raise _lost(table, name, head, last_snapshot_id, found[-1])
    if head is None and last_snapshot_id is not None:
        raise _lost(table, name, head, last_snapshot_id, None)
    return found[::-1]


def _lost(
    table: Table,
    name: str,
    head: Snapshot | None,
    last_snapshot_id: int,
    oldest: Snapshot | None,
) -> IcebergSourceError:
    """The error for a position the current snapshot's ancestry does not reach.

    ``oldest`` is the oldest snapshot the walk back from ``head`` reached. The
    ancestry was cut by expiry when its parent is gone (Iceberg's Java library keeps
    the parent id) or when it has no parent yet is newer than the position
    (pyiceberg's ``expire_snapshots`` clears the parent id of the snapshot after an
    expired one); otherwise it runs past the position on another lineage.
    """
    current = "no current snapshot" if head is None else f"current snapshot {head.snapshot_id}"
    last = table.snapshot_by_id(last_snapshot_id)
    cut = oldest is not None and (
        oldest.parent_snapshot_id is not None
        or (last is not None and oldest.timestamp_ms > last.timestamp_ms)
    )
    if last is None or cut:
        where = "was expired" if last is None else "is kept, but snapshots after it were expired"
        why = (
            f"snapshot {last_snapshot_id}, where the source stopped, {where}, and the "
            f"ancestry of the {current} no longer reaches it: appends after it may have been "
            "expired unread. Keep snapshots longer than a stream may lag (expire_snapshots "
            "older_than), and start a new stream (a new source_id) to go on"
        )
    else:
        why = (
            f"snapshot {last_snapshot_id}, where the source stopped, is not an ancestor of the "
            f"{current}: the table was rolled back or replaced. Start a new stream (a new "
            "source_id) from a snapshot of the current lineage"
        )
    return IcebergSourceError(f"IcebergSource on {name!r}: {why}", snapshot_id=last_snapshot_id)


@final
class IcebergSplitEnumerator:
    """Hands out file scan tasks; see the module docstring.

    Args:
        context: The enumerator's context.
        state: Where to start: a bounded plan's splits, or a checkpoint.
        planner: Plans the splits after a position; ``None`` for a bounded source.
        interval_ms: Time between two discoveries of a continuous source.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[IcebergSourceSplit],
        state: IcebergEnumeratorState,
        *,
        planner: Planner | None,
        interval_ms: int = 0,
    ) -> None:
        self._context = context
        self._planner = planner
        self._interval_ms = interval_ms
        self._splits = SplitQueue(context, state.remaining, continuous=planner is not None)
        self._started = state.started
        self._last = state.last_snapshot_id
        self._table_uuid = state.table_uuid

    def start(self) -> None:
        """Continuous: discover now and every interval."""
        if self._planner is not None:
            self._context.call_async(self._discover, self._on_discovered, 0, self._interval_ms)

    def close(self) -> None:
        """Nothing to release."""

    def _position(self) -> IcebergEnumeratorState:
        return IcebergEnumeratorState(
            started=self._started, last_snapshot_id=self._last, table_uuid=self._table_uuid
        )

    def _discover(self) -> Discovered:
        assert self._planner is not None  # only scheduled when continuous
        return self._planner(self._position())

    def _on_discovered(self, found: Discovered | None, error: BaseException | None) -> None:
        if error is not None:
            raise error
        assert found is not None  # no error: a result
        if (found.started, found.from_snapshot_id) != (self._started, self._last):
            return  # planned from a position this enumerator has left (restored meanwhile)
        self._started = True
        self._last = found.to_snapshot_id
        self._table_uuid = found.table_uuid
        self._splits.add(found.splits)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next split; bounded and none left: no more splits."""
        self._splits.request(subtask_id, requester_hostname)

    def add_splits_back(self, splits: list[IcebergSourceSplit], subtask_id: int) -> None:
        """A failed reader's splits go first to the next requests."""
        self._splits.add_back(splits)

    def add_reader(self, subtask_id: int) -> None:
        """A reader (re)registered: a request of an earlier reader of its subtask is void."""
        self._splits.forget_request(subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> IcebergEnumeratorState:
        """The splits not assigned and the last snapshot turned into splits."""
        return IcebergEnumeratorState(
            remaining=self._splits.remaining,
            started=self._started,
            last_snapshot_id=self._last,
            table_uuid=self._table_uuid,
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing: the position moved when the splits were queued, inside the checkpoint."""

    def handle_source_event(self, subtask_id: int, source_event: object) -> None:
        """Readers send no events."""
