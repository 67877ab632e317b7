"""Splits of a number sequence, and the enumerator that hands them out one per request.

Flink's ``NumberSequenceSplit`` and ``IteratorSourceEnumerator``: a bounded
sequence ``[from, to]`` is cut into contiguous ranges; an unbounded one (``to``
is ``None``, a sinkv2 extension) into interleaved arithmetic sequences, one per
split. A split's ``current`` field is its position: the next number to emit.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import final

import attrs

from sinkv2.source._context import SplitEnumeratorContext
from sinkv2.source._end_positions import SplitCut
from sinkv2.source._event import SourceEvent

__all__ = [
    "NumberSequenceSplit",
    "SequenceEnumerator",
    "SequenceEnumeratorState",
    "cut",
    "cut_at",
]


@final
@attrs.frozen
class NumberSequenceSplit:
    """The numbers ``current, current + step, ...`` up to ``to`` (for ever if ``None``).

    Attributes:
        id: The split's id.
        current: The next number to emit: the split's position.
        to: The last number, inclusive; ``None`` for an unbounded split.
        step: The distance between two numbers of the split.
    """

    id: str
    current: int
    to: int | None
    step: int = 1

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`."""
        return self.id

    def is_finished(self) -> bool:
        """Whether every number of the split was emitted."""
        return self.to is not None and self.current > self.to

    def advanced(self, count: int) -> NumberSequenceSplit:
        """The split after ``count`` more numbers were emitted."""
        return attrs.evolve(self, current=self.current + count * self.step)


@final
@attrs.frozen
class SequenceEnumeratorState:
    """The enumerator's checkpoint: the splits not yet assigned, positions included."""

    remaining: tuple[NumberSequenceSplit, ...]


def cut(first: int, last: int | None, splits: int) -> list[NumberSequenceSplit]:
    """``[first, last]`` in ``splits`` contiguous ranges, or ``first, ...`` in interleaved ones.

    A bounded range gives no more splits than it has numbers (an empty range: none);
    the first ``total % splits`` ranges hold one number more. Splits are named
    ``"1"``, ``"2"``, ... in order, as Flink's ``NumberSequenceSource#splitNumberRange``
    names them.
    """
    if last is None:
        return [NumberSequenceSplit(str(i + 1), first + i, None, splits) for i in range(splits)]
    total = last - first + 1
    count = max(0, min(splits, total))
    result = []
    start = first
    for index in range(count):
        size = total // count + (1 if index < total % count else 0)
        result.append(NumberSequenceSplit(str(index + 1), start, start + size - 1))
        start += size
    return result


def cut_at(
    split: NumberSequenceSplit, last: int, max_records: int | None
) -> SplitCut[NumberSequenceSplit]:
    """``split``'s numbers up to ``last`` (at most ``max_records`` of them), and the rest.

    The read part is a split ending at its last number (its reader stops there); the
    rest starts after it, and is ``None`` once the split's own end is read.
    """
    count = max(0, (last - split.current) // split.step + 1)
    if split.to is not None:
        count = min(count, max(0, (split.to - split.current) // split.step + 1))
    if max_records is not None:
        count = min(count, max_records)
    read = None
    if count:
        read = attrs.evolve(split, to=split.current + (count - 1) * split.step)
    rest: NumberSequenceSplit | None = split.advanced(count)
    if rest is not None and rest.is_finished():
        rest = None
    return SplitCut(read, rest, count)


@final
class SequenceEnumerator:
    """Assigns the remaining splits one per split request; then says there are no more.

    The enumerator of `NumberSequenceSource` and `DataGeneratorSource` (Flink's
    ``IteratorSourceEnumerator``).
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[NumberSequenceSplit],
        remaining: Sequence[NumberSequenceSplit],
    ) -> None:
        self._context = context
        self._remaining = collections.deque(remaining)

    def start(self) -> None:
        """Nothing to discover: the splits are known from the start."""

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next split, or signal that there are no more."""
        if self._remaining:
            self._context.assign_split(self._remaining.popleft(), subtask_id)
        else:
            self._context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[NumberSequenceSplit], subtask_id: int) -> None:
        """Take back a failed reader's splits; the next requests get them first."""
        self._remaining.extendleft(reversed(splits))

    def add_reader(self, subtask_id: int) -> None:
        """Readers ask for splits themselves."""

    def snapshot_state(self, checkpoint_id: int) -> SequenceEnumeratorState:
        """The splits not yet assigned."""
        return SequenceEnumeratorState(tuple(self._remaining))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing to acknowledge."""

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """No events are expected."""

    def close(self) -> None:
        """Nothing to release."""
