"""What Spark's file writer leaves in a directory: data files, partition directories, bookkeeping.

A native write (`sinkv2.SupportsNativeFileWrite`) puts an epoch's files under one
directory, laid out as Spark lays out ``df.write.partitionBy(...).save(path)``::

    <directory>/c1=v1/c2=v2/part-00000-<uuid>.c000.snappy.parquet   data
    <directory>/c1=v1/c2=v2/.part-00000-<uuid>.c000.snappy.parquet.crc   checksum
    <directory>/_temporary/0/_temporary/attempt_.../...          an unfinished write
    <directory>/_SUCCESS                                           (switched off here)

Anything whose name starts with ``_`` or ``.`` is bookkeeping (Spark's and Hadoop's
readers skip it too); the rest are the data files. Partition values are escaped as
Spark escapes them (``%XX``), a null or empty value is ``__HIVE_DEFAULT_PARTITION__``.
"""

from __future__ import annotations

import re
from typing import Final, final

import attrs
import pyarrow.fs as pafs

__all__ = ["HIVE_DEFAULT_PARTITION", "WrittenFile", "list_written_files", "unescape_path_name"]

HIVE_DEFAULT_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")


def unescape_path_name(text: str) -> str:
    """``text`` with every ``%XX`` turned back into its character (Spark's ``unescapePathName``)."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text)


@final
@attrs.frozen(kw_only=True)
class WrittenFile:
    """One data file of a Spark write.

    Attributes:
        path: The file, in the listing filesystem's coordinates.
        partition: Its partition directories relative to the write's directory, as
            written (``"c1=v1/c2=v2"``, or ``""``).
        size: Its size in bytes.
    """

    path: str
    partition: str
    size: int

    def partition_values(self) -> tuple[tuple[str, str | None], ...]:
        """The partition directories as (column, value) pairs, unescaped; null as ``None``."""
        pairs: list[tuple[str, str | None]] = []
        for part in filter(None, self.partition.split("/")):
            column, _, value = part.partition("=")
            pairs.append(
                (
                    unescape_path_name(column),
                    None if value == HIVE_DEFAULT_PARTITION else unescape_path_name(value),
                )
            )
        return tuple(pairs)


def list_written_files(fs: pafs.FileSystem, directory: str) -> list[WrittenFile]:
    """The data files Spark wrote under ``directory``, sorted by path; none if it is missing.

    Bookkeeping (a path component starting with ``_`` or ``.``) is left out.
    """
    root = directory.rstrip("/")
    found = []
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].strip("/")
        parts = relative.split("/")
        if any(part.startswith(("_", ".")) for part in parts):
            continue
        found.append(
            WrittenFile(path=info.path, partition="/".join(parts[:-1]), size=int(info.size or 0))
        )
    return sorted(found, key=lambda file: file.path)
