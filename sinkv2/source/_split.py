"""Splits, and what the enumerator knows about readers (`ReaderInfo`, `SplitsAssignment`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

import attrs

__all__ = ["ReaderInfo", "SourceSplit", "SplitsAssignment"]

SplitT = TypeVar("SplitT")


@runtime_checkable
class SourceSplit(Protocol):
    """A unit of work *and* a unit of reader state (Flink's ``SourceSplit``).

    Required: `split_id`.

    A split carries its own position: when a reader snapshots its state it returns
    its splits with the position reached, so a restored reader goes on from there.
    Make splits immutable values (attrs ``frozen`` classes) and give the position a
    field of its own; readers keep a mutable split *state* while reading and turn it
    back into a split in `SourceReader.snapshot_state`.
    """

    def split_id(self) -> str:
        """The split's id: unique within the source, stable across restarts."""
        ...


@attrs.frozen
class ReaderInfo:
    """A registered reader, as the enumerator sees it (Flink's ``ReaderInfo``).

    Attributes:
        subtask_id: The reader's subtask index, from 0.
        location: The host the reader runs on, or ``None`` when the engine cannot tell.
    """

    subtask_id: int
    location: str | None = None


def _frozen_lists(value: Mapping[int, Sequence[SplitT]]) -> Mapping[int, Sequence[SplitT]]:
    return {int(subtask): tuple(splits) for subtask, splits in value.items()}


@attrs.frozen
class SplitsAssignment(Generic[SplitT]):
    """New splits for several readers at once (Flink's ``SplitsAssignment``).

    Attributes:
        assignment: For each subtask id, the splits to add to that reader, in order.
    """

    assignment: Mapping[int, Sequence[SplitT]] = attrs.field(converter=_frozen_lists)

    def get_assignment(self) -> Mapping[int, Sequence[SplitT]]:
        """The splits per subtask id (Flink's ``assignment()``)."""
        return self.assignment
