"""`FileSink`: exactly-once Parquet or JSON-lines files, Hive-partitioned, on pyarrow.fs."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from reference_sinks.files import _markers, _native
from reference_sinks.files._committables import (
    InProgressFile,
    PendingFile,
    pending_file_serializer,
    writer_state_serializer,
)
from reference_sinks.files._committer import FileCommitter, remove_quietly
from reference_sinks.files._compaction import compact
from reference_sinks.files._config import (
    FORMATS,
    CompactionPolicy,
    FileFormat,
    RollingPolicy,
    describe,
)
from reference_sinks.files._location import resolve_location
from reference_sinks.files._schema import check_existing, check_no_char_varchar, check_types
from reference_sinks.files._writer import FileWriter
from sinkv2 import (
    AttrsMsgpackSerializer,
    CommitterInitContext,
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    Sink,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommittedCheckpoints,
    SupportsCommitter,
    SupportsNativeFileWrite,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    SupportsWriterState,
    WriterInitContext,
)
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FileSink"]


def _check_base_path(base_path: object) -> str:
    if isinstance(base_path, os.PathLike):
        base_path = os.fspath(base_path)
    if not isinstance(base_path, str) or not base_path.strip():
        raise SinkConfigurationError(
            f"FileSink base_path must be a non-empty str or os.PathLike (got "
            f"{describe(base_path)}); pass a directory such as '/data/out' or a URI "
            "such as 's3://bucket/out'"
        )
    return base_path


def _check_partition_by(partition_by: object) -> tuple[str, ...]:
    if isinstance(partition_by, str) or not isinstance(partition_by, Sequence):
        raise SinkConfigurationError(
            f"FileSink partition_by must be a list or tuple of column names (got "
            f"{describe(partition_by)}); write partition_by=['col'] even for one column"
        )
    columns = tuple(partition_by)
    bad = [c for c in columns if not isinstance(c, str) or not c or "/" in c]
    if bad:
        raise SinkConfigurationError(
            f"FileSink partition_by must hold non-empty column names without '/' (got "
            f"{describe(bad[0])}); name the DataFrame's columns"
        )
    if len(set(columns)) != len(columns):
        raise SinkConfigurationError(
            f"FileSink partition_by names a column twice (got {list(columns)!r}); "
            "name each column once"
        )
    return columns


class FileSink(
    Sink[dict[str, Any]],
    SupportsWriterState[dict[str, Any], InProgressFile],
    SupportsCommitter[PendingFile],
    SupportsAttemptCleanup,
    SupportsAbort[PendingFile],
    SupportsPreWriteTopology[dict[str, Any]],
    SupportsNativeFileWrite[PendingFile],
    SupportsCommittedCheckpoints,
):
    """Exactly-once files under ``base_path``: Parquet or JSON lines, Hive-partitioned.

    Writers stage hidden part files under ``<base>/_staging/<attempt token>/``, rolled
    by ``rolling_policy``; their committables are the closed files (`PendingFile`);
    the committer renames each into ``<base>/<c1=v1/...>/`` (atomic on local disk and
    HDFS). Losing attempts' staging is removed by `clean_up_attempts`, aborted
    epochs' by `abort`. With ``compaction``, small files of one partition and
    checkpoint are merged before they are committed (see `CompactionPolicy`). Each
    committed checkpoint of a batch run is marked under ``<base>/_sinkv2/``
    (`SupportsCommittedCheckpoints`): a re-run of it is not written again even with
    another commit state store.

    Partition columns are not stored in the files (as Spark does), so
    ``spark.read.parquet(base_path)`` returns the same columns, partition columns
    last.

    Args:
        base_path: The output directory: a local path or a URI pyarrow understands
            (``s3://``, ``gs://``, ``hdfs://``, ``file://``).
        format: ``"parquet"`` or ``"jsonl"``.
        partition_by: Columns to partition by (string, integer, boolean or date).
        rolling_policy: When part files are closed.
        compaction: Merge small files before commit, or ``None``.
        filesystem: A ``pyarrow.fs.FileSystem`` to use instead of the one
            ``base_path``'s URI names; ``base_path`` is then a path inside it.
        native_write: Whether Spark's own writer writes the files (the native
            path, `SupportsNativeFileWrite`: about 2 x faster, no row enters
            Python): ``None`` (default) when the configuration allows it, else the
            sink's writers, reporting why in ``SinkResult.native_write_unavailable``;
            ``True`` requires it (a configuration that does not allow it is refused
            before any Spark job); ``False`` always runs the sink's writers. It
            allows it for a local ``base_path`` without ``filesystem=``, no
            ``compaction``, no ``max_bytes`` in the rolling policy (the default;
            ``max_rows`` becomes Spark's ``maxRecordsPerFile``) and partition columns
            of the types above: ``FileSink(path)`` with defaults takes it. Otherwise
            the ``sinkv2.spark`` logger says why at INFO, with what to change.

    Raises:
        SinkConfigurationError: Any argument has a bad value or type.

    Before any data moves (its pre-write topology, on the driver), the DataFrame's
    types are checked against the format (see the type table in the docs) and, when
    appending to a directory that has files, against the newest committed file:
    other partition columns, and in Parquet a column of another type or a missing
    column, are refused with both schemas (a directory Spark could not read).

    Configure it, do not subclass it. With ``compaction``, the instance is of a
    private subclass that adds the pre-commit topology (Sink V2 capabilities are
    per class); without it there is no pre-commit step, and no Spark job for one.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> FileSink:
        """A plain FileSink, or the compacting variant if ``compaction`` is given."""
        if cls is FileSink and kwargs.get("compaction") is not None:
            return object.__new__(_CompactingFileSink)
        return object.__new__(cls)

    def __init__(
        self,
        base_path: str | os.PathLike[str],
        format: FileFormat = "parquet",  # the name users expect (Spark's)
        *,
        partition_by: Sequence[str] = (),
        rolling_policy: RollingPolicy | None = None,
        compaction: CompactionPolicy | None = None,
        filesystem: pafs.FileSystem | None = None,
        native_write: bool | None = None,
    ) -> None:
        self.base_path = _check_base_path(base_path)
        if format not in FORMATS:
            raise SinkConfigurationError(
                f"FileSink format must be one of {list(FORMATS)} (got {describe(format)}); "
                "pass format='parquet' or format='jsonl'"
            )
        self.format: FileFormat = format
        self.partition_by = _check_partition_by(partition_by)
        policy = RollingPolicy() if rolling_policy is None else rolling_policy
        if not isinstance(policy, RollingPolicy):
            raise SinkConfigurationError(
                f"FileSink rolling_policy must be a RollingPolicy (got {describe(policy)}); "
                "pass RollingPolicy(max_rows=..., max_bytes=..., roll_on_checkpoint=...)"
            )
        if not policy.roll_on_checkpoint:
            raise SinkConfigurationError(
                "FileSink needs RollingPolicy(roll_on_checkpoint=True) (got False): files are "
                "closed at every checkpoint so a checkpoint's committables hold all of its rows "
                "and writer state never has to resume a file (a Parquet file cannot be resumed "
                "at all: its footer is written on close); keep roll_on_checkpoint=True and tune "
                "file sizes with max_rows / max_bytes, or merge small files with compaction="
            )
        self.rolling_policy = policy
        if compaction is not None and not isinstance(compaction, CompactionPolicy):
            raise SinkConfigurationError(
                f"FileSink compaction must be a CompactionPolicy or None (got "
                f"{describe(compaction)}); pass CompactionPolicy(min_files=..., target_bytes=...)"
            )
        self.compaction = compaction
        if filesystem is not None and not isinstance(filesystem, pafs.FileSystem):
            raise SinkConfigurationError(
                f"FileSink filesystem must be a pyarrow.fs.FileSystem or None (got "
                f"{describe(filesystem)}); pass e.g. pyarrow.fs.LocalFileSystem() or None"
            )
        self.filesystem = filesystem
        if native_write is not None and not isinstance(native_write, bool):
            raise SinkConfigurationError(
                f"FileSink native_write must be True, False or None (got "
                f"{describe(native_write)}); None lets Spark write the files when it can"
            )
        self.native_write = native_write
        self.resolve()  # a base_path pyarrow cannot parse fails here, not in a task
        self._accepted_schema: str | None = None

    def __repr__(self) -> str:
        return (
            f"FileSink({self.base_path!r}, format={self.format!r}, "
            f"partition_by={list(self.partition_by)!r}, rolling_policy={self.rolling_policy!r}, "
            f"compaction={self.compaction!r}, native_write={self.native_write!r})"
        )

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the base directory's path inside it.

        Raises:
            SinkConfigurationError: ``base_path`` is not a path or URI pyarrow knows.
        """
        return resolve_location(self.base_path, self.filesystem, what="FileSink base_path")

    # --- before the writers ------------------------------------------------------------------

    def add_pre_write_topology(self, input: DataFrame) -> DataFrame:
        """Check the DataFrame against the format and the directory; ``input`` unchanged.

        Runs on the driver before any Spark job: one listing of ``base_path`` and
        one Parquet footer, skipped for a schema this sink already accepted (each
        micro-batch of a stream).

        Raises:
            SinkConfigurationError: A partition column is not in the DataFrame; a
                column's type has no exact form in the format; or the rows do not fit
                the files already committed (see `check_existing`).
        """
        from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415  # pyspark on use

        schema = input.schema
        if self._accepted_schema == schema.json():
            return input
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise SinkConfigurationError(
                f"FileSink partition_by names {missing} but the DataFrame has columns "
                f"{schema.names}; partition by columns of the DataFrame"
            )
        data = [f for f in schema.fields if f.name not in self.partition_by]
        try:
            arrow = to_arrow_schema(type(schema)(data), timezone="UTC")
        except Exception:  # noqa: BLE001  # the translator names the column Arrow cannot carry
            check_no_char_varchar(data, self.format)  # Spark's writer refuses them unnamed
            return input
        check_types(arrow, self.format, [f.dataType.simpleString() for f in data])
        fs, root = self.resolve()
        check_existing(fs, root, self.format, schema, self.partition_by)
        self._accepted_schema = schema.json()
        return input

    # --- Spark's own writer (the native path) --------------------------------------------------

    def plan_native_file_write(self, input: DataFrame) -> NativeFileWrite | NativeWriteUnavailable:
        """Spark's Parquet or JSON writer for this job, or why the sink's own writers run.

        Runs on the driver after the pre-write topology, before any Spark job. See
        ``native_write`` for when Spark writes the files.

        Raises:
            SinkConfigurationError: ``native_write=True`` and the configuration or a
                partition column's type does not allow it.
        """
        return _native.plan(self, input)

    def native_file_committables(self, written: NativeFilesWritten) -> list[PendingFile]:
        """One `PendingFile` per data file Spark staged under ``_staging/<token>/``.

        Files are committed under the names the sink's own writers use
        (``part-<token>-<n>.<ext>``); Spark's bookkeeping (``_temporary``, ``.crc``
        checksums) stays in staging for `clean_up_attempts`.
        """
        return _native.committables(self, written)

    # --- writers ---------------------------------------------------------------------------

    def create_writer(self, context: WriterInitContext) -> FileWriter:
        """A writer staging part files under ``_staging/<attempt token>/``."""
        return FileWriter(self, context)

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[InProgressFile]
    ) -> FileWriter:
        """A fresh writer; in-progress files named in ``recovered_state`` are discarded.

        Every file is rolled on checkpoint (as Flink does for bulk formats), so a
        checkpoint's rows are all in its committables and a writer's state is empty:
        there is nothing to resume. Should a state name in-progress files anyway,
        they are leftovers no committable refers to, and are deleted (idempotently).
        """
        return FileWriter(self, context, recovered_state)

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[InProgressFile]:
        """Writer states (`InProgressFile`) as msgpack, version 1."""
        return writer_state_serializer()

    # --- commit ----------------------------------------------------------------------------

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[PendingFile]:
        """Committables (`PendingFile`) as msgpack, version 1."""
        return pending_file_serializer()

    def create_committer(self, context: CommitterInitContext) -> FileCommitter:
        """The renaming committer."""
        fs, _ = self.resolve()
        return FileCommitter(fs)

    # --- the directory's own record of committed checkpoints ---------------------------------

    def is_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> bool:
        """Whether ``<base>/_sinkv2/checkpoints/`` marks ``checkpoint_id`` of ``sink_id``.

        The runtime asks before a batch run writes a checkpoint its commit state
        store does not know (a new or lost store): a marked one is not written again.
        """
        fs, root = self.resolve()
        return _markers.is_marked(fs, root, sink_id, checkpoint_id)

    def mark_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> None:
        """Leave the mark of ``checkpoint_id`` of ``sink_id`` (idempotent).

        The runtime calls it once the checkpoint's files are renamed into place,
        before its store records the checkpoint committed.
        """
        fs, root = self.resolve()
        _markers.mark(fs, root, sink_id, checkpoint_id)

    # --- cleanup ---------------------------------------------------------------------------

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Remove ``_staging/<token>/`` of every attempt of ``job_id`` not kept.

        Attempt tokens start with the job id, so only this job's attempts are touched;
        committed files live outside ``_staging`` and are never touched. Everything the
        job stages - part files, merged files and the temporaries of a merge killed
        midway - is in those directories, so ``clean_up_attempts(job_id, ())``, which
        the runtime calls once the job's epoch is committed (or for a dead job, at the
        next run of the sink id), leaves nothing of the job under ``_staging/``.
        Idempotent.
        """
        fs, root = self.resolve()
        staging = f"{root}/_staging"
        selector = pafs.FileSelector(staging, allow_not_found=True)
        kept = frozenset(kept_attempt_tokens)
        for info in fs.get_file_info(selector):
            name = info.base_name
            if (
                info.type == pafs.FileType.Directory
                and name.startswith(f"{job_id}-")
                and name not in kept
            ):
                fs.delete_dir(info.path)

    def abort(self, committables: Collection[PendingFile]) -> None:
        """Remove the staged files (and merge sources) of committables never to be committed.

        A committed file is no longer at its staged path, so it is never touched.
        """
        fs, _ = self.resolve()
        for file in committables:
            remove_quietly(fs, file.staged)
            for source in file.sources:
                remove_quietly(fs, source)


@final
class _CompactingFileSink(FileSink, SupportsPreCommitTopology[PendingFile, PendingFile]):
    """FileSink with ``compaction``: small staged files are merged before commit."""

    def get_write_result_serializer(self) -> AttrsMsgpackSerializer[PendingFile]:
        """Write results are pending files, as committables are."""
        return pending_file_serializer()

    def add_pre_commit_topology(self, committables: Any) -> Any:
        """The committables with each partition's small files merged, per checkpoint.

        On Spark, compaction runs one task per checkpoint (``groupBy(checkpoint_id)``);
        given any other committable stream (the contract-test kit's in-memory
        ``LocalCommittableStream``: ``toArrow()`` and a constructor taking the Arrow
        table), it runs in process. See `CompactionPolicy` for which files are merged.
        """
        if self.compaction is None:  # only FileSink(compaction=...) builds this class
            return committables
        fs, _ = self.resolve()
        file_format, policy = self.format, self.compaction

        def run(table: Any) -> Any:
            return compact(table, fs=fs, file_format=file_format, policy=policy)

        if not type(committables).__module__.startswith("pyspark."):
            table = committables.toArrow()
            checkpoints = table.column("checkpoint_id").to_pylist()
            parts = [
                run(table.filter(pc.equal(table.column("checkpoint_id"), checkpoint)))
                for checkpoint in sorted(set(checkpoints))
            ]
            return type(committables)(pa.concat_tables(parts) if parts else table)

        from sinkv2.runtime.committables import COMMITTABLE_COLUMNS  # noqa: PLC0415  # needs pyarrow
        from sinkv2_spark.committables import (  # noqa: PLC0415  # pyspark only when compacting
            committable_stream_ddl,
        )

        return (
            committables.select(*COMMITTABLE_COLUMNS)
            .groupBy("checkpoint_id")
            .applyInArrow(run, committable_stream_ddl())
        )
