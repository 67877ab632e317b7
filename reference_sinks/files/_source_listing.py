"""Listing a `FileSource`'s directory: which files count, their partitions, their splits.

The rules, the same for a bounded listing and for every tick of a continuous one:

- A path component that starts with ``.`` or ``_`` is hidden (staging directories,
  Spark's ``_SUCCESS``, FileSink's ``_staging`` and ``_sinkv2``, editors' swap
  files), as Spark's and Flink's file sources hide them; so is a file whose name
  ends with ``.tmp``, ``.inprogress``, ``.crc`` or ``.COPYING`` (a copy or upload
  not finished). Hidden files are never read.
- Only files of the format's extensions count (``.parquet``; ``.jsonl``, ``.json``,
  ``.ndjson``; ``.csv``), optionally compressed (``.gz``, ``.bz2``, ``.zst`` for JSON
  lines and CSV), unless ``extensions=`` says otherwise.
- Directories named ``key=value`` between the root and the file are partition
  values of column ``key`` (Hive style, as FileSink and Spark write them): the
  value is unescaped (``%2F`` is ``/``), ``__HIVE_DEFAULT_PARTITION__`` is null, and
  the column's type is inferred as Spark infers it for these values (``int``,
  ``long``, ``date``, else ``string``) unless given.
- A Parquet file larger than ``split_bytes`` is cut into runs of whole row groups
  of about ``split_bytes`` each (its footer is read once, on the enumerator);
  every other file is one split.
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Final, final

import attrs
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks.files._paths import HIVE_DEFAULT_PARTITION
from reference_sinks.files._source_split import FileSourceSplit
from sinkv2.errors import SinkConfigurationError

__all__ = [
    "DEFAULT_EXTENSIONS",
    "HIDDEN_SUFFIXES",
    "FileStatus",
    "is_hidden",
    "list_files",
    "make_splits",
    "partition_scalar",
    "partition_type",
]

DEFAULT_EXTENSIONS: Final = {
    "parquet": (".parquet",),
    "jsonl": (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".jsonl.bz2", ".jsonl.zst"),
    "csv": (".csv", ".csv.gz", ".csv.bz2", ".csv.zst"),
}
"""File name endings each format reads by default."""

HIDDEN_SUFFIXES: Final = (".tmp", ".inprogress", ".crc", ".COPYING", "._COPYING_")
"""Names that are a file being written or copied, never read."""


_INT32: Final = re.compile(r"-?\d{1,9}")
_INT64: Final = re.compile(r"-?\d{1,18}")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def partition_type(values: Sequence[str]) -> pa.DataType:
    """Spark's partition type inference, for the types FileSink partitions by."""
    present = [v for v in values if v != HIVE_DEFAULT_PARTITION]
    if present and all(_INT32.fullmatch(v) and -(2**31) <= int(v) < 2**31 for v in present):
        return pa.int32()
    if present and all(_INT64.fullmatch(v) for v in present):
        return pa.int64()
    if present and all(_DATE.fullmatch(v) for v in present):
        try:
            for v in present:
                dt.date.fromisoformat(v)
        except ValueError:
            return pa.string()
        return pa.date32()
    return pa.string()


def partition_scalar(raw: str, kind: pa.DataType, path: str) -> pa.Scalar:
    if raw == HIVE_DEFAULT_PARTITION:
        return pa.scalar(None, kind)
    text = urllib.parse.unquote(raw)
    try:
        return pa.scalar(text).cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise SinkConfigurationError(
            f"FileSource: the partition directory value {text!r} of {path!r} is not a {kind}; "
            "give partition_columns= with a string type for it, or move the file"
        ) from error


@final
@attrs.frozen
class FileStatus:
    """A listed file that counts: where, how big, when written, in which partition."""

    path: str
    size: int
    mtime_ns: int
    partition: tuple[tuple[str, str], ...]


def is_hidden(relative: str) -> bool:
    """Whether a path relative to the root is hidden (see the module docstring)."""
    parts = relative.split("/")
    if any(part.startswith((".", "_")) for part in parts):
        return True
    return parts[-1].endswith(HIDDEN_SUFFIXES)


def _partition(relative: str) -> tuple[tuple[str, str], ...]:
    found = []
    for part in relative.split("/")[:-1]:
        key, equals, value = part.partition("=")
        if equals and key:
            found.append((key, value))
    return tuple(found)


def list_files(
    fs: pafs.FileSystem, root: str, extensions: Sequence[str], *, single_file: bool = False
) -> list[FileStatus]:
    """Every file under ``root`` that counts, sorted by path.

    Args:
        fs: The filesystem.
        root: A directory (listed recursively) or, with ``single_file``, one file.
        extensions: Name endings that count.
        single_file: ``root`` is a file: it alone is listed (hidden or not).

    Raises:
        OSError: The listing failed (the filesystem's own error).
    """
    if single_file:
        info = fs.get_file_info(root)
        return [FileStatus(root, info.size or 0, info.mtime_ns or 0, ())]
    selector = pafs.FileSelector(root, allow_not_found=True, recursive=True)
    found = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].strip("/")
        if is_hidden(relative) or not relative.endswith(tuple(extensions)):
            continue
        found.append(
            FileStatus(info.path, info.size or 0, info.mtime_ns or 0, _partition(relative))
        )
    found.sort(key=lambda status: status.path)
    return found


def make_splits(
    fs: pafs.FileSystem, status: FileStatus, file_format: str, split_bytes: int
) -> list[FileSourceSplit]:
    """The splits of one file: whole, or runs of row groups of a large Parquet file."""
    whole = FileSourceSplit(
        status.path, status.path, status.size, status.mtime_ns, status.partition
    )
    if file_format != "parquet" or status.size <= split_bytes:
        return [whole]
    try:
        with fs.open_input_file(status.path) as handle:
            metadata = pq.ParquetFile(handle).metadata
    except (pa.ArrowInvalid, OSError):  # not Parquet, truncated, gone: the reader says so,
        return [whole]  # naming the file, or sets it aside in the dead-letter directory
    groups = _runs(
        (metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)),
        split_bytes,
    )
    if len(groups) <= 1:
        return [attrs.evolve(whole, records=metadata.num_rows)]
    return [
        attrs.evolve(
            whole,
            id=f"{status.path}#rg={run[0]}-{run[-1]}",
            row_groups=tuple(run),
            records=sum(metadata.row_group(i).num_rows for i in run),
        )
        for run in groups
    ]


def _runs(sizes: Iterable[int], split_bytes: int) -> list[list[int]]:
    """Consecutive row-group indices in runs of about ``split_bytes`` (at least one each)."""
    runs: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if current and total + size > split_bytes:
            runs.append(current)
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        runs.append(current)
    return runs
