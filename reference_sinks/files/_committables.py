"""What FileSink writers hand over: pending files (committables) and in-progress files (state)."""

from __future__ import annotations

from typing import Final, final

import attrs

from sinkv2 import AttrsMsgpackSerializer

__all__ = [
    "COMMITTABLE_VERSION",
    "STATE_VERSION",
    "InProgressFile",
    "PendingFile",
    "pending_file_serializer",
    "writer_state_serializer",
]

COMMITTABLE_VERSION: Final = 1
STATE_VERSION: Final = 1


@final
@attrs.frozen(kw_only=True)
class PendingFile:
    """A closed, staged part file and the name it gets when committed (the committable).

    Paths are in the sink's filesystem (``pyarrow.fs``) coordinates.

    Attributes:
        staged: Where the file is now: under ``<base>/_staging/``, hidden from readers.
        final: Where the committer renames it to. Unique per committable: it holds
            the writer's attempt token (or, for a merged file, its job id and a hash
            of its sources), so re-commits never collide.
        partition: The Hive-style partition directory (``"c1=v1/c2=v2"``, or ``""``).
        rows: Rows in the file.
        bytes: Size of the file in bytes.
        sources: For a file merged by compaction, the staged files it replaces; the
            committer deletes them once the merged file is in place (they are staged,
            so never visible). Empty otherwise.
    """

    staged: str
    final: str
    partition: str
    rows: int
    bytes: int
    sources: tuple[str, ...] = ()


@final
@attrs.frozen(kw_only=True)
class InProgressFile:
    """An open part file at a checkpoint (the writer state).

    FileSink rolls every file on checkpoint, so its writers' states are empty; the
    type keeps the state format versioned should a future version keep files open.

    Attributes:
        staged: The in-progress file.
        partition: Its partition directory.
        rows: Rows written to it up to the checkpoint.
        bytes: Its length at the checkpoint; a restored writer keeps exactly this prefix.
    """

    staged: str
    partition: str
    rows: int
    bytes: int


def pending_file_serializer() -> AttrsMsgpackSerializer[PendingFile]:
    """The committable (and write result) serializer, version `COMMITTABLE_VERSION`."""
    return AttrsMsgpackSerializer(PendingFile, version=COMMITTABLE_VERSION)


def writer_state_serializer() -> AttrsMsgpackSerializer[InProgressFile]:
    """The writer state serializer, version `STATE_VERSION`."""
    return AttrsMsgpackSerializer(InProgressFile, version=STATE_VERSION)
