"""Listing a `FileSource`'s directory: which files count, their partitions, their splits.

The rules, the same for a bounded listing and for every tick of a continuous one:

- A path component that starts with ``.``, or with ``_`` without holding a ``=``,
  is hidden (staging directories, Spark's ``_SUCCESS`` and ``_temporary``,
  FileSink's ``_staging`` and ``_sinkv2``, editors' swap files), as Spark's file
  index hides them (``HadoopFSUtils.shouldFilterOutPathName``): a partition
  directory such as ``_region=eu`` is not hidden, Spark reads it. So is a file whose name
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
import decimal
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
    "empty_partition_value",
    "is_hidden",
    "list_files",
    "make_splits",
    "partition_scalar",
    "partition_type",
]

_COMPRESSED: Final = ("", ".gz", ".bz2", ".zst")
"""Compressions pyarrow detects by name that Spark's writers also write (gzip, bzip2, zstd)."""

DEFAULT_EXTENSIONS: Final = {
    "parquet": (".parquet",),
    "jsonl": tuple(f"{e}{c}" for e in (".jsonl", ".json", ".ndjson") for c in _COMPRESSED),
    "csv": tuple(f".csv{c}" for c in _COMPRESSED),
}
"""File name endings each format reads by default."""

HIDDEN_SUFFIXES: Final = (".tmp", ".inprogress", ".crc", ".COPYING", "._COPYING_")
"""Names that are a file being written or copied, never read."""


_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE: Final = re.compile(
    r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)"
)  # what Java's Double.parseDouble reads (hexadecimal aside)
_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MAX_DECIMAL_DIGITS: Final = 38


def _integral(value: str) -> int | None:
    """``value`` as an integer when Java's ``BigDecimal`` reads it with no fraction.

    ``12``, and also ``1e3`` or ``1.5e3`` (scale 0 or less); ``1.5`` is not.
    """
    if _INTEGER.fullmatch(value):
        return int(value)
    if not _DOUBLE.fullmatch(value) or value.lstrip("+-")[:1] in "NI" or value[-1] in "fFdD":
        return None
    number = decimal.Decimal(value)
    exponent = number.as_tuple().exponent
    return int(number) if isinstance(exponent, int) and exponent >= 0 else None


def _value_type(value: str) -> pa.DataType:
    """The type Spark infers for one raw directory value (``inferPartitionColumnValue``).

    An integer, else a decimal of no scale (Java's ``BigDecimal``: ``1e3`` is
    ``decimal(4,0)``), else a double, a date, or a string.
    """
    number = _integral(value)
    if number is not None:
        return _integral_type(number, plain=_INTEGER.fullmatch(value) is not None)
    if _DOUBLE.fullmatch(value):
        return pa.float64()
    if _DATE.fullmatch(value):
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            return pa.string()
        return pa.date32()
    return pa.string()


def _integral_type(number: int, *, plain: bool) -> pa.DataType:
    """``int``, ``long`` (for ``plain`` digits), ``decimal(p, 0)``, or ``double`` past 38 digits."""
    if plain and -(2**31) <= number < 2**31:
        return pa.int32()
    if plain and -(2**63) <= number < 2**63:
        return pa.int64()
    digits = len(str(abs(number)))
    return pa.decimal128(digits, 0) if digits <= _MAX_DECIMAL_DIGITS else pa.float64()


def _integral_digits(kind: pa.DataType) -> int | None:
    """The decimal digits an integral or ``decimal(p, 0)`` type needs, else ``None``."""
    if kind == pa.int32():
        return 10
    if kind == pa.int64():
        return 20
    if isinstance(kind, pa.Decimal128Type):
        return int(kind.precision)
    return None


def _wider(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    """Spark's ``findWiderTypeWithoutStringPromotion`` for two inferred types, else string."""
    if left == right:
        return left
    if pa.types.is_date(left) or pa.types.is_date(right):
        return pa.string()
    if pa.types.is_string(left) or pa.types.is_string(right):
        return pa.string()
    if pa.float64() in (left, right):
        return pa.float64()
    if {left, right} == {pa.int32(), pa.int64()}:
        return pa.int64()
    digits = [_integral_digits(left), _integral_digits(right)]
    return pa.decimal128(min(max(d or 0 for d in digits), _MAX_DECIMAL_DIGITS), 0)


def partition_type(values: Sequence[str]) -> pa.DataType:
    """Spark's partition type inference over a column's raw directory values.

    Each value's type as Spark infers it (``int``, ``long``, ``decimal(p, 0)``,
    ``double``, ``date``, else ``string``), widened as Spark widens them; a column
    of nulls only is a string.
    """
    present = [v for v in values if v != HIVE_DEFAULT_PARTITION]
    if not present:
        return pa.string()
    found = _value_type(present[0])
    for value in present[1:]:
        found = _wider(found, _value_type(value))
    return found


def _double(text: str) -> float:
    """A directory value Spark infers as ``double``, as Java's ``Double.parseDouble`` reads it."""
    plain = text.rstrip("fFdD") if _DOUBLE.fullmatch(text) else text
    return float(plain.replace("Infinity", "inf"))


def empty_partition_value(key: str, path: str) -> SinkConfigurationError:
    """The error for a partition directory ``<key>=`` with no value, which Spark refuses."""
    return SinkConfigurationError(
        f"FileSource: the partition directory '{key}=' of {path!r} has an empty value, which "
        "Spark's reader refuses too (EMPTY_PARTITION_COLUMN_VALUE); name it "
        f"'{key}={HIVE_DEFAULT_PARTITION}' for a null, or move the file"
    )


def partition_scalar(raw: str, kind: pa.DataType, path: str, key: str = "") -> pa.Scalar:
    """The value of partition directory value ``raw`` (still escaped) as a ``kind`` scalar.

    Raises:
        SinkConfigurationError: The value is not a ``kind``, or empty (``key=``).
    """
    if raw == HIVE_DEFAULT_PARTITION:
        return pa.scalar(None, kind)
    if not raw:
        raise empty_partition_value(key, path)
    text = urllib.parse.unquote(raw)
    try:
        if pa.types.is_integer(kind):
            return pa.scalar(int(text), kind)
        if pa.types.is_decimal(kind):
            return pa.scalar(decimal.Decimal(text).quantize(decimal.Decimal(1)), kind)
        if pa.types.is_floating(kind):
            return pa.scalar(_double(text), kind)
        return pa.scalar(text).cast(kind)
    except (
        ValueError,
        OverflowError,
        ArithmeticError,
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
    ) as error:
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
    if any(part.startswith(".") or (part.startswith("_") and "=" not in part) for part in parts):
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
    endings = tuple(extension.lower() for extension in extensions)  # B.CSV is a CSV file
    found = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].strip("/")
        if is_hidden(relative) or not relative.lower().endswith(endings):
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
