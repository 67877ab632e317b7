"""Reading one Iceberg data file with pyarrow, by field id, as the table's schema says.

Iceberg names columns by field id, not by name: a renamed column keeps its id, a
column added after a file was written is missing from that file (its values are
null), and a type may have been widened (``int`` -> ``long``, ``float`` ->
``double``, a wider ``decimal``). So a Parquet file's columns are matched to the
table's fields by their ``PARQUET:field_id`` metadata, at every level of nesting,
and every value is rebuilt into the Arrow type of the table's field. Validity is
kept at every level: a null ``list<struct>`` stays null (pyiceberg's own reader,
to 0.12 at least, turns it into ``[]``: apache/iceberg-python#3833).

Position deletes (v2) are applied: the rows a position-delete file names for this
data file are skipped. The row filter is evaluated on the filter's columns and
the projected columns are taken at the rows that pass. The position of a split
counts rows emitted after both, so a restored read skips exactly those.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sinkv2.errors import SinkV2Error

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import NameMapping
    from pyiceberg.types import IcebergType

__all__ = [
    "DataFileReadError",
    "arrow_type",
    "open_data_file",
    "read_data_file",
    "schema_with_field_ids",
]

FIELD_ID: Final = b"PARQUET:field_id"
_ROW: Final = "__sinkv2_row__"


class DataFileReadError(SinkV2Error, ValueError):
    """A data file of an Iceberg table cannot be read as the table's schema says.

    The message names the file; the task fails rather than skip or invent a record.

    Attributes:
        path: The data (or delete) file.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


def _small(kind: pa.DataType) -> pa.DataType:  # noqa: PLR0911  # one return per kind of type
    """``kind`` with 32-bit offsets (string, binary, list), as Parquet reads and Spark takes."""
    if pa.types.is_large_string(kind):
        return pa.string()
    if pa.types.is_large_binary(kind):
        return pa.binary()
    if isinstance(kind, pa.ExtensionType):
        return _small(kind.storage_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(_small(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(_small(kind.key_type)),
            kind.item_field.with_type(_small(kind.item_type)),
            keys_sorted=kind.keys_sorted,
        )
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_small(field.type)) for field in kind])
    return kind


def arrow_type(schema: Schema) -> pa.Schema:
    """The Arrow schema of an Iceberg schema: nullability from ``required``, no field ids.

    pyiceberg's own conversion, with plain (32-bit offset) strings, binaries and lists,
    and a UUID as its 16 bytes.
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow  # noqa: PLC0415  # optional extra

    converted = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([field.with_type(_small(field.type)) for field in converted])


def _field_id(field: pa.Field) -> int | None:
    raw = (field.metadata or {}).get(FIELD_ID)
    return None if raw is None else int(raw)


def _convert(
    array: pa.Array, file_type: pa.DataType, kind: IcebergType, target: pa.DataType, path: str
) -> pa.Array:
    """``array`` (of the file's ``file_type``) as ``target``, children matched by field id."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415  # optional extra

    mask = array.is_null() if array.null_count else None
    if isinstance(kind, StructType):
        by_id = {_field_id(child): index for index, child in enumerate(file_type)}
        children = []
        for nested, want in zip(kind.fields, target, strict=True):
            index = by_id.get(nested.field_id)
            if index is None:
                children.append(pa.nulls(len(array), want.type))
            else:
                children.append(
                    _convert(
                        array.field(index),
                        file_type.field(index).type,
                        nested.field_type,
                        want.type,
                        path,
                    )
                )
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if isinstance(kind, ListType):
        if pa.types.is_large_list(file_type):
            array = array.cast(pa.list_(file_type.value_field))
            file_type = array.type
        values = _convert(
            array.values, file_type.value_type, kind.element_type, target.value_type, path
        )
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=mask)
    if isinstance(kind, MapType):
        entries = array.values
        keys = _convert(entries.field(0), file_type.key_type, kind.key_type, target.key_type, path)
        items = _convert(
            entries.field(1), file_type.item_type, kind.value_type, target.item_type, path
        )
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if array.type == target:
        return array
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise DataFileReadError(
            f"Iceberg data file {path}: a column of Parquet type {array.type} cannot be read as "
            f"the table's {kind} ({target}): {error}",
            path=path,
        ) from error


def _with_ids(kind: pa.DataType, iceberg: IcebergType) -> pa.DataType:
    """The file's ``kind`` with the field ids of ``iceberg`` (same shape) on its struct fields."""
    from pyiceberg.types import ListType, MapType, StructType  # noqa: PLC0415  # optional extra

    if isinstance(iceberg, StructType):
        return pa.struct(
            [
                field.with_type(_with_ids(field.type, nested.field_type)).with_metadata(
                    {FIELD_ID: str(nested.field_id).encode()}
                )
                for field, nested in zip(kind, iceberg.fields, strict=True)
            ]
        )
    if isinstance(iceberg, ListType):
        value = kind.value_field
        return pa.list_(value.with_type(_with_ids(value.type, iceberg.element_type)))
    if isinstance(iceberg, MapType):
        return pa.map_(
            kind.key_field.with_type(_with_ids(kind.key_type, iceberg.key_type)),
            kind.item_field.with_type(_with_ids(kind.item_type, iceberg.value_type)),
        )
    return kind


def schema_with_field_ids(
    file_schema: pa.Schema, name_mapping: NameMapping | None, path: str
) -> pa.Schema:
    """A file schema without field ids, given ids by the table's name mapping.

    Files written by other writers (Spark's Parquet writer under `IcebergSink`'s native
    path, ``add_files``) carry no field ids; Iceberg reads them through the table's
    ``schema.name-mapping.default``, and so does this.
    """
    from pyiceberg.io.pyarrow import pyarrow_to_schema  # noqa: PLC0415  # optional extra
    from pyiceberg.types import StructType  # noqa: PLC0415  # optional extra

    if name_mapping is None:
        raise DataFileReadError(
            f"Iceberg data file {path} has no Parquet field ids and the table has no name "
            "mapping (schema.name-mapping.default) to give them; IcebergSource maps columns "
            "by field id: set the table's name mapping, or rewrite the file with an Iceberg writer",
            path=path,
        )
    try:
        iceberg = pyarrow_to_schema(file_schema, name_mapping=name_mapping)
    except ValueError as error:
        raise DataFileReadError(
            f"Iceberg data file {path} has no Parquet field ids and the table's name mapping "
            f"does not cover its columns: {error}",
            path=path,
        ) from error
    annotated = _with_ids(pa.struct(list(file_schema)), StructType(*iceberg.fields))
    return pa.schema(list(annotated))


def open_data_file(io: FileIO, path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(io.new_input(path).open())
    except FileNotFoundError as error:
        raise DataFileReadError(
            f"Iceberg data file {path} is missing: the table's metadata names a file that is "
            "gone (removed by hand, or by an orphan-file clean-up)",
            path=path,
        ) from error
    except (pa.ArrowInvalid, OSError) as error:
        raise DataFileReadError(
            f"Iceberg data file {path} is not a Parquet file: {error}", path=path
        ) from error


def deleted_positions(
    io: FileIO, data_path: str, delete_paths: Sequence[str]
) -> np.ndarray[Any, Any]:
    """The sorted row positions of ``data_path`` that the position-delete files name."""
    found = []
    for delete_path in delete_paths:
        table = open_data_file(io, delete_path).read(columns=["file_path", "pos"])
        rows = table.filter(pc.equal(table["file_path"], data_path))
        found.append(rows["pos"].to_numpy())
    if not found:
        return np.empty(0, dtype=np.int64)
    return np.unique(np.concatenate(found))


def _constant(raw: bytes | None, kind: IcebergType, target: pa.DataType, rows: int) -> pa.Array:
    """``rows`` times the value Iceberg's single-value serialization ``raw`` holds."""
    from pyiceberg.conversions import from_bytes  # noqa: PLC0415  # optional extra
    from pyiceberg.types import PrimitiveType  # noqa: PLC0415  # optional extra

    if raw is None:
        return pa.nulls(rows, target)
    assert isinstance(kind, PrimitiveType)  # an identity partition's source is a primitive
    value: Any = from_bytes(kind, raw)
    if isinstance(value, uuid.UUID):
        value = value.bytes
    return pa.repeat(pa.scalar(value, type=target), rows)


def _batch(
    batch: pa.RecordBatch,
    file_schema: pa.Schema,
    schema: Schema,
    target: pa.Schema,
    *,
    path: str,
    identity: Mapping[int, bytes | None],
) -> pa.RecordBatch:
    """``batch`` (top-level file columns) as ``target``: fields matched by id, missing ones null.

    A missing column with an identity-partition value (``identity``) reads as that value.
    """
    by_id = {_field_id(field): field.name for field in file_schema}
    columns = []
    for nested, want in zip(schema.fields, target, strict=True):
        name = by_id.get(nested.field_id)
        if name is None and nested.field_id in identity:
            raw = identity[nested.field_id]
            columns.append(_constant(raw, nested.field_type, want.type, batch.num_rows))
            continue
        if name is None:
            if nested.required:
                raise DataFileReadError(
                    f"Iceberg data file {path} has no column with field id {nested.field_id} "
                    f"({nested.name!r}), which the table's schema requires",
                    path=path,
                )
            columns.append(pa.nulls(batch.num_rows, want.type))
            continue
        columns.append(
            _convert(
                batch.column(name), file_schema.field(name).type, nested.field_type, want.type, path
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _groups_after(
    parquet: pq.ParquetFile, deleted: np.ndarray[Any, Any] | None, skip: int, *, filtered: bool
) -> tuple[list[int], int, int]:
    """The row groups to read past ``skip`` emitted rows, the first one's row, what is left to skip.

    Whole row groups before the position are skipped by the footer's counts less their
    deleted rows (a split cut for a record limit goes on without reading its start
    again); with a row filter the rows a group emits are not known, so none is skipped.
    """
    metadata = parquet.metadata
    groups = list(range(metadata.num_row_groups))
    start = 0
    while groups and not filtered:
        rows = metadata.row_group(groups[0]).num_rows
        gone = 0
        if deleted is not None and deleted.size:
            gone = int(np.count_nonzero((deleted >= start) & (deleted < start + rows)))
        if rows - gone > skip:
            break
        skip -= rows - gone
        start += rows
        groups.pop(0)
    return groups, start, skip


def read_data_file(
    io: FileIO,
    path: str,
    *,
    projection: Schema,
    produced: pa.Schema,
    row_filter: tuple[Schema, pa.Schema, pc.Expression] | None,
    position_deletes: Sequence[str],
    skip: int,
    batch_rows: int,
    name_mapping: NameMapping | None = None,
    identity: Mapping[int, bytes | None] | None = None,
    current_name_mapping: Callable[[], NameMapping | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one data file as ``produced``, after deletes and the filter, past ``skip``.

    Args:
        io: The table's file IO.
        path: The data file.
        projection: The Iceberg schema to produce (the table's, or its projection).
        produced: ``projection`` as Arrow.
        row_filter: The filter's columns (Iceberg and Arrow) and the filter as a
            pyarrow expression on them; ``None`` for every row.
        position_deletes: Position-delete files that may name rows of this file.
        skip: Rows (counted after deletes and the filter) already emitted.
        batch_rows: Rows read from the file at a time.
        name_mapping: The table's name mapping, for files without field ids.
        identity: The file's identity-partition values by field id
            (`IcebergSourceSplit.identity`), for columns the file does not hold.
        current_name_mapping: The table's name mapping now, for a file ``name_mapping``
            (the one the source was made with) does not cover: a file without field
            ids added after a rename holds the new name, which only a later mapping knows.

    Raises:
        DataFileReadError: The file is missing, is not Parquet, has no field ids, or
            holds a column that cannot be read as the table's type.
    """
    constants = identity or {}
    parquet = open_data_file(io, path)
    file_schema = parquet.schema_arrow
    if all(_field_id(field) is None for field in file_schema):
        try:
            file_schema = schema_with_field_ids(file_schema, name_mapping, path)
        except DataFileReadError:
            if current_name_mapping is None:
                raise
            file_schema = schema_with_field_ids(file_schema, current_name_mapping(), path)
    wanted = {f.field_id for f in projection.fields}
    if row_filter is not None:
        wanted |= {f.field_id for f in row_filter[0].fields}
    columns = [field.name for field in file_schema if _field_id(field) in wanted]
    deleted = deleted_positions(io, path, position_deletes) if position_deletes else None
    groups, start, skip = _groups_after(parquet, deleted, skip, filtered=row_filter is not None)
    batches = parquet.iter_batches(
        batch_size=batch_rows, row_groups=groups, columns=columns, use_threads=False
    )
    for batch in batches:
        count = batch.num_rows
        keep: pa.Array | None = None
        if deleted is not None and deleted.size:
            rows = np.arange(start, start + count, dtype=np.int64)
            keep = pa.array(np.flatnonzero(~np.isin(rows, deleted)))
        if row_filter is not None:
            filter_schema, filter_arrow, expression = row_filter
            values = _batch(
                batch, file_schema, filter_schema, filter_arrow, path=path, identity=constants
            )
            values = values.append_column(_ROW, pa.array(np.arange(count, dtype=np.int64)))
            if keep is not None:
                values = values.take(keep)
            keep = pa.Table.from_batches([values]).filter(expression).column(_ROW).combine_chunks()
        start += count
        out = _batch(batch, file_schema, projection, produced, path=path, identity=constants)
        if keep is not None:
            out = out.take(keep)
        if skip:
            dropped = min(skip, out.num_rows)
            skip -= dropped
            out = out.slice(dropped)
        if out.num_rows:
            yield out
