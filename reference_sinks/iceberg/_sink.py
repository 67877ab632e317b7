"""`IcebergSink`: exactly-once appends to an Apache Iceberg table (the FLIP-372 use case).

Over 450 lines because `IcebergSink` is the sink's whole public surface (its
options, both write paths, commit, recovery and the clean-up of what dead jobs left
in the table's data directory), documented method by method; its writer, committer,
model and native path are modules of their own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import urlsplit

import attrs
import pyarrow as pa
import pyarrow.fs as pafs

from reference_sinks._arrow_types import arrow_of
from reference_sinks._spark_output import list_written_files
from reference_sinks.iceberg import _native
from reference_sinks.iceberg._catalog import CatalogSpec, local_catalog
from reference_sinks.iceberg._committer import IcebergCommitter, committed_state
from reference_sinks.iceberg._model import (
    AggregateWriteResults,
    IcebergCommittable,
    IcebergWriteResult,
    committable_serializer,
    write_result_serializer,
)
from reference_sinks.iceberg._orphans import CommitGuard, delete_unreferenced_metadata
from reference_sinks.iceberg._writer import (
    FILE_PREFIX,
    IcebergWriter,
    attempt_token_of,
    check_append_schema,
)
from sinkv2 import (
    END_OF_INPUT,
    AttrsMsgpackSerializer,
    CommitterInitContext,
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    SimpleVersionedSerialization,
    Sink,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommittedCheckpoints,
    SupportsNativeFileWrite,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    WriterInitContext,
)
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame

__all__ = ["IcebergSink"]

_MICROS_PER_DAY: Final = 86_400_000_000
_MICROS_PER_HOUR: Final = 3_600_000_000


def _unnamed_fields(kind: pa.DataType, path: str) -> Iterator[str]:
    """The paths of the struct fields with an empty name in ``kind``, at ``path``."""
    if pa.types.is_struct(kind):
        for field in kind:
            inner = f"{path}.{field.name}" if field.name else f"{path}.''"
            if not field.name:
                yield inner
            yield from _unnamed_fields(field.type, inner)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _unnamed_fields(kind.value_type, f"{path}[]")
    elif pa.types.is_map(kind):
        yield from _unnamed_fields(kind.key_type, f"{path}.key")
        yield from _unnamed_fields(kind.item_type, f"{path}.value")


def _check_field_names(schema: pa.Schema, table: str) -> None:
    """Refuse empty column and field names: Iceberg writes each name into Avro, which has none.

    Raises:
        SinkConfigurationError: A column or a struct field at any depth is named ``''``.
    """
    unnamed = [field.name or "''" for field in schema if not field.name]
    for field in schema:
        unnamed.extend(_unnamed_fields(field.type, field.name or "''"))
    if unnamed:
        raise SinkConfigurationError(
            f"Iceberg table {table!r} cannot hold a column or struct field with an empty "
            f"name (Iceberg writes every name into Avro schemas, which need one; got "
            f"{', '.join(unnamed)}); rename them, e.g. with named_struct('x', ...) or "
            "withColumnRenamed"
        )


def _check_identifier(table: object) -> str:
    if not isinstance(table, str) or "." not in table.strip(".") or not table.strip():
        raise SinkConfigurationError(
            f"table must be 'namespace.table' (got {table!r} of type {type(table).__name__}); "
            "e.g. IcebergSink(catalog, 'analytics.events')"
        )
    return table


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SinkConfigurationError(
            f"{name!r} must be a positive int (got {value!r} of type {type(value).__name__}); "
            "set it to at least 1"
        )
    return value


@final
class IcebergSink(
    Sink[dict[str, Any]],
    SupportsPreWriteTopology[dict[str, Any]],
    SupportsPreCommitTopology[IcebergWriteResult, IcebergCommittable],
    SupportsAttemptCleanup,
    SupportsAbort[IcebergCommittable],
    SupportsNativeFileWrite[IcebergCommittable],
    SupportsCommittedCheckpoints,
):
    """Exactly-once appends to an Iceberg table through any pyiceberg catalog.

    Writers stage Parquet data files under the table's data location; a pre-commit
    topology gathers every file of a checkpoint into one `IcebergCommittable`; the
    committer appends them in one snapshot whose summary carries ``sinkv2.sink-id``,
    ``sinkv2.commit-id`` and ``sinkv2.checkpoint-id``, and recognises a committable
    that is already in the table's history (see ``reference_sinks.iceberg._committer``).

    Args:
        catalog: A pyiceberg ``Catalog``. Only its class, name and properties are
            kept, so the sink survives cloudpickle; writers and the committer open
            their own catalog.
        table: ``"namespace.table"``; it must exist.
        sink_id: This sink's commit history inside the table. Defaults to ``table``.
            Give every pipeline that appends to the same table its own id: checkpoint
            ids are compared within one sink id.
        write_parallelism: Writer subtasks for a partitioned table (the pre-write
            topology repartitions into this many); defaults to Spark's
            ``spark.sql.shuffle.partitions``. Unpartitioned tables keep the input's
            partitioning.
        commit_attempts: Commit attempts per committable on conflicts with other
            committers, each re-checking the guard, before ``retry_later``.
        snapshot_properties: Extra summary properties of every snapshot.
        native_write: Whether Spark's own Parquet writer writes the data files (the
            native path, `SupportsNativeFileWrite`: about 2 x faster, no row enters
            Python; the files are registered in one append per checkpoint, with the
            same guard): ``None`` (default) when the table and the input allow it,
            else the sink's writers, reporting why in
            ``SinkResult.native_write_unavailable``; ``True`` requires it (refused
            before any Spark job otherwise); ``False`` always runs the sink's
            writers. It allows it for a table on a local disk whose partition spec
            uses identity (string, int, long, boolean, date, timestamptz), ``day``,
            ``hour``, ``month`` or ``year`` transforms (not ``bucket`` or
            ``truncate``), whose columns Spark writes as Iceberg reads them (not
            uuid, fixed, time or nanosecond timestamps), without dots in column
            names, and whose ``schema.name-mapping.default`` agrees with its schema
            (one is set from the schema if it has none).

    Raises:
        SinkConfigurationError: ``catalog`` is not a pyiceberg catalog, ``table`` does
            not exist, or an option is invalid.
    """

    def __init__(
        self,
        catalog: Catalog,
        table: str,
        *,
        sink_id: str | None = None,
        write_parallelism: int | None = None,
        commit_attempts: int = 8,
        snapshot_properties: Mapping[str, str] | None = None,
        native_write: bool | None = None,
    ) -> None:
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415  # optional extra

        self.catalog = CatalogSpec.of(catalog)
        self.table = _check_identifier(table)
        if sink_id is not None and (not isinstance(sink_id, str) or not sink_id.strip()):
            raise SinkConfigurationError(
                f"sink_id must be a non-empty str (got {sink_id!r} of type "
                f"{type(sink_id).__name__}); name the pipeline, e.g. 'orders-ingest'"
            )
        self.sink_id = sink_id or table
        self.write_parallelism = (
            None if write_parallelism is None else _positive("write_parallelism", write_parallelism)
        )
        self.commit_attempts = _positive("commit_attempts", commit_attempts)
        self.snapshot_properties = dict(snapshot_properties or {})
        self._committed_attempts: dict[str, set[str]] = {}  # see clean_up_attempts
        self._commit_guard = CommitGuard()  # see clean_up_attempts
        if native_write is not None and not isinstance(native_write, bool):
            raise SinkConfigurationError(
                f"'native_write' must be True, False or None (got {native_write!r} of type "
                f"{type(native_write).__name__}); None lets Spark write the files when it can"
            )
        self.native_write = native_write
        self.native_layout: _native.NativeLayout | None = None  # the last plan's (driver)
        try:
            catalog.load_table(table)
        except NoSuchTableError as error:
            raise SinkConfigurationError(
                f"Iceberg table {table!r} does not exist in catalog {catalog.name!r}; create it "
                "first (catalog.create_table(...)) or use IcebergSink.local(..., schema=...)"
            ) from error

    @classmethod
    def local(
        cls,
        warehouse: str | os.PathLike[str],
        table: str,
        *,
        schema: Schema | pa.Schema | None = None,
        partition_spec: PartitionSpec | None = None,
        **options: Any,
    ) -> IcebergSink:
        """A sink on the embedded default catalog: `local_catalog` (SQLite + local files).

        Args:
            warehouse: The warehouse directory (created if missing).
            table: ``"namespace.table"``.
            schema: Creates the table (and namespace) with this schema if it does not
                exist yet.
            partition_spec: The new table's partition spec.
            **options: `IcebergSink`'s keyword options.
        """
        catalog = local_catalog(warehouse)
        if schema is not None:
            from pyiceberg.exceptions import TableAlreadyExistsError  # noqa: PLC0415  # optional extra
            from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC  # noqa: PLC0415

            namespace = table.rsplit(".", 1)[0]
            catalog.create_namespace_if_not_exists(namespace)
            # Not create_table_if_not_exists: it writes a new table's metadata file before
            # finding the table there, which left one unreferenced file per call.
            if not catalog.table_exists(table):
                with contextlib.suppress(TableAlreadyExistsError):  # created meanwhile
                    catalog.create_table(
                        table,
                        schema=schema,
                        partition_spec=partition_spec or UNPARTITIONED_PARTITION_SPEC,
                    )
        return cls(catalog, table, **options)

    def load_table(self) -> Table:
        """The table at its current version (a new catalog connection)."""
        return self.catalog.load_table(self.table)

    # --- writers --------------------------------------------------------------------------

    def create_writer(self, context: WriterInitContext) -> IcebergWriter:
        """A writer staging data files for this subtask attempt."""
        return IcebergWriter(self.catalog, self.table, context)

    def check_schema(self, schema: pa.Schema) -> None:
        """Check that rows of ``schema`` can be appended to the table.

        Raises:
            SinkConfigurationError: Columns are missing, unexpected, or of the wrong
                type (the message lists the columns expected and got), or a column or
                struct field has an empty name.
        """
        _check_field_names(schema, self.table)
        table = self.load_table()
        check_append_schema(self.table, table.schema(), table.metadata.format_version, schema)

    def add_pre_write_topology(self, input: DataFrame) -> DataFrame:
        """Check the schema; for a partitioned table, cluster rows by partition.

        Runs on the driver before any Spark job. Rows are repartitioned by the
        table's partition values computed in Spark (identity, ``day``, ``hour``
        exactly; ``month``, ``year``, ``bucket`` and ``truncate`` by their source
        column, which also keeps each partition's rows together), so each writer
        opens few files.

        Raises:
            SinkConfigurationError: The DataFrame's schema does not fit the table.
        """
        # Types only: the zone does not matter (timestamps are instants), UTC keeps it simple.
        self.check_schema(arrow_of(input.schema, prefers_large_types=True))
        table = self.load_table()
        spec = table.spec()
        if spec.is_unpartitioned():
            return input
        keys = [self._partition_column(table.schema(), field) for field in spec.fields]
        if self.write_parallelism is not None:
            return input.repartition(self.write_parallelism, *keys)
        return input.repartition(*keys)

    @staticmethod
    def _partition_column(schema: Schema, field: Any) -> Column:
        from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform  # noqa: PLC0415  # optional extra
        from pyiceberg.types import DateType  # noqa: PLC0415  # optional extra
        from pyspark.sql import functions as sf  # noqa: PLC0415  # pyspark is optional

        source = schema.find_field(field.source_id)
        column = sf.col(f"`{schema.find_column_name(field.source_id)}`")
        transform = field.transform
        if isinstance(transform, IdentityTransform):
            return column
        if isinstance(transform, DayTransform | HourTransform):
            if isinstance(source.field_type, DateType):
                return sf.unix_date(column)
            unit = _MICROS_PER_DAY if isinstance(transform, DayTransform) else _MICROS_PER_HOUR
            return sf.floor(sf.unix_micros(column) / sf.lit(unit))
        return column

    # --- committables ---------------------------------------------------------------------

    def get_write_result_serializer(self) -> AttrsMsgpackSerializer[IcebergWriteResult]:
        """Write results travel as msgpack (version 1)."""
        return write_result_serializer()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[IcebergCommittable]:
        """Committables travel and are stored as msgpack (version 1)."""
        return committable_serializer()

    def add_pre_commit_topology(self, committables: DataFrame) -> DataFrame:
        """All write results of a checkpoint become one committable (one snapshot).

        Each write result first learns its checkpoint id from the stream, then
        ``aggregate_committables`` merges them per checkpoint. ``committables`` is a
        Spark DataFrame, or the contract-test kit's in-process stream.
        """
        from sinkv2.runtime.committables import COMMITTABLE_COLUMNS  # noqa: PLC0415  # needs pyarrow
        from sinkv2_spark.committables import (  # noqa: PLC0415  # the Spark runtime is optional
            aggregate_committables,
            committable_stream_ddl,
        )

        stream = committables.select(*COMMITTABLE_COLUMNS)
        if hasattr(stream, "mapInArrow"):  # a Spark DataFrame
            tagged = stream.mapInArrow(_TagCheckpoints(), committable_stream_ddl())
        else:  # the contract-test kit's in-process stream: the same work, locally
            rows = stream.toArrow()
            batches = list(_TagCheckpoints()(rows.to_batches()))
            local: Any = type(stream)
            tagged = local(pa.Table.from_batches(batches, schema=rows.schema))
        return aggregate_committables(
            tagged,
            AggregateWriteResults(self.sink_id),
            read=write_result_serializer(),
            write=committable_serializer(),
        )

    def create_committer(self, context: CommitterInitContext) -> IcebergCommitter:
        """The committer: one guarded fast append per committable."""
        return IcebergCommitter(
            self.catalog,
            self.table,
            attempts=self.commit_attempts,
            snapshot_properties=self.snapshot_properties,
            guard=self._commit_guard,
        )

    # --- Spark's own writer (the native path) --------------------------------------------

    def plan_native_file_write(self, input: DataFrame) -> NativeFileWrite | NativeWriteUnavailable:
        """Spark's Parquet write of this job's epochs, or why the sink's own writers run.

        Runs on the driver after the pre-write topology, before any Spark job: reads
        the table's metadata, and sets ``schema.name-mapping.default`` from the
        schema if the table has none (a metadata commit). See ``native_write`` and
        ``reference_sinks.iceberg._native`` for what is checked.

        Raises:
            SinkConfigurationError: ``native_write=True`` and the table or the input
                does not allow it.
        """
        return _native.plan(self, input)

    def native_file_committables(self, written: NativeFilesWritten) -> list[IcebergCommittable]:
        """One committable with every data file Spark wrote for the epoch (none if empty).

        Each file's statistics come from its Parquet footer, its partition values
        from its directories, checked against the table's spec and the file's column
        bounds.

        Raises:
            SinkWriterError: A file does not fit the table; nothing is committed.
        """
        return _native.committables(self, written)

    # --- cleanup --------------------------------------------------------------------------

    def data_location(self) -> tuple[Table, pafs.FileSystem, str, str]:
        """The table, and its data location: filesystem, URI and path inside the filesystem."""
        from pyiceberg.table.locations import load_location_provider  # noqa: PLC0415  # optional extra

        table = self.load_table()
        data_path = load_location_provider(table.location(), table.properties).data_path
        filesystem, root = pafs.FileSystem.from_uri(data_path)
        return table, filesystem, data_path, root

    @staticmethod
    def _files_under(filesystem: pafs.FileSystem, root: str) -> list[pafs.FileInfo]:
        """Every file under ``root`` named as this sink names data files."""
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        return [
            info
            for info in filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.startswith(FILE_PREFIX)
        ]

    def _staged_files(self) -> tuple[pafs.FileSystem, list[pafs.FileInfo]]:
        """The filesystem of the table's data location and every file this sink named."""
        _, filesystem, _, root = self.data_location()
        return filesystem, self._files_under(filesystem, root)

    def __getstate__(self) -> dict[str, Any]:
        """What is pickled: the configuration, without the driver's memo of committed attempts."""
        state = dict(self.__dict__)
        state["_committed_attempts"] = {}
        state["native_layout"] = None
        return state

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Delete data files staged by attempts of ``job_id`` other than the kept ones.

        Only files named with one of the job's attempt tokens are candidates, and a
        kept attempt's files stay. A candidate that any snapshot of the table
        references is never deleted: the runtime calls ``clean_up_attempts(job_id,
        ())`` once the job's epoch is committed (and for dead jobs whose pending
        epochs a later run committed), when the committed files are exactly such
        candidates. What remains deleted is staged output no snapshot will ever
        reference: failed and losing attempts, a dead job's writers, committables
        skipped as already committed. Idempotent.

        Cost: one listing of the data location; the table's manifests are read only
        when there is a candidate, and only until every candidate is found
        referenced (the newest snapshot's manifests first).

        A stream calls this after every micro-batch with one job id, so each call
        would find every file the job committed so far a candidate again, and read
        every manifest of the job to clear them: a cost growing with the stream's
        age. This instance therefore remembers, for the job it last cleaned up
        after, the attempts whose files it found all referenced (committed: a
        committed attempt never writes again) and skips them; the memo holds only
        attempts whose files are still listed, and is not pickled. It only ever
        spares files, so it cannot delete a referenced one.

        A native write (Spark's files) stages one directory,
        ``<data>/sinkv2-native/<token>/``: its data files are candidates as above
        (committed ones stay where Spark wrote them), and Spark's bookkeeping in it
        (``_temporary/`` of an unfinished write, ``.crc`` checksums) is always
        deleted; a directory left without a referenced file is deleted whole.

        The job's manifests and manifest lists that no snapshot references (a
        committer that died, or whose catalog call failed, after writing them) are
        deleted too: see ``_orphans``.
        """
        kept = frozenset(kept_attempt_tokens)
        committed = self._committed_attempts.get(job_id, set())
        table, filesystem, data_uri, root = self.data_location()
        candidates: dict[str, str] = {}
        token_of: dict[str, str] = {}
        listed: set[str] = set()
        for info in self._files_under(filesystem, root):
            token = attempt_token_of(info.base_name)
            if token is None or not token.startswith(f"{job_id}-"):
                continue
            listed.add(token)
            if token not in kept and token not in committed:
                candidates[_location_key(_uri_of(info.path, root, data_uri))] = info.path
                token_of[info.path] = token
        native = self._native_directories(filesystem, root, job_id, kept, committed)
        for token, directory in native.items():
            listed.add(token)
            for file in list_written_files(filesystem, directory):
                candidates[_location_key(_uri_of(file.path, root, data_uri))] = file.path
                token_of[file.path] = token
        unreferenced = _unreferenced(table, candidates) if candidates else []
        for path in unreferenced:
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_file(path)
        gone = set(unreferenced)
        referenced = {token for path, token in token_of.items() if path not in gone}
        for token, directory in native.items():
            if token not in referenced:
                filesystem.delete_dir(directory)  # nothing of it is in the table
        # Attempts whose files are all referenced now (a native one's unreferenced files
        # are deleted, so what is left of it is).
        committed = (
            (committed & listed)
            | (set(token_of.values()) - {token_of[path] for path in unreferenced})
            | (referenced & set(native))
        )
        self._committed_attempts = {job_id: committed}
        with self._commit_guard:  # not while a committer of this sink is mid-commit
            delete_unreferenced_metadata(self.load_table(), self.sink_id, job_id)

    @staticmethod
    def _native_directories(
        filesystem: pafs.FileSystem,
        root: str,
        job_id: str,
        kept: frozenset[str],
        committed: set[str],
    ) -> dict[str, str]:
        """The job's native write directories to clean, by token, bookkeeping removed."""
        native_root = f"{root}/{_native.NATIVE_DIRECTORY}"
        found = {}
        for info in filesystem.get_file_info(pafs.FileSelector(native_root, allow_not_found=True)):
            token = info.base_name
            if (
                info.type != pafs.FileType.Directory
                or not token.startswith(f"{job_id}-")
                or token in kept
                or token in committed
            ):
                continue
            found[token] = info.path
            inside = pafs.FileSelector(info.path, recursive=True, allow_not_found=True)
            for entry in filesystem.get_file_info(inside):
                relative = entry.path[len(info.path) :].strip("/").split("/")
                if not any(part.startswith(("_", ".")) for part in relative):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if entry.type == pafs.FileType.Directory:
                        filesystem.delete_dir(entry.path)
                    elif entry.type == pafs.FileType.File:
                        filesystem.delete_file(entry.path)
        return found

    def abort(self, committables: Collection[IcebergCommittable]) -> None:
        """Delete the staged files of committables that will never be committed.

        A committable the table's history shows as committed is left alone, and so
        is any file the current snapshot references. Idempotent.
        """
        table = self.load_table()
        live: set[str] | None = None
        for committable in committables:
            if committed_state(table, committable.sink_id).contains(committable):
                continue
            if live is None:
                live = _referenced_paths(table)
            for file in committable.files:
                if file.path not in live and _exists(table, file.path):
                    table.io.delete(file.path)

    def is_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> bool:
        """Whether the table's snapshots hold ``checkpoint_id`` of this sink, or a later one.

        The table's own record (``sinkv2.checkpoint-id`` in the snapshot summaries of
        this sink's ``sink_id``), as the committer reads it before every attempt: a
        checkpoint at or below the highest one committed is in the table. The
        runtime's ``sink_id`` is not needed: the table keys its history by the sink's.
        """
        highest = committed_state(self.load_table(), self.sink_id).max_checkpoint_id
        return highest is not None and checkpoint_id <= highest

    def mark_checkpoint_committed(self, sink_id: str, checkpoint_id: int) -> None:
        """Nothing to do: the snapshot that commits a checkpoint carries its id."""

    def __repr__(self) -> str:
        return f"IcebergSink({self.catalog.name!r}, {self.table!r}, sink_id={self.sink_id!r})"


def _exists(table: Table, path: str) -> bool:
    return bool(table.io.new_input(path).exists())


def _uri_of(path: str, root: str, data_uri: str) -> str:
    """The location of ``path`` (a filesystem path under ``root``) as the table writes it."""
    if path.startswith(root):
        return data_uri.rstrip("/") + path[len(root.rstrip("/")) :]
    return path


def _location_key(location: str) -> str:
    """``location`` without its scheme, so ``file:/x``, ``file:///x`` and ``/x`` compare equal."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return parts.path
    return f"{parts.netloc}{parts.path}"


def _manifests_newest_first(table: Table) -> Iterator[Any]:
    """Every manifest the table's snapshots list, each once, the current snapshot's first."""
    snapshots = list(table.metadata.snapshots)
    current = table.current_snapshot()
    snapshots.sort(
        key=lambda s: (current is None or s.snapshot_id != current.snapshot_id, -s.timestamp_ms)
    )
    seen: set[str] = set()
    for snapshot in snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path not in seen:
                seen.add(manifest.manifest_path)
                yield manifest


def _unreferenced(table: Table, candidates: Mapping[str, str]) -> list[str]:
    """The values of ``candidates`` (location key -> path) that no snapshot references.

    Reads manifests until every candidate is found referenced, so cleaning up after
    a committed job usually reads only the manifests of its own snapshot.
    """
    left = dict(candidates)
    for manifest in _manifests_newest_first(table):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            left.pop(_location_key(entry.data_file.file_path), None)
        if not left:
            break
    return list(left.values())


def _referenced_paths(table: Table) -> set[str]:
    """Every data file path the table's snapshots reference."""
    return {
        entry.data_file.file_path
        for manifest in _manifests_newest_first(table)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
    }


@attrs.frozen
class _TagCheckpoints:
    """mapInArrow: each write result gets the checkpoint id of its row (picklable)."""

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from sinkv2.runtime.committables import COMMITTABLE_SCHEMA  # noqa: PLC0415  # executor side

        serializer = write_result_serializer()
        for batch in batches:
            columns = batch.to_pydict()
            payloads = []
            for checkpoint_id, payload in zip(
                columns["checkpoint_id"], columns["payload"], strict=True
            ):
                result = SimpleVersionedSerialization.read_version_and_deserialize(
                    serializer, payload
                )
                tagged = attrs.evolve(
                    result, checkpoint_id=None if checkpoint_id == END_OF_INPUT else checkpoint_id
                )
                payloads.append(
                    SimpleVersionedSerialization.write_version_and_serialize(serializer, tagged)
                )
            columns["payload"] = payloads
            columns["serializer_version"] = [serializer.get_version()] * len(payloads)
            yield pa.RecordBatch.from_pydict(columns, schema=COMMITTABLE_SCHEMA)
