"""What FileSink refuses before any data moves: types it cannot write, schema changes.

Two checks, both raising `SinkConfigurationError`:

- `check_types`: every column's type can be written in the format so that Spark
  reads back the same values (see the type table on the FileSink docs page);
- `check_existing`: a run appends to a directory whose newest committed file
  (Parquet) has columns of other types, lacks a column, or whose partition columns
  differ. Such a directory is one ``spark.read`` cannot read
  (``CANNOT_MERGE_SCHEMAS``, or conflicting partition directories), and Spark's own
  ``df.write.mode("append")`` does not stop it; FileSink refuses it with both
  schemas side by side. Added columns are allowed: readers see them with
  ``mergeSchema`` or a schema.

Only the newest committed file is read (one listing, one footer): FileSink writes
every column of the newest file again (missing columns are refused), so the newest
file's columns are those of every earlier one, with their types.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks.files._config import FileFormat
from reference_sinks.files._json_lines import unsupported
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = ["check_existing", "check_no_char_varchar", "check_types", "newest_file"]

_SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
_EXTENSIONS = {"parquet": (".parquet",), "jsonl": (".jsonl", ".json")}


def check_types(
    schema: pa.Schema, file_format: FileFormat, spark_types: Sequence[str] = ()
) -> None:
    """Refuse a column whose type ``file_format`` cannot hold as Spark would read it back.

    Args:
        schema: The rows' Arrow schema.
        file_format: ``"parquet"`` or ``"jsonl"``.
        spark_types: The columns' Spark type names, for the message (optional).

    Raises:
        SinkConfigurationError: Names the column, its type and what to do.
    """
    names = list(spark_types) or [str(field.type) for field in schema]
    for field, spark_type in zip(schema, names, strict=True):
        if file_format == "jsonl":
            found = unsupported(field)
        else:
            found = _inside(field.type, pa.types.is_time)
        if found is None:
            continue
        what = "a time" if pa.types.is_time(found) else "a day-time interval"
        where = "" if found == field.type else f" (it holds {found} values)"
        reason = (
            "Spark's own writers refuse times too"
            if pa.types.is_time(found)
            else "JSON lines have no spelling of it that Spark's reader takes back for "
            "every interval type; Parquet keeps it"
        )
        raise SinkConfigurationError(
            f"FileSink ({file_format}) cannot write column {field.name!r} of type "
            f"{spark_type}{where}: {what} has no {file_format} form that reads back as the "
            f"same value ({reason}). Cast it before writing, e.g. to a string or a long"
        )


def check_no_char_varchar(fields: Sequence[Any], file_format: FileFormat) -> None:
    """Refuse a char or varchar column, naming it (Spark's own refusal names none).

    Such columns exist with ``spark.sql.preserveCharVarcharTypeInfo``; neither Arrow
    nor Spark's file writers take them.

    Raises:
        SinkConfigurationError: naming the column, its type and the cast to make.
    """
    from pyspark.sql import types as T  # noqa: PLC0415  # pyspark on use

    def holds(kind: Any) -> bool:
        if isinstance(kind, T.CharType | T.VarcharType):
            return True
        if isinstance(kind, T.ArrayType):
            return holds(kind.elementType)
        if isinstance(kind, T.MapType):
            return holds(kind.keyType) or holds(kind.valueType)
        if isinstance(kind, T.StructType):
            return any(holds(field.dataType) for field in kind.fields)
        return False

    for field in fields:
        if holds(field.dataType):
            raise SinkConfigurationError(
                f"FileSink ({file_format}) cannot write column {field.name!r} of type "
                f"{field.dataType.simpleString()}: neither Arrow nor Spark's file writers "
                f"take char or varchar types. Cast it to string first, e.g. "
                f"df.withColumn({field.name!r}, df[{field.name!r}].cast('string')) for a "
                "top-level column, or turn spark.sql.preserveCharVarcharTypeInfo off"
            )


def _inside(kind: pa.DataType, test: Any) -> pa.DataType | None:
    if test(kind):
        return kind
    if pa.types.is_struct(kind):
        children = [kind.field(i).type for i in range(kind.num_fields)]
    elif pa.types.is_map(kind):
        children = [kind.key_type, kind.item_type]
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        children = [kind.value_type]
    else:
        return None
    for child in children:
        found = _inside(child, test)
        if found is not None:
            return found
    return None


def newest_file(
    fs: pafs.FileSystem, root: str, file_format: FileFormat
) -> tuple[str, tuple[str, ...]] | None:
    """The newest committed data file under ``root`` and its partition columns, or ``None``.

    Hidden paths (a component starting with ``_`` or ``.``: staging, Spark's
    ``_SUCCESS``) are skipped, as readers skip them.
    """
    selector = pafs.FileSelector(root, allow_not_found=True, recursive=True)
    newest: tuple[Any, str] | None = None
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.base_name.endswith(_EXTENSIONS[file_format]):
            continue
        relative = info.path[len(root) :].strip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        key = info.mtime_ns or 0
        if newest is None or key > newest[0]:
            newest = (key, relative)
    if newest is None:
        return None
    relative = newest[1]
    directories = relative.split("/")[:-1]
    partitions = tuple(part.split("=", 1)[0] for part in directories if "=" in part)
    return f"{root}/{relative}", partitions


def _spark_schema(fs: pafs.FileSystem, path: str) -> StructType:
    """The Spark schema of a Parquet file: Spark's own if it wrote one, else from Arrow's."""
    from pyspark.sql.pandas.types import from_arrow_schema  # noqa: PLC0415  # pyspark on use
    from pyspark.sql.types import StructType  # noqa: PLC0415  # pyspark on use

    with fs.open_input_file(path) as source:
        schema = pq.read_schema(source)
    stored = (schema.metadata or {}).get(_SPARK_SCHEMA_KEY)
    if stored is not None:
        try:
            return StructType.fromJson(json.loads(stored))
        except (ValueError, KeyError, TypeError):  # not a schema Spark can read: ignore it
            pass
    result: StructType = from_arrow_schema(schema.remove_metadata())
    return result


def _normal(kind: DataType) -> DataType:
    """``kind`` as Spark reads it back: nullable everywhere, no metadata, one interval type."""
    from pyspark.sql import types as T  # noqa: PLC0415  # pyspark on use

    if isinstance(kind, T.StructType):
        return T.StructType([T.StructField(f.name, _normal(f.dataType)) for f in kind.fields])
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(_normal(kind.elementType))
    if isinstance(kind, T.MapType):
        return T.MapType(_normal(kind.keyType), _normal(kind.valueType))
    if isinstance(kind, T.DayTimeIntervalType):
        return T.DayTimeIntervalType()  # stored as microseconds, whatever its fields
    if isinstance(kind, T.CharType | T.VarcharType):
        return T.StringType()
    return kind


def check_existing(
    fs: pafs.FileSystem,
    root: str,
    file_format: FileFormat,
    schema: StructType,
    partition_by: Sequence[str],
) -> None:
    """Refuse rows that would make the directory at ``root`` unreadable as one table.

    Args:
        fs: The sink's filesystem.
        root: The base directory inside it.
        file_format: ``"parquet"`` or ``"jsonl"`` (JSON lines store no schema: only
            the partition columns are checked).
        schema: The DataFrame's Spark schema, partition columns included.
        partition_by: The sink's partition columns.

    Raises:
        SinkConfigurationError: The newest committed file has other partition
            columns, a column the rows lack, or a column of another type; the
            message shows both schemas.
    """
    found = newest_file(fs, root, file_format)
    if found is None:
        return
    path, partitions = found
    if list(partitions) != list(partition_by):
        raise SinkConfigurationError(
            f"FileSink at {root!r} is partitioned by {list(partitions)} (newest file "
            f"{path!r}) but this sink by {list(partition_by)}; spark.read cannot read "
            "directories partitioned two ways. Partition by the same columns, or write "
            "to another base_path"
        )
    if file_format != "parquet":
        return
    existing = _spark_schema(fs, path)
    new = {f.name: f.dataType for f in schema.fields if f.name not in partition_by}
    problems = []
    for field in existing.fields:
        if field.name not in new:
            problems.append(f"column {field.name!r} is missing")
        elif _normal(new[field.name]) != _normal(field.dataType):
            problems.append(
                f"column {field.name!r} is {new[field.name].simpleString()}, "
                f"was {field.dataType.simpleString()}"
            )
    if problems:
        before = ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in existing.fields)
        after = ", ".join(f"{name}: {kind.simpleString()}" for name, kind in new.items())
        raise SinkConfigurationError(
            f"FileSink cannot append these rows to {root!r}: {'; '.join(problems)}. "
            f"Files there (newest: {path!r}) have columns [{before}]; the DataFrame has "
            f"[{after}]. Spark cannot read a directory whose files disagree on a column's "
            "type (CANNOT_MERGE_SCHEMAS). Cast the columns to the types already written "
            "(and add missing ones as nulls, e.g. F.lit(None).cast(...)); new columns may be "
            "added. Or write to another base_path"
        )
