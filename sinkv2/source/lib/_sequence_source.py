"""What `NumberSequenceSource` and `DataGeneratorSource` share: indices, cut into splits.

Both read the indices ``first .. last`` (for ever if ``last`` is ``None``), cut the
same way and handed out by the same enumerator, so a restore sees the same splits;
they differ only in what a reader makes of a run of indices.
"""

from __future__ import annotations

from sinkv2._attrs_serializer import AttrsMsgpackSerializer
from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError
from sinkv2.source._boundedness import Boundedness
from sinkv2.source._context import SplitEnumeratorContext
from sinkv2.source.lib._sequence_splits import (
    NumberSequenceSplit,
    SequenceEnumerator,
    SequenceEnumeratorState,
    cut,
)

__all__ = ["SequenceSource", "check_int"]


def check_int(name: str, value: object, *, minimum: int | None = None) -> None:
    """Raise `SinkConfigurationError` unless ``value`` is an int (>= ``minimum``)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise SinkConfigurationError(f"{name!r} must be an int (got {describe(value)})")
    if minimum is not None and value < minimum:
        raise SinkConfigurationError(
            f"{name!r} must be at least {minimum} (got {describe(value)}); set it to {minimum} "
            "or more"
        )


class SequenceSource:
    """The indices ``first .. last`` in splits; subclasses say what a reader emits for them."""

    def __init__(
        self, first: int, last: int | None, *, batch_size: int, num_splits: int | None
    ) -> None:
        check_int("batch_size", batch_size, minimum=1)
        if num_splits is not None:
            check_int("num_splits", num_splits, minimum=1)
        self._first = first
        self._last = last
        self.batch_size = batch_size
        self.num_splits = num_splits

    def get_boundedness(self) -> Boundedness:
        """``BOUNDED`` when the indices end, else ``CONTINUOUS_UNBOUNDED``."""
        return Boundedness.BOUNDED if self._last is not None else Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[NumberSequenceSplit]
    ) -> SequenceEnumerator:
        """Cut the indices into splits, one per reader unless ``num_splits`` says otherwise."""
        count = self.num_splits or enum_context.current_parallelism()
        return SequenceEnumerator(enum_context, cut(self._first, self._last, count))

    def restore_enumerator(
        self,
        enum_context: SplitEnumeratorContext[NumberSequenceSplit],
        checkpoint: SequenceEnumeratorState,
    ) -> SequenceEnumerator:
        """Go on with the splits not yet assigned at the checkpoint."""
        return SequenceEnumerator(enum_context, checkpoint.remaining)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[NumberSequenceSplit]:
        """Splits as msgpack maps."""
        return AttrsMsgpackSerializer(NumberSequenceSplit)

    def get_enumerator_checkpoint_serializer(
        self,
    ) -> AttrsMsgpackSerializer[SequenceEnumeratorState]:
        """The remaining splits as msgpack."""
        return AttrsMsgpackSerializer(SequenceEnumeratorState)
