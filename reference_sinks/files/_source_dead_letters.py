"""Records of `FileSource` that do not parse: found one by one, and the dead-letter directory.

Without a dead-letter directory a file that does not parse fails the task, naming the
file, the line and the column. With one (``dead_letter_dir=``):

- **JSON lines and CSV**: each record that does not parse or convert is written,
  byte for byte as it was in the file, to ``<dead_letter_dir>/<path below the
  source's root>.bad``, with a sidecar ``<same>.bad.json`` saying why (one entry per
  record: its line, its column when one value is at fault, the error); every other
  record of the file is read. A restored split's position counts the records read,
  so it skips exactly what it read before.
- **Parquet**: a file whose footer cannot be read (truncated, not Parquet) is copied
  whole to ``<dead_letter_dir>/<path below the root>`` with the same sidecar, and
  nothing of it is read. A row group that fails to decode after others were read
  still fails the task (its earlier rows are already out), naming the file and the
  row group.

Writes are atomic (a hidden temporary name, then a rename) and the same on every
attempt, so a retried task or a replayed micro-batch writes the same dead letters
again and nothing twice, removing the temporaries a killed attempt left. A record is
never dropped silently: it is read, or it is in the dead-letter directory with its
reason.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Sequence
from typing import Final, final

import attrs
import pyarrow as pa
import pyarrow.fs as pafs

from reference_sinks.files._atomic import write_atomically

__all__ = [
    "BadRecord",
    "DeadLetters",
    "Record",
    "csv_records",
    "json_column",
    "json_records",
    "sift",
]

SIDECAR: Final = ".bad.json"
RECORDS: Final = ".bad"


@final
@attrs.frozen
class BadRecord:
    """One record that did not parse: where it was, what it was, why.

    Attributes:
        line: Its first line in the file (1-based, a CSV header is line 1).
        text: The record as it was in the file (its line ending included).
        error: Why it was refused.
        column: The column whose value is at fault, when one is.
    """

    line: int
    text: bytes
    error: str
    column: str | None = None


@final
class DeadLetters:
    """Writes a source's dead letters under ``directory`` of ``fs``.

    Args:
        fs: The dead-letter directory's filesystem.
        directory: The dead-letter directory inside ``fs``.
        root: The source's root path: a file's place below it is kept.
    """

    def __init__(self, fs: pafs.FileSystem, directory: str, root: str) -> None:
        self._fs = fs
        self._directory = directory.rstrip("/")
        self._root = root.rstrip("/")

    def target(self, path: str) -> str:
        """Where ``path``'s dead letters go (without the suffixes)."""
        relative = path[len(self._root) :].lstrip("/") if path != self._root else ""
        return f"{self._directory}/{relative or path.rsplit('/', 1)[-1]}"

    def records(self, path: str, file_format: str, bad: Sequence[BadRecord]) -> None:
        """Put ``bad`` (records of ``path``) and their reasons in the dead-letter directory."""
        target = self.target(path)
        self._write(target + RECORDS, b"".join(record.text for record in bad))
        why = {
            "file": path,
            "format": file_format,
            "records": [
                {"line": record.line, "column": record.column, "error": record.error}
                for record in bad
            ],
        }
        self._write(target + SIDECAR, json.dumps(why, indent=1).encode())

    def whole_file(self, fs: pafs.FileSystem, path: str, file_format: str, error: str) -> None:
        """Copy ``path`` (of ``fs``) whole to the dead-letter directory, with its reason."""
        target = self.target(path)
        with fs.open_input_stream(path) as stream:
            self._write(target, stream.read())
        why = {"file": path, "format": file_format, "whole_file": True, "error": error}
        self._write(target + SIDECAR, json.dumps(why, indent=1).encode())

    def _write(self, target: str, data: bytes) -> None:
        self._fs.create_dir(target.rpartition("/")[0], recursive=True)

        def write(temporary: str) -> None:
            with self._fs.open_output_stream(temporary) as out:
                out.write(data)

        write_atomically(self._fs, target, write)


# --- finding the bad records of a file ------------------------------------------------------

Record = tuple[int, bytes]
"""A record of a text file: its first line (1-based) and its bytes, line ending included."""

_COLUMN: Final = re.compile(r"Column\(/([^)]*)\)")


def json_records(data: bytes) -> list[Record]:
    """The non-blank lines of a JSON-lines file, with their line numbers."""
    lines = data.splitlines(keepends=True)
    return [(index + 1, line) for index, line in enumerate(lines) if line.strip()]


def csv_records(data: bytes, *, header: bool, delimiter: str, quote_char: str) -> list[Record]:
    """The records of a CSV file (a quoted field may span lines), with their first line.

    With ``header`` the first record is the header (line 1), returned first.
    """
    text = data.decode("utf-8", errors="surrogateescape")
    lines = list(io.StringIO(text, newline=""))
    reader = csv.reader(iter(lines), delimiter=delimiter, quotechar=quote_char)
    records: list[Record] = []
    consumed = 0
    while consumed < len(lines):
        try:
            next(reader)
            end = reader.line_num
        except StopIteration:
            break
        except csv.Error:  # an unclosed quote: the rest of the file is one bad record
            end = len(lines)
        chunk = "".join(lines[consumed:end])
        if chunk.strip():
            records.append((consumed + 1, chunk.encode("utf-8", errors="surrogateescape")))
        consumed = end
    return records


def sift(
    records: Sequence[Record],
    parse: Callable[[Sequence[Record]], pa.Table],
    column_of: Callable[[Record, Exception], str | None],
) -> tuple[list[pa.Table], list[BadRecord]]:
    """Split ``records`` into the tables of the good ones and the bad ones, in file order.

    ``parse`` reads a run of records (raising what the format raises for bad input);
    a run that fails is halved until each failing record stands alone, so a file
    with few bad records costs a few parses more than one.
    """
    tables: list[pa.Table] = []
    bad: list[BadRecord] = []

    def visit(group: Sequence[Record]) -> None:
        if not group:
            return
        try:
            tables.append(parse(group))
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as error:
            if len(group) == 1:
                line, text = group[0]
                column = getattr(error, "column", None) or column_of(group[0], error)
                bad.append(BadRecord(line, text, f"{type(error).__name__}: {error}", column))
                return
        middle = len(group) // 2
        visit(group[:middle])
        visit(group[middle:])

    visit(records)
    return tables, bad


def json_column(record: Record, error: Exception) -> str | None:
    """The column pyarrow's JSON error names (``Column(/a/b)`` is ``a.b``), if any."""
    found = _COLUMN.search(str(error))
    return found.group(1).replace("/", ".") if found else None
