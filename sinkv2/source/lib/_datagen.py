"""`DataGeneratorSource`: rows made by a function of their index (Flink's datagen source)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError
from sinkv2.source._context import SourceReaderContext
from sinkv2.source._end_positions import SplitCut
from sinkv2.source._errors import SourceReaderError, raised_at
from sinkv2.source.lib._sequence_reader import SequenceReader
from sinkv2.source.lib._sequence_source import SequenceSource, check_int
from sinkv2.source.lib._sequence_splits import NumberSequenceSplit, cut_at

if TYPE_CHECKING:
    import pyarrow

__all__ = ["DataGeneratorSource"]

Row = Mapping[str, Any] | Sequence[Any]


@final
class DataGeneratorSource(SequenceSource):
    """Rows ``generator_function(0)``, ``generator_function(1)``, ... (Flink's datagen source).

    The indices are a `NumberSequenceSource`'s, cut into splits the same way, so a
    replay after a restore calls the function with the same indices again: make it a
    pure function of the index (seed any randomness with it) and every crash replays
    the same rows. Rows are dicts keyed by ``schema``'s names, or tuples in its
    order; they leave in Arrow batches of ``batch_size``. A raise in the function
    fails the reader with `SourceReaderError`, naming the index (Flink's "threw an
    exception on this input"), the function's exception chained.

    On a micro-batch engine (Spark) the source tells how far each split can be read
    (`SupportsEndPositions`): a bounded split to its end, counted, so
    ``maxRecordsPerTrigger`` bounds a micro-batch; an endless one (``count=None``) as
    far as ``records_per_second`` allows since the query (re)started, as Spark's
    ``rate`` source does - there the rate paces the micro-batches, not the readers.

    Args:
        generator_function: ``index -> row``. Pickled to every reader.
        count: How many rows; ``None`` for no end (``CONTINUOUS_UNBOUNDED``; Flink
            writes ``Long.MAX_VALUE`` and stays ``BOUNDED``).
        schema: The rows' ``pyarrow.Schema``.
        records_per_second: The whole source's rate limit, shared evenly by the
            readers (Flink's ``RateLimiterStrategy.perSecond``); ``None``: as fast as
            the function goes. An endless generator needs it on a micro-batch
            engine: it is how many rows each micro-batch has to read.
        batch_size: Rows per emitted batch, at most.
        num_splits: How many splits; default: the readers' parallelism.

    Raises:
        SinkConfigurationError: A bad argument, named.
    """

    def __init__(
        self,
        generator_function: Callable[[int], Row],
        count: int | None,
        schema: pyarrow.Schema,
        *,
        records_per_second: float | None = None,
        batch_size: int = 1024,
        num_splits: int | None = None,
    ) -> None:
        if not callable(generator_function):
            raise SinkConfigurationError(
                f"'generator_function' must be a callable index -> row (got "
                f"{describe(generator_function)})"
            )
        if count is not None:
            check_int("count", count, minimum=0)
        if type(schema).__name__ != "Schema" or not type(schema).__module__.startswith("pyarrow"):
            raise SinkConfigurationError(
                f"'schema' must be a pyarrow.Schema (got {describe(schema)}); e.g. "
                "pyarrow.schema([('id', pyarrow.int64())])"
            )
        if records_per_second is not None and (
            isinstance(records_per_second, bool)
            or not isinstance(records_per_second, int | float)
            or not records_per_second > 0
        ):
            raise SinkConfigurationError(
                f"'records_per_second' must be a positive number or None (got "
                f"{describe(records_per_second)})"
            )
        last = None if count is None else count - 1
        super().__init__(0, last, batch_size=batch_size, num_splits=num_splits)
        self.generator_function = generator_function
        self.count = count
        self.schema = schema
        self.records_per_second = records_per_second
        self._anchors: dict[str, tuple[float, int]] = {}

    def create_reader(self, reader_context: SourceReaderContext) -> SequenceReader:
        """A reader that calls the function for each index of its splits.

        The rate is the readers' when the splits are theirs to pace: always for a
        bounded generator (Flink's rate limiter), and for the endless splits of an
        endless one; its slices cut by `cut_split` were paced by the engine already.
        """
        rate = None
        if self.records_per_second is not None:
            rate = self.records_per_second / reader_context.current_parallelism()
        return SequenceReader(
            reader_context,
            self._batch,
            batch_size=self.batch_size,
            rate=rate,
            pace_ended_splits=self.count is not None,
        )

    def end_positions(self, splits: Sequence[NumberSequenceSplit]) -> list[int]:
        """Each split's last index a micro-batch may read now.

        A bounded split's own last index. An endless split's is what the rate made due
        since the split was first seen by this source object (the query's start or
        restart): ``records_per_second / splits`` indices a second.

        Raises:
            SinkConfigurationError: An endless generator without ``records_per_second``:
                nothing says how many rows a micro-batch reads.
        """
        ends = []
        for split in splits:
            if split.to is not None:
                ends.append(split.to)
                continue
            if self.records_per_second is None:
                raise SinkConfigurationError(
                    "DataGeneratorSource with count=None and no records_per_second cannot be "
                    "streamed by a micro-batch engine: nothing says how many rows a "
                    "micro-batch reads. Set records_per_second (as Spark's rate source's "
                    "rowsPerSecond), or a count"
                )
            now = time.monotonic()
            since, first = self._anchors.setdefault(split.id, (now, split.current))
            due = int((now - since) * self.records_per_second / split.step)
            ends.append(first + (due - 1) * split.step)
        return ends

    def cut_split(
        self, split: NumberSequenceSplit, end: object, max_records: int | None
    ) -> SplitCut[NumberSequenceSplit]:
        """``split`` up to index ``end`` (and at most ``max_records`` indices), and the rest."""
        if isinstance(end, bool) or not isinstance(end, int):
            raise SinkConfigurationError(
                f"DataGeneratorSource.cut_split takes an index from end_positions (got "
                f"{describe(end)})"
            )
        return cut_at(split, end, max_records)

    def _batch(self, indices: range) -> pyarrow.RecordBatch:
        import pyarrow  # noqa: PLC0415  # only readers need it; importing the source must not

        rows: list[Row] = []
        try:
            rows.extend(map(self.generator_function, indices))  # keeps what came before a raise
        except Exception as error:
            failed = SourceReaderError(
                f"generator_function {self.generator_function!r} threw an exception on this "
                f"input: {indices[len(rows)]} ({type(error).__name__}: {error})"
            )
            failed.add_note(raised_at(error))  # Spark drops __cause__, keeps notes
            raise failed from error
        dicts = bool(rows) and isinstance(rows[0], Mapping)
        if not self._all_fit(rows, dicts):
            for index, row in zip(indices, rows, strict=True):
                self._check_row(index, row, dicts)
        try:
            if dicts:
                return pyarrow.RecordBatch.from_pylist(rows, schema=self.schema)
            columns = zip(*rows, strict=True)
            arrays = [pyarrow.array(c, f.type) for c, f in zip(columns, self.schema, strict=True)]
            return pyarrow.record_batch(arrays, schema=self.schema)
        except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError) as error:
            raise SinkConfigurationError(
                f"generator_function's rows for indices {indices.start}..{indices.stop - 1} do "
                f"not fit the schema ({error}); return values of the schema's types"
            ) from error

    def _all_fit(self, rows: list[Row], dicts: bool) -> bool:
        """The quick test, once per batch: every row of the schema's columns.

        A dict row must have exactly the schema's names (a misspelt key would otherwise
        become a column of nulls, as ``from_pylist`` fills what is missing); a tuple
        row the schema's width. A row of another kind fails Arrow's conversion, which
        `_batch` reports. Comparing a dict's keys with a set is one C call per row.
        """
        names = self.schema.names
        if dicts:
            keys = frozenset(names)
            try:
                return all(row.keys() == keys for row in rows)  # type: ignore[union-attr]
            except AttributeError:  # a row that is not a dict among dicts
                return False
        width = len(names)
        try:
            return all(len(row) == width for row in rows)
        except TypeError:  # a row without a length: neither a dict nor a tuple
            return False

    def _check_row(self, index: int, row: Row, dicts: bool) -> None:
        """Refuse a row that is not of the first row's kind or not of the schema's columns."""
        names = self.schema.names
        if dicts:
            fits = isinstance(row, Mapping) and set(row) == set(names)
        else:
            fits = isinstance(row, tuple | list) and len(row) == len(names)
        if not fits:
            raise SinkConfigurationError(
                f"generator_function({index}) returned {describe(row)}; every row must be a "
                f"dict with exactly the keys {names}, or every row a tuple of "
                f"{len(names)} values in that order"
            )

    def get_produced_type(self) -> pyarrow.Schema:
        """The ``schema`` given."""
        return self.schema

    def __repr__(self) -> str:
        return f"DataGeneratorSource({self.generator_function!r}, count={self.count})"
