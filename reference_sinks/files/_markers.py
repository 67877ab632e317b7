"""FileSink's checkpoint markers: which checkpoints of a sink id the directory holds.

After the committer has renamed a checkpoint's files into place, the commit
coordinator asks the sink to mark it (`SupportsCommittedCheckpoints`): an empty-ish
file ``<base>/_sinkv2/checkpoints/<sink key>/<checkpoint id>``, where the sink key
is the first 16 hex digits of the SHA-256 of the sink id. Before a batch run
writes a checkpoint its commit state store does not know, the coordinator asks
whether that file exists: if it does, the checkpoint is in the directory already
and is not written again - even when the store is new (another working directory's
default) or lost. ``_sinkv2`` starts with ``_``, so Spark and pyarrow readers skip
it, as they skip ``_staging``.

The mark is written after the files and before the store records the checkpoint
committed: a crash in between leaves the epoch pending in the store, whose next run
commits it again and writes the mark. Only a crash in that gap *and* a lost store
together can still duplicate a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

import pyarrow.fs as pafs

__all__ = ["MARKER_DIRECTORY", "is_marked", "mark", "marker_path"]

MARKER_DIRECTORY: Final = "_sinkv2/checkpoints"


def marker_path(root: str, sink_id: str, checkpoint_id: int) -> str:
    """Where the mark of ``checkpoint_id`` of ``sink_id`` lives under ``root``."""
    key = hashlib.sha256(sink_id.encode("utf-8")).hexdigest()[:16]
    return f"{root}/{MARKER_DIRECTORY}/{key}/{checkpoint_id}"


def is_marked(fs: pafs.FileSystem, root: str, sink_id: str, checkpoint_id: int) -> bool:
    """Whether the mark of ``checkpoint_id`` of ``sink_id`` exists."""
    path = marker_path(root, sink_id, checkpoint_id)
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def mark(fs: pafs.FileSystem, root: str, sink_id: str, checkpoint_id: int) -> None:
    """Write the mark (idempotent): a small JSON file naming the sink id and checkpoint."""
    path = marker_path(root, sink_id, checkpoint_id)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    body = json.dumps({"sink_id": sink_id, "checkpoint_id": checkpoint_id}).encode("utf-8")
    with fs.open_output_stream(path) as out:
        out.write(body + b"\n")
