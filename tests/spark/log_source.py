"""An append-only log source: a directory of line files, each file one split that never ends.

The test source with unbounded splits of issue 23, real files and nothing mocked.
Writers append lines to ``*.log`` files in a directory (`append`); each file is one
split, read for ever, whose position is the byte offset and index of the next
complete line (a last line without its newline is not complete yet and is not read).
It implements `sinkv2.source.SupportsEndPositions`, as a log partition source must
for a micro-batch engine: `LogSource.end_positions` tells how far each file holds
complete lines now, and `LogSource.cut_split` cuts a split into the lines one
micro-batch reads (a split that carries its stop offset, Flink's bounded-Kafka
pattern) and the rest from there on.

- The enumerator (`LogEnumerator`) lists the directory periodically with
  ``call_async`` (Flink's ``ContinuousFileSplitEnumerator``), and assigns each new
  file once, round-robin over the registered readers, as Flink's Kafka enumerator
  assigns partitions: readers never ask. Its checkpoint holds every file name it
  assigned and the splits not assigned yet (with their positions).
- The reader (`LogSourceReader`) is a `SingleThreadMultiplexSourceReaderBase` over
  a `LogSplitReader` that reads a few lines of every split per fetch, as Arrow
  batches, and ends a split exactly at its stop offset, if it has one.
- ``notify_checkpoint_complete`` appends the checkpoint id to ``ack_path`` when one
  is set: the acknowledgement a real log source would send upstream.

Records: ``file`` (the file's name, not null), ``line`` (the line's index in its
file, from 0, not null), ``value`` (the line's text; an empty line is null).

For the data source door: ``.option("source", "tests.spark.log_source:make")
.option("path", directory)``; every other option of `make` is a string there.
"""

from __future__ import annotations

import collections
import fnmatch
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import pyarrow as pa

from sinkv2 import AttrsMsgpackSerializer
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

__all__ = [
    "SCHEMA",
    "LogEnumerator",
    "LogEnumeratorState",
    "LogSource",
    "LogSourceReader",
    "LogSplit",
    "LogSplitReader",
    "append",
    "make",
    "records_of",
]

SCHEMA: Final = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),
        pa.field("value", pa.string()),
    ]
)
"""What the source produces."""

_BLOCK: Final = 1 << 20  # bytes read at a time when scanning a file


# --- writing and expecting ----------------------------------------------------------------


def append(directory: str | os.PathLike[str], name: str, values: Iterable[object]) -> None:
    """Append one complete line per value (its ``str``) to ``directory/name``, and flush."""
    data = "".join(f"{value}\n" for value in values).encode()
    with open(Path(directory) / name, "ab") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def records_of(directory: str | os.PathLike[str], name: str) -> list[dict[str, Any]]:
    """The records of ``directory/name``'s complete lines, in order, as the source emits them."""
    data = (Path(directory) / name).read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    lines = complete.split(b"\n")[:-1]
    return [
        {"file": name, "line": index, "value": text.decode() or None}
        for index, text in enumerate(lines)
    ]


# --- splits and the enumerator ---------------------------------------------------------------


@attrs.frozen
class LogSplit:
    """One log file from a position on; the file's name is the split's id.

    Attributes:
        file: The file's name in the source's directory.
        offset: The byte offset of the next line to read (always just after a newline).
        line: The index of the next line to read.
        stop: The byte offset where the split ends (just after a newline), or ``None``
            for a split that never ends (the file may grow for ever).
    """

    file: str
    offset: int = 0
    line: int = 0
    stop: int | None = None

    def split_id(self) -> str:
        """See `sinkv2.source.SourceSplit`."""
        return self.file


@attrs.frozen
class LogEnumeratorState:
    """The enumerator's checkpoint: files already assigned, and splits not assigned yet."""

    assigned: tuple[str, ...]
    pending: tuple[LogSplit, ...]


class LogEnumerator:
    """Lists the directory every ``interval_ms`` and assigns each new file once, round-robin."""

    def __init__(
        self,
        context: SplitEnumeratorContext[LogSplit],
        source: LogSource,
        assigned: Iterable[str] = (),
        pending: Iterable[LogSplit] = (),
    ) -> None:
        self._context = context
        self._source = source
        self._assigned = set(assigned)
        self._pending = collections.deque(pending)

    def start(self) -> None:
        """List the directory now and every ``discovery_interval_ms``."""
        self._context.call_async(
            self._source.list_files,
            self._discovered,
            initial_delay_ms=0,
            period_ms=self._source.discovery_interval_ms,
        )

    def _discovered(self, names: list[str] | None, error: BaseException | None) -> None:
        if error is not None:
            raise RuntimeError(
                f"listing the log directory {self._source.directory!r} failed: {error}"
            ) from error
        known = self._assigned | {split.file for split in self._pending}
        self._pending.extend(LogSplit(name) for name in names or () if name not in known)
        self._assign()

    def _assign(self) -> None:
        readers = sorted(self._context.registered_readers())
        while readers and self._pending:
            split = self._pending.popleft()
            self._context.assign_split(split, readers[len(self._assigned) % len(readers)])
            self._assigned.add(split.file)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign what is pending (splits are pushed, so readers need not ask)."""
        self._assign()

    def add_splits_back(self, splits: list[LogSplit], subtask_id: int) -> None:
        """Take back a failed reader's splits, at their positions; assign them again."""
        for split in splits:
            self._assigned.discard(split.file)
        self._pending.extendleft(reversed(splits))
        self._assign()

    def add_reader(self, subtask_id: int) -> None:
        """A reader registered: it may take pending splits."""
        self._assign()

    def snapshot_state(self, checkpoint_id: int) -> LogEnumeratorState:
        """The assigned file names and the pending splits."""
        return LogEnumeratorState(tuple(sorted(self._assigned)), tuple(self._pending))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Acknowledge ``checkpoint_id``: append it to ``ack_path`` when one is set."""
        if self._source.ack_path is not None:
            with open(self._source.ack_path, "a", encoding="utf-8") as file:
                file.write(f"{checkpoint_id}\n")

    def handle_source_event(self, subtask_id: int, source_event: SourceEvent) -> None:
        """No events are expected."""

    def close(self) -> None:
        """Nothing to release."""


# --- the reader --------------------------------------------------------------------------------


@attrs.define
class LogSplitState:
    """A split being read: the position after the last line emitted."""

    split: LogSplit
    offset: int
    line: int


@attrs.frozen
class _Chunk:
    """Lines of one split read by one fetch, and the position just after them."""

    batch: pa.RecordBatch
    offset: int
    line: int


class LogSplitReader:
    """Reads up to ``batch_lines`` complete lines of every split per fetch."""

    def __init__(self, source: LogSource) -> None:
        self._source = source
        self._splits: dict[str, LogSplit] = {}
        self._woken = threading.Event()

    def fetch(self) -> RecordsBySplits[_Chunk]:
        """The next lines of each split; waits a little when no split has any."""
        _fail_once(self._source.fail_once)
        records: dict[str, list[_Chunk]] = {}
        finished: list[str] = []
        for split_id, split in list(self._splits.items()):
            chunk = self._read(split)
            offset = split.offset
            if chunk is not None:
                records[split_id] = [chunk]
                offset = chunk.offset
                self._splits[split_id] = attrs.evolve(split, offset=offset, line=chunk.line)
            if split.stop is not None and offset == split.stop:
                finished.append(split_id)
                del self._splits[split_id]
        if not records and not finished:
            self._woken.wait(self._source.poll_interval_s)
        self._woken.clear()
        return RecordsBySplits(records, finished)

    def _read(self, split: LogSplit) -> _Chunk | None:
        path = self._source.path_of(split.file)
        limit = None if split.stop is None else split.stop - split.offset
        lines, consumed = _complete_lines(path, split.offset, limit, self._source.batch_lines)
        if split.stop is not None and split.offset + consumed > split.stop:
            raise RuntimeError(f"split {split.file!r} was read past its stop {split.stop}")
        if not lines:
            if limit:  # a bounded split with bytes left must have lines left
                raise RuntimeError(
                    f"split {split.file!r}: {path} holds no complete line between offset "
                    f"{split.offset} and the split's stop {split.stop}; a log file must only "
                    "grow by whole lines"
                )
            return None
        values = [text.decode() or None for text in lines]
        batch = pa.record_batch(
            [
                pa.array([split.file] * len(lines), pa.string()),
                pa.array(range(split.line, split.line + len(lines)), pa.int64()),
                pa.array(values, pa.string()),
            ],
            names=SCHEMA.names,
        )
        return _Chunk(batch, split.offset + consumed, split.line + len(lines))

    def handle_splits_changes(self, splits_changes: SplitsChange[LogSplit]) -> None:
        """Add splits (removals are not used by this source)."""
        for split in splits_changes.splits:
            self._splits[split.file] = split

    def wake_up(self) -> None:
        """End a waiting fetch."""
        self._woken.set()

    def close(self) -> None:
        """Nothing to release: files are opened per fetch."""


def _fail_once(marker: str | None) -> None:
    """Fail the first fetch of all (a task failure), leaving ``marker`` so retries go on."""
    if marker is None:
        return
    try:
        with open(marker, "x", encoding="utf-8") as file:
            file.write(f"failed in process {os.getpid()}\n")
    except FileExistsError:
        return
    raise RuntimeError(f"a fetch fails on purpose, once (marker {marker})")


class _ChunkEmitter:
    def emit_record(self, element: _Chunk, output: Any, split_state: LogSplitState) -> None:
        output.collect_batch(element.batch)
        split_state.offset = element.offset
        split_state.line = element.line


class LogSourceReader(SingleThreadMultiplexSourceReaderBase[_Chunk, Any, LogSplit, LogSplitState]):
    """Reads the log splits it is given; a split with a stop ends exactly there."""

    def __init__(self, context: SourceReaderContext, source: LogSource) -> None:
        super().__init__(lambda: LogSplitReader(source), _ChunkEmitter(), context)

    def initialized_state(self, split: LogSplit) -> LogSplitState:
        """The split at its position."""
        return LogSplitState(split, split.offset, split.line)

    def to_split_type(self, split_id: str, split_state: LogSplitState) -> LogSplit:
        """The split at the position reached."""
        return attrs.evolve(split_state.split, offset=split_state.offset, line=split_state.line)

    def on_split_finished(self, finished_split_ids: dict[str, LogSplitState]) -> None:
        """Nothing to ask for: the enumerator pushes splits."""


# --- scanning files ------------------------------------------------------------------------


def _complete_lines(
    path: Path, offset: int, limit: int | None, max_lines: int
) -> tuple[list[bytes], int]:
    """Up to ``max_lines`` complete lines from ``offset`` (within ``limit`` bytes); bytes used.

    Raises:
        RuntimeError: The file ends before ``offset + limit`` (it was truncated).
    """
    want = _BLOCK if limit is None else min(limit, _BLOCK)
    with open(path, "rb") as file:
        file.seek(offset)
        data = file.read(want)
        while b"\n" not in data and len(data) == want and (limit is None or want < limit):
            step = _BLOCK if limit is None else min(_BLOCK, limit - want)
            more = file.read(step)  # a line longer than a block: read on
            data += more
            want += step
            if len(more) < step:
                break
    if limit is not None and len(data) < want:
        raise RuntimeError(
            f"{path} ends at byte {offset + len(data)}, before the split's stop "
            f"{offset + limit}; a log file must only grow (was it truncated?)"
        )
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        end = sum(len(line) + 1 for line in lines)
    return lines, end


def _last_line_end(path: Path, offset: int) -> int:
    """The offset just after the last newline at or after ``offset``; ``offset`` if none."""
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        high = size
        while high > offset:
            low = max(offset, high - _BLOCK)
            file.seek(low)
            found = file.read(high - low).rfind(b"\n")
            if found >= 0:
                return low + found + 1
            high = low
    return offset


def _nth_line_end(path: Path, offset: int, end: int, most: int | None) -> tuple[int, int]:
    """Lines in ``[offset, end)`` (at most ``most``), and the offset just after the last one.

    Raises:
        RuntimeError: The file ends before ``end`` (it was truncated).
    """
    count = 0
    position = last = offset
    with open(path, "rb") as file:
        file.seek(offset)
        while position < end:
            block = file.read(min(_BLOCK, end - position))
            if not block:
                raise RuntimeError(
                    f"{path} ends at byte {position}, before the end position {end}; a log "
                    "file must only grow (was it truncated?)"
                )
            found = block.find(b"\n")
            while found >= 0:
                count += 1
                last = position + found + 1
                if count == most:
                    return count, last
                found = block.find(b"\n", found + 1)
            position += len(block)
    return count, last


# --- the source ----------------------------------------------------------------------------------


def _positive(name: str, value: object, *, minimum: int = 1) -> int:
    try:
        number = int(str(value)) if not isinstance(value, int) else value
    except ValueError:
        number = minimum - 1
    if isinstance(value, bool) or number < minimum:
        raise ValueError(f"{name!r} must be an int >= {minimum} (got {value!r})")
    return number


class LogSource:
    """The ``*.log`` files (``pattern``) of ``directory``, each an unbounded split.

    Args:
        directory: Where the log files are; it must exist (files may come later).
        pattern: Which file names are logs (``fnmatch``).
        discovery_interval_ms: How often the enumerator lists the directory.
        batch_lines: Lines per Arrow batch, at most, per split and fetch.
        ack_path: A file the enumerator appends each completed checkpoint id to.
        value_nullable: Whether ``value`` is declared nullable (empty lines are null).
        fail_once: A path: the first fetch of any reader fails (a task failure) and
            creates it; every later fetch finds it and goes on.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        pattern: str = "*.log",
        discovery_interval_ms: int = 100,
        batch_lines: int = 1000,
        ack_path: str | os.PathLike[str] | None = None,
        value_nullable: bool = True,
        fail_once: str | os.PathLike[str] | None = None,
    ) -> None:
        path = Path(directory)
        if not path.is_dir():
            raise ValueError(
                f"the log directory {str(directory)!r} does not exist or is not a directory; "
                "create it first (log files may appear in it later)"
            )
        self.directory = str(path.resolve())
        self.pattern = pattern
        self.discovery_interval_ms = _positive("discovery_interval_ms", discovery_interval_ms)
        self.batch_lines = _positive("batch_lines", batch_lines)
        self.ack_path = None if ack_path is None else str(ack_path)
        self.value_nullable = value_nullable
        self.fail_once = None if fail_once is None else str(fail_once)
        self.poll_interval_s = 0.02

    def path_of(self, name: str) -> Path:
        """The path of the log file ``name``."""
        return Path(self.directory) / name

    def list_files(self) -> list[str]:
        """The log files in the directory now, by name."""
        return sorted(
            entry.name
            for entry in os.scandir(self.directory)
            if entry.is_file() and fnmatch.fnmatchcase(entry.name, self.pattern)
        )

    def get_boundedness(self) -> Boundedness:
        """Logs never end."""
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[LogSplit]) -> LogEnumerator:
        """A new enumerator: no file assigned yet."""
        return LogEnumerator(enum_context, self)

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[LogSplit], checkpoint: LogEnumeratorState
    ) -> LogEnumerator:
        """An enumerator that knows the files it assigned and the splits pending."""
        return LogEnumerator(enum_context, self, checkpoint.assigned, checkpoint.pending)

    def create_reader(self, reader_context: SourceReaderContext) -> LogSourceReader:
        """A reader of log splits."""
        return LogSourceReader(reader_context, self)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[LogSplit]:
        """Splits as msgpack maps."""
        return AttrsMsgpackSerializer(LogSplit)

    def get_enumerator_checkpoint_serializer(self) -> AttrsMsgpackSerializer[LogEnumeratorState]:
        """The enumerator's checkpoint as msgpack."""
        return AttrsMsgpackSerializer(LogEnumeratorState)

    def get_produced_type(self) -> pa.Schema:
        """``file`` and ``line`` not null; ``value`` nullable unless ``value_nullable`` is off."""
        if self.value_nullable:
            return SCHEMA
        return SCHEMA.set(2, SCHEMA.field("value").with_nullable(False))

    # --- SupportsEndPositions ----------------------------------------------------------------

    def end_positions(self, splits: Sequence[LogSplit]) -> list[int | None]:
        """For each split the offset just after its file's last complete line (None if stopped)."""
        ends: list[int | None] = []
        for split in splits:
            if split.stop is not None:
                ends.append(None)
                continue
            path = self.path_of(split.file)
            try:
                ends.append(_last_line_end(path, split.offset))
            except FileNotFoundError as error:
                raise RuntimeError(
                    f"the log file of split {split.file!r} is gone ({path}); log files are only "
                    "appended to, never removed while a query reads them"
                ) from error
        return ends

    def cut_split(
        self, split: LogSplit, end: object, max_records: int | None
    ) -> SplitCut[LogSplit]:
        """The lines ``[split.offset, end)``, at most ``max_records`` of them, and the rest."""
        if split.stop is not None:
            raise ValueError(f"split {split.file!r} already stops at {split.stop}; it is not cut")
        if not isinstance(end, int) or isinstance(end, bool) or end < split.offset:
            raise ValueError(
                f"the end position of split {split.file!r} must be an int >= its offset "
                f"{split.offset} (got {end!r}); pass a value end_positions() returned"
            )
        if max_records is not None and max_records < 0:
            raise ValueError(f"max_records must be None or >= 0 (got {max_records!r})")
        if end == split.offset or max_records == 0:
            return SplitCut(None, split, 0)
        count, stop = _nth_line_end(self.path_of(split.file), split.offset, end, max_records)
        if stop != end and count != max_records:
            raise ValueError(
                f"the end position {end} of split {split.file!r} is not just after a newline; "
                "pass a value end_positions() returned"
            )
        read = attrs.evolve(split, stop=stop)
        rest = LogSplit(split.file, stop, split.line + count)
        return SplitCut(read, rest, count)

    def __repr__(self) -> str:
        return f"LogSource({self.directory!r}, pattern={self.pattern!r})"


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{name!r} must be true or false (got {value!r})")


def make(
    path: str,
    *,
    pattern: str = "*.log",
    discovery_interval_ms: int | str = 100,
    batch_lines: int | str = 1000,
    ack_path: str | None = None,
    value_nullable: bool | str = True,
    fail_once: str | None = None,
) -> LogSource:
    """The factory for ``.option("source", "tests.spark.log_source:make")``: options are strings."""
    return LogSource(
        path,
        pattern=pattern,
        discovery_interval_ms=_positive("discovery_interval_ms", discovery_interval_ms),
        batch_lines=_positive("batch_lines", batch_lines),
        ack_path=ack_path,
        value_nullable=_flag("value_nullable", value_nullable),
        fail_once=fail_once,
    )


def lines_of(records: Iterable[dict[str, Any]]) -> Iterator[tuple[str, int]]:
    """``(file, line)`` of each record: what identifies a record of this source."""
    for record in records:
        yield record["file"], record["line"]
