"""The error of `IcebergSource` when a table's history does not allow reading on."""

from __future__ import annotations

from sinkv2.errors import SinkV2Error

__all__ = ["IcebergSourceError"]


class IcebergSourceError(SinkV2Error, RuntimeError):
    """An Iceberg table's snapshots do not let the source go on exactly once.

    Raised for a snapshot that overwrites or deletes rows in a stream without
    ``skip_overwrites``, for a position whose successors were expired or left the
    table's lineage, and for delete files the source cannot apply. The message names
    the snapshot (or file) and what to do.

    Attributes:
        snapshot_id: The snapshot concerned, when there is one.
    """

    def __init__(self, message: str, *, snapshot_id: int | None = None) -> None:
        super().__init__(message)
        self.snapshot_id = snapshot_id
