"""The FileSink writer: stages hidden part files per partition, rolls them, hands them over.

One writer runs per subtask attempt. Everything it writes goes under
``<base>/_staging/<attempt token>/``; readers skip ``_``-prefixed directories, so
nothing is visible until the committer renames a closed file into place.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks._arrow_types import rebuild_type
from reference_sinks.files._committables import InProgressFile, PendingFile
from reference_sinks.files._committer import remove_quietly
from reference_sinks.files._config import FileFormat, RollingPolicy
from reference_sinks.files._json_lines import JsonLinesEncoder
from reference_sinks.files._paths import partition_path
from reference_sinks.files._schema import check_types
from sinkv2 import CommittingSinkWriter, SinkWriter, StatefulSinkWriter, WriterInitContext
from sinkv2.errors import FatalDestinationError, SinkConfigurationError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["FileWriter"]

_ROWS_PER_ROW_BATCH: Final = 8192
"""Elements given to ``write`` are turned into Arrow batches of this many rows."""

_ROW_GROUP_ROWS: Final = 128 * 1024
"""Parquet batches are buffered up to this many rows per row group."""

_EXTENSIONS: Final = {"parquet": "parquet", "jsonl": "jsonl"}
_NAME_MAX: Final = 255
"""The longest file or directory name (bytes) of ext4, XFS, btrfs, APFS and HDFS."""


def _relaxed(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every struct's fields nullable (at any depth).

    A null struct still has a slot in each child; Arrow's Parquet writer refuses a
    non-nullable child with a null slot (a variant's ``value``, Spark's non-null
    struct fields). Spark reads an optional field back as the same values.
    """
    return rebuild_type(kind, struct_field=lambda field: field.with_nullable(True))


def parquet_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a Parquet part file is written with: ``schema``, struct fields nullable."""
    return pa.schema([f.with_type(_relaxed(f.type)) for f in schema], metadata=schema.metadata)


class _PartFile:
    """One open in-progress part file."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        staged: str,
        final: str,
        partition: str,
        file_format: str,
        *,
        rows: int = 0,
    ) -> None:
        self.staged = staged
        self.final = final
        self.partition = partition
        self.format = file_format
        self.rows = rows
        self.stream = fs.open_output_stream(staged)
        self.parquet: pq.ParquetWriter | None = None
        self.json: JsonLinesEncoder | None = None
        self.schema: pa.Schema | None = None
        self.written: pa.Schema | None = None  # the Parquet file's (see parquet_schema)
        self.buffer: list[pa.RecordBatch] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0

    @property
    def bytes(self) -> int:
        """Bytes written so far, plus the estimated size of what is still buffered."""
        return int(self.stream.tell()) + self.buffered_bytes

    def accepts(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """``batch`` in this file's schema, or ``None`` if it cannot be stored here."""
        if self.schema is None or batch.schema.equals(self.schema):
            return batch
        if sorted(batch.schema.names) != sorted(self.schema.names):
            return None
        batch = batch.select(self.schema.names)  # the same columns in another order
        try:
            return batch.cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
            return None

    def write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (already without partition columns)."""
        self.rows += batch.num_rows
        if self.format == "jsonl":
            if self.json is None or not batch.schema.equals(self.json.schema):
                self.json = JsonLinesEncoder(batch.schema)
            self.stream.write(self.json.encode(batch))
            return
        if self.parquet is None:
            self.schema = batch.schema
            written = parquet_schema(batch.schema)
            self.written = None if written.equals(batch.schema) else written
            self.parquet = pq.ParquetWriter(self.stream, written)
        if self.written is not None:
            batch = batch.cast(self.written)
        self.buffer.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        if self.buffered_rows >= _ROW_GROUP_ROWS:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if self.buffer and self.parquet is not None:
            self.parquet.write_table(pa.Table.from_batches(self.buffer))
        self.buffer, self.buffered_rows, self.buffered_bytes = [], 0, 0

    def flush(self) -> None:
        """Make what was written so far durable, where the format allows it."""
        if self.format == "jsonl":
            self.stream.flush()

    def close(self) -> int:
        """Close the file; returns its final size in bytes."""
        self._write_row_group()
        if self.parquet is not None:
            self.parquet.close()  # writes the footer; the stream stays open
        size = int(self.stream.tell())
        self.stream.close()
        return size

    def abandon(self) -> None:
        """Close without caring about the content (a failed writer)."""
        try:
            if self.parquet is not None:
                self.parquet.close()
        finally:
            self.stream.close()


def split_by_partition(
    batch: pa.RecordBatch, columns: Sequence[str]
) -> Iterator[tuple[tuple[object, ...], pa.RecordBatch]]:
    """The rows of ``batch`` grouped by the values of ``columns``, those columns dropped.

    Vectorised: one Arrow group-by for the distinct keys, one filter per key.

    Raises:
        SinkConfigurationError: A partition column is not in ``batch``.
    """
    if not columns:
        yield (), batch
        return
    missing = [column for column in columns if column not in batch.schema.names]
    if missing:
        raise SinkConfigurationError(
            f"FileSink partition_by names {missing} but the data has columns "
            f"{batch.schema.names}; partition by columns of the DataFrame"
        )
    data_columns = [name for name in batch.schema.names if name not in columns]
    table = pa.Table.from_batches([batch])
    if len(columns) == 1 and table.column(columns[0]).null_count == 0:
        keys = [
            (value,) for value in pc.unique(table.column(columns[0]).combine_chunks()).to_pylist()
        ]
    else:
        grouped = table.select(list(columns)).group_by(list(columns), use_threads=False)
        keys = [tuple(row[c] for c in columns) for row in grouped.aggregate([]).to_pylist()]
    if len(keys) == 1:
        yield keys[0], batch.select(data_columns)
        return
    for key in keys:
        mask: Any = None
        for column, value in zip(columns, key, strict=True):
            array = batch.column(column)
            if value is None:
                match = pc.is_null(array)
            else:
                match = pc.fill_null(pc.equal(array, value), False)
            mask = match if mask is None else pc.and_(mask, match)
        yield key, batch.filter(mask).select(data_columns)


class WriterSettings(Protocol):
    """What a `FileWriter` reads from its sink; `FileSink` has all of it.

    A protocol, not ``FileSink`` itself, so that this module does not import the sink
    module that imports it.
    """

    @property
    def format(self) -> FileFormat:
        """``"parquet"`` or ``"jsonl"``."""
        ...

    @property
    def partition_by(self) -> Sequence[str]:
        """The partition columns, outermost first."""
        ...

    @property
    def rolling_policy(self) -> RollingPolicy:
        """When part files are closed."""
        ...

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the base path inside it."""
        ...


@final
class FileWriter(
    CommittingSinkWriter[dict[str, Any], PendingFile],
    StatefulSinkWriter[dict[str, Any], InProgressFile],
):
    """Writes one subtask attempt's rows into staged part files.

    Lifecycle (Flink's): ``write``/``write_arrow_batch``* -> ``flush`` ->
    ``prepare_commit`` (closed files as `PendingFile` committables) ->
    ``snapshot_state`` (open files as `InProgressFile`) -> ... -> ``close``.
    """

    def __init__(
        self,
        sink: WriterSettings,
        context: WriterInitContext,
        restored: Collection[InProgressFile] = (),
    ) -> None:
        self._fs, self._root = sink.resolve()
        self._format = sink.format
        self._partition_by = tuple(sink.partition_by)
        self._policy = sink.rolling_policy
        schema = self._input_schema = context.get_input_schema()
        if schema is not None:  # the sink checked it on the driver; this runtime may not have
            check_types(
                pa.schema([f for f in schema if f.name not in self._partition_by]), self._format
            )
        self._token = context.get_attempt_token()
        self._staging = f"{self._root}/_staging/{self._token}"
        self._fs.create_dir(self._staging, recursive=True)
        self._metrics = context.metric_group()
        self._open: dict[str, _PartFile] = {}
        self._pending: list[PendingFile] = []
        self._sequence = 0
        self._rows: list[dict[str, Any]] = []
        self._end_of_input = False
        for state in restored:
            self._discard(state)

    # --- files -----------------------------------------------------------------------------

    def _new_file(self, partition: str, *, rows: int = 0) -> _PartFile:
        name = f"part-{self._token}-{self._sequence:05d}.{_EXTENSIONS[self._format]}"
        self._sequence += 1
        directory = f"{self._root}/{partition}" if partition else self._root
        return _PartFile(
            self._fs,
            f"{self._staging}/{name}",
            f"{directory}/{name}",
            partition,
            self._format,
            rows=rows,
        )

    def _roll(self, file: _PartFile) -> None:
        del self._open[file.partition]
        size = file.close()
        self._pending.append(
            PendingFile(
                staged=file.staged,
                final=file.final,
                partition=file.partition,
                rows=file.rows,
                bytes=size,
            )
        )

    def _discard(self, state: InProgressFile) -> None:
        """Delete a leftover in-progress file named in restored state.

        Files are rolled on every checkpoint, so no committable and no later state
        refers to it; its rows were either handed over before the checkpoint or
        belong to input that is replayed.
        """
        remove_quietly(self._fs, state.staged)

    # --- writing ---------------------------------------------------------------------------

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        """Write every row of ``batch`` into its partition's part file (no per-row Python)."""
        self._rows_to_batch()
        self._write_batch(batch)

    def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
        """Buffer one element (a dict of column -> value); full buffers become Arrow batches."""
        self._rows.append(element)
        if len(self._rows) >= _ROWS_PER_ROW_BATCH:
            self._rows_to_batch()

    def _rows_to_batch(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            # With the input schema, a map's (key, value) pairs stay a map, not a list.
            self._write_batch(pa.RecordBatch.from_pylist(rows, schema=self._input_schema))

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        for key, part in split_by_partition(batch, self._partition_by):
            partition = partition_path(self._partition_by, key)
            if partition not in self._open:
                self._check_directory_names(partition)
            self._write_part(partition, part)
        self._metrics.get_num_records_send_counter().inc(batch.num_rows)
        self._metrics.get_num_bytes_send_counter().inc(batch.nbytes)

    def _check_directory_names(self, partition: str) -> None:
        """Refuse a partition directory name a local filesystem cannot create.

        Found now, with nothing visible: the committer would fail to create it after
        renaming other files of the checkpoint into place, and again on every retry.
        """
        if not self._partition_by or not isinstance(self._fs, pafs.LocalFileSystem):
            return  # object stores limit whole keys (about 1024 bytes), not names
        for column, name in zip(self._partition_by, partition.split("/"), strict=True):
            if len(name.encode("utf-8")) > _NAME_MAX:
                raise FatalDestinationError(
                    f"FileSink cannot write partition column {column!r}: its directory name "
                    f"{name[:60]!r}... is {len(name.encode('utf-8'))} bytes, more than the "
                    f"{_NAME_MAX} a file name may have. Nothing of this attempt is visible; "
                    "partition by a shorter column (e.g. a hash of this one) and re-run"
                )

    def _write_part(self, partition: str, part: pa.RecordBatch) -> None:
        """Append ``part`` to ``partition``'s open file, rolling files as the policy says.

        ``max_rows`` is exact: a batch that would take a file past it is sliced at the
        boundary (zero-copy) and the rest goes to the next file. ``max_bytes`` is
        checked after each slice is written, so a file may pass it by one batch.
        """
        max_rows, max_bytes = self._policy.max_rows, self._policy.max_bytes
        while part.num_rows:
            file = self._open.get(partition)
            converted = part if file is None else file.accepts(part)
            if file is not None and converted is None:
                self._roll(file)  # a schema this file cannot hold: start a new one
                file, converted = None, part
            if file is None:
                file = self._open[partition] = self._new_file(partition)
            part = part if converted is None else converted
            room = part.num_rows if max_rows is None else max_rows - file.rows
            if room <= 0:  # full already (never, as full files are rolled at once)
                self._roll(file)
                continue
            file.write(part.slice(0, room) if room < part.num_rows else part)
            part = part.slice(room)  # empty once all of it is written
            if (max_rows is not None and file.rows >= max_rows) or (
                max_bytes is not None and file.bytes >= max_bytes
            ):
                self._roll(file)

    def flush(self, end_of_input: bool) -> None:
        """Write buffered elements into their files and make open JSON-lines files durable."""
        self._rows_to_batch()
        for file in self._open.values():
            file.flush()
        self._end_of_input = self._end_of_input or end_of_input

    def prepare_commit(self) -> list[PendingFile]:
        """The files closed since the last call; every open file is rolled first.

        The sink requires ``roll_on_checkpoint``, so the committables hold every row
        written so far.
        """
        if self._policy.roll_on_checkpoint or self._end_of_input:
            for file in list(self._open.values()):
                self._roll(file)
        pending, self._pending = self._pending, []
        return pending

    def snapshot_state(self, checkpoint_id: int) -> list[InProgressFile]:
        """The files still open, with their length: always none, as ``prepare_commit`` rolls all."""
        return [
            InProgressFile(
                staged=file.staged, partition=file.partition, rows=file.rows, bytes=file.bytes
            )
            for file in self._open.values()
        ]

    def close(self) -> None:
        """Close open files. Staged files stay for the committer or for cleanup."""
        files, self._open = list(self._open.values()), {}
        for file in files:
            file.abandon()
