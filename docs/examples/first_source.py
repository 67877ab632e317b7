"""Implement your first source: the JSON Lines files of a directory, one split per file.

This is the complete example of the tutorial "Implement your first source". It has
no Spark in it: `main` runs the source on `sinkv2.testing.LocalSourceEngine`, takes a
checkpoint, stops, restores from the checkpoint with another number of readers, and
then checks the source with the contract kit. Run it with::

    python docs/examples/first_source.py [DIRECTORY]

It reads the ``*.jsonl`` files of DIRECTORY, for example the output of the first
sink tutorial. A directory without such files (or none given: a fresh temporary
directory) first gets three sample files. The source, the kit and this example
need pyarrow, hypothesis and cloudpickle: ``pip install -e '.[test]' pyarrow``.
"""

# --8<-- [start:imports]
from __future__ import annotations

import collections
import itertools
import json
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import attrs
import pyarrow

from sinkv2 import AttrsMsgpackSerializer, SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.source import (
    Boundedness,
    Source,
    SourceOutput,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
    inspect_source,
)
from sinkv2.source.reader import (
    RecordEmitter,
    RecordsBySplits,
    SingleThreadMultiplexSourceReaderBase,
    SplitReader,
    SplitsAddition,
    SplitsChange,
)
from sinkv2.testing import LocalSourceEngine, SourceCheckpoint, check_source, check_source_reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Record = dict[str, Any]
"""What the source emits: one dict per line, keyed by the schema's column names."""
# --8<-- [end:imports]


# --8<-- [start:split]
@attrs.frozen
class FileSplit:
    """A split: one file, and how far it was read.

    Attributes:
        path: The file's absolute path; also the split's id.
        position: Lines already read: the next line to read (0 at the start).
    """

    path: str
    position: int = 0

    def split_id(self) -> str:
        """Unique within the source and stable across restarts: the path."""
        return self.path


@attrs.define
class FileSplitState:
    """A split being read: the reader's mutable copy of its position."""

    path: str
    position: int


@attrs.frozen
class PendingFiles:
    """The enumerator's checkpoint: the files not assigned yet, as whole splits."""

    splits: tuple[FileSplit, ...]


# --8<-- [end:split]


# --8<-- [start:split_reader]
class Line(NamedTuple):
    """What the split reader fetches: one non-blank line and its number (from 0)."""

    number: int
    text: str


class JsonLinesSplitReader(SplitReader[Line, FileSplit]):
    """Reads its files one after another, at most ``lines_per_fetch`` lines per fetch.

    Runs in the reader's fetcher thread.
    """

    def __init__(self, lines_per_fetch: int) -> None:
        self._lines_per_fetch = lines_per_fetch
        self._waiting: collections.deque[FileSplit] = collections.deque()
        self._split: FileSplit | None = None
        self._file: IO[str] | None = None
        self._next_line = 0

    def handle_splits_changes(self, splits_changes: SplitsChange[FileSplit]) -> None:
        """Queue new files; they are read in the order they came."""
        if not isinstance(splits_changes, SplitsAddition):
            raise NotImplementedError(
                f"JsonLinesSplitReader only takes SplitsAddition (got "
                f"{type(splits_changes).__name__}); it never pauses or removes a file"
            )
        self._waiting.extend(splits_changes.splits)

    def fetch(self) -> RecordsBySplits[Line]:
        """The next lines of the current file; the file is finished when none are left."""
        if self._file is None:
            if not self._waiting:
                return RecordsBySplits({})  # no file to read: an empty fetch
            self._open(self._waiting.popleft())
        assert self._split is not None  # set by _open
        assert self._file is not None
        split_id = self._split.split_id()
        lines = []
        read = 0
        for text in itertools.islice(self._file, self._lines_per_fetch):
            read += 1
            if text.strip():
                lines.append(Line(self._next_line, text))
            self._next_line += 1
        records = {split_id: lines} if lines else {}
        if read < self._lines_per_fetch:  # the end of the file
            self._close_file()
            return RecordsBySplits(records, finished_splits=[split_id])
        return RecordsBySplits(records)

    def _open(self, split: FileSplit) -> None:
        self._file = open(split.path, encoding="utf-8")  # noqa: SIM115  # closed by _close_file
        self._split = split
        # Skip the lines read before the split's checkpoint (position = line number).
        skipped = sum(1 for _ in itertools.islice(self._file, split.position))
        if skipped < split.position:
            self._close_file()
            raise ValueError(
                f"{split.path} has {skipped} lines, but its split was checkpointed at line "
                f"{split.position}: the file changed after it was read; restore from a "
                "checkpoint taken after the change, or restore the file"
            )
        self._next_line = split.position

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._split = None

    def wake_up(self) -> None:
        """Nothing to interrupt: a fetch reads a local file and returns at once."""

    def close(self) -> None:
        """Close the file being read, if any."""
        self._close_file()


# --8<-- [end:split_reader]


# --8<-- [start:emitter]
class JsonLinesEmitter(RecordEmitter[Line, Record, FileSplitState]):
    """Parses a line, emits it as a record, and moves the split's position past it."""

    def __init__(self, columns: Sequence[str]) -> None:
        self._columns = tuple(columns)

    def emit_record(
        self, element: Line, output: SourceOutput[Record], split_state: FileSplitState
    ) -> None:
        """Emit ``element`` as a dict of the schema's columns; then advance the position."""
        output.collect(to_record(element, split_state.path, self._columns))
        split_state.position = element.number + 1


def to_record(line: Line, path: str, columns: Sequence[str]) -> Record:
    """``line`` as a record: its JSON object's values of ``columns`` (missing ones None)."""
    try:
        value = json.loads(line.text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}, line {line.number + 1}: not JSON ({error})") from error
    if not isinstance(value, dict):
        raise ValueError(
            f"{path}, line {line.number + 1}: expected a JSON object, got "
            f"{type(value).__name__} {line.text.strip()[:40]!r}"
        )
    return {column: value.get(column) for column in columns}


# --8<-- [end:emitter]


# --8<-- [start:reader]
class JsonLinesReader(
    SingleThreadMultiplexSourceReaderBase[Line, Record, FileSplit, FileSplitState]
):
    """A reader of one subtask: asks for a file, reads it, asks for the next one."""

    def __init__(
        self, context: SourceReaderContext, columns: Sequence[str], lines_per_fetch: int
    ) -> None:
        super().__init__(
            lambda: JsonLinesSplitReader(lines_per_fetch), JsonLinesEmitter(columns), context
        )
        self._started = False
        self._restored = False

    def add_splits(self, splits: list[FileSplit]) -> None:
        """Splits added before `start` were restored from a checkpoint."""
        self._restored = self._restored or not self._started
        super().add_splits(splits)

    def start(self) -> None:
        """Ask for a first file, unless restored files are waiting to be read."""
        self._started = True
        if not self._restored:
            self.context.send_split_request()

    def initialized_state(self, split: FileSplit) -> FileSplitState:
        """A split starts at the position it carries."""
        return FileSplitState(split.path, split.position)

    def to_split_type(self, split_id: str, split_state: FileSplitState) -> FileSplit:
        """The split at the position reached, for a checkpoint."""
        return FileSplit(split_state.path, split_state.position)

    def on_split_finished(self, finished_split_ids: dict[str, FileSplitState]) -> None:
        """A file is done: ask for the next one."""
        self.context.send_split_request()


# --8<-- [end:reader]


# --8<-- [start:enumerator]
class FileEnumerator(SplitEnumerator[FileSplit, PendingFiles]):
    """Hands out one file per split request, then tells readers there are no more."""

    def __init__(
        self, context: SplitEnumeratorContext[FileSplit], pending: Iterable[FileSplit]
    ) -> None:
        self._context = context
        self._pending = collections.deque(pending)

    def start(self) -> None:
        """Nothing to start: the files were listed when the job started."""

    def add_reader(self, subtask_id: int) -> None:
        """Nothing to do: a new reader asks for a file itself."""

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next file, or signal that none are left."""
        if self._pending:
            self._context.assign_split(self._pending.popleft(), subtask_id)
        else:
            self._context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[FileSplit], subtask_id: int) -> None:
        """A reader failed: its files since the last checkpoint go to whoever asks next."""
        self._pending.extend(splits)

    def snapshot_state(self, checkpoint_id: int) -> PendingFiles:
        """The files not assigned yet: whole splits, positions included."""
        return PendingFiles(tuple(self._pending))

    def close(self) -> None:
        """Nothing to release."""


# --8<-- [end:enumerator]


# --8<-- [start:source]
class JsonLinesSource(Source[Record, FileSplit, PendingFiles]):
    """The ``*.jsonl`` files of ``directory``, one split per file; bounded.

    The source is plain data (a path, a schema and a number), so engines can ship it
    to their readers; enumerators and readers open files, the source never does.
    """

    def __init__(
        self, directory: str | Path, schema: pyarrow.Schema, *, lines_per_fetch: int = 1000
    ) -> None:
        if not isinstance(lines_per_fetch, int) or lines_per_fetch < 1:
            raise ValueError(f"lines_per_fetch must be an int >= 1 (got {lines_per_fetch!r})")
        self.directory = str(Path(directory).resolve())
        self.schema = schema
        self.lines_per_fetch = lines_per_fetch

    def get_boundedness(self) -> Boundedness:
        """The files are listed once, when the job starts: the data ends."""
        return Boundedness.BOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[FileSplit]) -> FileEnumerator:
        """List the files, in name order: one split each, from line 0."""
        files = sorted(Path(self.directory).glob("*.jsonl"))
        return FileEnumerator(enum_context, [FileSplit(str(path)) for path in files])

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[FileSplit], checkpoint: PendingFiles
    ) -> FileEnumerator:
        """Go on with the files that were not assigned at the checkpoint."""
        return FileEnumerator(enum_context, checkpoint.splits)

    def create_reader(self, reader_context: SourceReaderContext) -> JsonLinesReader:
        """A reader for one subtask."""
        return JsonLinesReader(reader_context, self.schema.names, self.lines_per_fetch)

    def get_split_serializer(self) -> SimpleVersionedSerializer[FileSplit]:
        """Splits, positions included, as msgpack, version 1."""
        return AttrsMsgpackSerializer(FileSplit, version=1)

    def get_enumerator_checkpoint_serializer(self) -> SimpleVersionedSerializer[PendingFiles]:
        """The enumerator's checkpoint as msgpack, version 1."""
        return AttrsMsgpackSerializer(PendingFiles, version=1)

    def get_produced_type(self) -> pyarrow.Schema:
        """The records' schema."""
        return self.schema


# --8<-- [end:source]


# --8<-- [start:helpers]
ORDERS = pyarrow.schema([("order", pyarrow.int64()), ("item", pyarrow.string())])
"""The schema of the sample files, and of the first sink tutorial's output."""


def write_sample_files(directory: Path) -> None:
    """Three files of orders, 10, 5 and 8 lines long."""
    directory.mkdir(parents=True, exist_ok=True)
    items = itertools.cycle(["apple", "pear", "plum", "fig", "quince"])
    order = itertools.count(1)
    for number, lines in enumerate([10, 5, 8], start=1):
        with open(directory / f"orders-{number}.jsonl", "w", encoding="utf-8") as file:
            for _ in range(lines):
                file.write(json.dumps({"order": next(order), "item": next(items)}) + "\n")


def records_of(path: Path, columns: Sequence[str]) -> list[Record]:
    """A file's records, read plainly: what the source must emit for it, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        to_record(Line(number, text), str(path), columns)
        for number, text in enumerate(lines)
        if text.strip()
    ]


# --8<-- [end:helpers]


# --8<-- [start:main]
def main(argv: list[str]) -> int:
    """Run the source locally: checkpoint, stop, restore with more readers, then check it."""
    directory = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="first-source-"))
    if not any(directory.glob("*.jsonl")):
        write_sample_files(directory)
    source = JsonLinesSource(directory, ORDERS, lines_per_fetch=3)

    # 1. Check the source before any record moves.
    capabilities = inspect_source(source)
    print(f"{capabilities.source_type}: {capabilities.boundedness.name}, {source.directory}")

    # 2. Two readers; a checkpoint once about a third of the records were emitted.
    files = sorted(directory.glob("*.jsonl"))
    want = {str(path.resolve()): records_of(path, ORDERS.names) for path in files}
    total = sum(len(records) for records in want.values())
    engine = LocalSourceEngine(source, parallelism=2, seed=1)
    engine.run(until=lambda e: emitted(e) >= total // 3)
    checkpoint = engine.checkpoint()
    print(f"checkpoint {checkpoint.checkpoint_id}: {len(engine.committed)} records committed")
    show(source, checkpoint)

    # 3. The job goes on a little, then stops before its next checkpoint: what it
    #    emitted since checkpoint 1 is not committed, and is read again after the restore.
    engine.run(until=lambda e: emitted(e) >= total // 2)
    print(f"stopped with {emitted(engine) - len(engine.committed)} records not committed")
    engine.close()

    # 4. Restore from checkpoint 1 with three readers, and read to the end.
    restored = LocalSourceEngine(source, parallelism=3, seed=2, checkpoint=checkpoint)
    restored.run()
    restored.finish()
    committed = engine.committed + restored.committed
    print(f"restored with 3 readers: {len(restored.committed)} more records committed")

    # 5. Each file's records, each once and in the file's order.
    by_file: dict[str, list[Record]] = collections.defaultdict(list)
    for emitted_record in committed:
        by_file[emitted_record.split_id or "?"].append(dict(emitted_record.record))
    for path, records in want.items():
        verdict = "each once, in order" if by_file[path] == records else "WRONG"
        print(f"  {Path(path).name}: {len(by_file[path])} of {len(records)} records, {verdict}")
    exactly_once = by_file == want
    outcome = "exactly once" if exactly_once else "NOT exactly once"
    print(f"read {len(committed)} records from {len(files)} files {outcome}")

    # 6. The contract kit: many more runs, with failures and restores at random points.
    check(directory)
    return 0 if exactly_once else 1


def emitted(engine: LocalSourceEngine) -> int:
    """Records the engine's readers emitted so far, committed or not."""
    return sum(seen for seen, _ in engine.records_in().values())


def show(source: JsonLinesSource, checkpoint: SourceCheckpoint) -> None:
    """What a checkpoint holds: every split, with its position."""
    pending = SimpleVersionedSerialization.read_version_and_deserialize(
        source.get_enumerator_checkpoint_serializer(), checkpoint.enumerator
    )
    names = [Path(split.path).name for split in pending.splits]
    print(f"  enumerator: not yet assigned {names}")
    for subtask, framed in enumerate(checkpoint.readers):
        splits = [
            SimpleVersionedSerialization.read_version_and_deserialize(
                source.get_split_serializer(), data
            )
            for data in framed
        ]
        held = [f"{Path(split.path).name} from line {split.position}" for split in splits]
        print(f"  reader {subtask}: {', '.join(held) or 'no file'}")


# --8<-- [end:main]


# --8<-- [start:checks]
def check(directory: Path) -> None:
    """The contract kit: Flink's SourceTestSuiteBase, then its SourceReaderTestBase."""
    files = sorted(directory.glob("*.jsonl"))
    expected = [record for path in files for record in records_of(path, ORDERS.names)]
    check_source(
        lambda: JsonLinesSource(directory, ORDERS, lines_per_fetch=3),
        expected=expected,
        max_examples=20,
    )
    print(f"check_source: passed ({len(expected)} records, {len(files)} files)")

    with tempfile.TemporaryDirectory(prefix="first-source-reader-") as name:
        scratch = Path(name)
        source = JsonLinesSource(scratch, pyarrow.schema([("value", pyarrow.int64())]))

        def get_split(index: int, records: int, boundedness: Boundedness) -> FileSplit:
            # Split `index` holds the values index * records ... index * records + records - 1.
            # An unbounded split must not end while the test reads: a file far longer
            # (the test stops a reader that reads one file at a time at 1,000 records).
            first = index * records
            numbers = list(range(first, first + records))
            if boundedness is Boundedness.CONTINUOUS_UNBOUNDED:
                numbers += range(10_000 * (index + 1), 10_000 * (index + 1) + 2_000)
            path = scratch / f"split-{index}-{boundedness.name.lower()}.jsonl"
            path.write_text("".join(json.dumps({"value": n}) + "\n" for n in numbers))
            return FileSplit(str(path))

        check_source_reader(
            source.create_reader,
            get_split,
            value_of=lambda record: int(record["value"]),
            next_record_index=lambda split: int(split.position),
            split_serializer=source.get_split_serializer(),
        )
    print("check_source_reader: passed")


# --8<-- [end:checks]


# --8<-- [start:spark]
def read_with_spark(spark: SparkSession, directory: Path, state_store: Path) -> tuple[int, int]:
    """Read the files with Spark: as a batch DataFrame, then as a stream; the row counts."""
    from pyspark import cloudpickle  # noqa: PLC0415  # Spark's own copy of cloudpickle

    from sinkv2_spark import from_source  # noqa: PLC0415  # the tutorial runs without Spark

    # Spark's Python processes import the source's classes by module name, and cannot
    # import this file: ship its classes by value (or put the file on their PYTHONPATH).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    source = JsonLinesSource(directory, ORDERS)

    batch = from_source(spark, source)  # BOUNDED: a batch DataFrame
    stream = from_source(
        spark, source, streaming=True, source_id="first-source-orders", state_store=str(state_store)
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("first_source_orders")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return batch.count(), spark.table("first_source_orders").count()


# --8<-- [end:spark]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
