"""A connector author's source, written outside the package, for the source kit's tests.

It reads a directory of numbered text files (``part-0.txt``, ``part-1.txt``, ...), one
split per file, a split's position being the number of lines read. It is written the
way a Flink connector author writes one, against the bare FLIP-27 interfaces:

- the enumerator pushes splits, as Flink's ``KafkaSourceEnumerator`` does: each file
  belongs to reader ``number % parallelism``; splits of a reader not registered yet
  wait in a pending assignment; a bounded run signals no more splits to every reader
  once its pending splits are delivered, including readers that own no file;
- its checkpoint holds the splits not delivered yet (whole splits, positions too);
- the reader has no fetcher thread: ``poll_next`` reads up to ``batch`` lines of its
  current split, emits them through the split's output and moves the position past
  them in the same call;
- both serializers are hand-written ``SimpleVersionedSerializer``s (JSON, version 1),
  as Flink's are.

`tests/unit/testing/test_source_kit_author.py` checks it with ``check_source`` and
plants bugs in subclasses.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import pyarrow

from sinkv2.source import (
    Boundedness,
    InputStatus,
    ReaderOutput,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
)

SCHEMA = pyarrow.schema([("file", pyarrow.int64()), ("line", pyarrow.string())])


@attrs.frozen
class FileSplit:
    """One file; ``lines_read`` lines of it were emitted."""

    number: int
    path: str
    lines_read: int = 0

    def split_id(self) -> str:
        return f"part-{self.number}"


@attrs.frozen
class EnumState:
    """The enumerator's checkpoint: splits not delivered to a reader yet."""

    pending: tuple[FileSplit, ...]


class FileSplitSerializer:
    """Version 1: a JSON object ``{"n", "p", "l"}``."""

    VERSION = 1

    def get_version(self) -> int:
        return self.VERSION

    def serialize(self, obj: FileSplit) -> bytes:
        return json.dumps({"n": obj.number, "p": obj.path, "l": obj.lines_read}).encode()

    def deserialize(self, version: int, serialized: bytes) -> FileSplit:
        if version != 1:
            raise ValueError(f"FileSplitSerializer: unknown version {version}")
        data = json.loads(serialized)
        return FileSplit(data["n"], data["p"], data["l"])


class EnumStateSerializer:
    """Version 1: a JSON list of splits, each as `FileSplitSerializer` writes it."""

    def get_version(self) -> int:
        return 1

    def serialize(self, obj: EnumState) -> bytes:
        splits = FileSplitSerializer()
        return json.dumps([splits.serialize(s).decode() for s in obj.pending]).encode()

    def deserialize(self, version: int, serialized: bytes) -> EnumState:
        if version != 1:
            raise ValueError(f"EnumStateSerializer: unknown version {version}")
        splits = FileSplitSerializer()
        return EnumState(tuple(splits.deserialize(1, s.encode()) for s in json.loads(serialized)))


class PushEnumerator(SplitEnumerator[FileSplit, EnumState]):
    """Assigns each file to its owner reader when that reader registers (or comes back)."""

    def __init__(
        self,
        context: SplitEnumeratorContext[FileSplit],
        pending: Iterable[FileSplit],
        bounded: bool,
    ) -> None:
        self.context = context
        self.bounded = bounded
        self.pending: dict[int, list[FileSplit]] = {}
        for split in pending:
            self.pending.setdefault(self.owner(split), []).append(split)

    def owner(self, split: FileSplit) -> int:
        return split.number % self.context.current_parallelism()

    def start(self) -> None:
        """Splits were listed when the enumerator was made."""

    def add_reader(self, subtask_id: int) -> None:
        self.assign_pending(subtask_id)

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """A push enumerator ignores requests."""

    def add_splits_back(self, splits: list[FileSplit], subtask_id: int) -> None:
        for split in splits:
            self.pending.setdefault(subtask_id, []).append(split)
        if subtask_id in self.context.registered_readers():
            self.assign_pending(subtask_id)

    def assign_pending(self, subtask_id: int) -> None:
        splits = self.pending.pop(subtask_id, [])
        if splits:
            for split in splits:
                self.context.assign_split(split, subtask_id)
        if self.bounded:
            self.context.signal_no_more_splits(subtask_id)

    def snapshot_state(self, checkpoint_id: int) -> EnumState:
        return EnumState(tuple(s for splits in self.pending.values() for s in splits))

    def close(self) -> None:
        """Nothing to release."""


class LinesReader:
    """Reads its splits one after another, ``batch`` lines per `poll_next`."""

    def __init__(self, context: SourceReaderContext, batch: int) -> None:
        self.context = context
        self.batch = batch
        self.splits: list[FileSplit] = []
        self.lines: dict[str, list[str]] = {}
        self.no_more = False
        self.available: concurrent.futures.Future[None] = concurrent.futures.Future()

    def start(self) -> None:
        """A push source: nothing to ask for."""

    def add_splits(self, splits: list[FileSplit]) -> None:
        self.splits.extend(splits)
        self.wake_up()

    def notify_no_more_splits(self) -> None:
        self.no_more = True
        self.wake_up()

    def wake_up(self) -> None:
        if not self.available.done():
            self.available.set_result(None)

    def read_lines(self, split: FileSplit) -> list[str]:
        if split.split_id() not in self.lines:
            self.lines[split.split_id()] = Path(split.path).read_text().splitlines()
        return self.lines[split.split_id()]

    def poll_next(self, output: ReaderOutput[dict[str, Any]]) -> InputStatus:
        if not self.splits:
            if self.no_more:
                return InputStatus.END_OF_INPUT
            if self.available.done():
                self.available = concurrent.futures.Future()
            return InputStatus.NOTHING_AVAILABLE
        split = self.splits[0]
        lines = self.read_lines(split)
        chunk = lines[split.lines_read : split.lines_read + self.batch]
        split_output = output.create_output_for_split(split.split_id())
        for line in chunk:
            split_output.collect({"file": split.number, "line": line})
        split = attrs.evolve(split, lines_read=split.lines_read + len(chunk))
        if split.lines_read >= len(lines):
            self.finish(split)
            output.release_output_for_split(split.split_id())
        else:
            self.splits[0] = split
        return InputStatus.MORE_AVAILABLE

    def finish(self, split: FileSplit) -> None:
        self.splits.pop(0)
        self.lines.pop(split.split_id(), None)

    def is_available(self) -> concurrent.futures.Future[None]:
        return self.available

    def snapshot_state(self, checkpoint_id: int) -> list[FileSplit]:
        return list(self.splits)

    def close(self) -> None:
        """Nothing to release."""


class NumberedFilesSource:
    """The ``part-<n>.txt`` files of ``directory``, listed when the job starts."""

    enumerator_class: type[PushEnumerator] = PushEnumerator
    reader_class: type[LinesReader] = LinesReader

    def __init__(self, directory: str, *, batch: int = 3, bounded: bool = True) -> None:
        self.directory = directory
        self.batch = batch
        self.bounded = bounded

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self.bounded else Boundedness.CONTINUOUS_UNBOUNDED

    def list_splits(self) -> list[FileSplit]:
        paths = Path(self.directory).glob("part-*.txt")
        numbered = sorted((int(p.stem.split("-")[1]), str(p)) for p in paths)
        return [FileSplit(number, path) for number, path in numbered]

    def create_enumerator(self, enum_context: SplitEnumeratorContext[FileSplit]) -> Any:
        return self.enumerator_class(enum_context, self.list_splits(), self.bounded)

    def restore_enumerator(self, enum_context: Any, checkpoint: EnumState) -> Any:
        return self.enumerator_class(enum_context, checkpoint.pending, self.bounded)

    def create_reader(self, reader_context: SourceReaderContext) -> LinesReader:
        return self.reader_class(reader_context, self.batch)

    def get_split_serializer(self) -> FileSplitSerializer:
        return FileSplitSerializer()

    def get_enumerator_checkpoint_serializer(self) -> EnumStateSerializer:
        return EnumStateSerializer()

    def get_produced_type(self) -> pyarrow.Schema:
        return SCHEMA


def write_files(directory: Path, lines: list[int]) -> list[dict[str, Any]]:
    """``part-<n>.txt`` with ``lines[n]`` lines each; the records, each file's in order."""
    directory.mkdir(parents=True, exist_ok=True)
    records = []
    for number, count in enumerate(lines):
        text = [f"{number}:{i}" for i in range(count)]
        (directory / f"part-{number}.txt").write_text("".join(t + "\n" for t in text))
        records.extend({"file": number, "line": t} for t in text)
    return records
