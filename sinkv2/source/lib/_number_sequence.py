"""`NumberSequenceSource`: the numbers from ``start`` to ``end``, in parallel (Flink's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError
from sinkv2.source._context import SourceReaderContext
from sinkv2.source.lib._sequence_reader import SequenceReader
from sinkv2.source.lib._sequence_source import SequenceSource, check_int

if TYPE_CHECKING:
    import pyarrow

__all__ = ["NumberSequenceSource"]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _check_long(name: str, value: int) -> None:
    """Refuse a number the ``int64`` column cannot hold (Flink's ``from`` and ``to`` are longs)."""
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise SinkConfigurationError(
            f"{name!r} must fit the int64 column, {_LONG_MIN} .. {_LONG_MAX} (got {value!r}); "
            "Flink's NumberSequenceSource takes longs"
        )


@final
class NumberSequenceSource(SequenceSource):
    """The numbers ``start, start + 1, ..., end`` as rows of one ``int64`` column.

    Flink's ``NumberSequenceSource`` (PyFlink's names): bounded, cut into one
    contiguous range per reader when the job starts (``num_splits`` to choose);
    each split emits its numbers in order, in Arrow batches of ``batch_size`` rows.
    With ``end=None`` (a sinkv2 extension) the sequence never ends: split ``i`` of
    ``n`` emits ``start + i, start + i + n, ...``, and the source is
    ``CONTINUOUS_UNBOUNDED``.

    Args:
        start: The first number.
        end: The last number, inclusive; ``None`` for no end.
        column: The column's name.
        batch_size: Rows per emitted batch, at most.
        num_splits: How many splits; default: the readers' parallelism.

    Raises:
        SinkConfigurationError: A bad argument (``end`` before ``start - 1``, a
            number outside int64, a non-positive batch size, ...).
    """

    def __init__(
        self,
        start: int,
        end: int | None,
        *,
        column: str = "value",
        batch_size: int = 8192,
        num_splits: int | None = None,
    ) -> None:
        check_int("start", start)
        _check_long("start", start)
        if end is not None:
            check_int("end", end, minimum=start - 1)
            _check_long("end", end)
        if not isinstance(column, str) or not column:
            raise SinkConfigurationError(
                f"'column' must be a non-empty str (got {describe(column)})"
            )
        super().__init__(start, end, batch_size=batch_size, num_splits=num_splits)
        self.start = start
        self.end = end
        self.column = column

    def create_reader(self, reader_context: SourceReaderContext) -> SequenceReader:
        """A reader that emits each split's numbers as Arrow batches."""
        return SequenceReader(reader_context, self._batch, batch_size=self.batch_size)

    def _batch(self, numbers: range) -> pyarrow.RecordBatch:
        import pyarrow  # noqa: PLC0415  # only readers need it; importing the source must not

        return pyarrow.record_batch([pyarrow.array(numbers, pyarrow.int64())], [self.column])

    def get_produced_type(self) -> pyarrow.Schema:
        """One non-null ``int64`` column."""
        import pyarrow  # noqa: PLC0415  # see _batch

        return pyarrow.schema([pyarrow.field(self.column, pyarrow.int64(), nullable=False)])

    def __repr__(self) -> str:
        return f"NumberSequenceSource(start={self.start}, end={self.end})"
