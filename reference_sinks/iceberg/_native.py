"""IcebergSink's native write: Spark's Parquet writer writes the files, the sink registers them.

Over 450 lines because it is one decision - whether Spark's Parquet files can be
Iceberg data files for this table - and each pitfall below (field ids, types,
partition values, statistics) is a check beside the code that handles it.

When the table and the input allow it (see `plan`), an epoch is written by Spark
into ``<table data>/sinkv2-native/<job id>-native-<checkpoint id>/``, and
`committables` turns what it wrote into one `IcebergCommittable` - every data file
with its statistics from the Parquet footer and its partition values - which the
sink's committer appends in one snapshot, guarded by the snapshot summary's
checkpoint id as on the Python path. The files stay where Spark wrote them.

What makes Spark's files Iceberg data files, and how each pitfall is handled:

- **Field ids.** Spark writes none (``spark.sql.parquet.fieldId.write.enabled`` is
  off for the write). Readers map the file's columns to the table's by name, with
  the table's ``schema.name-mapping.default``: set from the schema if the table has
  none, and a mapping that disagrees with the schema makes the sink's own writers
  run (they write field ids). A file that has field ids anyway is refused unless
  each is the table's for its name (pyiceberg would read a column whose id differs
  as all nulls, silently).
- **Types.** Columns are cast to the table's types where Iceberg promotes (byte,
  short and int to int or long, float to double, a decimal to a wider one);
  timestamps are written as microseconds (``outputTimestampType``; INT96 is refused),
  in the standard Parquet layout (``writeLegacyFormat`` off). Tables with types
  Spark cannot write as Iceberg reads them (uuid, fixed, time, nanoseconds, v3
  types) and nested fields in another order than the table's run the sink's writers.
- **Partition values.** ``partitionBy`` puts each value in a directory name and
  leaves the column out of the file, so the files are partitioned by derived
  columns (the table's transform computed in Spark: identity, ``day``, ``hour``,
  ``month``, ``year``) and every table column stays in the file. The values are read
  back from the path - never inferred from column statistics, which would record
  ``None`` (and filtered scans would skip the file) - and checked against the
  file's own column bounds where those pin the value. Strings carry a one-letter
  prefix in the path, since Spark writes an empty string as the null directory.
  ``bucket`` and ``truncate`` cannot be computed by Spark as Iceberg does: the
  sink's writers run.
- **Exactly once.** No ``add_files``: its duplicate check scans every manifest of
  the table; the committer's guard (the checkpoint id and commit id in the snapshot
  summary) needs only the snapshot list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, final

import attrs
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks._spark_output import WrittenFile, list_written_files
from reference_sinks.iceberg._model import IcebergCommittable, IcebergDataFile
from reference_sinks.iceberg._statistics import file_statistics
from sinkv2 import END_OF_INPUT, NativeFilesWritten, NativeFileWrite, NativeWriteUnavailable
from sinkv2.errors import SinkConfigurationError, SinkWriterError

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.name_mapping import MappedField
    from pyiceberg.types import IcebergType, PrimitiveType
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


__all__ = ["NATIVE_DIRECTORY", "NativeLayout", "committables", "plan"]

NATIVE_DIRECTORY: Final = "sinkv2-native"
"""Native writes go to ``<table data location>/sinkv2-native/<attempt token>/``."""

_NAME_MAPPING: Final = "schema.name-mapping.default"
_CODECS: Final = {"uncompressed": "uncompressed", "none": "uncompressed"}
_STRING_PREFIX: Final = "v"
_MICROS_PER_DAY: Final = 86_400_000_000
_MICROS_PER_HOUR: Final = 3_600_000_000
_FIELD_ID: Final = b"PARQUET:field_id"


class _Unavailable(Exception):
    """Why the native write cannot serve; carried up to a `NativeWriteUnavailable`."""


@final
@attrs.frozen
class _PartitionColumn:
    """How one partition field is written: a derived column and how to read its value back."""

    name: str
    field_id: int
    kind: str  # "str" (prefixed), "int" or "bool"


@final
@attrs.frozen
class NativeLayout:
    """What a native write of a table looks like, to read its files back (driver only)."""

    location: str
    spec_id: int
    schema_id: int
    partitions: tuple[_PartitionColumn, ...]


# --- planning ----------------------------------------------------------------------------


class IcebergSinkConfig(Protocol):
    """What the native write reads of an `IcebergSink`, without importing it.

    ``native_layout`` is written: the driver keeps the last plan's layout on the sink.
    """

    native_layout: NativeLayout | None

    @property
    def table(self) -> str: ...
    @property
    def sink_id(self) -> str: ...
    @property
    def commit_attempts(self) -> int: ...
    @property
    def native_write(self) -> bool | None: ...
    def load_table(self) -> Table:
        """The Iceberg table, freshly loaded from its catalog."""
        ...

    def data_location(self) -> tuple[Table, pafs.FileSystem, str, str]:
        """The table, its data files' filesystem, data URI and local root."""
        ...


def plan(sink: IcebergSinkConfig, input: DataFrame) -> NativeFileWrite | NativeWriteUnavailable:
    """Spark's write of ``input`` into ``sink``'s table, or why its own writers must run.

    Raises:
        SinkConfigurationError: ``native_write=True`` and the write is not possible.
    """
    try:
        write, layout = _plan(sink, input)
    except _Unavailable as reason:
        if sink.native_write:
            raise SinkConfigurationError(
                f"IcebergSink(native_write=True) cannot let Spark write the data files of "
                f"{sink.table!r}: {reason}. Change that, or leave native_write unset to use "
                "IcebergSink's own writers then"
            ) from None
        return NativeWriteUnavailable(str(reason))
    sink.native_layout = layout
    return write


def _plan(sink: IcebergSinkConfig, input: DataFrame) -> tuple[NativeFileWrite, NativeLayout]:
    from pyspark.sql import functions as sf  # noqa: PLC0415  # pyspark is optional

    if sink.native_write is False:
        raise _Unavailable("IcebergSink(native_write=False) asks for its own writers")
    table, filesystem, _, root = sink.data_location()
    if not isinstance(filesystem, pafs.LocalFileSystem):
        raise _Unavailable(
            "the table's data location is not on a local disk; the native write is enabled "
            "for local tables only (Spark and pyarrow name other filesystems differently)"
        )
    metadata = table.metadata
    schema = metadata.schema()
    _check_mapping(table, schema)
    frame = {field.name: field for field in input.schema.fields}
    columns: list[Column] = []
    for field in schema.fields:
        found = frame.get(field.name)
        if found is None:  # the pre-write topology refused this already
            raise _Unavailable(f"the DataFrame has no column {field.name!r}")
        _no_dots(found.name, found.dataType)
        target, needs_cast = _fit(found.dataType, field.field_type, repr(field.name))
        column = sf.col(_quoted(field.name))
        columns.append(column.cast(target).alias(field.name) if needs_cast else column)
    spec = metadata.spec()
    partitions, derived = _partition_columns(spec, schema)
    location = f"file://{root}/{NATIVE_DIRECTORY}"
    options = {
        "compression": _codec(metadata.properties),
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.fieldId.write.enabled": "false",
        "spark.sql.parquet.writeLegacyFormat": "false",
    }
    _set_name_mapping(sink, table)
    write = NativeFileWrite(
        format="parquet",
        location=location,
        partition_by=tuple(column.name for column in partitions),
        options=options,
        input=input.select(*columns, *derived),
    )
    return write, NativeLayout(
        location=location,
        spec_id=spec.spec_id,
        schema_id=schema.schema_id,
        partitions=partitions,
    )


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _codec(properties: Mapping[str, str]) -> str:
    from pyiceberg.table import TableProperties  # noqa: PLC0415  # optional extra

    codec = properties.get(
        TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT
    ).lower()
    return _CODECS.get(codec, codec)


def _no_dots(name: str, kind: DataType) -> None:
    from pyspark.sql import types as st  # noqa: PLC0415  # pyspark is optional

    if "." in name:
        raise _Unavailable(
            f"column {name!r} has a dot in its name, which Parquet column paths cannot tell "
            "from nesting"
        )
    if isinstance(kind, st.StructType):
        for field in kind.fields:
            _no_dots(f"{name}.{field.name}" if "." in field.name else field.name, field.dataType)
    elif isinstance(kind, st.ArrayType):
        _no_dots("element", kind.elementType)
    elif isinstance(kind, st.MapType):
        _no_dots("key", kind.keyType)
        _no_dots("value", kind.valueType)


def _primitive(kind: IcebergType) -> DataType:
    """The Spark type Spark writes as Iceberg reads ``kind``."""
    from pyiceberg import types as it  # noqa: PLC0415  # optional extra
    from pyspark.sql import types as st  # noqa: PLC0415  # pyspark is optional

    simple: dict[type[Any], DataType] = {
        it.BooleanType: st.BooleanType(),
        it.IntegerType: st.IntegerType(),
        it.LongType: st.LongType(),
        it.FloatType: st.FloatType(),
        it.DoubleType: st.DoubleType(),
        it.DateType: st.DateType(),
        it.TimestamptzType: st.TimestampType(),
        it.TimestampType: st.TimestampNTZType(),
        it.StringType: st.StringType(),
        it.BinaryType: st.BinaryType(),
    }
    if isinstance(kind, it.DecimalType):
        return st.DecimalType(kind.precision, kind.scale)
    found = simple.get(type(kind))
    if found is None:
        raise _Unavailable(
            f"the table has a column of type {kind}, which Spark cannot write as Iceberg reads it"
        )
    return found


def _promotes(source: DataType, target: DataType) -> bool:
    """Whether Iceberg reads ``source`` as ``target`` (the casts the writers would do)."""
    from pyspark.sql import types as st  # noqa: PLC0415  # pyspark is optional

    integral = (st.ByteType, st.ShortType, st.IntegerType)
    if isinstance(target, st.IntegerType):
        return isinstance(source, integral)
    if isinstance(target, st.LongType):
        return isinstance(source, integral)
    if isinstance(target, st.DoubleType):
        return isinstance(source, st.FloatType)
    if isinstance(target, st.DecimalType) and isinstance(source, st.DecimalType):
        return source.scale == target.scale and source.precision <= target.precision
    return False


def _fit(kind: DataType, iceberg: IcebergType, where: str) -> tuple[DataType, bool]:
    """The Spark type to write a column of ``kind`` as ``iceberg`` in, and whether it is a cast.

    The target keeps ``kind``'s nullability and field names, so a cast never
    changes what is null; only leaves change type. A struct that needs a cast must
    have the table's fields in the table's order (Spark casts structs by position).
    """
    from pyiceberg import types as it  # noqa: PLC0415  # optional extra
    from pyspark.sql import types as st  # noqa: PLC0415  # pyspark is optional

    if isinstance(iceberg, it.StructType):
        if not isinstance(kind, st.StructType):
            raise _Unavailable(f"{where} is {kind.simpleString()}, the table's is a struct")
        by_name = {field.name: field for field in iceberg.fields}
        fields, needs_cast = [], False
        for field in kind.fields:
            nested = by_name.get(field.name)
            if nested is None:  # the pre-write topology refused this already
                raise _Unavailable(f"{where} has a field {field.name!r} the table does not have")
            target, cast_it = _fit(field.dataType, nested.field_type, f"{where}.{field.name}")
            fields.append(st.StructField(field.name, target, field.nullable))
            needs_cast = needs_cast or cast_it
        if needs_cast and [f.name for f in kind.fields] != [f.name for f in iceberg.fields]:
            raise _Unavailable(
                f"{where} needs its fields converted and has them in another order than the "
                "table; the sink's writers match them by name"
            )
        return st.StructType(fields), needs_cast
    if isinstance(iceberg, it.ListType):
        if not isinstance(kind, st.ArrayType):
            raise _Unavailable(f"{where} is {kind.simpleString()}, the table's is a list")
        element, needs_cast = _fit(kind.elementType, iceberg.element_type, f"{where}[]")
        return st.ArrayType(element, kind.containsNull), needs_cast
    if isinstance(iceberg, it.MapType):
        if not isinstance(kind, st.MapType):
            raise _Unavailable(f"{where} is {kind.simpleString()}, the table's is a map")
        key, key_cast = _fit(kind.keyType, iceberg.key_type, f"{where} key")
        value, value_cast = _fit(kind.valueType, iceberg.value_type, f"{where} value")
        return st.MapType(key, value, kind.valueContainsNull), key_cast or value_cast
    target = _primitive(iceberg)
    if isinstance(target, st.StringType) and isinstance(kind, st.StringType):
        return kind, False
    if kind == target:
        return kind, False
    if _promotes(kind, target):
        return target, True
    raise _Unavailable(
        f"{where} is {kind.simpleString()}; the table's {iceberg} is not a type Iceberg reads it as"
    )


def _partition_columns(
    spec: PartitionSpec, schema: Schema
) -> tuple[tuple[_PartitionColumn, ...], list[Column]]:
    """One derived column per partition field (its value as a string, int or bool)."""
    from pyspark.sql import functions as sf  # noqa: PLC0415  # pyspark is optional

    taken = {field.name.lower() for field in schema.fields}
    partitions: list[_PartitionColumn] = []
    columns: list[Column] = []
    for index, field in enumerate(spec.fields):
        expression, kind = _transform(field, schema)
        name = field.name if not field.name.startswith(("_", ".")) else f"p{field.name}"
        if name.lower() in taken:
            name = f"{name}_p{index}"
        while name.lower() in taken:
            name = f"{name}_"
        taken.add(name.lower())
        partitions.append(_PartitionColumn(name=name, field_id=field.field_id, kind=kind))
        columns.append(sf.expr(expression).alias(name))
    return tuple(partitions), columns


def _transform(field: PartitionField, schema: Schema) -> tuple[str, str]:  # noqa: PLR0911, PLR0912  # one return per transform and type
    """Spark SQL computing ``field``'s partition value, and the value's kind."""
    from pyiceberg import transforms as tr  # noqa: PLC0415  # optional extra
    from pyiceberg import types as it  # noqa: PLC0415  # optional extra

    source = schema.find_field(field.source_id)
    kind = source.field_type
    column = _quoted(schema.find_column_name(field.source_id) or source.name)
    if "." in (schema.find_column_name(field.source_id) or ""):
        raise _Unavailable(f"partition field {field.name!r} has a nested source column")
    transform = field.transform
    micros = f"unix_micros({column})"
    days_tz = f"(({micros} - pmod({micros}, {_MICROS_PER_DAY})) div {_MICROS_PER_DAY})"
    if isinstance(kind, it.TimestamptzType):
        date = f"date_from_unix_date(cast({days_tz} as int))"
    elif isinstance(kind, it.TimestampType):
        date = f"cast({column} as date)"
    elif isinstance(kind, it.DateType):
        date = column
    else:
        date = ""
    if isinstance(transform, tr.IdentityTransform):
        if isinstance(kind, it.StringType):
            return f"concat('{_STRING_PREFIX}', {column})", "str"
        if isinstance(kind, it.IntegerType | it.LongType):
            return f"cast({column} as bigint)", "int"
        if isinstance(kind, it.BooleanType):
            return column, "bool"
        if isinstance(kind, it.DateType):
            return f"unix_date({column})", "int"
        if isinstance(kind, it.TimestamptzType):
            return micros, "int"
    elif date and isinstance(transform, tr.DayTransform):
        if isinstance(kind, it.TimestamptzType):
            return days_tz, "int"
        return f"unix_date({date})", "int"
    elif date and isinstance(transform, tr.MonthTransform):
        return f"((year({date}) - 1970) * 12 + month({date}) - 1)", "int"
    elif date and isinstance(transform, tr.YearTransform):
        return f"(year({date}) - 1970)", "int"
    elif isinstance(transform, tr.HourTransform):
        if isinstance(kind, it.TimestamptzType):
            return (
                f"(({micros} - pmod({micros}, {_MICROS_PER_HOUR})) div {_MICROS_PER_HOUR})",
                "int",
            )
        if isinstance(kind, it.TimestampType):
            return f"(unix_date({date}) * 24 + hour({column}))", "int"
    raise _Unavailable(
        f"partition field {field.name!r} is {transform} of a {kind} column, which Spark does "
        "not compute as Iceberg does (bucket and truncate never)"
    )


# --- the name mapping ------------------------------------------------------------------------


def _ids_by_path(
    fields: Sequence[MappedField], prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], int | None]:
    found: dict[tuple[str, ...], int | None] = {}
    for field in fields:
        for name in field.names:
            path = (*prefix, name)
            found[path] = field.field_id
            found.update(_ids_by_path(field.fields, path))
    return found


def _check_mapping(table: Table, schema: Schema) -> None:
    """Refuse a name mapping under which a column of the schema would read another field."""
    from pyiceberg.table.name_mapping import create_mapping_from_schema  # noqa: PLC0415

    existing = table.metadata.name_mapping()
    if existing is None:
        return
    have = _ids_by_path(list(existing))
    for path, field_id in _ids_by_path(list(create_mapping_from_schema(schema))).items():
        if have.get(path) != field_id:
            raise _Unavailable(
                f"the table's {_NAME_MAPPING} maps {'.'.join(path)!r} to field id "
                f"{have.get(path)}, its schema has {field_id}: files without field ids would "
                "read another column; the sink's writers write field ids"
            )


def _set_name_mapping(sink: IcebergSinkConfig, table: Table) -> None:
    """Give the table a name mapping from its schema, if it has none (a metadata commit)."""
    from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415  # optional extra

    for _ in range(sink.commit_attempts):
        if table.metadata.name_mapping() is not None:
            return
        mapping = table.metadata.schema().name_mapping.model_dump_json()
        try:
            with table.transaction() as transaction:
                transaction.set_properties({_NAME_MAPPING: mapping})
        except CommitFailedException:
            table = sink.load_table()
            continue
        return
    raise SinkConfigurationError(
        f"could not set {_NAME_MAPPING} on {sink.table!r}: the table kept changing "
        f"({sink.commit_attempts} attempts); try again"
    )


# --- after the write --------------------------------------------------------------------------


def committables(sink: IcebergSinkConfig, written: NativeFilesWritten) -> list[IcebergCommittable]:
    """The epoch's one committable: every non-empty data file Spark wrote, or none.

    Raises:
        SinkWriterError: A file does not fit the table (INT96 timestamps, field ids of
            other columns, columns of other types, partition directories that are not
            the layout's, or a partition value its column's bounds contradict).
    """
    layout = sink.native_layout
    if layout is None or layout.location != written.write.location:
        raise SinkWriterError(
            "IcebergSink was asked for the committables of a native write it did not plan "
            f"({written.directory}); plan_native_file_write() must run first",
            subtask_id=0,
            position=None,
        )
    table, filesystem, data_uri, root = sink.data_location()
    metadata = table.metadata
    schema = next(s for s in metadata.schemas if s.schema_id == layout.schema_id)
    spec = metadata.specs()[layout.spec_id]
    directory = f"{root}/{NATIVE_DIRECTORY}/{written.attempt_token}"
    files = []
    for file in list_written_files(filesystem, directory):
        data_file = _data_file(table, schema, spec, layout, filesystem, file, data_uri, root)
        if data_file is not None:
            files.append(data_file)
    if not files:
        return []
    return [
        IcebergCommittable(
            sink_id=sink.sink_id,
            job_id=written.job_id,
            checkpoint_id=None if written.checkpoint_id == END_OF_INPUT else written.checkpoint_id,
            files=tuple(files),
        )
    ]


def _refuse(file: WrittenFile, problem: str) -> SinkWriterError:
    name = file.path.rsplit("/", 1)[-1]
    task = name.split("-")[1] if name.startswith("part-") else "0"
    return SinkWriterError(
        f"Spark wrote {file.path}, which cannot be appended to the table as it is: {problem}. "
        "Nothing was committed",
        subtask_id=int(task) if task.isdigit() else 0,
        position=None,
    )


def _data_file(  # noqa: PLR0917  # the file and everything it is checked against
    table: Table,
    schema: Schema,
    spec: PartitionSpec,
    layout: NativeLayout,
    filesystem: pafs.FileSystem,
    file: WrittenFile,
    data_uri: str,
    root: str,
) -> IcebergDataFile | None:
    """``file`` as a data file of ``table``, or ``None`` if it holds no row."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible  # noqa: PLC0415  # optional extra

    with filesystem.open_input_file(file.path) as source:
        footer = pq.read_metadata(source)
    if footer.num_rows == 0:
        return None  # Spark's schema-only file of an empty task; the clean-up removes it
    for index in range(footer.num_columns):
        column = footer.schema.column(index)
        if column.physical_type == "INT96":
            raise _refuse(file, f"column {column.path!r} holds INT96 timestamps")
    arrow_schema = footer.schema.to_arrow_schema()
    _check_field_ids(file, arrow_schema, schema)
    try:
        _check_pyarrow_schema_compatible(
            schema, arrow_schema, format_version=table.metadata.format_version
        )
        statistics = file_statistics(footer, schema, table.metadata.properties)
    except (ValueError, KeyError) as error:
        raise _refuse(file, f"{type(error).__name__}: {error}") from error
    values = _partition_values(file, layout, spec)
    _check_bounds(file, spec, schema, statistics, values)
    return IcebergDataFile.from_statistics(
        path=data_uri.rstrip("/") + file.path[len(root.rstrip("/")) :],
        spec_id=spec.spec_id,
        partition=_encode(spec, schema, values),
        file_size_in_bytes=file.size,
        statistics=statistics.to_serialized_dict(),
    )


def _check_field_ids(file: WrittenFile, arrow_schema: Any, schema: Schema) -> None:
    """Refuse a file with a field id that is not the table's for that column."""
    import pyarrow as pa  # noqa: PLC0415

    def walk(field: pa.Field, path: tuple[str, ...]) -> None:
        raw = (field.metadata or {}).get(_FIELD_ID)
        if raw is not None:
            try:
                expected: int | None = schema.find_field(".".join(path)).field_id
            except ValueError:
                expected = None
            if expected != int(raw):
                raise _refuse(
                    file,
                    f"column {'.'.join(path)!r} has field id {int(raw)}, the table's is "
                    f"{expected} (readers would read it as another column, or as nulls)",
                )
        kind = field.type
        if pa.types.is_struct(kind):
            for child in kind:
                walk(child, (*path, child.name))
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            walk(kind.value_field, (*path, "element"))
        elif pa.types.is_map(kind):
            walk(kind.key_field, (*path, "key"))
            walk(kind.item_field, (*path, "value"))

    for field in arrow_schema:
        walk(field, (field.name,))


def _partition_values(file: WrittenFile, layout: NativeLayout, spec: PartitionSpec) -> list[Any]:
    """The file's partition values from its directories, in spec order."""
    pairs = file.partition_values()
    names = [column.name for column in layout.partitions]
    if [column for column, _ in pairs] != names:
        raise _refuse(
            file,
            f"its partition directories are {[c for c, _ in pairs]}, the layout of spec "
            f"{spec.spec_id} is {names}",
        )
    values: list[Any] = []
    for column, (_, text) in zip(layout.partitions, pairs, strict=True):
        if text is None:
            values.append(None)
        elif column.kind == "str":
            if not text.startswith(_STRING_PREFIX):
                raise _refuse(file, f"partition value {text!r} of {column.name!r} lost its prefix")
            values.append(text[len(_STRING_PREFIX) :])
        elif column.kind == "bool":
            if text not in ("true", "false"):
                raise _refuse(file, f"partition value {text!r} of {column.name!r} is no boolean")
            values.append(text == "true")
        else:
            try:
                values.append(int(text))
            except ValueError:
                raise _refuse(
                    file, f"partition value {text!r} of {column.name!r} is no integer"
                ) from None
    return values


def _check_bounds(
    file: WrittenFile, spec: PartitionSpec, schema: Schema, statistics: Any, values: list[Any]
) -> None:
    """Where a source column's bounds pin the partition value, it must be the path's."""
    from pyiceberg.partitioning import partition_record_value  # noqa: PLC0415  # optional extra

    for field, value in zip(spec.fields, values, strict=True):
        aggregate = statistics.column_aggregates.get(field.source_id)
        if aggregate is None or aggregate.current_min is None or aggregate.current_max is None:
            continue
        transform = field.transform.transform(schema.find_field(field.source_id).field_type)
        try:
            low = transform(partition_record_value(field, aggregate.current_min, schema))
            high = transform(partition_record_value(field, aggregate.current_max, schema))
        except Exception:  # noqa: BLE001  # bounds pyiceberg cannot convert pin nothing
            continue
        if low == high and low != value:
            raise _refuse(
                file,
                f"its directory says {field.name}={value!r}, but its rows' "
                f"{schema.find_column_name(field.source_id)!r} values give {low!r}",
            )


def _encode(spec: PartitionSpec, schema: Schema, values: list[Any]) -> tuple[bytes | None, ...]:
    from pyiceberg.conversions import to_bytes  # noqa: PLC0415  # optional extra

    struct = spec.partition_type(schema)
    return tuple(
        None if value is None else to_bytes(cast("PrimitiveType", field.field_type), value)
        for field, value in zip(struct.fields, values, strict=True)
    )
