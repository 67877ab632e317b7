"""The `FileSource` enumerator: Flink's static and continuous file split enumerators in one.

Bounded (Flink's ``StaticFileSplitEnumerator``): the splits of a listing made when
the job starts are handed out one per split request; a request when none is left
is answered with "no more splits".

Continuous (Flink's ``ContinuousFileSplitEnumerator``): every ``interval`` a
``call_async`` lists the directory again; a file becomes splits once, and its path
joins the processed-paths set of the checkpoint, so it is never read twice, across
restarts too. Requests are never answered with "no more splits": a reader without
a split waits until a file arrives. Two rules keep it from reading what is not
finished or growing without bound:

- **Half-written files.** Besides the hidden names (see ``_source_listing``), a
  file is read only once it is *stable*: last modified at least one interval
  before the listing, or seen by two consecutive listings with the same size and
  modification time. A file still being written is picked up one interval after
  its last change; a writer that pauses for longer than the interval between
  writes must write under a hidden name and rename when done (what FileSink,
  Spark and Flink's writers do).
- **Discovery cut-off** (``max_file_age``, Spark's ``maxFileAge``): a file modified
  more than ``max_file_age`` before the newest file seen so far is ignored, and
  processed paths older than that are dropped from the set. A file dated in the
  future (a writer's skewed clock) counts as modified now, not later: unlike Spark,
  one such file does not make every file of the present too old. The set then holds
  only files modified within ``max_file_age`` of the newest one: its bound.

With a clean-up (``clean_source``), the enumerator learns which splits were read to
their end once the checkpoint that holds their records has completed, in one of two
ways, and cleans a file when every one of its splits was reported, never earlier:

- from a reader (Flink's way, the local engine's): a `SplitsFinished` event from
  the reader's ``notify_checkpoint_complete``. A report lost with a failed reader
  leaves its file in place (never removed early): it is not read again (its path is
  processed), and can be removed by hand;
- from the engine (`sinkv2.source.SupportsFinishedSplits`), where readers live for
  one task and never hear of a commit (Spark): the source coordinator tells the
  enumerator the splits each committed epoch read to their end. It tells at least
  once (a crash repeats a report, never loses one), and a repeated report finds the
  file gone and does nothing.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from typing import final

import pyarrow.fs as pafs

from reference_sinks._split_queue import SplitQueue
from reference_sinks.files._atomic import write_atomically
from reference_sinks.files._source_listing import FileStatus
from reference_sinks.files._source_split import (
    FileEnumeratorState,
    FileSourceSplit,
    OpenFile,
    SplitsFinished,
)
from sinkv2.source import SourceEvent, SplitEnumeratorContext

__all__ = ["Cleaner", "Discovery", "FileSplitEnumerator", "make_cleaner"]

Lister = Callable[[], list[FileStatus]]
Splitter = Callable[[FileStatus], list[FileSourceSplit]]
Cleaner = Callable[[str, "int | None"], None]
"""Cleans the file at a path, if it still is the one listed (its modification time, if known)."""


@final
class Discovery:
    """What a continuous enumerator needs to discover: how to list, how often, what to keep."""

    def __init__(
        self, lister: Lister, splitter: Splitter, interval_ms: int, max_file_age_ns: int | None
    ) -> None:
        self.lister = lister
        self.splitter = splitter
        self.interval_ms = interval_ms
        self.max_file_age_ns = max_file_age_ns


@final
class FileSplitEnumerator:
    """Hands out file splits; see the module docstring.

    Args:
        context: The enumerator's context.
        state: Where to start: a listing's splits, or a checkpoint.
        discovery: How to discover new files; ``None`` for a bounded source.
        cleaner: Archives or deletes a processed file; ``None`` for no clean-up.
    """

    def __init__(
        self,
        context: SplitEnumeratorContext[FileSourceSplit],
        state: FileEnumeratorState,
        *,
        discovery: Discovery | None,
        cleaner: Cleaner | None,
    ) -> None:
        self._context = context
        self._discovery = discovery
        self._cleaner = cleaner
        self._splits = SplitQueue(context, state.remaining, continuous=discovery is not None)
        self._processed = dict(state.processed)
        self._newest_ns = state.newest_mtime_ns
        self._open = {f.path: set(f.split_ids) for f in state.open_files}
        self._split_files: dict[str, str] = {
            split_id: f.path for f in state.open_files for split_id in f.split_ids
        }
        self._seen: dict[str, tuple[int, int]] = {}  # path -> (size, mtime) at the last tick

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Continuous: list the directory now and every interval."""
        if self._discovery is not None:
            period = self._discovery.interval_ms
            self._context.call_async(self._discovery.lister, self._on_listed, 0, period)

    def close(self) -> None:
        """Nothing to release."""

    # --- discovery ---------------------------------------------------------------------------

    def _on_listed(self, listed: list[FileStatus] | None, error: BaseException | None) -> None:
        if error is not None:
            raise RuntimeError(f"FileSource could not list its directory: {error}") from error
        assert listed is not None  # no error: a result
        assert self._discovery is not None  # only continuous enumerators list
        discovery = self._discovery
        now_ns = time.time_ns()
        for status in listed:  # a file dated in the future (a skewed clock) counts as now:
            self._newest_ns = max(self._newest_ns, min(status.mtime_ns, now_ns))  # else the
        cutoff = self._cutoff()  # cut-off would pass over every file of the present
        seen = {}
        found: list[FileSourceSplit] = []
        for status in listed:
            if status.path in self._processed or status.mtime_ns < cutoff:
                continue
            sighting = (status.size, status.mtime_ns)
            changed = self._seen.get(status.path) != sighting
            if changed and now_ns - status.mtime_ns < discovery.interval_ms * 1_000_000:
                # new or changed, and written within the last interval: not stable yet
                seen[status.path] = sighting
                continue
            self._processed[status.path] = status.mtime_ns
            splits = discovery.splitter(status)
            found.extend(splits)
            if self._cleaner is not None:
                self._open[status.path] = {split.id for split in splits}
                self._split_files.update((split.id, status.path) for split in splits)
        self._seen = seen
        if discovery.max_file_age_ns is not None:
            self._processed = {p: t for p, t in self._processed.items() if t >= cutoff}
        self._splits.add(found)

    def _cutoff(self) -> int:
        age = None if self._discovery is None else self._discovery.max_file_age_ns
        return -1 if age is None else self._newest_ns - age

    # --- assignment --------------------------------------------------------------------------

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next split; bounded and none left: no more splits."""
        self._splits.request(subtask_id, requester_hostname)

    def add_splits_back(self, splits: list[FileSourceSplit], subtask_id: int) -> None:
        """A failed reader's splits go first to the next requests."""
        self._splits.add_back(splits)

    def add_reader(self, subtask_id: int) -> None:
        """A reader (re)registered: a request of an earlier reader of its subtask is void."""
        self._splits.forget_request(subtask_id)

    # --- clean-up ----------------------------------------------------------------------------

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """A reader reports splits whose records are committed: clean the files they finish."""
        if isinstance(source_event, SplitsFinished):
            self._finished(source_event.split_ids)

    def notify_splits_finished(self, checkpoint_id: int, split_ids: Sequence[str]) -> None:
        """The engine reports splits whose records are committed: clean the files they finish.

        `sinkv2.source.SupportsFinishedSplits`: the engine's report, where readers
        cannot send one (Spark). The same clean-up as a reader's `SplitsFinished`.
        """
        self._finished(split_ids)

    def _finished(self, split_ids: Sequence[str]) -> None:
        if self._cleaner is None:
            return
        for split_id in split_ids:
            path = self._split_files.pop(split_id, None)
            if path is None:  # reported twice, or a file the checkpoint no longer tracks
                continue
            ids = self._open[path]
            ids.discard(split_id)
            if not ids:
                del self._open[path]
                self._cleaner(path, self._processed.get(path))

    def snapshot_state(self, checkpoint_id: int) -> FileEnumeratorState:
        """The splits not assigned, the processed paths, and the files not yet cleaned."""
        return FileEnumeratorState(
            remaining=self._splits.remaining,
            processed=tuple(sorted(self._processed.items())),
            newest_mtime_ns=self._newest_ns,
            open_files=tuple(
                OpenFile(path, tuple(sorted(ids))) for path, ids in sorted(self._open.items())
            ),
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Nothing: readers report what a completed checkpoint committed."""


def make_cleaner(fs: pafs.FileSystem, root: str, archive_dir: str | None) -> Cleaner:
    """Deletes a file, or moves it to ``archive_dir`` keeping its path below ``root``.

    An archived file never replaces another: when its place in the archive is taken
    (a file of the same name archived before, by this source or another), it goes
    beside it as ``<name>-1.<extensions>``, ``-2``, ... A file already gone (a clean-up
    repeated after a restart) is left alone, and so is a file written again under the
    path after it was listed (another modification time than ``mtime_ns``): it was
    not read, so it is not the source's to remove.
    """

    def clean(path: str, mtime_ns: int | None) -> None:
        try:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.NotFound:
                return  # cleaned before a restart that repeated the report
            if mtime_ns is not None and info.mtime_ns != mtime_ns:
                return  # written again since it was read: the new file is not read, nor removed
            if archive_dir is None:
                fs.delete_file(path)
                return
            relative = path[len(root) :].lstrip("/") or path.rsplit("/", 1)[-1]
            target = _free_name(fs, f"{archive_dir.rstrip('/')}/{relative}")
            fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            _move(fs, path, target)
        except FileNotFoundError:  # cleaned before a restart that replayed the notification
            return

    return clean


def _move(fs: pafs.FileSystem, path: str, target: str) -> None:
    """Move ``path`` to ``target``; across devices, copy beside the target, rename, delete.

    A rename cannot cross devices (an archive on another mount of the local
    filesystem); the copy goes to a hidden name first, so a crash mid-copy leaves no
    partial file under the archive's name, only the original in place (and the
    hidden copy, which the clean-up of the same file after the restart removes).
    """
    try:
        fs.move(path, target)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno != errno.EXDEV and "cross-device" not in str(error).lower():
            raise
        write_atomically(fs, target, lambda temporary: fs.copy_file(path, temporary))
        fs.delete_file(path)


def _free_name(fs: pafs.FileSystem, target: str) -> str:
    """``target``, or ``<stem>-<n>.<extensions>`` beside it when ``target`` exists."""
    directory, _, name = target.rpartition("/")
    stem, dot, extensions = name.partition(".")
    candidate, number = target, 0
    while fs.get_file_info(candidate).type != pafs.FileType.NotFound:
        number += 1
        candidate = f"{directory}/{stem}-{number}{dot}{extensions}"
    return candidate
