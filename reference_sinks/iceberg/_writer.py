"""The Iceberg writer: Parquet data files under the table's data location, not yet committed.

Each writer opens one Parquet file per partition it sees (a fan-out writer) and
streams every batch into it through pyiceberg's own Parquet format writer, so field
ids, type conversion and column statistics are exactly what pyiceberg writes for
``table.append``. Files are named ``sinkv2-<attempt token>-<n>.parquet``: until a
snapshot references them no reader sees them, and the attempt token tells a losing
attempt's files from the winner's.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any, Final, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reference_sinks._arrow_types import rebuild_type
from reference_sinks.iceberg._catalog import CatalogSpec
from reference_sinks.iceberg._model import IcebergDataFile, IcebergWriteResult
from reference_sinks.iceberg._projection import fill_hidden_nulls, project
from reference_sinks.iceberg._statistics import file_statistics
from sinkv2 import CommittingSinkWriter, SinkWriter, WriterInitContext
from sinkv2.errors import FatalDestinationError, SinkConfigurationError

if TYPE_CHECKING:
    from pyiceberg.io import OutputFile
    from pyiceberg.io.pyarrow import DataFileStatistics, ParquetFormatWriter
    from pyiceberg.partitioning import PartitionKey
    from pyiceberg.schema import Schema
    from pyiceberg.types import PrimitiveType

__all__ = [
    "FILE_PREFIX",
    "IcebergWriter",
    "attempt_token_of",
    "check_append_schema",
    "utc_timestamps",
]

FILE_PREFIX: Final = "sinkv2-"
_NAME: Final = re.compile(r"^sinkv2-(?P<token>.+)-(?P<seq>\d{5})\.parquet$")
_ROWS_PER_BATCH: Final = 8192
_UTC: Final = frozenset({"UTC", "Etc/UTC", "+00:00", "Z", "GMT", "Etc/GMT"})


def attempt_token_of(file_name: str) -> str | None:
    """The attempt token in a data file name this sink wrote, else ``None``."""
    match = _NAME.match(file_name)
    return match.group("token") if match else None


def _in_utc(kind: pa.DataType) -> pa.DataType:
    """``kind`` in UTC if it is a timestamp in another zone, else ``kind``."""
    if pa.types.is_timestamp(kind) and kind.tz is not None and kind.tz not in _UTC:
        return pa.timestamp(kind.unit, "UTC")
    return kind


def utc_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every zoned timestamp in UTC (the same instants; Iceberg's timestamptz).

    Spark hands timestamps over in the session time zone; Iceberg stores instants in UTC.
    Timestamps inside lists, maps and structs are rebuilt too, at any depth.
    """
    return pa.schema(
        [field.with_type(rebuild_type(field.type, _in_utc)) for field in schema],
        metadata=schema.metadata,
    )


def check_append_schema(
    table_name: str,
    expected: Schema,
    format_version: Any,
    schema: pa.Schema,
    *,
    why: str = "",
    optional_may_miss: bool = False,
) -> None:
    """Check that rows of ``schema`` can be appended to a table of schema ``expected``.

    ``optional_may_miss``: an optional column ``schema`` lacks is not refused (a
    writer's check: the table may have gained one since the driver's, and the rows
    read it as null, as rows written before it).

    Raises:
        SinkConfigurationError: Columns are missing, unexpected, or of the wrong
            type; the message lists the columns expected and got (``why`` after it).
    """
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible  # noqa: PLC0415  # optional extra

    want = [f"{field.name}: {field.field_type}" for field in expected.fields]
    got = [f"{field.name}: {field.type}" for field in schema]
    names = {field.name for field in expected.fields}
    missing = [
        field.name
        for field in expected.fields
        if field.name not in schema.names and (field.required or not optional_may_miss)
    ]
    unexpected = [name for name in schema.names if name not in names]
    if missing or unexpected:
        raise SinkConfigurationError(
            f"the DataFrame's columns do not match Iceberg table {table_name!r}{why}: "
            f"missing {missing}, unexpected {unexpected}; "
            f"expected columns [{', '.join(want)}], got [{', '.join(got)}]. "
            "Select and rename the columns to match the table"
        )
    try:
        _check_pyarrow_schema_compatible(
            expected,
            utc_timestamps(schema),
            downcast_ns_timestamp_to_us=True,
            format_version=format_version,
        )
    except ValueError as error:
        raise SinkConfigurationError(
            f"the DataFrame's column types do not match Iceberg table {table_name!r}{why}: "
            f"expected columns [{', '.join(want)}], got [{', '.join(got)}]; cast the "
            f"columns to the table's types. pyiceberg says:\n{error}"
        ) from error


class _OpenFile:
    """One Parquet file being written for one partition."""

    def __init__(
        self,
        output: OutputFile,
        writer: ParquetFormatWriter,
        partition: tuple[bytes | None, ...],
    ) -> None:
        self.output = output
        self.writer = writer
        self.partition = partition


class IcebergWriter(CommittingSinkWriter[dict[str, Any], IcebergWriteResult]):
    """Writes the subtask's rows into staged Parquet data files of the table.

    Lifecycle: ``write``/``write_arrow_batch`` any number of times, ``flush``,
    ``prepare_commit`` (closes the files and returns one `IcebergWriteResult`, or
    nothing if no row arrived), ``close``. A failure leaves staged files that no
    snapshot references; attempt cleanup removes them.
    """

    def __init__(self, catalog: CatalogSpec, table: str, context: WriterInitContext) -> None:
        from pyiceberg.io.pyarrow import ParquetFormatModel, schema_to_pyarrow  # noqa: PLC0415  # optional extra
        from pyiceberg.schema import sanitize_column_names  # noqa: PLC0415  # optional extra
        from pyiceberg.table.locations import load_location_provider  # noqa: PLC0415  # optional extra

        loaded = catalog.load_table(table)
        self._table = table
        self._metadata = loaded.metadata
        self._io = loaded.io
        self._table_schema: Schema = self._metadata.schema()
        self._file_schema: Schema = sanitize_column_names(self._table_schema)
        self._spec = self._metadata.spec()
        self._locations = load_location_provider(self._metadata.location, self._metadata.properties)
        self._format = ParquetFormatModel()
        self._arrow_schema = schema_to_pyarrow(self._table_schema, include_field_ids=False)
        self._token = context.get_attempt_token()
        self._job_id = context.get_job_id()
        self._metrics = context.metric_group()
        self._open: dict[tuple[Any, ...], _OpenFile] = {}
        self._done: list[IcebergDataFile] = []
        self._rows: list[dict[str, Any]] = []
        self._task_schema: Schema | None = None
        self._file_arrow_schema: pa.Schema | None = None
        self._sequence = 0
        self._rows_written = 0  # rows of this attempt's input written so far

    # --- input ---------------------------------------------------------------------------

    def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
        """Buffer one row (a dict keyed by column name); full buffers become batches."""
        self._rows.append(element)
        if len(self._rows) >= _ROWS_PER_BATCH:
            self._drain()

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        """Write every row of ``batch`` into the files of its partitions."""
        if batch.num_rows:
            self._write_batch(batch)

    def _drain(self) -> None:
        if self._rows:
            self._write_batch(pa.RecordBatch.from_pylist(self._rows, schema=self._arrow_schema))
            self._rows = []

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        from pyiceberg.io.pyarrow import pyarrow_to_schema  # noqa: PLC0415  # optional extra

        # Casts refuse a null in a required struct field even where the struct is null.
        batch = pa.RecordBatch.from_arrays(
            [fill_hidden_nulls(column) for column in batch.columns], schema=batch.schema
        )
        schema = utc_timestamps(batch.schema)
        if any(pa.types.is_null(field.type) for field in schema):
            # A column that is null in every row of this batch has no type of its
            # own (say, rows built with from_pylist): take the table's.
            schema = pa.schema(
                [
                    field.with_type(self._arrow_schema.field(field.name).type)
                    if pa.types.is_null(field.type) and field.name in self._arrow_schema.names
                    else field
                    for field in schema
                ]
            )
        if schema != batch.schema:
            batch = batch.cast(schema)
        self._check_nanoseconds(batch)
        if self._task_schema is None:
            check_append_schema(
                self._table,
                self._table_schema,
                self._metadata.format_version,
                batch.schema,
                why=" (its schema changed after the job checked the DataFrame)",
                optional_may_miss=True,
            )
            self._task_schema = pyarrow_to_schema(
                batch.schema,
                name_mapping=self._table_schema.name_mapping,
                downcast_ns_timestamp_to_us=True,
                format_version=self._metadata.format_version,
            )
        converted = project(
            batch,
            requested_schema=self._file_schema,
            file_schema=self._task_schema,
            format_model=self._format,
        )
        if self._file_arrow_schema is None:
            self._file_arrow_schema = converted.schema
        elif converted.schema != self._file_arrow_schema:
            # e.g. string in one batch and large_string in the next: a Parquet file
            # has one schema, so later batches take the first one's.
            converted = converted.cast(self._file_arrow_schema)
        table = pa.Table.from_batches([converted])
        if self._spec.is_unpartitioned():
            self._file_for(None).writer.write(table)
        else:
            for key, rows in self._split_by_partition(table):
                self._file_for(key).writer.write(rows)
        self._metrics.get_num_records_send_counter().inc(batch.num_rows)
        self._metrics.get_num_bytes_send_counter().inc(batch.nbytes)
        self._rows_written += batch.num_rows

    def _check_nanoseconds(self, batch: pa.RecordBatch) -> None:
        """Refuse a nanosecond timestamp a microsecond column would cut (Spark's never are).

        Iceberg's ``timestamp`` and ``timestamptz`` hold microseconds; the file is
        written with pyiceberg's downcast, which drops the last three digits of every
        value. One that has them is refused, naming row, column and value, before any
        row of the batch is written; whole microseconds pass.
        """
        for index, field in enumerate(batch.schema):
            kind = field.type
            if not pa.types.is_timestamp(kind) or kind.unit != "ns":
                continue
            target = (
                self._arrow_schema.field(field.name).type
                if field.name in self._arrow_schema.names
                else None
            )
            if target is None or not pa.types.is_timestamp(target) or target.unit == "ns":
                continue
            raw = batch.column(index).cast(pa.int64())
            cut = pc.not_equal(pc.multiply(pc.divide(raw, 1000), 1000), raw)
            row = pc.index(pc.fill_null(cut, False), True).as_py()
            if row >= 0:
                raise FatalDestinationError(
                    f"Iceberg column {field.name!r} holds microseconds, but row "
                    f"{self._rows_written + row} of this writer's input has "
                    f"{batch.column(index)[row]} with nanoseconds, which it would cut. Nothing "
                    "of this attempt is visible; truncate or round the column to microseconds "
                    "and re-run"
                )

    def _split_by_partition(self, table: pa.Table) -> list[tuple[PartitionKey, pa.Table]]:
        """``table``'s rows grouped by partition, with each group's partition key.

        Transforms run in Python once per distinct source value (pyiceberg's own
        transform functions), never per row, and need no native extension.
        """
        from pyiceberg.io.pyarrow import _get_field_from_arrow_table  # noqa: PLC0415  # optional extra
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey  # noqa: PLC0415  # optional extra

        fields = self._spec.fields
        codes: list[pa.Array] = []
        values: list[list[Any]] = []
        for field in fields:
            source = self._table_schema.find_field(field.source_id)
            name = self._table_schema.find_column_name(field.source_id)
            if name is None:
                raise ValueError(
                    f"partition source field id {field.source_id} is not in the schema"
                )
            column = _get_field_from_arrow_table(table, name)
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.int64())  # Iceberg's representation: units since epoch
            elif pa.types.is_date(column.type):
                column = column.cast(pa.int32())  # days since epoch
            encoded = column.dictionary_encode(null_encoding="encode")
            transform = field.transform.transform(source.field_type)
            values.append([transform(value) for value in encoded.dictionary.to_pylist()])
            codes.append(encoded.indices)
        names = [f"p{i}" for i in range(len(fields))]
        keys = pa.table(dict(zip(names, codes, strict=True)))
        combos = keys.group_by(names).aggregate([]).to_pylist()
        groups = []
        for combo in combos:
            if len(combos) == 1:
                rows = table
            else:
                mask = pc.equal(keys.column(names[0]), combo[names[0]])
                for name in names[1:]:
                    mask = pc.and_(mask, pc.equal(keys.column(name), combo[name]))
                rows = table.filter(mask)
            key = PartitionKey(
                field_values=[
                    PartitionFieldValue(field=field, value=values[i][combo[name]])
                    for i, (field, name) in enumerate(zip(fields, names, strict=True))
                ],
                partition_spec=self._spec,
                schema=self._table_schema,
            )
            groups.append((key, rows))
        return groups

    def _file_for(self, key: PartitionKey | None) -> _OpenFile:
        from pyiceberg.conversions import to_bytes  # noqa: PLC0415  # optional extra

        if key is None:
            values: tuple[Any, ...] = ()
            partition: tuple[bytes | None, ...] = ()
        else:
            record = key.partition
            values = tuple(record[i] for i in range(len(record)))
            struct = self._spec.partition_type(self._table_schema)
            partition = tuple(
                None if value is None else to_bytes(cast("PrimitiveType", field.field_type), value)
                for field, value in zip(struct.fields, values, strict=True)
            )
        found = self._open.get(values)
        if found is None:
            name = f"{FILE_PREFIX}{self._token}-{self._sequence:05d}.parquet"
            self._sequence += 1
            output = self._io.new_output(self._locations.new_data_location(name, key))
            writer = self._format.create_writer(
                output, self._file_schema, self._metadata.properties
            )
            found = self._open[values] = _OpenFile(output, writer, partition)
        return found

    # --- checkpoint ----------------------------------------------------------------------

    def flush(self, end_of_input: bool) -> None:
        """Write buffered rows into the files (they stay open until ``prepare_commit``)."""
        self._drain()

    def prepare_commit(self) -> list[IcebergWriteResult]:
        """Close every open file and hand all of them over as one write result."""
        self._drain()
        for open_file in self._open.values():
            statistics = self._close(open_file)
            self._done.append(
                IcebergDataFile.from_statistics(
                    path=open_file.output.location,
                    spec_id=self._spec.spec_id,
                    partition=open_file.partition,
                    file_size_in_bytes=len(open_file.output),
                    statistics=statistics.to_serialized_dict(),
                )
            )
        self._open.clear()
        files, self._done = tuple(self._done), []
        if not files:
            return []
        return [IcebergWriteResult(job_id=self._job_id, files=files)]

    def _close(self, open_file: _OpenFile) -> DataFileStatistics:
        """Close ``open_file``; its statistics, bounds Python cannot hold left out."""
        try:
            return open_file.writer.close()
        except OverflowError:
            # pyiceberg closed the file, then failed on a date or timestamp bound
            # outside Python's years 1..9999: read the footer back, skip those bounds.
            with open_file.output.to_input_file().open() as source:
                footer = pq.read_metadata(source)
            return file_statistics(footer, self._file_schema, self._metadata.properties)

    def close(self) -> None:
        """Close files a failure left open; they stay unreferenced staging."""
        for open_file in self._open.values():
            with contextlib.suppress(Exception):  # a half-written staged file is cleaned up later
                open_file.writer.close()
        self._open.clear()
