"""What `FileSource` checkpoints: file splits with positions, and the enumerator's state.

Flink's ``FileSourceSplit`` and ``PendingSplitsCheckpoint``: a split is a whole
file, or a run of row groups of a large Parquet file; its position is the number
of records already emitted from it (Flink's ``CheckpointedPosition`` with the
offset at the split's start), so a restored reader skips exactly what was read.
The enumerator's state holds the splits not yet assigned (with their positions,
FLINK-38453's lesson), every path already turned into splits (the
processed-paths set of a continuous source), and the files the clean-up still waits for.
"""

# No `from __future__ import annotations`: the public classes are re-homed in
# reference_sinks.files (publish), where cattrs could not resolve the names of the others.

from typing import final

import attrs

from sinkv2 import AttrsMsgpackSerializer
from sinkv2.source import SourceEvent

__all__ = [
    "FileEnumeratorState",
    "FileSourceSplit",
    "OpenFile",
    "SplitsFinished",
    "enumerator_state_serializer",
    "split_serializer",
]


@final
@attrs.frozen
class FileSourceSplit:
    """One file, or a run of row groups of one Parquet file, and how far it was read.

    Attributes:
        id: The split's id: the path, with ``#rg=<first>-<last>`` for row groups.
        path: The file, inside the source's filesystem.
        size: The file's size in bytes when it was listed.
        mtime_ns: The file's modification time when it was listed (ns since the epoch).
        partition: The ``key=value`` directories above the file, as ``(key, raw
            value)`` pairs (the value still escaped as Spark writes it).
        row_groups: The Parquet row groups of the split, or ``None`` for the whole file.
        records_read: The split's position: records already emitted from it.
        records: The split's records, when counted (a Parquet footer's rows of the
            split's row groups); ``None`` when not counted yet.
        stop: Where a reader stops: the record (counted as ``records_read``) a
            micro-batch's cut ends at (``reference_sinks._row_cut``); ``None``: the
            split's end.
    """

    id: str
    path: str
    size: int
    mtime_ns: int
    partition: tuple[tuple[str, str], ...] = ()
    row_groups: tuple[int, ...] | None = None
    records_read: int = 0
    records: int | None = None
    stop: int | None = None

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`."""
        return self.id

    def at(self, records_read: int) -> "FileSourceSplit":
        """This split with ``records_read`` records already emitted."""
        return attrs.evolve(self, records_read=records_read)

    def until(self, stop: int | None, records: int) -> "FileSourceSplit":
        """This split read up to record ``stop`` (``None``: its end), of ``records`` in all."""
        return attrs.evolve(self, stop=stop, records=records)


@final
@attrs.frozen
class OpenFile:
    """A file whose splits are not all known to be read (tracked for the clean-up)."""

    path: str
    split_ids: tuple[str, ...]


@final
@attrs.frozen
class FileEnumeratorState:
    """The enumerator's checkpoint (Flink's ``PendingSplitsCheckpoint``, plus the clean-up's).

    Attributes:
        remaining: The splits not assigned yet, with their positions.
        processed: Every path already turned into splits, with its modification
            time (ns), so a continuous source never reads a file twice; with
            ``max_file_age`` only those younger than the cut-off are kept.
        newest_mtime_ns: The newest modification time seen; the cut-off of
            ``max_file_age`` is measured from it.
        open_files: Files with splits whose records are not yet reported committed
            (only with a clean-up).
    """

    remaining: tuple[FileSourceSplit, ...] = ()
    processed: tuple[tuple[str, int], ...] = ()
    newest_mtime_ns: int = 0
    open_files: tuple[OpenFile, ...] = ()


@final
@attrs.frozen
class SplitsFinished(SourceEvent):
    """Reader -> enumerator: these splits were read, and a completed checkpoint holds their records.

    Sent only with a clean-up, from the reader's ``notify_checkpoint_complete``.
    """

    split_ids: tuple[str, ...]


def split_serializer() -> AttrsMsgpackSerializer[FileSourceSplit]:
    """Splits as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(FileSourceSplit)


def enumerator_state_serializer() -> AttrsMsgpackSerializer[FileEnumeratorState]:
    """Enumerator checkpoints as msgpack maps (version 1)."""
    return AttrsMsgpackSerializer(FileEnumeratorState)
