"""Flink's reader framework: `SourceReaderBase` and `SingleThreadMultiplexSourceReaderBase`.

The reader's own thread (the task's) emits; a fetcher thread runs the
`SplitReader`; a bounded queue (Flink's default capacity: 2 fetches) is between
them. A subclass says how a split becomes mutable split state and back
(`initialized_state`, `to_split_type`) and what to do when splits finish
(`on_split_finished`); the `RecordEmitter` advances the split state with every
element it emits, so `snapshot_state` always holds the position after the last
record emitted.

One difference from Flink, for Python's per-call cost: a `poll_next` call emits
every record of the current split in the current fetch, not one record. A
checkpoint still falls between two calls, so it sees exactly what was emitted.
The call that emits a fetch's last records also finishes the fetch (reports the
splits that ended with it) and returns the status after it, as Flink's contract
asks: ``NOTHING_AVAILABLE`` if the queue is empty while the fetcher still works.
So a fetch of one split costs one `poll_next`, one `is_available` and, on the
fetcher's side, one `ElementQueue.put`.
"""

from __future__ import annotations

import abc
import concurrent.futures
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from sinkv2._metrics import Counter
from sinkv2._text import describe
from sinkv2.source._boundedness import InputStatus
from sinkv2.source._context import SourceReaderContext
from sinkv2.source._errors import SourceContractError
from sinkv2.source._output import ReaderOutput, SourceOutput
from sinkv2.source._reader import SourceReader
from sinkv2.source.reader._emitter import RecordEmitter
from sinkv2.source.reader._fetcher import SingleThreadFetcherManager
from sinkv2.source.reader._queue import DEFAULT_ELEMENT_QUEUE_CAPACITY, ElementQueue, done_future
from sinkv2.source.reader._records import RecordsBySplits, RecordsWithSplitIds
from sinkv2.source.reader._split_reader import SplitReader

if TYPE_CHECKING:
    import pyarrow

__all__ = ["SingleThreadMultiplexSourceReaderBase", "SourceReaderBase"]

E = TypeVar("E")
T = TypeVar("T")
SplitT = TypeVar("SplitT")
SplitStateT = TypeVar("SplitStateT")

NUM_RECORDS_IN = "numRecordsIn"

_NO_RECORD = object()  # what a split's last record is before any was emitted

_BASE_STATE = frozenset(
    {"_queue", "_fetchers", "_emitter", "_context", "_states", "_fetch", "_split"}
    | {"_no_more_splits", "_closed", "_records_in", "context"}
)
"""What `SourceReaderBase.__init__` sets: missing, a subclass skipped ``super().__init__``."""


def _base_init(cls: type) -> str:
    """The framework base's ``__init__`` that ``cls``'s ``super().__init__`` should reach."""
    names = {base.__name__ for base in cls.__mro__}
    if "SingleThreadMultiplexSourceReaderBase" in names:
        return (
            "SingleThreadMultiplexSourceReaderBase.__init__(split_reader_supplier, "
            "record_emitter, context)"
        )
    return "SourceReaderBase.__init__(queue, fetcher_manager, record_emitter, context)"


class _CountingOutput(Generic[T]):
    """A split's output that counts the rows it passes on (``numRecordsIn``).

    It holds the inner output's bound methods, so a record costs one call here and
    one there, with no attribute look-up in between.
    """

    __slots__ = ("_collect", "_collect_batch", "rows")

    def __init__(self, inner: SourceOutput[T]) -> None:
        self._collect = inner.collect
        self._collect_batch = inner.collect_batch
        self.rows = 0

    def collect(self, record: T, timestamp: int | None = None) -> None:
        self.rows += 1
        self._collect(record, timestamp)

    def collect_batch(self, batch: pyarrow.RecordBatch) -> None:
        self.rows += batch.num_rows
        self._collect_batch(batch)


class _SplitContext(Generic[T, SplitStateT]):
    __slots__ = ("output", "split_id", "state")

    def __init__(self, split_id: str, state: SplitStateT) -> None:
        self.split_id = split_id
        self.state = state
        self.output: _CountingOutput[T] | None = None


class SourceReaderBase(
    SourceReader[T, SplitT], Generic[E, T, SplitT, SplitStateT], metaclass=abc.ABCMeta
):
    """A `SourceReader` whose records come from a fetcher thread (Flink's ``SourceReaderBase``).

    Subclasses implement `initialized_state`, `to_split_type` and
    `on_split_finished`; they may override `start` (e.g. to send the first split
    request when nothing was restored) and must call ``super()`` in what else they
    override.

    Type parameters: ``E`` what the split reader fetches (a row, or a whole
    ``pyarrow.RecordBatch`` on the Arrow path), ``T`` what is emitted, ``SplitT`` the
    split, ``SplitStateT`` the mutable state of a split being read.
    """

    def __init__(
        self,
        queue: ElementQueue[RecordsWithSplitIds[E]],
        fetcher_manager: SingleThreadFetcherManager[E, SplitT],
        record_emitter: RecordEmitter[E, T, SplitStateT],
        context: SourceReaderContext,
    ) -> None:
        self._queue = queue
        self._fetchers = fetcher_manager
        self._emitter = record_emitter
        self._context = context
        self._states: dict[str, _SplitContext[T, SplitStateT]] = {}
        self._fetch: RecordsWithSplitIds[E] | None = None
        self._split: _SplitContext[T, SplitStateT] | None = None
        self._no_more_splits = False
        self._closed = False
        self._records_in: Counter = context.metric_group().counter(NUM_RECORDS_IN)

    if not TYPE_CHECKING:  # a fallback for a missing attribute only; mypy sees none

        def __getattr__(self, name: str) -> object:
            """Name the usual cause when the base's own state is missing."""
            if name in _BASE_STATE:
                raise AttributeError(
                    f"{type(self).__name__} has no {name}: its __init__ did not call "
                    f"{_base_init(type(self))}; call super().__init__(...) first"
                )
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
            )

    @property
    def context(self) -> SourceReaderContext:
        """The context this reader was created with."""
        return self._context

    @abc.abstractmethod
    def initialized_state(self, split: SplitT) -> SplitStateT:
        """The mutable state of ``split`` as it starts to be read (its position included)."""

    @abc.abstractmethod
    def to_split_type(self, split_id: str, split_state: SplitStateT) -> SplitT:
        """The split ``split_id`` at the position ``split_state`` reached (for snapshots)."""

    @abc.abstractmethod
    def on_split_finished(self, finished_split_ids: dict[str, SplitStateT]) -> None:
        """Splits ended; e.g. ask for the next one with ``context.send_split_request()``."""

    def start(self) -> None:
        """Nothing to start: the fetcher thread starts with the first splits."""

    def poll_next(self, output: ReaderOutput[T]) -> InputStatus:
        """Emit the current split's records of the current fetch; see `SourceReader.poll_next`.

        A call that emitted returns the status after it, as Flink's contract says:
        ``MORE_AVAILABLE`` while the fetch holds more splits or the queue holds a
        fetch, or when the fetcher may have ended (the next call tells);
        ``NOTHING_AVAILABLE`` when the queue is empty and the fetcher plainly still
        works (the caller waits on `is_available`, which a fetch, an error or the
        fetcher turning idle completes). A fetch whose last records were emitted is
        finished in the same call (its finished splits dropped and reported): one
        call per fetch of one split, the hot path of the Arrow path.
        """
        while True:
            fetch = self._fetch
            if fetch is None:
                self._fetchers.check_errors()
                fetch = self._fetch = self._queue.poll()
                if fetch is None:
                    # Checked again after the poll, which forgets notifications: an error
                    # (or an end) signalled since is seen here or wakes the caller later.
                    self._fetchers.check_errors()
                    return self._finished_or_available_later()
            split = self._split or self._move_to_next_split(fetch, output)
            if split is None:  # the fetch is done and finished: poll the next one
                continue
            emitted = self._emit_split_records(fetch, split)
            # This split's records in this fetch are out: move on now.
            if self._move_to_next_split(fetch, output) is not None:
                if emitted:
                    return InputStatus.MORE_AVAILABLE
            elif emitted:
                if self._queue.is_empty() and self._fetchers.busy():
                    return InputStatus.NOTHING_AVAILABLE
                return InputStatus.MORE_AVAILABLE

    def _emit_split_records(
        self, fetch: RecordsWithSplitIds[E], split: _SplitContext[T, SplitStateT]
    ) -> bool:
        """Emit every record ``fetch`` holds of ``split``, advancing its state; whether any."""
        records: Iterator[E]
        if isinstance(fetch, RecordsBySplits):  # final: exactly the class
            records = fetch.current_split_records()  # no method call per record
        else:
            records = iter(fetch.next_record_from_split, None)
        emit = self._emitter.emit_record
        split_output = split.output
        assert split_output is not None  # set when the split became current
        state = split.state
        rows = split_output.rows
        record: object = _NO_RECORD
        for record in records:
            emit(record, split_output, state)
        if split_output.rows != rows:
            self._records_in.inc(split_output.rows - rows)
        return record is not _NO_RECORD

    def _move_to_next_split(
        self, fetch: RecordsWithSplitIds[E], output: ReaderOutput[T]
    ) -> _SplitContext[T, SplitStateT] | None:
        """Make the fetch's next split current; ``None`` when none is left (fetch finished)."""
        split_id = fetch.next_split()
        if split_id is None:
            self._finish_fetch(fetch, output)
            return None
        split = self._states.get(split_id)
        if split is None:
            raise SourceContractError(
                f"the split reader fetched records of split {split_id!r}, which this reader "
                f"does not hold (it holds {sorted(self._states)}); a SplitReader may only "
                "return records of splits added by handle_splits_changes",
                method="fetch",
                split_id=split_id,
            )
        if split.output is None:
            split.output = _CountingOutput(output.create_output_for_split(split_id))
        self._split = split
        return split

    def _finish_fetch(self, fetch: RecordsWithSplitIds[E], output: ReaderOutput[T]) -> None:
        finished: dict[str, SplitStateT] = {}
        for split_id in fetch.finished_splits():
            split = self._states.pop(split_id, None)
            if split is None:
                raise SourceContractError(
                    f"the split reader reported split {split_id!r} finished, which this reader "
                    f"does not hold (it holds {sorted(self._states)})",
                    method="fetch",
                    split_id=split_id,
                )
            output.release_output_for_split(split_id)
            finished[split_id] = split.state
        self._fetch = None
        self._split = None
        fetch.recycle()
        if finished:
            self.on_split_finished(finished)

    def _finished_or_available_later(self) -> InputStatus:
        none_left = self._fetchers.maybe_shutdown_finished_fetchers()
        if not (self._no_more_splits and none_left):
            return InputStatus.NOTHING_AVAILABLE
        if self._queue.is_empty():
            self._fetchers.check_errors()
            if self._states:
                raise SourceContractError(
                    f"the split fetcher stopped while splits {sorted(self._states)} were not "
                    "finished; a SplitReader must report every split it ends in finished_splits()",
                    method="fetch",
                    split_id=next(iter(self._states)),
                )
            return InputStatus.END_OF_INPUT
        return InputStatus.MORE_AVAILABLE

    def is_available(self) -> concurrent.futures.Future[None]:
        """Done when a fetch is ready (or the input ended, or the fetcher failed)."""
        if self._fetch is not None:
            return done_future()
        return self._queue.availability()

    def add_splits(self, splits: list[SplitT]) -> None:
        """Start reading ``splits`` from the positions they carry.

        Raises:
            SourceContractError: A split is already held by this reader.
        """
        ids = []
        for split in splits:
            get_id = getattr(split, "split_id", None)
            split_id = get_id() if callable(get_id) else None
            if not isinstance(split_id, str):
                raise SourceContractError(
                    f"add_splits() got {describe(split)}, whose split_id() is "
                    f"{describe(split_id) if callable(get_id) else 'missing'}: not a SourceSplit "
                    "with a str id (a split serializer's deserialize() must return the split it "
                    "serialized)",
                    method="add_splits",
                )
            if split_id in self._states or split_id in ids:
                raise SourceContractError(
                    f"split {split_id!r} was added to reader "
                    f"{self._context.get_index_of_subtask()} while it already holds it; an "
                    "enumerator must assign each split once",
                    method="add_splits",
                    split_id=split_id,
                )
            ids.append(split_id)
        for split_id, split in zip(ids, splits, strict=True):
            self._states[split_id] = _SplitContext(split_id, self.initialized_state(split))
        if splits:
            self._fetchers.add_splits(list(splits), ids)

    def notify_no_more_splits(self) -> None:
        """End the input once the current splits are done."""
        self._no_more_splits = True
        self._queue.notify_available()

    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """Every unfinished split, at the position after the last record emitted."""
        return [
            self.to_split_type(split_id, split.state) for split_id, split in self._states.items()
        ]

    def close(self) -> None:
        """Stop the fetcher thread and close the split reader."""
        if not self._closed:
            self._closed = True
            self._fetchers.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(subtask={self._context.get_index_of_subtask()}, "
            f"splits={sorted(self._states)}, no_more_splits={self._no_more_splits})"
        )


class SingleThreadMultiplexSourceReaderBase(SourceReaderBase[E, T, SplitT, SplitStateT]):
    """A `SourceReaderBase` with one fetcher thread and one `SplitReader` for all its splits.

    The split reader reads its splits one after another (files) or interleaved
    (partitions of a log): Flink's ``SingleThreadMultiplexSourceReaderBase``.

    Args:
        split_reader_supplier: Makes the split reader, in the reader's thread, when
            the first splits arrive (again if splits come after all had finished).
        record_emitter: Emits each fetched element and advances its split's state.
        context: The reader's context.
        element_queue_capacity: Fetches handed over but not yet emitted, at most.
    """

    def __init__(
        self,
        split_reader_supplier: Callable[[], SplitReader[E, SplitT]],
        record_emitter: RecordEmitter[E, T, SplitStateT],
        context: SourceReaderContext,
        *,
        element_queue_capacity: int = DEFAULT_ELEMENT_QUEUE_CAPACITY,
    ) -> None:
        if not callable(split_reader_supplier):
            raise TypeError(
                f"split_reader_supplier must be a callable that returns a SplitReader (got "
                f"{describe(split_reader_supplier)}); pass e.g. lambda: MySplitReader(...)"
            )
        if (
            not isinstance(element_queue_capacity, int)
            or isinstance(element_queue_capacity, bool)
            or element_queue_capacity < 1
        ):
            raise ValueError(
                f"element_queue_capacity must be an int >= 1 (got "
                f"{describe(element_queue_capacity)}); Flink's default is 2"
            )
        queue: ElementQueue[RecordsWithSplitIds[E]] = ElementQueue(element_queue_capacity)
        super().__init__(
            queue,
            SingleThreadFetcherManager(queue, split_reader_supplier),
            record_emitter,
            context,
        )
