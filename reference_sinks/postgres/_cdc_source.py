"""`PostgresCdcSource`: a table's changes from a logical replication slot, exactly once.

One split, the slot, that never ends; its position is an LSN. A micro-batch engine
cuts it (`sinkv2.source.SupportsEndPositions`) into ranges ``(start, stop]`` of whole
transactions, measured by each transaction's commit end LSN, and a range is read by
peeking the slot (``pg_logical_slot_peek_binary_changes(slot, stop, ...)``, pgoutput)
and keeping the transactions that commit in it. Peeking never moves the slot, so a
replayed micro-batch reads the same changes; the slot is advanced
(``pg_replication_slot_advance``) only by the enumerator's
``notify_checkpoint_complete(e)``, to the end of epoch ``e``, once the engine has
committed it downstream. See ``docs/sinks/postgres-cdc.md``.

How the enumerator learns where an epoch ends: the engine cuts the carried split on
the driver with this source's `cut_split` right before it snapshots the enumerator
for that epoch. Each cut is noted on the source (``from -> to``, on the driver only,
never pickled) and the enumerator's ``snapshot_state(e)`` follows the notes from its
own position, so its checkpoint for epoch ``e`` holds the end of ``e``. An engine that
never cuts (long-lived readers, the local engine) leaves no notes: the slot is then
never advanced, which is safe, never early.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa

from reference_sinks.postgres._cdc_decode import (
    Transaction,
    TupleDecoder,
    arrow_type,
    transactions,
)
from reference_sinks.postgres._cdc_server import (
    advance_slot,
    check_server,
    check_slot,
    create_slot,
    flush_lsn,
    format_lsn,
    lock_slot,
    peek_changes,
    qualified_table,
    slot_state,
)
from reference_sinks.postgres._cdc_snapshot import drop_copy, read_chunk, snapshot_into_copy
from reference_sinks.postgres._table import TableName, describe_table
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import (
    Boundedness,
    SourceEvent,
    SourceReaderContext,
    SplitCut,
    SplitEnumeratorContext,
)
from sinkv2.source.reader import (
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitsChange,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CdcEnumerator",
    "CdcEnumeratorState",
    "CdcSplit",
    "PostgresCdcSource",
]

OP: Final = "_op"
LSN: Final = "_lsn"
SEQ: Final = "_seq"
BEFORE: Final = "_before"
_META: Final = (OP, LSN, SEQ, BEFORE)
IDLE_ADVANCE_BYTES: Final = 16 << 20
"""A range with no change of the table is read (empty) only once it spans this much WAL,
so that the slot still moves on, and frees WAL, while the table is idle."""


@final
@attrs.frozen
class CdcSplit:
    """The slot from an LSN on, or one chunk of the snapshot copy.

    The stream split (``chunk_end`` is ``None``): transactions committing after
    ``start`` (an LSN), up to ``stop``. A snapshot chunk: the copy's rows numbered
    ``(start, stop or chunk_end]``, all read as of the slot's consistent point ``lsn``.

    Attributes:
        slot: The replication slot's name; the stream split's id.
        start: Where the split goes on from (exclusive): an LSN, or a row number.
        stop: Where a read ends (inclusive), or ``None`` for an open split.
        chunk_end: A snapshot chunk's last row number; ``None`` for the stream split.
        lsn: A snapshot chunk's LSN (the slot's consistent point).
    """

    slot: str
    start: int
    stop: int | None = None
    chunk_end: int | None = None
    lsn: int = 0

    def split_id(self) -> str:
        """The slot's name; ``<slot>#snapshot-<last row>`` for a snapshot chunk."""
        return self.slot if self.chunk_end is None else f"{self.slot}#snapshot-{self.chunk_end}"


@final
@attrs.frozen
class CdcEnumeratorState:
    """The enumerator's checkpoint.

    Attributes:
        replication_slot: The slot's name (``sinkv2 state show-source`` shows it).
        start: Where the split started when the slot was taken.
        committed: The LSN the slot was last advanced to by this source.
        position: The end of the last epoch snapshotted.
        ends: ``(epoch, end LSN)`` of the epochs not yet acknowledged.
        assigned: Whether the stream split was handed to a reader.
        chunks_left: The last row numbers of the snapshot chunks not read yet.
        snapshot_epoch: The epoch that read the last snapshot chunk; the stream split
            is handed out once it is acknowledged (-1: not yet; ``None``: no snapshot).
        checkpoint: The epoch this checkpoint was taken for.
        unassigned: ``(first, last)`` row numbers of the chunks not handed out yet.
    """

    replication_slot: str
    start: int
    committed: int
    position: int
    ends: tuple[tuple[int, int], ...] = ()
    assigned: bool = True
    chunks_left: tuple[int, ...] = ()
    snapshot_epoch: int | None = None
    checkpoint: int = -1
    unassigned: tuple[tuple[int, int], ...] = ()


class CdcEnumerator:
    """Takes (or makes) the slot, hands its one split out, advances it on acknowledgement."""

    def __init__(
        self,
        context: SplitEnumeratorContext[CdcSplit],
        source: PostgresCdcSource,
        state: CdcEnumeratorState | None,
    ) -> None:
        self._context = context
        self._source = source
        self._state = state
        self._pending: list[CdcSplit] = []
        self._connection: psycopg.Connection[Any] | None = None

    @property
    def slot(self) -> str:
        """The slot's name (known once started)."""
        assert self._state is not None, "start() first"
        return self._state.replication_slot

    def start(self) -> None:
        """Check the server, lock the slot, and make it if it is missing (fresh start only).

        Raises:
            SinkConfigurationError: A server requirement is not met.
            CommitStateError: The slot of a restored query is gone or invalidated, or
                another query holds it.
        """
        self._connection = self._source.connect()
        try:
            self._start(self._connection)
        except BaseException:
            self.close()
            raise

    def _start(self, connection: psycopg.Connection[Any]) -> None:
        source = self._source
        source.check_server(connection)
        if self._state is not None:
            lock_slot(connection, self.slot)
            check_slot(connection, self.slot)
            restored = self._state
            self._pending.extend(
                CdcSplit(self.slot, low, None, end, restored.start)
                for low, end in restored.unassigned
            )
            if restored.snapshot_epoch is None:
                drop_copy(connection, self.slot)  # acknowledged, but a crash left it
            elif 0 <= restored.snapshot_epoch <= restored.checkpoint:
                self._release_stream()  # restored at an epoch: it is committed
            return
        slot = source.slot_name or f"sinkv2_cdc_{uuid.uuid4().hex[:16]}"
        lock_slot(connection, slot)
        existing = slot_state(connection, slot)
        if source.snapshot:
            if existing is not None:
                raise SinkConfigurationError(
                    f"snapshot=True reads the table as of a new slot's consistent point, but "
                    f"slot {slot!r} exists already; name a new slot (or none), or read "
                    "without a snapshot"
                )
            drop_copy(connection, slot)  # a crashed first start's
            start, rows = snapshot_into_copy(
                source.conninfo, slot, source.schema_name, source.table_name
            )
            step = source.snapshot_chunk_rows
            ends = tuple(min(low + step, rows) for low in range(0, rows, step))
            self._pending.extend(
                CdcSplit(slot, low, None, end, start)
                for low, end in zip((0, *ends), ends, strict=False)
            )
            self._state = CdcEnumeratorState(
                slot, start, start, start, (), False, ends, None if not ends else -1
            )
            if not ends:
                self._pending.append(CdcSplit(slot, start))
            return
        if existing is None:
            start = create_slot(source.conninfo, slot)
        else:
            start = check_slot(connection, slot).confirmed_flush or 0
        self._state = CdcEnumeratorState(slot, start, start, start, (), assigned=False)
        self._pending.append(CdcSplit(slot, start))

    def _release_stream(self) -> CdcEnumeratorState:
        """Every snapshot chunk is committed: drop the copy, hand the stream split out."""
        assert self._state is not None
        assert self._connection is not None
        drop_copy(self._connection, self._state.replication_slot)
        self._state = attrs.evolve(self._state, snapshot_epoch=None)
        self._pending.append(CdcSplit(self._state.replication_slot, self._state.start))
        return self._state

    def _assign(self, subtask_id: int) -> None:
        if self._pending and subtask_id in self._context.registered_readers():
            split = self._pending.pop(0)
            self._context.assign_split(split, subtask_id)
            if self._state is not None and split.chunk_end is None:
                self._state = attrs.evolve(self._state, assigned=True)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Hand the split out if it is not read by anyone."""
        self._assign(subtask_id)

    def add_splits_back(self, splits: list[CdcSplit], subtask_id: int) -> None:
        """A failed reader's split comes back, at its position."""
        self._pending.extend(splits)

    def add_reader(self, subtask_id: int) -> None:
        """A reader registered: it takes a chunk, or the stream split, if one is pending."""
        self._assign(subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> CdcEnumeratorState:
        """The slot, the committed LSN, and the end of this epoch (see the module)."""
        assert self._state is not None, "start() first"
        state = self._state
        position = self._source.cut_end(state.replication_slot, state.position)
        ends = tuple(e for e in state.ends if e[0] < checkpoint_id)
        left = self._source.chunks_left(state.replication_slot, state.chunks_left)
        snapshot_epoch = state.snapshot_epoch
        if snapshot_epoch == -1 and not left:
            snapshot_epoch = checkpoint_id  # it read the last chunk
        self._state = attrs.evolve(
            state,
            position=position,
            ends=(*ends, (checkpoint_id, position)),
            chunks_left=left,
            snapshot_epoch=snapshot_epoch,
            checkpoint=checkpoint_id,
            unassigned=tuple(
                (split.start, split.chunk_end)
                for split in self._pending
                if split.chunk_end is not None
            ),
        )
        return self._state

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Epoch ``checkpoint_id`` is committed downstream: advance the slot to its end.

        Raises:
            CommitStateError: The slot is gone or invalidated.
        """
        state = self._state
        if state is None or self._connection is None:
            return
        if state.snapshot_epoch is not None and 0 <= state.snapshot_epoch <= checkpoint_id:
            state = self._release_stream()
        done = [end for epoch, end in state.ends if epoch <= checkpoint_id]
        if not done:
            return
        target = max(done)
        if target > state.committed:
            slot = check_slot(self._connection, state.replication_slot)
            if slot.confirmed_flush is not None and slot.confirmed_flush < target:
                advance_slot(self._connection, state.replication_slot, target)
        self._state = attrs.evolve(
            state,
            committed=max(target, state.committed),
            ends=tuple(e for e in state.ends if e[0] > checkpoint_id),
        )

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """No events are expected."""

    def close(self) -> None:
        """Close the connection (releasing the slot's lock); the slot stays."""
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.close()


# --- reading -------------------------------------------------------------------------------


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

    def __init__(self, source: PostgresCdcSource, decoder: TupleDecoder) -> None:
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
                merged = self._decoder.merge(change.new, change.old)
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
        schema = self._source.schema
        arrays = [
            pa.array(values, type=field.type)
            for values, field in zip(self._columns, schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class CdcSplitReader:
    """Reads the slot's split: a stopped split whole in one fetch, an open one up to now."""

    def __init__(self, source: PostgresCdcSource) -> None:
        self._source = source
        self._connection = source.connect()
        self._decoder = TupleDecoder(
            self._connection, source.all_names, source.all_oids, source.all_types
        )
        self._splits: dict[str, CdcSplit] = {}
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
            import time  # noqa: PLC0415

            time.sleep(self._source.poll_interval_s)
        self._woken = False
        return RecordsBySplits(records, finished)

    def _read(self, split: CdcSplit) -> tuple[list[_Chunk], int]:
        source = self._source
        connection = self._connection
        if split.chunk_end is not None:
            stop = split.chunk_end if split.stop is None else split.stop
            rows = _Rows(source, self._decoder)
            rows.add_snapshot(
                read_chunk(connection, split.slot, source.all_names, split.start, stop), split.lsn
            )
            return [_Chunk(rows.batch(), stop)], stop
        check_slot(connection, split.slot, split.start)
        upto = split.stop if split.stop is not None else flush_lsn(connection)
        if upto <= split.start:
            return [], split.start
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

    def __init__(self, context: SourceReaderContext, source: PostgresCdcSource) -> None:
        super().__init__(lambda: CdcSplitReader(source), _ChunkEmitter(), context)

    def initialized_state(self, split: CdcSplit) -> _SplitState:
        """The split at its position."""
        return _SplitState(split, split.start)

    def to_split_type(self, split_id: str, split_state: _SplitState) -> CdcSplit:
        """The split at the position reached."""
        return attrs.evolve(split_state.split, start=split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, _SplitState]) -> None:
        """Nothing to ask for."""


# --- the source ------------------------------------------------------------------------------


def _name(what: str, value: object) -> str:
    if isinstance(value, str) and value.strip() and "\0" not in value:
        return value
    raise SinkConfigurationError(f"{what} must be a non-empty str (got {value!r:.80})")


def _slot_name(value: object) -> str | None:
    if value is None:
        return None
    if (
        isinstance(value, str)
        and 0 < len(value) <= 63
        and all(c.islower() or c.isdigit() or c == "_" for c in value)
    ):
        return value
    raise SinkConfigurationError(
        f"slot_name must be a replication slot name: lower-case letters, digits and "
        f"underscores, at most 63 characters (got {value!r:.80}); or leave it out and the "
        "source makes a slot of its own"
    )


@final
class PostgresCdcSource:
    """A PostgreSQL table's inserts, updates and deletes, read from a logical replication slot.

    An unbounded FLIP-27 source with one split (the slot), read on Spark as a stream
    (``from_source(spark, source, source_id=..., streaming=True)``). Each row is one
    change: ``_op`` (``insert``, ``update`` or ``delete``), ``_lsn`` (the end LSN of
    the commit of its transaction, as an int), ``_seq`` (its index among the
    transaction's changes of the table), then the table's columns - the new values,
    or for a delete the old key (all old values under REPLICA IDENTITY FULL) - and,
    with ``before=True``, ``_before``: the old values of an update or delete.

    Micro-batches hold whole transactions; a replay reads the same ones; the slot is
    advanced only after the engine committed an epoch (see the module docstring and
    ``docs/sinks/postgres-cdc.md``). A stopped query's slot keeps WAL on the server
    until it is dropped.

    Args:
        connection: A libpq conninfo string or URL; the role needs REPLICATION (or
            superuser).
        table: ``"table"`` or ``"schema.table"``.
        publication: The publication whose changes are decoded; it must cover the table.
        create_publication: Create ``publication`` for the table if it is missing.
        slot_name: The slot to read (made if missing); default: a new slot of the
            source's own, named in its enumerator's checkpoint.
        before: Add ``_before`` (needs REPLICA IDENTITY FULL on the table).
        columns: Read only these columns (default: all).
        batch_rows: Rows per Arrow batch.
        snapshot: First read the rows the table holds when the query first starts,
            through the new slot's exported snapshot (``_op`` ``read``), then the
            changes after it; each row exactly once (``_cdc_snapshot``).
        snapshot_chunk_rows: Rows per snapshot chunk (one split each).

    Raises:
        SinkConfigurationError: An option is invalid, the table is missing, a column's
            type has no Arrow mapping, or a server requirement is not met.
    """

    def __init__(
        self,
        connection: str,
        table: str,
        *,
        publication: str,
        create_publication: bool = False,
        slot_name: str | None = None,
        before: bool = False,
        columns: Sequence[str] | None = None,
        batch_rows: int = 4096,
        snapshot: bool = False,
        snapshot_chunk_rows: int = 50_000,
    ) -> None:
        self.conninfo = _name("connection (a conninfo string or URL)", connection)
        self.table = TableName.parse(table)
        self.publication = _name("publication", publication)
        self.create_publication = bool(create_publication)
        self.slot_name = _slot_name(slot_name)
        self.before = bool(before)
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise SinkConfigurationError(f"batch_rows must be an int >= 1 (got {batch_rows!r})")
        self.batch_rows = batch_rows
        self.snapshot = bool(snapshot)
        if (
            isinstance(snapshot_chunk_rows, bool)
            or not isinstance(snapshot_chunk_rows, int)
            or snapshot_chunk_rows < 1
        ):
            raise SinkConfigurationError(
                f"snapshot_chunk_rows must be an int >= 1 (got {snapshot_chunk_rows!r})"
            )
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self._chunks_cut: set[tuple[str, int]] = set()
        self.poll_interval_s = 0.05
        self.idle_advance_bytes = IDLE_ADVANCE_BYTES
        self._cuts: dict[tuple[str, int], int] = {}
        with self.connect() as conn:
            self.check_server(conn)
            self.schema_name, self.table_name, oid = qualified_table(conn, self.table)
            described = describe_table(conn, self.table)
            oids = dict(
                conn.execute(
                    "SELECT attname, atttypid::int8 FROM pg_attribute WHERE attrelid = %s "
                    "AND attnum > 0 AND NOT attisdropped",
                    (oid,),
                ).fetchall()
            )
        every = described.columns
        self.all_names = tuple(c.name for c in every)
        self.all_oids = tuple(int(oids[c.name]) for c in every)
        wanted = list(self.all_names) if columns is None else list(columns)
        unknown = [name for name in wanted if name not in self.all_names]
        if unknown or not wanted:
            raise SinkConfigurationError(
                f"columns must name columns of table {self.schema_name}.{self.table_name} "
                f"(got {columns!r}; unknown {unknown}); it has {list(self.all_names)}"
            )
        clash = [name for name in wanted if name in _META]
        if clash:
            raise SinkConfigurationError(
                f"table columns {clash} clash with the change columns {list(_META)}; leave "
                "them out with columns=[...]"
            )
        self.column_index = tuple(self.all_names.index(name) for name in wanted)
        self.all_types = tuple(
            arrow_type(c) if i in self.column_index else pa.string() for i, c in enumerate(every)
        )
        fields = [pa.field(name, self.all_types[self.all_names.index(name)]) for name in wanted]
        meta = [
            pa.field(OP, pa.string(), nullable=False),
            pa.field(LSN, pa.int64(), nullable=False),
            pa.field(SEQ, pa.int32(), nullable=False),
        ]
        extra = [pa.field(BEFORE, pa.struct(fields))] if self.before else []
        self.schema = pa.schema(meta + fields + extra)

    # -- the server -----------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection."""
        import psycopg  # noqa: PLC0415  # optional extra

        return psycopg.connect(self.conninfo, autocommit=True, application_name="sinkv2-cdc")

    def check_server(self, connection: psycopg.Connection[Any]) -> None:
        """``wal_level``, the role's privilege, the publication (made if asked).

        Raises:
            SinkConfigurationError: A requirement is not met.
        """
        check_server(
            connection,
            self.table,
            self.publication,
            create_publication=self.create_publication,
            needs_full_identity=self.before,
        )

    def transactions(
        self, connection: psycopg.Connection[Any], slot: str, upto: int
    ) -> Any:  # Iterator[Transaction]
        """The slot's committed transactions up to ``upto`` (peeked: the slot stays)."""
        columns = list(zip(self.all_names, self.all_oids, strict=True))
        return transactions(
            peek_changes(connection, slot, upto, self.publication),
            self.schema_name,
            self.table_name,
            columns,
        )

    def chunks_left(self, slot: str, left: tuple[int, ...]) -> tuple[int, ...]:
        """``left`` without the snapshot chunks cut to their end since it was taken."""
        done = {end for (name, end) in self._chunks_cut if name == slot}
        self._chunks_cut -= {(slot, end) for end in done}
        return tuple(end for end in left if end not in done)

    def cut_end(self, slot: str, position: int) -> int:
        """Where the cuts noted since ``position`` end (``position`` if none)."""
        seen = 0
        while (slot, position) in self._cuts and seen < 1_000_000:
            position = self._cuts[(slot, position)]
            seen += 1
        for key in [key for key in self._cuts if key[0] == slot and key[1] < position]:
            del self._cuts[key]
        return position

    # -- FLIP-27 ------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """Changes never end."""
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[CdcSplit]) -> CdcEnumerator:
        """A fresh enumerator: it takes (or makes) the slot when started."""
        return CdcEnumerator(enum_context, self, None)

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[CdcSplit], checkpoint: CdcEnumeratorState
    ) -> CdcEnumerator:
        """An enumerator of the checkpoint's slot."""
        return CdcEnumerator(enum_context, self, checkpoint)

    def create_reader(self, reader_context: SourceReaderContext) -> CdcSourceReader:
        """A reader of the slot's split."""
        return CdcSourceReader(reader_context, self)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[CdcSplit]:
        """Splits as msgpack."""
        return AttrsMsgpackSerializer(CdcSplit)

    def get_enumerator_checkpoint_serializer(self) -> AttrsMsgpackSerializer[CdcEnumeratorState]:
        """The enumerator's checkpoint as msgpack (a map: ``replication_slot`` is readable)."""
        return AttrsMsgpackSerializer(CdcEnumeratorState)

    def get_produced_type(self) -> pa.Schema:
        """``_op``, ``_lsn``, ``_seq``, the columns, and ``_before`` if asked."""
        return self.schema

    # -- SupportsEndPositions ---------------------------------------------------------------

    def end_positions(self, splits: Sequence[CdcSplit]) -> list[int | None]:
        """The WAL flush position for the open stream split, a chunk's last row for a chunk.

        ``None`` for a split that stops already (a cut's read part).
        """
        now = None
        if any(split.stop is None and split.chunk_end is None for split in splits):
            with self.connect() as connection:
                now = flush_lsn(connection)
        return [
            None if split.stop is not None else now if split.chunk_end is None else split.chunk_end
            for split in splits
        ]

    def cut_split(
        self, split: CdcSplit, end: object, max_records: int | None
    ) -> SplitCut[CdcSplit]:
        """Whole transactions committing in ``(split.start, end]``, at most ``max_records`` changes.

        The read stops at the last whole transaction's commit end; it stops at
        ``end`` itself only when no published transaction's commit record crosses
        ``end`` (then advancing the slot to ``end`` skips nothing of ours). A range
        with no change of the table is read only once it spans
        ``idle_advance_bytes`` of WAL (so the slot moves on while the table is idle).

        Raises:
            ValueError: ``end`` is not an LSN at or after the split's start, or the
                split already stops.
            SinkConfigurationError: A single transaction holds more changes than
                ``max_records`` (it cannot be split across micro-batches).
            CommitStateError: The slot is gone, invalidated, or past the split's start.
        """
        if split.stop is not None:
            raise ValueError(f"split {split.slot!r} already stops at {split.stop}; it is not cut")
        if split.chunk_end is not None:
            return self._cut_chunk(split, end, max_records)
        if not isinstance(end, int) or isinstance(end, bool) or end < split.start:
            raise ValueError(
                f"the end position of split {split.slot!r} must be an int LSN >= its start "
                f"{split.start} (got {end!r}); pass a value end_positions() returned"
            )
        if end == split.start or max_records == 0:
            return SplitCut(None, split, 0)
        count, stop, capped, crossed = 0, split.start, False, False
        with self.connect() as connection:
            check_slot(connection, split.slot, split.start)
            for transaction in self.transactions(connection, split.slot, end):
                if transaction.end_lsn <= split.start:
                    continue
                if transaction.end_lsn > end:
                    crossed = True
                    break
                size = len(transaction.changes)
                if max_records is not None and count + size > max_records:
                    if count == 0:
                        raise SinkConfigurationError(
                            f"the transaction committed at LSN {format_lsn(transaction.end_lsn)} "
                            f"changed {size} rows of {self.schema_name}.{self.table_name}, more "
                            f"than the {max_records} records a micro-batch may read "
                            "(maxRecordsPerTrigger); a transaction is never split across "
                            f"micro-batches: raise the limit to at least {size}"
                        )
                    capped = True
                    break
                count += size
                stop = transaction.end_lsn
        if not capped and not crossed:
            stop = end
        if stop == split.start or (count == 0 and stop - split.start < self.idle_advance_bytes):
            return SplitCut(None, split, 0)
        self._cuts[(split.slot, split.start)] = stop
        return SplitCut(CdcSplit(split.slot, split.start, stop), CdcSplit(split.slot, stop), count)

    def _cut_chunk(
        self, split: CdcSplit, end: object, max_records: int | None
    ) -> SplitCut[CdcSplit]:
        """Rows ``(start, end]`` of a snapshot chunk, at most ``max_records`` of them."""
        assert split.chunk_end is not None
        if not isinstance(end, int) or isinstance(end, bool) or not split.start <= end:
            raise ValueError(
                f"the end of snapshot chunk {split.split_id()!r} must be a row number >= "
                f"{split.start} (got {end!r}); pass a value end_positions() returned"
            )
        stop = min(end, split.chunk_end)
        if max_records is not None:
            stop = min(stop, split.start + max_records)
        if stop == split.start:
            return SplitCut(None, split, 0)
        read = attrs.evolve(split, stop=stop)
        if stop == split.chunk_end:
            self._chunks_cut.add((split.slot, split.chunk_end))
            return SplitCut(read, None, stop - split.start)
        return SplitCut(read, attrs.evolve(split, start=stop), stop - split.start)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cuts"] = {}  # the driver's notes stay on the driver
        state["_chunks_cut"] = set()
        return state

    def __repr__(self) -> str:
        return (
            f"PostgresCdcSource({self.schema_name}.{self.table_name}, "
            f"publication={self.publication!r}, slot_name={self.slot_name!r})"
        )
