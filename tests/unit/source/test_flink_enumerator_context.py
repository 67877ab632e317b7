"""Flink's ``SourceCoordinatorContextTest``: the enumerator context's contract, on the local engine.

The context is the engine's (`LocalSourceEngine` here, the Spark runtime on Spark);
these cases check the `SplitEnumeratorContext` contract `sinkv2.source` states:
readers register before they can be given splits, ``assign_splits`` delivers each
subtask's splits to that reader, and an assignment to a reader that is not
registered is refused (Flink: ``IllegalArgumentException("Cannot assign splits
...")``; here `SourceContractError`). Left out: ``testSnapshotAndRestore`` and
``testUnregisterReader`` (the coordinator's own bookkeeping, the engine's tests).
"""

from __future__ import annotations

from typing import Any

import pytest
from flip27_fixtures import ListEnumerator, ListSource

from sinkv2.source import SourceContractError, SplitsAssignment
from sinkv2.testing import LocalSourceEngine


class AssignsInStart(ListEnumerator):
    def start(self) -> None:
        self.context.assign_splits(SplitsAssignment({0: [self.remaining.popleft()]}))


class AssignsOnceAllRegistered(ListEnumerator):
    """Gives split 0 to reader 0 and splits 1, 2 to reader 1 once all three registered."""

    seen: list[dict[int, int]]

    def add_reader(self, subtask_id: int) -> None:
        registered = self.context.registered_readers()
        type(self).seen.append({i: info.subtask_id for i, info in registered.items()})
        if len(registered) < self.context.current_parallelism():
            return
        s0, s1, s2 = (self.remaining.popleft() for _ in range(3))
        self.context.assign_splits(SplitsAssignment({0: [s0], 1: [s1, s2]}))
        for subtask in registered:
            self.context.signal_no_more_splits(subtask)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        pass  # everything is assigned at registration


def test_assign_split_to_unregistered_reader():
    """``testAssignSplitToUnregisteredReader``: no reader registered yet in ``start``."""

    class Source(ListSource):
        enumerator_class = AssignsInStart

    with pytest.raises(SourceContractError, match="not a registered reader"):
        LocalSourceEngine(Source(splits=2, per_split=3), 2)


def test_register_reader_and_assign_splits():
    """``testRegisterReader`` + ``testAssignSplits``: each subtask reads what it was given."""
    AssignsOnceAllRegistered.seen = []

    class Source(ListSource):
        enumerator_class = AssignsOnceAllRegistered

    source = Source(splits=3, per_split=4)
    engine = LocalSourceEngine(source, 3)
    try:
        engine.run()
        engine.finish()
    finally:
        engine.close()
    assert AssignsOnceAllRegistered.seen[-1] == {0: 0, 1: 1, 2: 2}
    by_subtask: dict[int, set[Any]] = {}
    for record in engine.committed:
        by_subtask.setdefault(record.subtask, set()).add(record.split_id)
    assert by_subtask == {0: {"s0"}, 1: {"s1", "s2"}}
    assert sorted(r.record["value"] for r in engine.committed) == list(range(12))
