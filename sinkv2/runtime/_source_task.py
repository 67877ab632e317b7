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

from collections.abc import Iterator, Sequence
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
        self._ready: list[pyarrow.RecordBatch] = []
        self.rows_out = 0

    def collect(self, record: Any, timestamp: int | None = None) -> None:
        self._rows.append(record)
        if len(self._rows) >= self._batch_rows:
            self.flush()

    def collect_batch(self, batch: pyarrow.RecordBatch) -> None:
        self.flush()
        conformed = self._conform(batch)
        self.rows_out += conformed.num_rows
        self._ready.append(conformed)

    def create_output_for_split(self, split_id: str) -> ArrowBatchOutput:
        return self

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
        batch = self._from_rows(rows)
        self.rows_out += batch.num_rows
        self._ready.append(batch)

    def _from_rows(self, rows: list[Any]) -> pyarrow.RecordBatch:
        import pyarrow as pa  # noqa: PLC0415  # importing the runtime must not load pyarrow

        if isinstance(rows[0], dict):
            for index, row in enumerate(rows):
                if not isinstance(row, dict) or row.keys() != self._name_set:
                    raise self._row_error(row, index)
            columns = [[row[name] for row in rows] for name in self._names]
        else:
            width = len(self._names)
            for index, row in enumerate(rows):
                if not isinstance(row, tuple) or len(row) != width:
                    raise self._row_error(row, index)
            columns = [list(column) for column in zip(*rows, strict=True)]
        arrays = []
        for field, column in zip(self._schema, columns, strict=True):
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as error:
                raise SourceContractError(
                    f"a record's column {field.name!r} does not fit the produced type "
                    f"{field.type} ({error}); emit values of the type get_produced_type() names",
                    method="collect",
                ) from error
        return self._conform(pa.RecordBatch.from_arrays(arrays, names=list(self._names)))

    def _row_error(self, row: object, index: int) -> SourceContractError:
        if isinstance(row, dict):
            missing = sorted(self._name_set - row.keys())
            extra = sorted(str(key) for key in row.keys() - self._name_set)
            detail = f"missing {missing}" if missing else ""
            detail += ("; " if missing and extra else "") + (f"unknown {extra}" if extra else "")
        elif isinstance(row, tuple):
            detail = f"{len(row)} values for {len(self._names)} columns"
        else:
            detail = f"{describe(row)} is neither a dict nor a tuple"
        return SourceContractError(
            f"record {short_repr(row)} (row {index} of a batch) does not match the produced "
            f"schema {list(self._names)}: {detail}; emit a dict keyed by those names or a tuple "
            "in their order",
            method="collect",
        )

    def _conform(self, batch: Any) -> pyarrow.RecordBatch:
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
                raise SourceContractError(
                    f"column {field.name!r} is declared not nullable and a batch holds "
                    f"{column.null_count} null(s); emit values or declare it nullable",
                    method="collect_batch",
                )
        try:
            return batch.cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise SourceContractError(
                f"collect_batch() got {batch.schema}, which does not cast to the produced "
                f"schema {self._schema} ({error})",
                method="collect_batch",
            ) from error


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
                reader.is_available().result()
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
