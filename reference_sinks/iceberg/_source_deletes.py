"""Delete files a stream of appends or a scan cannot leave unread: found, to be named.

`IcebergSource` applies position deletes and refuses equality deletes and deletion
vectors, never ignoring one. Two cases need a look past pyiceberg's planning:

- pyiceberg's scan planning refuses an equality-delete file with a ``ValueError`` that
  names no file; `equality_delete_file` finds it (and a data file it deletes rows
  of), for the source's error;
- a snapshot whose operation is ``append`` may still add delete files (pyiceberg's
  ``fast_append`` of a delete file commits one; Iceberg's own writers commit deletes
  as ``overwrite`` or ``delete``), which an incremental append scan skips silently;
  `added_delete_files` counts them from the snapshot's summary, so a stream treats
  such a snapshot as an overwrite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["added_delete_files", "equality_delete_file"]

_DELETE_SUMMARY_KEYS: Final = (
    "added-delete-files",
    "added-position-delete-files",
    "added-equality-delete-files",
    "added-dvs",
)


def added_delete_files(snapshot: Snapshot) -> int:
    """How many delete files ``snapshot`` adds, by its summary.

    Iceberg's writers commit deletes as ``overwrite`` or ``delete``; a writer that
    commits them as an ``append`` (pyiceberg's ``fast_append`` of a delete file does,
    and counts it in the summary) must not have them ignored by a stream of appends.
    """
    summary = {} if snapshot.summary is None else snapshot.summary.additional_properties
    counts = [0]
    for key in _DELETE_SUMMARY_KEYS:
        try:
            counts.append(int(summary.get(key) or 0))
        except ValueError:
            counts.append(1)  # a count that is not a number: some delete files
    return max(counts)


def equality_delete_file(
    table: Table, snapshot_id: int, *, added_only: bool
) -> tuple[str, str | None] | None:
    """An equality-delete file live in ``snapshot_id`` and a data file it deletes rows of.

    ``added_only``: only a delete file that snapshot added. ``None``: there is none.
    """
    from pyiceberg.manifest import DataFileContent  # noqa: PLC0415  # optional extra

    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return None
    deletes, data = [], []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.EQUALITY_DELETES:
                if not added_only or entry.snapshot_id == snapshot_id:
                    deletes.append(entry)
            elif entry.data_file.content == DataFileContent.DATA:
                data.append(entry)
    if not deletes:
        return None
    delete = min(deletes, key=lambda entry: entry.data_file.file_path)
    rows_of = sorted(
        entry.data_file.file_path
        for entry in data
        if entry.data_file.spec_id == delete.data_file.spec_id
        and entry.data_file.partition == delete.data_file.partition
        and (entry.sequence_number or 0) < (delete.sequence_number or 0)
    )
    return delete.data_file.file_path, rows_of[0] if rows_of else None
