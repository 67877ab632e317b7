"""Metadata files a commit wrote and the table never took: found by their commit uuid.

An Iceberg append writes its manifests (``<commit uuid>-m<n>.avro``) and its
manifest list (``snap-<snapshot id>-<attempt>-<commit uuid>.avro``) into the
table's ``metadata/`` directory first, then asks the catalog to take the new
table version. A committer that dies in between (or whose catalog call fails)
leaves those files behind, referenced by nothing.

Between commits (see `CommitGuard`), the committer names its appends' commit uuids
after the job that wrote the
files (`job_commit_uuid`: the first 8 bytes are a digest of the sink id and the
job id, the rest random), so the clean-up of a job (``clean_up_attempts``, which
runs once the job is done, or for a dead job at the next run of the sink id)
can tell that job's metadata files from every other writer's, and deletes those
the table does not reference:

- a manifest list, when no snapshot of the table has it;
- a manifest, when no snapshot of its commit uuid exists and no snapshot's
  manifest list names it (a fast append carries older manifests forward, so an
  expired snapshot's manifests can still be live: those are read to be sure,
  which happens only when there is such a candidate).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import pyarrow.fs as pafs

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = ["CommitGuard", "delete_unreferenced_metadata", "job_commit_uuid"]

_UUID: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_MANIFEST: Final = re.compile(rf"({_UUID})-m\d+\.avro")
_MANIFEST_LIST: Final = re.compile(rf"snap-(-?\d+)-\d+-({_UUID})\.avro")
_KEY_BYTES: Final = 8


class CommitGuard:
    """Keeps a sink's metadata clean-up and its committers' commits apart, in one process.

    A stream commits on a commit thread while the next micro-batch's clean-up of the
    same job runs: a commit's manifests exist before the catalog takes them, and the
    clean-up must not take them for a dead commit's. The committers a sink makes hold
    the sink's guard for each ``commit``; the clean-up holds it while it looks. It
    pickles as a new guard (a process of its own has no commit to wait for).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._lock.release()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.RLock()


def _job_key(sink_id: str, job_id: str) -> str:
    """16 hex digits: the start of every commit uuid of ``job_id`` of ``sink_id``."""
    digest = hashlib.sha256(f"{sink_id}\0{job_id}".encode()).digest()
    return digest[:_KEY_BYTES].hex()


def job_commit_uuid(sink_id: str, job_id: str) -> uuid.UUID:
    """A new commit uuid for an append of files ``job_id`` wrote, telling whose it is."""
    key = bytes.fromhex(_job_key(sink_id, job_id))
    return uuid.UUID(bytes=key + os.urandom(16 - _KEY_BYTES))


def _base_name(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[-1]


def delete_unreferenced_metadata(table: Table, sink_id: str, job_id: str) -> list[str]:
    """Delete ``job_id``'s manifests and manifest lists the table does not reference.

    Returns the deleted paths. Only metadata files whose commit uuid carries the
    job's key are looked at; the table's metadata JSON files are never touched.
    """
    key = _job_key(sink_id, job_id)
    filesystem, root = pafs.FileSystem.from_uri(f"{table.location().rstrip('/')}/metadata")
    lists: dict[str, str] = {}  # base name -> path
    manifests: dict[str, str] = {}
    manifest_uuids: dict[str, str] = {}  # base name -> commit uuid
    for info in filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        name = info.base_name
        if (found := _MANIFEST_LIST.fullmatch(name)) and found[2].replace("-", "")[:16] == key:
            lists[name] = info.path
        elif (found := _MANIFEST.fullmatch(name)) and found[1].replace("-", "")[:16] == key:
            manifests[name] = info.path
            manifest_uuids[name] = found[1]
    if not lists and not manifests:
        return []
    snapshot_lists = {_base_name(s.manifest_list) for s in table.metadata.snapshots}
    committed_uuids = {
        found[2] for name in snapshot_lists if (found := _MANIFEST_LIST.fullmatch(name))
    }
    orphans = [path for name, path in lists.items() if name not in snapshot_lists]
    candidates = {
        name: path
        for name, path in manifests.items()
        if manifest_uuids[name] not in committed_uuids
    }
    if candidates:
        for snapshot in table.metadata.snapshots:
            for manifest in snapshot.manifests(table.io):
                candidates.pop(_base_name(manifest.manifest_path), None)
            if not candidates:
                break
        orphans += candidates.values()
    for path in orphans:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(path)
    return orphans
