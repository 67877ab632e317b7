"""`FileSource` read by Spark's own Parquet reader: `sinkv2.source.SupportsNativeRead`.

A bounded plan's splits are handed over as whole Parquet files when Spark's reader
gives exactly the rows and values `FileSource`'s readers give, and only then:

- the format is Parquet (Spark's JSON and CSV readers parse values by other rules
  than pyarrow's: base64 binaries, timestamp patterns, quotes and empty fields);
- the files are on the local filesystem (no ``filesystem=``; an object store's
  URI scheme and credentials are Spark's Hadoop configuration, not pyarrow's);
- every split starts at its file's beginning, and the splits of a file cover all of
  its row groups (then it is read whole, however it was cut);
- each file's directories below the root are exactly the partition columns'
  ``key=value`` directories, in the columns' order, and the partition types are
  ones Spark parses from a directory name as pyarrow does (string, integers,
  date, boolean);
- each file's footer (read on the driver, one small read per file) holds every
  data column it has with the declared type, up to nullability and the names of
  list and map items, in a type both readers read alike (booleans, integers,
  floats, decimals, strings, binaries, dates, millisecond or microsecond
  timestamps, Spark's variants, and lists, maps and structs of them); a column
  whose name differs only in case is refused (Spark's reader would match it,
  FileSource's would not);
- no path holds a glob character (Spark would expand it) or a hidden name.

Otherwise the answer is `NativeReadUnavailable`, with the first reason found. A
footer that does not parse is the `FileReadError` the Python path raises.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks.files._source_formats import CsvOptions, infer_schema
from reference_sinks.files._source_split import FileSourceSplit
from reference_sinks.files._source_variant import VARIANT_MARK, is_variant
from sinkv2.source import NativeRead, NativeReadUnavailable

__all__ = ["NATIVE_PARQUET_OPTIONS", "plan_native_read"]

NATIVE_PARQUET_OPTIONS: Final = {"datetimeRebaseMode": "CORRECTED", "int96RebaseMode": "CORRECTED"}
"""Dates and timestamps as written (proleptic Gregorian), as pyarrow reads them.

Spark refuses dates before 1582 and timestamps before 1900 from files it did not
write unless told how to read them; files Spark 3+ wrote say so themselves.
"""

_GLOB: Final = frozenset("{}[]*?\\")
"""Characters that make Spark expand a path as a glob pattern."""


def _partition_type_ok(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_signed_integer(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_boolean(kind)
    )


def _leaf(kind: pa.DataType) -> pa.DataType | None:
    """A leaf type as both readers give it, or ``None`` when they might differ."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if pa.types.is_timestamp(kind):
        if kind.unit not in ("ms", "us"):  # Spark refuses nanoseconds; INT96 is mapped before
            return None
        return pa.timestamp("us", None if kind.tz is None else "UTC")
    if pa.types.is_duration(kind):  # INT64 microseconds: Spark's day-time interval
        return kind if kind.unit == "us" else None
    plain = (
        pa.types.is_boolean(kind)
        or pa.types.is_signed_integer(kind)
        or kind in (pa.float32(), pa.float64())
        or pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_decimal128(kind)
    )
    return kind if plain else None


def _comparable(kind: pa.DataType) -> pa.DataType | None:
    """``kind`` with nullability and item names dropped, or ``None`` for a type not allowed.

    A variant (pyspark's Arrow form) is `VARIANT_MARK`: Spark's reader rebuilds a
    shredded variant as `FileSource`'s does, and reads a variant group as nothing else.
    """
    if is_variant(kind):
        return VARIANT_MARK
    if pa.types.is_struct(kind):
        fields = []
        for field in kind:
            inner = _comparable(field.type)
            if inner is None:
                return None
            fields.append(pa.field(field.name, inner))
        return pa.struct(fields)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _comparable(kind.value_type)
        return None if inner is None else pa.list_(inner)
    if pa.types.is_map(kind):
        key, item = _comparable(kind.key_type), _comparable(kind.item_type)
        return None if key is None or item is None else pa.map_(key, item)
    return _leaf(kind)


def _unavailable(reason: str) -> NativeReadUnavailable:
    return NativeReadUnavailable(f"FileSource: {reason}")


def plan_native_read(
    splits: Sequence[FileSourceSplit],
    where: tuple[str, pafs.FileSystem | None, pafs.FileSystem, str],
    data_schema: pa.Schema,
    partitions: Mapping[str, pa.DataType],
) -> NativeRead | NativeReadUnavailable:
    """The files of ``splits`` for Spark's Parquet reader, or the reason it cannot read them.

    Args:
        splits: Every split of a bounded plan.
        where: The source's format, the ``filesystem=`` it was given (or ``None``),
            the filesystem it reads (resolved) and its root in it.
        data_schema: The data columns, as the source's readers give them.
        partitions: The partition columns and their types, in order.

    Raises:
        FileReadError: A file's footer does not parse.
    """
    file_format, filesystem, fs, root = where
    reason = _config_reason(file_format, filesystem, fs, partitions) or _empty_reason(splits)
    if reason is not None:
        return _unavailable(reason)
    declared: dict[str, pa.DataType] = {}
    for field in data_schema:
        comparable = _comparable(field.type)
        if comparable is None:
            return _unavailable(
                f"column {field.name!r} is {field.type}, which Spark's Parquet reader reads "
                "otherwise or not at all"
            )
        declared[field.name] = comparable
    groups: dict[str, list[FileSourceSplit]] = collections.defaultdict(list)
    for split in splits:
        if split.records_read:
            return _unavailable(
                f"split {split.id!r} starts at record {split.records_read}, not at the file's "
                "beginning"
            )
        if split.stop is not None:
            return _unavailable(
                f"split {split.id!r} stops at record {split.stop}, before the file's end"
            )
        if split.size > 0:  # an empty file has no rows, nor a footer Spark could read
            groups[split.path].append(split)
    paths = []
    for path, parts in groups.items():
        reason = _path_reason(path, root, parts[0].partition, partitions)
        if reason is None:
            reason = _footer_reason(fs, path, parts, declared)
        if reason is not None:
            return _unavailable(reason)
        paths.append(f"file://{path}")
    return NativeRead(
        format="parquet",
        paths=sorted(paths),
        partition_columns=tuple(partitions),
        base_path=f"file://{root}" if partitions else None,
        options=NATIVE_PARQUET_OPTIONS,
    )


def _config_reason(
    file_format: str,
    filesystem: pafs.FileSystem | None,
    fs: pafs.FileSystem,
    partitions: Mapping[str, pa.DataType],
) -> str | None:
    if file_format != "parquet":
        return (
            f"format {file_format!r} is read by FileSource itself: Spark's {file_format} reader "
            "parses values by other rules (binaries, timestamps, quotes, empty fields)"
        )
    if filesystem is not None or not isinstance(fs, pafs.LocalFileSystem):
        return (
            f"the files are on {type(fs).__name__}, not the local filesystem without "
            "filesystem=; Spark's Hadoop filesystems are configured apart from pyarrow's"
        )
    bad = [name for name, kind in partitions.items() if not _partition_type_ok(kind)]
    if bad:
        return (
            f"partition column(s) {bad} have types Spark may parse from directory names "
            "otherwise than FileSource (string, signed integer, date and boolean read alike)"
        )
    return None


def _empty_reason(splits: Sequence[FileSourceSplit]) -> str | None:
    if splits and all(split.size == 0 for split in splits):
        return "every file is empty: there is nothing for Spark's reader"
    return None


def _path_reason(
    path: str,
    root: str,
    partition: tuple[tuple[str, str], ...],
    partitions: Mapping[str, pa.DataType],
) -> str | None:
    if _GLOB.intersection(path):
        return f"the path {path!r} holds a character Spark reads as a glob pattern"
    relative = "" if path == root else path[len(root) :].strip("/")
    parts = relative.split("/") if relative else [path.rsplit("/", 1)[-1]]
    if parts[-1].startswith((".", "_")):
        return f"the file name of {path!r} is hidden from Spark's reader (it starts with . or _)"
    if not partitions:
        return None
    expected = [f"{key}={value}" for key, value in partition]
    if [key for key, _ in partition] != list(partitions) or parts[:-1] != expected:
        return (
            f"the directories of {path!r} below {root!r} are not exactly the partition "
            f"columns {list(partitions)} as key=value directories, in that order"
        )
    return None


def _footer_reason(
    fs: pafs.FileSystem,
    path: str,
    parts: list[FileSourceSplit],
    declared: Mapping[str, pa.DataType],
) -> str | None:
    schema = infer_schema(fs, path, "parquet", CsvOptions())  # as the Python path reads it
    if not any(split.row_groups is None for split in parts):
        with fs.open_input_file(path) as handle:  # parsed above: the footer is sound
            groups = pq.ParquetFile(handle).metadata.num_row_groups
        covered = sorted(group for split in parts for group in split.row_groups or ())
        if covered != list(range(groups)):
            return (
                f"the splits of {path!r} cover row groups {covered}, not the whole file's {groups}"
            )
    elif len(parts) > 1:
        return f"{path!r} is planned as {len(parts)} splits, one of them the whole file"
    lowered = {name.lower(): name for name in declared}
    for field in schema:
        if field.name not in declared:
            if field.name.lower() in lowered:
                return (
                    f"{path!r} has column {field.name!r}, which Spark's reader would match to "
                    f"the declared {lowered[field.name.lower()]!r} (names differ only in case)"
                )
            continue
        if _comparable(field.type) != declared[field.name]:
            return (
                f"column {field.name!r} of {path!r} is {field.type}, not the declared type "
                "(FileSource converts it; Spark's reader may not)"
            )
    return None
