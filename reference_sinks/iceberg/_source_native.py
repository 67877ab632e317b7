"""`IcebergSource` read by Spark's own Parquet reader: `sinkv2.source.SupportsNativeRead`.

A bounded plan's data files are handed to Spark's Parquet reader when it gives
exactly the rows and values `IcebergSource`'s readers give, and only then:

- no ``row_filter`` (the source's readers apply it to every row; it is not
  translated into a Spark expression);
- every split starts at record 0 and has no delete files (position deletes are
  applied by the source's readers only);
- every data file is a local ``file:`` path without glob characters or a hidden
  name;
- every column of the produced type, at every level, is a boolean, int, long,
  float, double, decimal, date, string, binary or timestamp(tz), and each file
  holds it (matched by field id) with exactly that type - no widened type, which
  the source's readers widen and Spark's may not;
- the files are read by name when, in every file, the columns (matched by field id,
  at every level) have the table's current names and no other column has one of
  those names in another case; otherwise by Parquet field id (`NativeRead.field_ids`;
  Spark 4 honours field ids of nested fields too), which needs field ids in every
  file: a renamed column in a file without field ids (read through the table's
  name mapping) stays on the source's readers.

A column added after a file was written is missing from it: both readers give
nulls. A column an imported file does not hold whose values are the file's identity
partition value (`IcebergSourceSplit.identity`) stays on the source's readers.
Columns declared ``required`` keep the read on the source's readers (the
door refuses non-nullable types before asking: Spark's reader makes every column
nullable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from reference_sinks.iceberg._source_read import FIELD_ID, open_data_file, schema_with_field_ids
from reference_sinks.iceberg._source_split import IcebergSourceSplit
from sinkv2.source import NativeRead, NativeReadUnavailable

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType, NestedField

__all__ = ["plan_native_read"]

NATIVE_PARQUET_OPTIONS: Final = {"datetimeRebaseMode": "CORRECTED", "int96RebaseMode": "CORRECTED"}
"""Dates and timestamps as written (proleptic Gregorian), as pyarrow reads them."""

_GLOB: Final = frozenset("{}[]*?\\")


def _unavailable(reason: str) -> NativeReadUnavailable:
    return NativeReadUnavailable(f"IcebergSource: {reason}")


def _leaf_ok(kind: IcebergType) -> bool:
    from pyiceberg import types as t  # noqa: PLC0415  # optional extra

    allowed = (
        t.BooleanType,
        t.IntegerType,
        t.LongType,
        t.FloatType,
        t.DoubleType,
        t.DecimalType,
        t.DateType,
        t.StringType,
        t.BinaryType,
        t.TimestampType,
        t.TimestamptzType,
    )
    return isinstance(kind, allowed)


def _type_reason(kind: IcebergType, where: str) -> str | None:
    """Why a produced type is not read alike by both readers, or ``None``."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415

    if isinstance(kind, StructType):
        for field in kind.fields:
            reason = _type_reason(
                field.field_type, f"{where}.{field.name}" if where else field.name
            )
            if reason is not None:
                return reason
        return None
    if isinstance(kind, ListType):
        return _type_reason(kind.element_type, f"{where}[]")
    if isinstance(kind, MapType):
        return _type_reason(kind.key_type, f"{where}{{}}") or _type_reason(
            kind.value_type, f"{where}{{}}"
        )
    if _leaf_ok(kind):
        return None
    return f"column {where!r} is {kind}, which Spark's Parquet reader reads otherwise or not at all"


def _compare(  # noqa: PLR0911  # one answer per kind of type
    want: IcebergType, have: IcebergType, where: str, path: str
) -> tuple[str | None, bool]:
    """(why ``have`` in the file is not read as ``want`` alike, whether all names equal)."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415

    if isinstance(want, StructType):
        if not isinstance(have, StructType):
            return f"{path} holds {where!r} as {have}, not a struct", False
        by_id = {field.field_id: field for field in have.fields}
        wanted_lower = {field.name.lower(): field.field_id for field in want.fields}
        same = all(
            wanted_lower.get(field.name.lower(), field.field_id) == field.field_id
            for field in have.fields
        )
        for field in want.fields:
            found: NestedField | None = by_id.get(field.field_id)
            if found is None:
                continue  # added after the file was written: null in both readers
            name = f"{where}.{field.name}" if where else field.name
            same = same and found.name == field.name
            reason, names = _compare(field.field_type, found.field_type, name, path)
            if reason is not None:
                return reason, False
            same = same and names
        return None, same
    if isinstance(want, ListType):
        if not isinstance(have, ListType):
            return f"{path} holds {where!r} as {have}, not a list", False
        return _compare(want.element_type, have.element_type, f"{where}[]", path)
    if isinstance(want, MapType):
        if not isinstance(have, MapType):
            return f"{path} holds {where!r} as {have}, not a map", False
        reason, keys = _compare(want.key_type, have.key_type, f"{where}{{}}", path)
        if reason is not None:
            return reason, False
        reason, values = _compare(want.value_type, have.value_type, f"{where}{{}}", path)
        return reason, keys and values
    if want != have:
        return (
            f"{path} holds {where!r} as {have}, not the table's {want} (the source's readers "
            "widen it; Spark's may not)",
            False,
        )
    return None, True


def _field_ids(produced: pa.Schema, projection: Schema) -> pa.Schema:
    """``produced`` with each field's Iceberg id as ``PARQUET:field_id`` metadata."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415

    def walk(kind: pa.DataType, iceberg: IcebergType) -> pa.DataType:
        if isinstance(iceberg, StructType):
            return pa.struct([field(f, n) for f, n in zip(kind, iceberg.fields, strict=True)])
        if isinstance(iceberg, ListType):
            value = kind.value_field
            return pa.list_(value.with_type(walk(value.type, iceberg.element_type)))
        if isinstance(iceberg, MapType):
            return pa.map_(
                kind.key_field.with_type(walk(kind.key_type, iceberg.key_type)),
                kind.item_field.with_type(walk(kind.item_type, iceberg.value_type)),
            )
        return kind

    def field(arrow: pa.Field, nested: NestedField) -> pa.Field:
        return arrow.with_type(walk(arrow.type, nested.field_type)).with_metadata(
            {FIELD_ID: str(nested.field_id).encode()}
        )

    return pa.schema([field(f, n) for f, n in zip(produced, projection.fields, strict=True)])


def plan_native_read(  # noqa: PLR0911, PLR0912  # one reason per check
    splits: Sequence[IcebergSourceSplit],
    *,
    io: FileIO,
    projection: Schema,
    produced: pa.Schema,
    has_row_filter: bool,
    name_mapping: NameMapping | None,
) -> NativeRead | NativeReadUnavailable:
    """The data files of ``splits`` for Spark's Parquet reader, or why it cannot read them.

    Reads every data file's footer (one small read per file) on the driver.

    Raises:
        DataFileReadError: A data file is missing or is not Parquet, or has no field
            ids and the table no name mapping that covers it (as the readers raise).
    """
    from pyiceberg.io.pyarrow import pyarrow_to_schema  # noqa: PLC0415  # optional extra
    from pyiceberg.types import StructType  # noqa: PLC0415

    if has_row_filter:
        return _unavailable(
            "a row_filter is applied to every row by the source's readers, and is not "
            "translated into a Spark expression; filter the DataFrame instead to read natively"
        )
    reason = _type_reason(StructType(*projection.fields), "")
    if reason is not None:
        return _unavailable(reason)
    by_name = True
    all_ids = True
    paths = []
    for split in splits:
        if split.records_read or split.stop is not None:
            return _unavailable(
                f"split {split.path!r} starts at record {split.records_read} and stops at "
                f"{'the end' if split.stop is None else split.stop}; only whole files are read "
                "natively"
            )
        if split.position_deletes:
            return _unavailable(
                f"{split.path!r} has position-delete files {list(split.position_deletes)}, which "
                "only the source's readers apply (compact the table to read it natively)"
            )
        path = split.path.removeprefix("file://")
        if not path.startswith("/") or "://" in split.path.removeprefix("file://"):
            return _unavailable(
                f"{split.path!r} is not a local file: Spark's filesystems are configured apart "
                "from the table's FileIO"
            )
        name = path.rsplit("/", 1)[-1]
        if _GLOB.intersection(path) or name.startswith((".", "_")):
            return _unavailable(
                f"{split.path!r} holds a glob character or a hidden name, which Spark's reader "
                "would expand or skip"
            )
        parquet: pq.ParquetFile = open_data_file(io, split.path)
        file_schema = parquet.schema_arrow
        if all((field.metadata or {}).get(FIELD_ID) is None for field in file_schema):
            all_ids = False
            # raises the Python readers' error for a file the name mapping cannot map
            schema_with_field_ids(file_schema, name_mapping, split.path)
        try:
            iceberg = pyarrow_to_schema(file_schema, name_mapping=name_mapping)
        except ValueError as error:
            return _unavailable(f"{split.path!r}: its columns cannot be matched by id: {error}")
        held = {field.field_id for field in iceberg.fields}
        filled = [field_id for field_id, _ in split.identity if field_id not in held]
        if filled:
            return _unavailable(
                f"{split.path!r} holds no column {projection.find_column_name(filled[0])!r}, "
                "whose values are the file's identity-partition value, which only the "
                "source's readers fill in"
            )
        reason, same = _compare(
            StructType(*projection.fields), StructType(*iceberg.fields), "", split.path
        )
        if reason is not None:
            return _unavailable(reason)
        by_name = by_name and same
        paths.append(f"file://{path}")
    if by_name:
        return NativeRead(format="parquet", paths=sorted(paths), options=NATIVE_PARQUET_OPTIONS)
    if not all_ids:
        return _unavailable(
            "a column was renamed, and some data files have no Parquet field ids (the source's "
            "readers match them through the table's name mapping; Spark's reader cannot)"
        )
    return NativeRead(
        format="parquet",
        paths=sorted(paths),
        options=NATIVE_PARQUET_OPTIONS,
        field_ids=_field_ids(produced, projection),
    )
