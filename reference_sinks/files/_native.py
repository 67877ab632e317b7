"""FileSink's native write: Spark's own Parquet or JSON writer stages the files.

When the configuration allows (see `unavailable`), an epoch is written by Spark
into ``<base>/_staging/<job id>-native-<checkpoint id>/`` with ``partitionBy`` on
the sink's partition columns and ``maxRecordsPerFile`` from the rolling policy;
`committables` then lists the data files there and makes one `PendingFile` per
file, named as the sink's own writers name theirs. The committer, the clean-up of
attempts (which removes the whole directory, Spark's ``_temporary`` and checksum
files included) and abort are the ones of the Python path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks._spark_output import list_written_files
from reference_sinks.files._committables import PendingFile
from sinkv2 import NativeFilesWritten, NativeFileWrite, NativeWriteUnavailable
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from reference_sinks.files._config import CompactionPolicy, FileFormat, RollingPolicy


class FileSinkConfig(Protocol):
    """What the native write reads of a `FileSink` (its configuration), without importing it."""

    @property
    def base_path(self) -> str: ...
    @property
    def format(self) -> FileFormat: ...
    @property
    def partition_by(self) -> tuple[str, ...]: ...
    @property
    def rolling_policy(self) -> RollingPolicy: ...
    @property
    def compaction(self) -> CompactionPolicy | None: ...
    @property
    def filesystem(self) -> pafs.FileSystem | None: ...
    @property
    def native_write(self) -> bool | None: ...
    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The sink's filesystem and root path."""
        ...


__all__ = ["committables", "plan"]

_SPARK_FORMATS: Final = {"parquet": "parquet", "jsonl": "json"}
_JSON_OPTIONS: Final = {
    # Spark's default JSON timestamp format cuts microseconds; FileSink's keep them.
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSxxx",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "timeZone": "UTC",
}
_PARTITION_TYPES: Final = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date")


def unavailable(sink: FileSinkConfig, input: Any) -> str | None:  # noqa: PLR0911  # one return per reason
    """Why Spark cannot write this sink's files for ``input``, or ``None`` if it can."""
    if sink.native_write is False:
        return (
            "FileSink(native_write=False) asks for its own writers; leave native_write unset "
            "to let Spark write the files"
        )
    if sink.compaction is not None:
        return (
            "compaction= merges the sink's small rolled files before they are committed; "
            "Spark's writer writes one file per task and partition (up to max_rows each), "
            "so drop compaction= to let Spark write the files"
        )
    if sink.filesystem is not None:
        return (
            "a filesystem= object is a pyarrow filesystem, which Spark cannot write through; "
            "name a local base_path without filesystem= to let Spark write the files"
        )
    fs, _ = sink.resolve()
    if not isinstance(fs, pafs.LocalFileSystem):
        return (
            f"base_path {sink.base_path!r} is not on a local disk; the native write is "
            "enabled for local directories only (Spark and pyarrow name other filesystems "
            "differently, e.g. s3a:// and s3://); FileSink's own writers write there"
        )
    if sink.rolling_policy.max_bytes is not None:
        return (
            f"rolling_policy.max_bytes={sink.rolling_policy.max_bytes}: Spark's writer cannot "
            "roll files by size; leave max_bytes unset (None, the default) and bound files "
            "by max_rows, Spark's maxRecordsPerFile"
        )
    kinds = {field.name: field.dataType.simpleString() for field in input.schema.fields}
    for column in sink.partition_by:
        kind = kinds.get(column)
        if kind is not None and kind not in _PARTITION_TYPES:
            return (
                f"partition column {column!r} is {kind}; FileSink partitions by string, "
                "integer, boolean or date columns (its own writers refuse this one too): "
                "cast it, or partition by another column"
            )
    return None


def plan(sink: FileSinkConfig, input: Any) -> NativeFileWrite | NativeWriteUnavailable:
    """Spark's write of ``input`` for ``sink``, or why its own writers must run.

    Raises:
        SinkConfigurationError: ``native_write=True`` and the write is not possible.
    """
    reason = unavailable(sink, input)
    if reason is not None:
        if sink.native_write:
            raise SinkConfigurationError(
                f"FileSink(native_write=True) cannot let Spark write these files: {reason}. "
                "Change that, or leave native_write unset to use FileSink's own writers then"
            )
        return NativeWriteUnavailable(reason)
    _, root = sink.resolve()
    options = dict(_JSON_OPTIONS) if sink.format == "jsonl" else {}
    if sink.rolling_policy.max_rows is not None:
        options["maxRecordsPerFile"] = str(sink.rolling_policy.max_rows)
    return NativeFileWrite(
        format=_SPARK_FORMATS[sink.format],
        location=f"file://{root}/_staging",
        partition_by=sink.partition_by,
        options=options,
    )


def committables(sink: FileSinkConfig, written: NativeFilesWritten) -> list[PendingFile]:
    """One `PendingFile` per data file Spark wrote; empty files are left for the clean-up.

    Each is renamed on commit to ``<base>/<partition>/part-<token>-<n>.<ext>``, as
    the sink's own writers name their files. Parquet files' row counts come from
    their footers; JSON lines files do not say (``rows`` is 0).
    """
    fs, root = sink.resolve()
    token = written.attempt_token
    extension = "parquet" if sink.format == "parquet" else "jsonl"
    pending: list[PendingFile] = []
    for file in list_written_files(fs, f"{root}/_staging/{token}"):
        rows = 0
        if sink.format == "parquet":
            with fs.open_input_file(file.path) as source:
                rows = pq.read_metadata(source).num_rows
            if rows == 0:
                continue  # Spark writes a schema-only file for an empty input
        elif file.size == 0:
            continue
        name = f"part-{token}-{len(pending):05d}.{extension}"
        directory = f"{root}/{file.partition}" if file.partition else root
        pending.append(
            PendingFile(
                staged=file.path,
                final=f"{directory}/{name}",
                partition=file.partition,
                rows=rows,
                bytes=file.size,
            )
        )
    return pending
