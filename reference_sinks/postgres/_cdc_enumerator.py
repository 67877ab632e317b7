"""The CDC source's enumerator: takes (or makes) the slot, acknowledges epochs by advancing it.

It hands out the snapshot chunks first (``snapshot=True``), then the stream split -
only once the epoch that read the last chunk is acknowledged. ``snapshot_state(e)``
records where epoch ``e`` ends, from the cuts the engine made on the driver (see
``_cdc_source``), and ``notify_checkpoint_complete(e)`` advances the slot there: the
only place the slot ever moves.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from reference_sinks.postgres._cdc_server import (
    advance_slot,
    check_slot,
    create_slot,
    drop_slot,
    lock_slot,
    slot_state,
)
from reference_sinks.postgres._cdc_snapshot import drop_copy, row_filter, snapshot_into_copy
from reference_sinks.postgres._cdc_split import CdcEnumeratorState, CdcSplit
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import SourceEvent, SplitEnumeratorContext, source_id_of

if TYPE_CHECKING:
    import psycopg

__all__ = ["CdcEnumerator"]


class _CdcSettings(Protocol):
    """What the enumerator uses of its `PostgresCdcSource` (which it tells of cuts)."""

    @property
    def conninfo(self) -> str: ...

    @property
    def slot_name(self) -> str | None: ...

    @property
    def publication(self) -> str: ...

    @property
    def snapshot(self) -> bool: ...

    @property
    def snapshot_chunk_rows(self) -> int: ...

    @property
    def schema_name(self) -> str: ...

    @property
    def table_name(self) -> str: ...

    def connect(self) -> psycopg.Connection[Any]: ...

    def check_server(self, connection: psycopg.Connection[Any]) -> None: ...

    def chunks_left(self, slot: str, left: tuple[int, ...]) -> tuple[int, ...]: ...

    def cut_end(self, slot: str, position: int) -> int: ...


class CdcEnumerator:
    """Takes (or makes) the slot, hands its one split out, advances it on acknowledgement."""

    def __init__(
        self,
        context: SplitEnumeratorContext[CdcSplit],
        source: _CdcSettings,
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
            self._check_restored(self._state)
            lock_slot(connection, self.slot)
            check_slot(connection, self.slot)
            restored = self._state
            self._pending.extend(
                CdcSplit(self.slot, low, None, end, restored.start)
                for low, end in restored.unassigned
            )
            if restored.pending_stream is not None:
                self._pending.append(CdcSplit(self.slot, restored.pending_stream))
            if restored.snapshot_epoch is None:
                drop_copy(connection, self.slot)  # acknowledged, but a crash left it
            elif 0 <= restored.snapshot_epoch <= restored.checkpoint:
                self._release_stream()  # restored at an epoch: it is committed
            return
        slot = source.slot_name or self._default_slot(connection)
        lock_slot(connection, slot)
        existing = slot_state(connection, slot)
        if source.snapshot:
            if existing is not None and source.slot_name is None:
                # Named after this source id, which has no recorded epoch: a first start
                # that crashed before recording one made it. Nothing read from it was
                # committed; it goes, with its copy, and the snapshot is taken again.
                drop_slot(connection, slot)
            elif existing is not None:
                raise SinkConfigurationError(
                    f"snapshot=True reads the table as of a new slot's consistent point, but "
                    f"slot {slot!r} exists already; name a new slot (or none), or read "
                    "without a snapshot"
                )
            drop_copy(connection, slot)  # a crashed first start's
            where = row_filter(
                connection, source.publication, source.schema_name, source.table_name
            )
            start, rows = snapshot_into_copy(
                source.conninfo, slot, source.schema_name, source.table_name, where=where
            )
            step = source.snapshot_chunk_rows
            ends = tuple(min(low + step, rows) for low in range(0, rows, step))
            self._pending.extend(
                CdcSplit(slot, low, None, end, start)
                for low, end in zip((0, *ends), ends, strict=False)
            )
            self._state = CdcEnumeratorState(
                slot,
                start,
                start,
                start,
                (),
                False,
                ends,
                None if not ends else -1,
                table=self._table(),
                snapshot=True,
            )
            if not ends:  # an empty table: nothing will read the copy
                drop_copy(connection, slot)
                self._pending.append(CdcSplit(slot, start))
            return
        if existing is None:
            start = create_slot(source.conninfo, slot)
        else:
            start = check_slot(connection, slot).confirmed_flush or 0
        self._state = CdcEnumeratorState(
            slot, start, start, start, (), assigned=False, table=self._table(), snapshot=False
        )
        self._pending.append(CdcSplit(slot, start))

    def _table(self) -> str:
        return f"{self._source.schema_name}.{self._source.table_name}"

    def _check_restored(self, state: CdcEnumeratorState) -> None:
        """The restored checkpoint is this source's: its table, and its slot if one is named.

        Raises:
            SinkConfigurationError: It was written for another table, or without the
                snapshot this source asks for (rows from before the slot was made would
                never be read), or the source names another slot than the one the
                checkpoint reads (which would be ignored).
        """
        problem = None
        if state.table is not None and state.table != self._table():
            problem = (
                f"was written for table {state.table}, not {self._table()}: read through "
                f"its slot, the rows {self._table()} held before the slot was made would "
                "never come"
            )
        elif self._source.snapshot and state.snapshot is False:
            problem = (
                "was written by a query started without snapshot=True: its slot follows "
                "the changes made after it was created, and the rows the table held then "
                "would never come"
            )
        elif self._source.slot_name not in (None, state.replication_slot):
            problem = (
                f"reads slot {state.replication_slot!r}, not slot_name="
                f"{self._source.slot_name!r}: a restored query goes on from its own slot"
            )
        if problem is not None:
            raise SinkConfigurationError(
                f"the checkpoint this PostgresCdcSource is restored from {problem}. Start a "
                "new query for it (a new source_id and checkpoint location), or restore "
                "this one with the source it was started with"
            )

    def _default_slot(self, connection: psycopg.Connection[Any]) -> str:
        """The slot's name when none was given: the source id's, else a new one.

        Derived from the source id (`source_id_of`), the database and the table, so a
        first start that crashes after making its slot and before its first epoch is
        recorded leaves a slot the next start under the same id takes over (or, with a
        snapshot, drops and makes again) instead of one nobody knows. Without a source
        id (the local engine) each start makes a new name.
        """
        source_id = source_id_of(self._context)
        if source_id is None:
            return f"sinkv2_cdc_{uuid.uuid4().hex[:16]}"
        identity = "\0".join(
            (source_id, connection.info.dbname, self._source.schema_name, self._source.table_name)
        )
        return f"sinkv2_cdc_{hashlib.sha256(identity.encode()).hexdigest()[:16]}"

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
        """A failed reader's split comes back, at its position, and goes out again now.

        As Flink's Kafka enumerator does: the failed subtask may have registered again
        already (its ``add_reader`` then found nothing pending), and a reader of this
        source never asks for splits - so the split goes to that subtask if it is
        registered, else to any registered reader; with none, the next ``add_reader``.
        """
        self._pending.extend(splits)
        registered = sorted(self._context.registered_readers())
        for subtask in ([subtask_id] if subtask_id in registered else []) + registered:
            if not self._pending:
                break
            self._assign(subtask)

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
            pending_stream=next(
                (split.start for split in self._pending if split.chunk_end is None), None
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
