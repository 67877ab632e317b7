"""The CDC source's split (the slot, or a snapshot chunk) and its enumerator's checkpoint."""

from __future__ import annotations

from typing import final

import attrs

__all__ = ["CdcEnumeratorState", "CdcSplit"]


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
        pending_stream: The stream split's position when no reader held it at this
            checkpoint (not handed out yet, or handed back by a failed reader): a
            restored enumerator hands it out from there. ``None`` when a reader holds
            it (its position is in that reader's state).
        table: The table the slot was taken for, ``schema.table`` (``None`` in a
            checkpoint written before it was recorded): a restored source of another
            table is refused.
        snapshot: Whether the query started with a snapshot (``None``: not recorded);
            one restored with ``snapshot=True`` from a checkpoint without is refused.
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
    pending_stream: int | None = None
    table: str | None = None
    snapshot: bool | None = None
