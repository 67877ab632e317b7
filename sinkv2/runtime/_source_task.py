"""Read one subtask's splits to their end, as Arrow batches of one exact schema.

Where an engine runs a reader for one task and no longer (Spark creates a reader per
task; nothing survives it), the reader's life is: created, started, given all its
splits and every event the enumerator sent it, told "no more splits", polled until
``END_OF_INPUT``, checked to hold no unfinished split, closed. Records come out as
Arrow record batches in the schema the engine asked for (Spark checks the first
batch's schema for equality, nullability included), whether the reader emits rows
(dicts or tuples) or whole batches (`collect_batch`). Needs pyarrow: imported when a
subtask is read, never at import time.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from sinkv2._metrics import InMemoryMetricGroup
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2._text import describe, short_repr
from sinkv2.source import (
    InputStatus,
    SourceContractError,
    SourceEvent,
    check_reader,
)

if TYPE_CHECKING:
    import pyarrow

__all__ = ["DEFAULT_BATCH_ROWS", "ArrowBatchOutput", "TaskReaderContext", "read_subtask"]

logger = logging.getLogger("sinkv2.source")

WAIT_WARNING_S: Final = 60.0
"""A reader waiting this long on ``is_available()`` is logged as a WARNING, and again as often."""

DEFAULT_BATCH_ROWS: Final = 10_000
"""Rows per Arrow batch built from emitted rows: Spark's ``maxRecordsPerBatch`` default."""


class TaskReaderContext:
    """A reader's context for one task: every split is given up front, nothing goes back.

    A split request is answered by the plan before the task starts, so it is a no-op
    here. An event to the enumerator cannot be delivered: the enumerator finished
    planning before any task ran; the call fails clearly instead of dropping it.
    """

    def __init__(self, subtask: int, parallelism: int) -> None:
        self._subtask = subtask
        self._parallelism = parallelism
        self._metrics = InMemoryMetricGroup()

    def get_index_of_subtask(self) -> int:
        return self._subtask

    def current_parallelism(self) -> int:
        return self._parallelism

    def send_split_request(self) -> None:
        """Nothing to do: this task's splits were all assigned before it started."""

    def send_source_event_to_coordinator(self, source_event: SourceEvent) -> None:
        raise SourceContractError(
            f"subtask {self._subtask} sent {short_repr(source_event)} to the enumerator, which "
            "does not run while a bounded read's tasks read (every split is planned before); "
            "a reader of a bounded read cannot depend on events to the enumerator",
            method="send_source_event_to_coordinator",
        )

    def metric_group(self) -> InMemoryMetricGroup:
        return self._metrics


class ArrowBatchOutput:
    """A `ReaderOutput` that turns what a reader emits into batches of one Arrow schema.

    Rows (dicts keyed by the schema's names, or tuples in its order) are gathered
    into batches of ``batch_rows``; a batch from `collect_batch` is conformed to the
    schema (same names; types cast; no null in a non-nullable column). Event
    timestamps are dropped: Spark has no per-record timestamp (use an event-time
    column and ``withWatermark``).
    """

    def __init__(self, schema: pyarrow.Schema, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self._schema = schema
        self._names = tuple(schema.names)
        self._name_set = frozenset(self._names)
        self._batch_rows = batch_rows
        self._rows: list[Any] = []
        self._runs: list[
            tuple[int, str | None]
        ] = []  # (first row, split) where a split's rows start
        self._ready: list[pyarrow.RecordBatch] = []
        self.rows_out = 0

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._collect(record, None)

    def _collect(self, record: Any, split_id: str | None) -> None:
        if not self._runs or self._runs[-1][1] != split_id:
            self._runs.append((len(self._rows), split_id))
        self._rows.append(record)
        if len(self._rows) >= self._batch_rows:
            self.flush()

    def collect_batch(self, batch: pyarrow.RecordBatch) -> None:
        self._collect_batch(batch, None)

    def _collect_batch(self, batch: pyarrow.RecordBatch, split_id: str | None) -> None:
        self.flush()
        conformed = self._conform(batch, lambda _: split_id)
        self.rows_out += conformed.num_rows
        self._ready.append(conformed)

    def create_output_for_split(self, split_id: str) -> _SplitOutput:
        """An output that names ``split_id`` in the errors of what it is given."""
        return _SplitOutput(self, split_id)

    def release_output_for_split(self, split_id: str) -> None:
        """Nothing is kept per split."""

    def take(self) -> list[pyarrow.RecordBatch]:
        """The batches completed since the last call."""
        ready, self._ready = self._ready, []
        return ready

    def flush(self) -> None:
        """Turn the rows gathered so far into a batch."""
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        runs, self._runs = self._runs, []
        batch = self._from_rows(rows, runs)
        self.rows_out += batch.num_rows
        self._ready.append(batch)

    def _from_rows(
        self, rows: list[Any], runs: list[tuple[int, str | None]]
    ) -> pyarrow.RecordBatch:
        import pyarrow as pa  # noqa: PLC0415  # importing the runtime must not load pyarrow

        def split_of(index: int) -> str | None:
            return next((split for first, split in reversed(runs) if first <= index), None)

        if isinstance(rows[0], dict):
            for index, row in enumerate(rows):
                if not isinstance(row, dict) or row.keys() != self._name_set:
                    raise self._row_error(row, index, split_of(index))
            columns = [[row[name] for row in rows] for name in self._names]
        else:
            width = len(self._names)
            for index, row in enumerate(rows):
                if not isinstance(row, tuple) or len(row) != width:
                    raise self._row_error(row, index, split_of(index))
            columns = [list(column) for column in zip(*rows, strict=True)]
        arrays = []
        for field, column in zip(self._schema, columns, strict=True):
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as error:
                index = _first_misfit(column, field.type)
                raise SourceContractError(
                    f"a record's column {field.name!r} does not fit the produced type "
                    f"{field.type} ({error}){_where(index, split_of(index))}; emit values of "
                    "the type get_produced_type() names",
                    method="collect",
                    split_id=split_of(index),
                ) from error
        batch = pa.RecordBatch.from_arrays(arrays, names=list(self._names))
        return self._conform(batch, split_of)

    def _row_error(self, row: object, index: int, split_id: str | None) -> SourceContractError:
        if isinstance(row, dict):
            missing = sorted(self._name_set - row.keys())
            extra = sorted(str(key) for key in row.keys() - self._name_set)
            detail = f"missing {missing}" if missing else ""
            detail += ("; " if missing and extra else "") + (f"unknown {extra}" if extra else "")
        elif isinstance(row, tuple):
            detail = f"{len(row)} values for {len(self._names)} columns"
        else:
            detail = f"{describe(row)} is neither a dict nor a tuple"
        of_split = "" if split_id is None else f" of split {split_id!r}"
        return SourceContractError(
            f"record {short_repr(row)}{of_split} (row {index} of a batch) does not match the "
            f"produced schema {list(self._names)}: {detail}; emit a dict keyed by those names "
            "or a tuple in their order",
            method="collect",
            split_id=split_id,
        )

    def _conform(self, batch: Any, split_of: Callable[[int], str | None]) -> pyarrow.RecordBatch:
        import pyarrow as pa  # noqa: PLC0415  # see _from_rows

        if not isinstance(batch, pa.RecordBatch):
            raise SourceContractError(
                f"collect_batch() got {describe(batch)}; pass a pyarrow.RecordBatch",
                method="collect_batch",
            )
        if batch.schema.equals(self._schema):
            return batch
        if tuple(batch.schema.names) != self._names:
            raise SourceContractError(
                f"collect_batch() got columns {batch.schema.names}; the produced schema has "
                f"{list(self._names)}, in that order",
                method="collect_batch",
            )
        for field, column in zip(self._schema, batch.columns, strict=True):
            if not field.nullable and column.null_count:
                index = column.is_null().to_pylist().index(True)
                raise SourceContractError(
                    f"column {field.name!r} is declared not nullable and a batch holds "
                    f"{column.null_count} null(s){_where(index, split_of(index))}; emit values "
                    "or declare it nullable",
                    method="collect_batch",
                    split_id=split_of(index),
                )
        try:
            return batch.cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            of_split = "" if split_of(0) is None else f" for split {split_of(0)!r}"
            raise SourceContractError(
                f"collect_batch() got {batch.schema}{of_split}, which does not cast to the "
                f"produced schema {self._schema} ({error})",
                method="collect_batch",
                split_id=split_of(0),
            ) from error


class _SplitOutput:
    """`ArrowBatchOutput` for one split: the split is named when what it emits does not fit."""

    def __init__(self, output: ArrowBatchOutput, split_id: str) -> None:
        self._output = output
        self._split_id = split_id

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._output._collect(record, self._split_id)  # its own helper

    def collect_batch(self, batch: pyarrow.RecordBatch) -> None:
        self._output._collect_batch(batch, self._split_id)  # its own helper


def _first_misfit(column: list[Any], arrow_type: Any) -> int:
    """The index of the first value of ``column`` that is not of ``arrow_type`` (0 if none)."""
    import pyarrow as pa  # noqa: PLC0415  # see ArrowBatchOutput._from_rows

    for index, value in enumerate(column):
        try:
            pa.array([value], type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return index
    return 0


def _where(index: int, split_id: str | None) -> str:
    """Where in a batch a bad value is: its row, and its split when known."""
    return f" in row {index} of a batch" + (
        "" if split_id is None else f", from split {split_id!r}"
    )


def read_subtask(
    source: Any,
    schema: pyarrow.Schema,
    *,
    subtask: int,
    parallelism: int,
    splits: Sequence[bytes],
    events: Sequence[SourceEvent] = (),
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pyarrow.RecordBatch]:
    """Read ``splits`` (framed by the source's split serializer) to their end.

    Raises:
        SourceContractError: The reader emitted a record that does not fit
            ``schema``, or ended its input with splits unfinished.
        SourceReaderError: The reader's split fetcher failed (the cause is chained).
    """
    serializer = source.get_split_serializer()
    restored = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed)
        for framed in splits
    ]
    try:
        yield from _read(source, schema, subtask, parallelism, restored, events, batch_rows)
    except Exception as error:
        error.add_note(
            f"(while subtask {subtask} of {parallelism} read split(s) {_ids(restored)} of "
            f"{short_repr(source)})"
        )
        raise


def _ids(splits: Sequence[Any]) -> list[object]:
    """The splits' ids, for messages (a split without a usable ``split_id()`` as itself)."""
    ids: list[object] = []
    for split in splits:
        try:
            ids.append(split.split_id())
        except Exception:  # noqa: BLE001  # a message must not fail on a broken split
            ids.append(short_repr(split))
    return ids


def _read(  # noqa: PLR0917  # read_subtask's arguments, passed on
    source: Any,
    schema: pyarrow.Schema,
    subtask: int,
    parallelism: int,
    restored: list[Any],
    events: Sequence[SourceEvent],
    batch_rows: int,
) -> Iterator[pyarrow.RecordBatch]:
    reader = source.create_reader(TaskReaderContext(subtask, parallelism))
    check_reader(reader)
    output = ArrowBatchOutput(schema, batch_rows)
    try:
        reader.start()
        if restored:
            reader.add_splits(restored)
        for event in events:
            reader.handle_source_events(event)
        reader.notify_no_more_splits()
        while True:
            status = reader.poll_next(output)
            yield from output.take()
            if status is InputStatus.END_OF_INPUT:
                break
            if status is InputStatus.NOTHING_AVAILABLE:
                _wait_available(reader, subtask, restored)
            elif status is not InputStatus.MORE_AVAILABLE:
                raise SourceContractError(
                    f"poll_next() returned {short_repr(status)}; return an InputStatus",
                    method="poll_next",
                )
        output.flush()
        yield from output.take()
        left = reader.snapshot_state(0)
        if left:
            raise SourceContractError(
                f"the reader of subtask {subtask} reported END_OF_INPUT but its snapshot still "
                f"holds {len(left)} unfinished split(s) ({short_repr(left)}); a reader ends its "
                "input only when every split it was given is finished",
                method="poll_next",
            )
    finally:
        reader.close()


def _wait_available(reader: Any, subtask: int, splits: Sequence[Any]) -> None:
    """Wait on ``reader.is_available()``, saying every `WAIT_WARNING_S` that it still waits.

    There is no timeout, as in Flink (a source may wait on a slow system for long);
    a reader that never becomes available leaves a WARNING on the ``sinkv2.source``
    logger (the task's log) every `WAIT_WARNING_S` seconds, naming its splits.
    """
    future = reader.is_available()
    if not isinstance(future, concurrent.futures.Future):
        raise SourceContractError(
            f"is_available() returned {describe(future)}; return a concurrent.futures.Future "
            "that completes when poll_next() has something to emit (a done one if it has now)",
            method="is_available",
        )
    waited = 0.0
    while True:
        try:
            future.result(timeout=WAIT_WARNING_S)
        except concurrent.futures.TimeoutError:
            waited += WAIT_WARNING_S
            logger.warning(
                "the reader of subtask %d has waited %.0f s on is_available() after poll_next() "
                "returned NOTHING_AVAILABLE, reading split(s) %s; a reader must complete that "
                "future when it has records or its input ended (the task waits for it)",
                subtask,
                waited,
                _ids(splits),
            )
        else:
            return
