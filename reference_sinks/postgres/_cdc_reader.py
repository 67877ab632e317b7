"""The CDC source's reader: a stream range by peeking the slot, a snapshot chunk from the copy.

A stopped split (a micro-batch's range) is read whole in one fetch and finished at its
stop; an open one (an engine with long-lived readers) is read up to the WAL flush
position each fetch, transaction by transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import pyarrow as pa

from reference_sinks.postgres._cdc_decode import Transaction, TupleDecoder
from reference_sinks.postgres._cdc_server import check_slot, flush_lsn
from reference_sinks.postgres._cdc_snapshot import read_chunk
from reference_sinks.postgres._cdc_split import CdcSplit
from reference_sinks.postgres._chunk_read import UnreadableValueError
from reference_sinks.postgres._source import PostgresReadError
from sinkv2.source import SourceReaderContext
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsChange,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["BEFORE", "CdcSourceReader", "CdcSplitReader"]


class _ReaderSettings(Protocol):
    """What a reader uses of its `PostgresCdcSource`."""

    @property
    def before(self) -> bool: ...

    @property
    def schema_name(self) -> str: ...

    @property
    def table_name(self) -> str: ...

    @property
    def batch_rows(self) -> int: ...

    @property
    def poll_interval_s(self) -> float: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def column_index(self) -> tuple[int, ...]: ...

    @property
    def all_names(self) -> tuple[str, ...]: ...

    @property
    def all_oids(self) -> tuple[int, ...]: ...

    @property
    def value_oids(self) -> tuple[int, ...]: ...

    @property
    def all_types(self) -> tuple[pa.DataType, ...]: ...

    def connect(self) -> psycopg.Connection[Any]: ...

    def transactions(
        self, connection: psycopg.Connection[Any], slot: str, upto: int, *, values: bool = True
    ) -> Iterator[Transaction]: ...


BEFORE = "_before"


@attrs.define
class _SplitState:
    split: CdcSplit
    position: int


@attrs.frozen
class _Chunk:
    batch: pa.RecordBatch
    position: int


class _Rows:
    """Builds Arrow batches of changes for one source."""

    def __init__(self, source: _ReaderSettings, decoder: TupleDecoder) -> None:
        self._source = source
        self._decoder = decoder
        self._index = source.column_index
        self.clear()

    def clear(self) -> None:
        self.count = 0
        self._columns: list[list[Any]] = [[] for _ in self._source.schema]

    def add(self, transaction: Transaction) -> None:
        before = self._source.before
        for seq, change in enumerate(transaction.changes):
            if change.op == "delete":
                assert change.old is not None
                values = self._decoder.values(change.old, op="delete")
            else:
                assert change.new is not None
                merged = self._decoder.merge(change)
                values = self._decoder.values(merged, op=change.op)
            row: list[Any] = [change.op, transaction.end_lsn, seq]
            row.extend(values[i] for i in self._index)
            if before:
                old = None if change.old is None else self._decoder.values(change.old, op=change.op)
                names = self._source.schema.field(BEFORE).type
                row.append(
                    None
                    if old is None
                    else {names.field(k).name: old[i] for k, i in enumerate(self._index)}
                )
            for column, value in zip(self._columns, row, strict=True):
                column.append(value)
            self.count += 1

    def add_snapshot(self, rows: list[tuple[int, tuple[bytes | None, ...]]], lsn: int) -> None:
        for number, text in rows:
            values = self._decoder.values(text, op="read")
            row: list[Any] = ["read", lsn, number]
            row.extend(values[i] for i in self._index)
            if self._source.before:
                row.append(None)
            for column, value in zip(self._columns, row, strict=True):
                column.append(value)
            self.count += 1

    def batch(self) -> pa.RecordBatch:
        """The rows added since `clear` as one batch.

        Raises:
            UnreadableValueError: A value has no Arrow value of its column's type
                (numeric NaN in a ``numeric(p, s)`` column, a multi-dimensional array);
                the message names the column and the change.
        """
        schema = self._source.schema
        return pa.RecordBatch.from_arrays(
            [
                self._array(values, field)
                for values, field in zip(self._columns, schema, strict=True)
            ],
            schema=schema,
        )

    def _array(self, values: list[Any], field: pa.Field) -> pa.Array:
        try:
            return pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as error:
            at = next(
                (i for i, value in enumerate(values) if not self._holds(value, field.type)), 0
            )
            value, lsn, seq = values[at], self._columns[1][at], self._columns[2][at]
            raise UnreadableValueError(
                f"column {field.name!r}: the value {value!r:.80} of the change "
                f"(_lsn {lsn}, _seq {seq}) has no Arrow value of type {field.type} ({error})"
            ) from error

    @staticmethod
    def _holds(value: Any, kind: pa.DataType) -> bool:
        try:
            pa.array([value], type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return False
        return True


class CdcSplitReader:
    """Reads the slot's split: a stopped split whole in one fetch, an open one up to now."""

    def __init__(self, source: _ReaderSettings) -> None:
        self._source = source
        self._connection = source.connect()
        self._decoder = TupleDecoder(
            self._connection,
            source.all_names,
            source.value_oids,
            source.all_types,
            wanted=source.column_index,
        )
        self._splits: dict[str, CdcSplit] = {}
        self._peeked: dict[str, int] = {}
        """Per open split: the flush position it was last peeked up to. A peek decodes the
        WAL from the slot's restart point, so an open split is peeked again only once the
        server has flushed more (a long-lived reader polls often)."""
        self._woken = False

    def fetch(self) -> RecordsBySplits[_Chunk]:
        """The changes of every split up to its stop (or up to the flush position now)."""
        records: dict[str, list[_Chunk]] = {}
        finished: list[str] = []
        for split_id, split in list(self._splits.items()):
            chunks, position = self._read(split)
            if chunks:
                records[split_id] = chunks
            if split.stop is not None or split.chunk_end is not None:
                finished.append(split_id)
                del self._splits[split_id]
            else:
                self._splits[split_id] = attrs.evolve(split, start=position)
        if not records and not finished and not self._woken:
            time.sleep(self._source.poll_interval_s)
        self._woken = False
        return RecordsBySplits(records, finished)

    def _read(self, split: CdcSplit) -> tuple[list[_Chunk], int]:
        try:
            return self._read_split(split)
        except UnreadableValueError as error:
            source = self._source
            raise PostgresReadError(
                f"PostgresCdcSource could not read split {split.split_id()!r} of "
                f"{source.schema_name}.{source.table_name}: {error}. Values Arrow cannot hold "
                "(numeric NaN in a numeric(p, s) column, infinite dates and timestamps, "
                "multi-dimensional arrays) fail the read, and a replay reads them again: "
                "leave the column out (columns=[...]), or start over under a new source_id "
                "(a new slot) once the table holds no such value",
                split_id=split.split_id(),
            ) from error

    def _read_split(self, split: CdcSplit) -> tuple[list[_Chunk], int]:
        source = self._source
        connection = self._connection
        if split.chunk_end is not None:
            stop = split.chunk_end if split.stop is None else split.stop
            rows = _Rows(source, self._decoder)
            rows.add_snapshot(
                read_chunk(
                    connection,
                    split.slot,
                    source.all_names,
                    split.start,
                    stop,
                    oids=(*source.all_oids, *source.value_oids),  # a domain's: its base's
                ),
                split.lsn,
            )
            return [_Chunk(rows.batch(), stop)], stop
        check_slot(connection, split.slot, split.start)
        upto = split.stop if split.stop is not None else flush_lsn(connection)
        if upto <= split.start:
            return [], split.start
        if split.stop is None:
            if self._peeked.get(split.split_id()) == upto:
                return [], split.start  # nothing flushed since the last look
            self._peeked[split.split_id()] = upto
        rows = _Rows(source, self._decoder)
        chunks: list[_Chunk] = []
        position = split.start
        for transaction in source.transactions(connection, split.slot, upto):
            if transaction.end_lsn <= split.start:
                continue
            if transaction.end_lsn > upto:
                break  # its commit record crosses the stop: the next range's
            rows.add(transaction)
            position = transaction.end_lsn
            if rows.count >= source.batch_rows:
                chunks.append(_Chunk(rows.batch(), position))
                rows.clear()
        if split.stop is not None:
            position = split.stop
        if rows.count or (chunks == [] and position != split.start):
            chunks.append(_Chunk(rows.batch(), position))
        return chunks, position

    def handle_splits_changes(self, splits_changes: SplitsChange[CdcSplit]) -> None:
        """Add splits."""
        for split in splits_changes.splits:
            self._splits[split.split_id()] = split

    def wake_up(self) -> None:
        """End a wait early."""
        self._woken = True

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


class _ChunkEmitter:
    def emit_record(self, element: _Chunk, output: Any, split_state: _SplitState) -> None:
        if element.batch.num_rows:
            output.collect_batch(element.batch)
        split_state.position = element.position


class CdcSourceReader(SingleThreadMultiplexSourceReaderBase[_Chunk, Any, CdcSplit, _SplitState]):
    """Reads the slot's split; a split with a stop ends exactly there."""

    def __init__(self, context: SourceReaderContext, source: _ReaderSettings) -> None:
        super().__init__(lambda: CdcSplitReader(source), _ChunkEmitter(), context)

    def initialized_state(self, split: CdcSplit) -> _SplitState:
        """The split at its position."""
        return _SplitState(split, split.start)

    def to_split_type(self, split_id: str, split_state: _SplitState) -> CdcSplit:
        """The split at the position reached."""
        return attrs.evolve(split_state.split, start=split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, _SplitState]) -> None:
        """Nothing to ask for."""
