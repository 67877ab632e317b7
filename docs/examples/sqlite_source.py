"""A FLIP-27 source over a SQLite table, checked with the source contract kit.

The how-to "Test your sink" (section "Test a source") includes this file. The source
reads one table in rowid ranges, one split per range; a split's position is the last
rowid it read. Its reader is written against `sinkv2.source.SourceReader` directly (no
reader framework), and its enumerator hands out one range per split request. With
``delete_read=True`` the table is a queue: rows are deleted once a completed
checkpoint holds them. Run it with::

    python docs/examples/sqlite_source.py

It makes a table in a temporary directory and runs ``check_source`` on it, plain and
as a queue. Needs pyarrow, hypothesis and cloudpickle: ``pip install -e '.[test]' pyarrow``.
"""

# --8<-- [start:source]
from __future__ import annotations

import collections
import concurrent.futures
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pyarrow

from sinkv2 import AttrsMsgpackSerializer, SimpleVersionedSerializer
from sinkv2.source import (
    Boundedness,
    InputStatus,
    ReaderOutput,
    SourceReaderContext,
    SplitEnumerator,
    SplitEnumeratorContext,
)
from sinkv2.testing import check_source

Record = dict[str, Any]


@attrs.frozen
class RowidRange:
    """A split: the rows with ``after < rowid <= last``; ``after`` moves as rows are read."""

    table: str
    first: int  # the range's lower bound as planned (exclusive); part of the id
    last: int
    after: int

    def split_id(self) -> str:
        """Unique in the source and stable across restarts: the table and the range."""
        return f"{self.table}({self.first},{self.last}]"


@attrs.frozen
class Unassigned:
    """The enumerator's checkpoint: the ranges no reader has yet, as whole splits."""

    splits: tuple[RowidRange, ...]


class RangeEnumerator(SplitEnumerator[RowidRange, Unassigned]):
    """One range per split request; none left: no more splits for that reader."""

    def __init__(self, context: SplitEnumeratorContext[RowidRange], splits: Any) -> None:
        self.context = context
        self.unassigned = collections.deque(splits)

    def start(self) -> None:
        """The ranges were planned when the enumerator was made."""

    def add_reader(self, subtask_id: int) -> None:
        """A reader asks for its first range itself."""

    def handle_split_request(self, subtask_id: int, requester_hostname: str | None) -> None:
        """Assign the next range, or tell the reader none are left."""
        if self.unassigned:
            self.context.assign_split(self.unassigned.popleft(), subtask_id)
        else:
            self.context.signal_no_more_splits(subtask_id)

    def add_splits_back(self, splits: list[RowidRange], subtask_id: int) -> None:
        """A reader failed: its ranges since the last checkpoint go to whoever asks next."""
        self.unassigned.extend(splits)

    def snapshot_state(self, checkpoint_id: int) -> Unassigned:
        """The ranges not assigned yet, positions included."""
        return Unassigned(tuple(self.unassigned))

    def close(self) -> None:
        """Nothing to release."""


class RangeReader:
    """Reads its ranges one after another, ``batch`` rows per `poll_next`."""

    def __init__(self, context: SourceReaderContext, source: SqliteTableSource) -> None:
        self.context = context
        self.source = source
        self.ranges: collections.deque[RowidRange] = collections.deque()
        self.no_more = False
        self.connection: sqlite3.Connection | None = None
        self.available: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.read_whole: list[RowidRange] = []  # ranges finished since the last snapshot
        self.to_delete: dict[int, list[RowidRange]] = {}  # checkpoint id -> what it read

    def start(self) -> None:
        """Open the database; ask for a first range unless ranges were restored."""
        self.connection = sqlite3.connect(self.source.path)
        if not self.ranges:  # a restored reader reads its ranges first
            self.context.send_split_request()

    def add_splits(self, splits: list[RowidRange]) -> None:
        """Read these ranges after the ones it has, from the positions they carry."""
        self.ranges.extend(splits)
        self.wake_up()

    def notify_no_more_splits(self) -> None:
        """Once its ranges are read, the reader is at the end of its input."""
        self.no_more = True
        self.wake_up()

    def wake_up(self) -> None:
        """Complete the future `is_available` returned: there is something to do."""
        if not self.available.done():
            self.available.set_result(None)

    def poll_next(self, output: ReaderOutput[Record]) -> InputStatus:
        """Emit the next rows of the current range and move its position past them."""
        if not self.ranges:
            if self.no_more:
                return InputStatus.END_OF_INPUT
            if self.available.done():
                self.available = concurrent.futures.Future()
            return InputStatus.NOTHING_AVAILABLE
        split = self.ranges[0]
        assert self.connection is not None  # opened by start()
        rows = self.connection.execute(
            f"SELECT rowid, {', '.join(self.source.columns)} FROM {split.table} "
            "WHERE rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?",
            (split.after, split.last, self.source.batch),
        ).fetchall()
        if not rows:  # the range is read: ask for the next one
            self.read_whole.append(self.ranges.popleft())
            output.release_output_for_split(split.split_id())
            if not self.ranges:
                self.context.send_split_request()
            return InputStatus.MORE_AVAILABLE
        split_output = output.create_output_for_split(split.split_id())
        for _rowid, *values in rows:
            split_output.collect(dict(zip(self.source.columns, values, strict=True)))
        self.ranges[0] = attrs.evolve(split, after=rows[-1][0])  # past the last row emitted
        return InputStatus.MORE_AVAILABLE

    def is_available(self) -> concurrent.futures.Future[None]:
        """Completes when ranges or the end of them arrive."""
        return self.available

    def snapshot_state(self, checkpoint_id: int) -> list[RowidRange]:
        """The unread ranges at their positions; as a queue, remember what to delete."""
        read, self.read_whole = [*self.read_whole, *self.ranges], []
        if self.source.delete_read:  # deleted once this checkpoint completes, not before
            self.to_delete[checkpoint_id] = read
        return list(self.ranges)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """As a queue: delete what the completed checkpoint's snapshot had read."""
        for done in sorted(c for c in self.to_delete if c <= checkpoint_id):
            self.delete(self.to_delete.pop(done))

    def delete(self, ranges: list[RowidRange]) -> None:
        """Delete the rows of ``ranges`` up to their positions."""
        assert self.connection is not None
        for split in ranges:
            self.connection.execute(
                f"DELETE FROM {split.table} WHERE rowid > ? AND rowid <= ?",
                (split.first, split.after),
            )
        self.connection.commit()

    def close(self) -> None:
        """Close the database."""
        if self.connection is not None:
            self.connection.close()


class SqliteTableSource:
    """The rows of ``table`` in the database file ``path``, in ranges of rowids; bounded.

    ``delete_read``: delete rows once a completed checkpoint holds them (a queue).
    """

    def __init__(
        self,
        path: str,
        table: str,
        schema: pyarrow.Schema,
        *,
        rows_per_split: int = 10,
        batch: int = 4,
        delete_read: bool = False,
    ) -> None:
        self.path, self.table, self.schema = path, table, schema
        self.columns = list(schema.names)
        self.rows_per_split, self.batch, self.delete_read = rows_per_split, batch, delete_read

    def get_boundedness(self) -> Boundedness:
        """The table is read as it is when the job starts."""
        return Boundedness.BOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[RowidRange]) -> Any:
        """Plan the ranges over the rowids the table has now."""
        with sqlite3.connect(self.path) as connection:
            (high,) = connection.execute(f"SELECT max(rowid) FROM {self.table}").fetchone()
        connection.close()
        bounds = range(0, high or 0, self.rows_per_split)
        return RangeEnumerator(
            enum_context,
            [RowidRange(self.table, b, min(b + self.rows_per_split, high), b) for b in bounds],
        )

    def restore_enumerator(self, enum_context: Any, checkpoint: Unassigned) -> Any:
        """Go on with the ranges not assigned at the checkpoint."""
        return RangeEnumerator(enum_context, checkpoint.splits)

    def create_reader(self, reader_context: SourceReaderContext) -> RangeReader:
        """A reader for one subtask."""
        return RangeReader(reader_context, self)

    def get_split_serializer(self) -> SimpleVersionedSerializer[RowidRange]:
        """Ranges, positions included, as msgpack, version 1."""
        return AttrsMsgpackSerializer(RowidRange, version=1)

    def get_enumerator_checkpoint_serializer(self) -> SimpleVersionedSerializer[Unassigned]:
        """The enumerator checkpoint as msgpack, version 1."""
        return AttrsMsgpackSerializer(Unassigned, version=1)

    def get_produced_type(self) -> pyarrow.Schema:
        """The records' schema."""
        return self.schema


# --8<-- [end:source]


# --8<-- [start:check]
ORDERS = pyarrow.schema([("id", pyarrow.int64()), ("item", pyarrow.string())])


def make_table(path: Path, rows: int) -> list[Record]:
    """A table ``orders`` of ``rows`` rows, rowids with gaps; its records in rowid order."""
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE orders (id INTEGER, item TEXT)")
        connection.executemany(
            "INSERT INTO orders (rowid, id, item) VALUES (?, ?, ?)",
            [(3 * i + 1, i, ["apple", "pear", "fig"][i % 3]) for i in range(rows)],
        )
    connection.close()
    return [{"id": i, "item": ["apple", "pear", "fig"][i % 3]} for i in range(rows)]


def fresh_copies(template: Path, make: Callable[[str], Any]) -> Callable[[], Any]:
    """A source factory: each call, a source over a fresh copy of ``template``.

    The kit runs every case on a new source from the factory (a restore within a case
    reuses that case's source, and so its table): a source that deletes what it read
    needs a fresh table per case.
    """
    copies = iter(range(sys.maxsize))

    def factory() -> Any:
        copy = template.with_name(f"copy-{next(copies)}.sqlite")
        copy.write_bytes(template.read_bytes())
        return make(str(copy))

    return factory


def check(directory: Path, *, max_examples: int = 20) -> None:
    """The kit on the table, then on the table as a queue."""
    template = directory / "orders.sqlite"
    expected = make_table(template, 50)
    check_source(
        lambda: SqliteTableSource(str(template), "orders", ORDERS),
        expected=expected,
        max_examples=max_examples,
    )
    print(f"check_source: SqliteTableSource passed ({len(expected)} rows)")
    check_source(
        fresh_copies(
            template, lambda path: SqliteTableSource(path, "orders", ORDERS, delete_read=True)
        ),
        expected=expected,
        max_examples=max_examples,
    )
    print("check_source: SqliteTableSource(delete_read=True) passed")


# --8<-- [end:check]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="sqlite-source-") as name:
        check(Path(name))
