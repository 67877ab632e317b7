"""`IcebergSource`: an Iceberg table as a FLIP-27 source, a snapshot or its appends as a stream.

Over 450 lines because the source is one picklable object that checks its many options
(snapshot, time, ref, filter, projection, start point, overwrite rule) and turns them
into splits on the driver; reading, enumerating, splits and errors are modules of their own.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, final

import pyarrow as pa

from reference_sinks._row_cut import COUNT_WHEN_CUT, cut_counted, until_stop
from reference_sinks.iceberg._catalog import CatalogSpec, local_catalog
from reference_sinks.iceberg._source_deletes import added_delete_files, equality_delete_file
from reference_sinks.iceberg._source_enumerator import (
    Discovered,
    IcebergSplitEnumerator,
    walk_new_snapshots,
)
from reference_sinks.iceberg._source_errors import IcebergSourceError
from reference_sinks.iceberg._source_filter import (
    as_iceberg_reads,
    inexact_literal,
    references,
    with_names,
)
from reference_sinks.iceberg._source_read import arrow_type, deleted_positions, read_data_file
from reference_sinks.iceberg._source_reader import IcebergSourceReader
from reference_sinks.iceberg._source_split import (
    IcebergEnumeratorState,
    IcebergSourceSplit,
    enumerator_state_serializer,
    split_serializer,
)
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import (
    Boundedness,
    NativeRead,
    NativeReadUnavailable,
    SourceReaderContext,
    SplitCut,
    SplitEnumeratorContext,
)
from sinkv2.text import describe, short_repr

if TYPE_CHECKING:
    import pyarrow.compute as pc
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["IcebergSource", "StartingPoint"]

StartingPoint = Literal["table", "earliest", "latest"] | int | dt.datetime
"""Where a stream starts (Iceberg's ``StreamingStartingStrategy``).

See `IcebergSource.monitor_continuously`.
"""

_STARTS: Final = ("table", "earliest", "latest")
_MAX_INTERVAL_S: Final = 366 * 24 * 3600.0


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SinkConfigurationError(
            f"IcebergSource {name} must be a positive int (got {describe(value)}); set it to at "
            "least 1"
        )
    return value


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _millis(moment: dt.datetime, name: str, *, up: bool = False) -> int:
    """``moment`` in epoch milliseconds, exactly: rounded down, or ``up`` (a sub-millisecond rest).

    Snapshot times are whole milliseconds: "at or before" ``moment`` (``as_of``) is at
    or before its floor, "at or after" it (a stream's ``start``) at or after its ceiling.
    Integer arithmetic, not ``timestamp() * 1000`` (a float: off by one past 2038).
    """
    if moment.tzinfo is None:
        raise SinkConfigurationError(
            f"IcebergSource {name} must be a timezone-aware datetime (got {moment!r}); e.g. "
            "datetime.datetime(2024, 3, 30, tzinfo=datetime.timezone.utc)"
        )
    micros = (moment - _EPOCH) // dt.timedelta(microseconds=1)
    return -(-micros // 1000) if up else micros // 1000


@functools.lru_cache(maxsize=16)
def _file_io(properties: tuple[tuple[str, str], ...], location: str) -> FileIO:
    """The table's file IO, one per process and table (pyiceberg's choice by scheme)."""
    from pyiceberg.io import load_file_io  # noqa: PLC0415  # optional extra

    return load_file_io(dict(properties), location)


@final
class IcebergSource:
    """An Apache Iceberg table as a FLIP-27 source (Iceberg's Flink ``IcebergSource``).

    Bounded (the default): the table at its current snapshot when the job starts,
    or at ``snapshot_id``, at the snapshot current at ``as_of``, or at the head of
    a tag or branch ``ref``. `monitor_continuously` makes it ``CONTINUOUS_UNBOUNDED``:
    every append snapshot after a start point, each snapshot's added data files read
    exactly once (the last snapshot read is in the enumerator's checkpoint).

    A split is one data file (a ``FileScanTask``) with its position: records already
    emitted. The source reads the Parquet files itself with pyarrow, matching columns
    by Iceberg field id (renamed columns keep their values, columns added after a
    file was written are null in it, widened types are widened) and keeping nulls at
    every level of nesting. Position deletes (v2) are applied; equality deletes and
    deletion vectors are refused, naming the file: never ignored. A bounded read by
    `sinkv2_spark.from_source` is read by Spark's own Parquet reader where that gives
    the same rows (`native_read`: no row filter, no deletes).

    Records are Arrow batches of `get_produced_type`: the table's current schema (or
    its ``selected_fields``), nullability from ``required``.

    Args:
        catalog: A pyiceberg ``Catalog`` (kept as its class and properties, so it
            survives cloudpickle; see `IcebergSink`).
        table: ``"namespace.table"``.
        snapshot_id: Read this snapshot (bounded only).
        as_of: Read the snapshot current at this time (a timezone-aware datetime).
        ref: Read the head of this tag or branch; with `monitor_continuously`, follow
            this branch's appends.
        row_filter: Rows to read: an Iceberg expression or its string form
            (``"id > 10 and key = 'a'"``); pushed into the scan's planning (files
            and partitions that cannot match are not read) and applied to each row.
        selected_fields: Columns to read (Iceberg's ``select``, nested names with
            dots); ``None`` for all.
        case_sensitive: Whether names in ``row_filter`` and ``selected_fields`` are
            case sensitive.
        batch_rows: Rows per emitted Arrow batch, at most.

    Raises:
        SinkConfigurationError: A bad argument, named; a table that does not exist;
            a snapshot, time or ref the table does not have.
    """

    def __init__(
        self,
        catalog: Catalog,
        table: str,
        *,
        snapshot_id: int | None = None,
        as_of: dt.datetime | None = None,
        ref: str | None = None,
        row_filter: str | BooleanExpression | None = None,
        selected_fields: Sequence[str] | None = None,
        case_sensitive: bool = True,
        batch_rows: int = 65_536,
    ) -> None:
        from pyiceberg.catalog import Catalog  # noqa: PLC0415  # optional extra
        from pyiceberg.expressions import AlwaysTrue, BooleanExpression  # noqa: PLC0415

        if not isinstance(catalog, Catalog):
            raise SinkConfigurationError(
                f"IcebergSource needs a pyiceberg Catalog (got {describe(catalog)}); pass e.g. "
                "pyiceberg.catalog.load_catalog(...) or reference_sinks.iceberg.local_catalog(dir)"
            )
        if not isinstance(table, str) or "." not in table.strip(".") or not table.strip():
            raise SinkConfigurationError(
                f"IcebergSource table must be 'namespace.table' (got {describe(table)})"
            )
        self.catalog = CatalogSpec.of(catalog)
        self.table = table
        given = {
            name: value
            for name, value in (("snapshot_id", snapshot_id), ("as_of", as_of), ("ref", ref))
            if value is not None
        }
        if len(given) > 1:
            raise SinkConfigurationError(
                f"IcebergSource takes at most one of snapshot_id, as_of and ref (got "
                f"{sorted(given)}); they each name the snapshot to read"
            )
        if snapshot_id is not None and (
            isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int)
        ):
            raise SinkConfigurationError(
                f"IcebergSource snapshot_id must be an int (got {describe(snapshot_id)})"
            )
        if as_of is not None and not isinstance(as_of, dt.datetime):
            raise SinkConfigurationError(
                f"IcebergSource as_of must be a datetime (got {describe(as_of)})"
            )
        self.as_of_ms = None if as_of is None else _millis(as_of, "as_of")
        if ref is not None and (not isinstance(ref, str) or not ref):
            raise SinkConfigurationError(
                f"IcebergSource ref must be a tag or branch name (got {describe(ref)})"
            )
        self.snapshot_id = snapshot_id
        self.ref = ref
        if row_filter is None:
            row_filter = AlwaysTrue()
        if not isinstance(row_filter, str | BooleanExpression):
            raise SinkConfigurationError(
                f"IcebergSource row_filter must be a str or a pyiceberg BooleanExpression (got "
                f"{describe(row_filter)}); e.g. \"id > 10 and key = 'a'\""
            )
        self.row_filter: str | BooleanExpression = row_filter
        if selected_fields is not None and (
            isinstance(selected_fields, str)
            or not all(isinstance(name, str) and name for name in selected_fields)
        ):
            raise SinkConfigurationError(
                f"IcebergSource selected_fields must be a list of column names such as "
                f"['id', 'key'] (got {describe(selected_fields)})"
            )
        if selected_fields is not None and not selected_fields:
            raise SinkConfigurationError(
                "IcebergSource selected_fields is empty: a read of no columns would give no "
                "rows; name at least one column (e.g. ['id']), or leave it None for all"
            )
        self.selected_fields = None if selected_fields is None else tuple(selected_fields)
        if not isinstance(case_sensitive, bool):
            raise SinkConfigurationError(
                f"IcebergSource case_sensitive must be a bool (got {describe(case_sensitive)})"
            )
        self.case_sensitive = case_sensitive
        self.batch_rows = _positive_int("batch_rows", batch_rows)
        self.monitor_interval: float | None = None
        self.start: StartingPoint = "table"
        self.skip_overwrites = False
        loaded = _load_table(catalog, table)
        self._io_properties = tuple(
            sorted({**self.catalog.properties, **loaded.properties}.items())
        )
        self._name_mapping = loaded.name_mapping()
        self._location = loaded.location()
        self._table_uuid = str(loaded.metadata.table_uuid)
        self._plan_schema(loaded)
        self._resolve_snapshot(loaded)

    @classmethod
    def local(cls, warehouse: str | os.PathLike[str], table: str, **options: Any) -> IcebergSource:
        """A source on the embedded default catalog `local_catalog` (SQLite + local files)."""
        return cls(local_catalog(warehouse), table, **options)

    def _plan_schema(self, table: Table) -> None:
        """The projection, produced type and row filter's columns, from the table's schema."""
        from pyiceberg.expressions import AlwaysTrue  # noqa: PLC0415  # optional extra
        from pyiceberg.expressions.visitors import bind, extract_field_ids  # noqa: PLC0415
        from pyiceberg.io.pyarrow import expression_to_pyarrow  # noqa: PLC0415
        from pyiceberg.schema import prune_columns  # noqa: PLC0415
        from pyiceberg.table import _parse_row_filter  # noqa: PLC0415  # pyiceberg's own parser
        from pyparsing import ParseBaseException  # noqa: PLC0415  # pyiceberg's filter parser

        schema = table.schema()
        try:
            if self.selected_fields is None:
                self._projection = schema
            else:
                self._projection = schema.select(
                    *self.selected_fields, case_sensitive=self.case_sensitive
                )
        except (ValueError, KeyError) as error:
            raise SinkConfigurationError(
                f"IcebergSource selected_fields {list(self.selected_fields or ())} on "
                f"{self.table!r}: {error}; name columns of the table: {schema.column_names}"
            ) from error
        try:
            expression = _parse_row_filter(self.row_filter)
        except ValueError as error:  # pyiceberg's expression classes refuse a parsed piece
            raise SinkConfigurationError(
                f"IcebergSource row_filter {short_repr(self.row_filter)} is not a filter "
                f"pyiceberg can build: {str(error).splitlines()[0]}; write it in Iceberg's filter "
                "syntax, e.g. \"id > 10 and key = 'a'\""
            ) from None
        except ParseBaseException as error:
            raise SinkConfigurationError(
                f"IcebergSource row_filter {short_repr(self.row_filter)} does not parse (at "
                f"character {error.loc + 1}); write it in Iceberg's filter syntax, e.g. "
                "\"id > 10 and key = 'a' and day >= '2024-03-01'\""
            ) from None
        inexact = inexact_literal(expression, schema, case_sensitive=self.case_sensitive)
        if inexact is not None:
            column, value, kind = inexact
            raise SinkConfigurationError(
                f"IcebergSource row_filter {short_repr(self.row_filter)} compares the {kind} "
                f"column {column!r} with {value}, which a {kind} cannot hold (pyiceberg would "
                "round it and read other rows; Iceberg's Java library refuses it): compare with "
                "a whole number"
            )
        expression = as_iceberg_reads(expression, schema, case_sensitive=self.case_sensitive)
        self._scan_filter = expression  # what planning prunes files by, as rows are filtered
        try:
            bound = bind(schema, expression, case_sensitive=self.case_sensitive)
        except (ValueError, KeyError, TypeError) as error:
            why = str(error)
            if "accessor" in why:  # pyiceberg's filters reach top-level and struct fields only
                why = (
                    "it names a column inside a list or map, which Iceberg's filters cannot "
                    "reach (only top-level columns and fields of structs); filter the "
                    "DataFrame after the read instead"
                )
            elif isinstance(error, TypeError):
                why = f"{why} (compare a primitive column or a struct's field, not a struct)"
            raise SinkConfigurationError(
                f"IcebergSource row_filter {short_repr(self.row_filter)} on {self.table!r}: "
                f"{why} (columns: {schema.column_names})"
            ) from error
        # the filter's column names and their field ids: planning renames what was renamed
        self._filter_columns = {
            name: schema.find_field(name, self.case_sensitive).field_id
            for name in references(expression)
        }
        self._produced = arrow_type(self._projection)
        self._read_ids = frozenset(field.field_id for field in self._projection.fields)
        self._filter: tuple[Schema, pa.Schema, pc.Expression] | None = None
        if bound != AlwaysTrue():
            filter_schema = prune_columns(schema, extract_field_ids(bound), select_full_types=True)
            self._filter = (
                filter_schema,
                arrow_type(filter_schema),
                expression_to_pyarrow(bound, filter_schema),
            )
            self._read_ids |= {field.field_id for field in filter_schema.fields}
            try:  # Arrow picks its kernels by type: an empty table finds a missing one now
                self._filter[1].empty_table().filter(self._filter[2])
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid) as error:
                raise SinkConfigurationError(
                    f"IcebergSource row_filter {short_repr(self.row_filter)} cannot be applied "
                    f"to the rows of {self.table!r}: {error} (Arrow has no such comparison; a "
                    "UUID column, for one, can only be tested with 'is null'); filter the "
                    "DataFrame after the read instead"
                ) from None

    def _resolve_snapshot(self, table: Table) -> Snapshot | None:
        """The snapshot a bounded read reads (``None``: an empty table's current state).

        Raises:
            SinkConfigurationError: The table has no such snapshot, time or ref.
        """
        if self.snapshot_id is not None:
            found = table.snapshot_by_id(self.snapshot_id)
            what = f"snapshot_id {self.snapshot_id}"
        elif self.as_of_ms is not None:
            found = table.snapshot_as_of_timestamp(self.as_of_ms)
            moment = dt.datetime.fromtimestamp(self.as_of_ms / 1000, dt.UTC).isoformat()
            what = f"snapshot current at {moment} (as_of: before its first snapshot)"
        elif self.ref is not None:
            found = table.snapshot_by_name(self.ref)
            what = f"ref (tag or branch) {self.ref!r}"
        else:
            return table.current_snapshot()
        if found is None:
            raise SinkConfigurationError(
                f"Iceberg table {self.table!r} has no {what}; its snapshots: "
                f"{[s.snapshot_id for s in table.snapshots()][-10:]}, refs: {sorted(table.refs())}"
            )
        return found

    # --- configuration -----------------------------------------------------------------------

    def monitor_continuously(
        self,
        interval: float | dt.timedelta,
        *,
        start: StartingPoint = "table",
        skip_overwrites: bool = False,
    ) -> IcebergSource:
        """This source, continuous: look for new snapshots every ``interval``.

        Returns a new source (Iceberg's ``streaming(true)`` with ``monitorInterval``);
        this one is unchanged.

        Args:
            interval: Time between two looks at the table (seconds or a timedelta).
            start: ``"table"`` (default, Iceberg's ``TABLE_SCAN_THEN_INCREMENTAL``):
                the current snapshot whole, then every later append; ``"earliest"``:
                every append from the oldest snapshot kept; ``"latest"``: the
                current snapshot's appended files, then every later append; a
                snapshot id: the appends from that snapshot on (inclusive); a
                timezone-aware datetime: the appends from the oldest snapshot at or
                after it.
            skip_overwrites: Skip ``overwrite`` and ``delete`` snapshots (their added
                files too) instead of failing on them (Iceberg's
                ``streaming-skip-overwrite-snapshots`` and
                ``streaming-skip-delete-snapshots``).

        Raises:
            SinkConfigurationError: A bad argument, named; ``snapshot_id`` or
                ``as_of`` set (a stream follows the table's head; ``ref`` names the
                branch it follows).
        """
        if isinstance(interval, dt.timedelta):
            interval = interval.total_seconds()
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not 0 < interval <= _MAX_INTERVAL_S
        ):
            raise SinkConfigurationError(
                f"IcebergSource monitor_continuously interval must be a positive, finite number "
                f"of seconds (at most a year) or a timedelta (got {describe(interval)})"
            )
        if self.snapshot_id is not None or self.as_of_ms is not None:
            raise SinkConfigurationError(
                "IcebergSource.monitor_continuously follows the table's head: drop snapshot_id "
                "and as_of, and say where the stream starts with start=<snapshot id or datetime>"
            )
        valid_start = (
            start in _STARTS
            if isinstance(start, str)
            else (isinstance(start, int | dt.datetime) and not isinstance(start, bool))
        )
        if not valid_start:
            raise SinkConfigurationError(
                f"IcebergSource start must be one of {list(_STARTS)}, a snapshot id (int) or a "
                f"datetime (got {describe(start)})"
            )
        if isinstance(start, dt.datetime):
            _millis(start, "start")
        if not isinstance(skip_overwrites, bool):
            raise SinkConfigurationError(
                f"IcebergSource skip_overwrites must be a bool (got {describe(skip_overwrites)})"
            )
        self._check_stream(start)
        other = object.__new__(IcebergSource)
        other.__dict__.update(self.__dict__)
        other.monitor_interval = float(interval)
        other.start = start
        other.skip_overwrites = skip_overwrites
        return other

    def _check_stream(self, start: StartingPoint) -> None:
        """A stream's ref is a branch, its start snapshot one the table has."""
        from pyiceberg.table.refs import SnapshotRefType  # noqa: PLC0415  # optional extra

        table = self.load_table()
        ref = None if self.ref is None else table.metadata.refs.get(self.ref)
        if ref is not None and ref.snapshot_ref_type == SnapshotRefType.TAG:
            raise SinkConfigurationError(
                f"IcebergSource ref {self.ref!r} of {self.table!r} is a tag, and a tag never "
                "moves: a stream follows a branch (Iceberg's Flink source refuses to stream a "
                "tag too). Name a branch, or read the tag without monitor_continuously"
            )
        if isinstance(start, int) and table.snapshot_by_id(start) is None:
            raise SinkConfigurationError(
                f"IcebergSource start={start}: {self.table!r} has no snapshot {start} "
                f"(expired, or of another table); its snapshots: "
                f"{[s.snapshot_id for s in table.snapshots()][-10:]}"
            )

    def load_table(self) -> Table:
        """The table at its current version, from a new catalog.

        Raises:
            IcebergSourceError: The table no longer exists (dropped or renamed since
                the source was made).
        """
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415  # optional extra

        try:
            table = self.catalog.load_table(self.table)
        except NoSuchTableError as error:
            raise IcebergSourceError(
                f"IcebergSource: the Iceberg table {self.table!r} no longer exists in its "
                "catalog (dropped or renamed since the source was made); create it again, or "
                "start a new source on the table's new name"
            ) from error
        self._check_same_table(table, self._table_uuid, "the source was made")
        return table

    def _check_same_table(self, table: Table, table_uuid: str | None, since: str) -> None:
        """Fail if ``table`` is not the table ``table_uuid`` names (dropped, created again)."""
        found = str(table.metadata.table_uuid)
        if table_uuid is not None and found != table_uuid:
            raise IcebergSourceError(
                f"IcebergSource: the Iceberg table {self.table!r} was dropped and created again "
                f"since {since} (table-uuid {table_uuid}, now {found}): it is another table, "
                "not read as a continuation of the first. Make a new source (a stream: with a "
                "new source_id) to read it"
            )

    def __repr__(self) -> str:
        mode = "" if self.monitor_interval is None else f", monitor={self.monitor_interval:g}s"
        return f"IcebergSource({self.table!r}{mode})"

    # --- planning ----------------------------------------------------------------------------

    def _identity(self, table: Table, task: FileScanTask) -> tuple[tuple[int, bytes | None], ...]:
        """The identity-partition values of the columns read (`IcebergSourceSplit.identity`)."""
        from pyiceberg.conversions import to_bytes  # noqa: PLC0415  # optional extra
        from pyiceberg.transforms import IdentityTransform  # noqa: PLC0415  # optional extra
        from pyiceberg.types import PrimitiveType  # noqa: PLC0415  # optional extra

        data = task.file
        spec = table.specs().get(data.spec_id)
        if spec is None:
            return ()
        schema = table.schema()
        values: dict[int, bytes | None] = {}
        for position, field in enumerate(spec.fields):
            if not isinstance(field.transform, IdentityTransform) or field.source_id not in (
                self._read_ids
            ):
                continue
            value = data.partition[position]
            kind = schema.find_field(field.source_id).field_type
            if isinstance(kind, PrimitiveType):  # as an identity partition's source is
                values[field.source_id] = None if value is None else to_bytes(kind, value)
        return tuple(sorted(values.items()))

    def _split(
        self, task: FileScanTask, snapshot_id: int, table: Table | None = None
    ) -> IcebergSourceSplit:
        from pyiceberg.manifest import DataFileContent, FileFormat  # noqa: PLC0415

        data = task.file
        if data.file_format != FileFormat.PARQUET:
            raise IcebergSourceError(
                f"IcebergSource reads Parquet data files; {data.file_path} of {self.table!r} is "
                f"{data.file_format.name}",
                snapshot_id=snapshot_id,
            )
        deletes = []
        for delete in sorted(task.delete_files, key=lambda d: d.file_path):
            if delete.content != DataFileContent.POSITION_DELETES:
                raise IcebergSourceError(
                    f"IcebergSource cannot apply the equality-delete file {delete.file_path} of "
                    f"{self.table!r} (it deletes rows of {data.file_path}); it never ignores "
                    "deletes: rewrite the table's data files (compaction) to remove them",
                    snapshot_id=snapshot_id,
                )
            if delete.file_format != FileFormat.PARQUET:
                raise IcebergSourceError(
                    f"IcebergSource cannot apply the {delete.file_format.name} delete file "
                    f"{delete.file_path} of {self.table!r} (deletion vectors are not read); it "
                    f"never ignores deletes: rewrite {data.file_path} (compaction) to remove them",
                    snapshot_id=snapshot_id,
                )
            deletes.append(delete.file_path)
        return IcebergSourceSplit(
            path=data.file_path,
            record_count=data.record_count,
            file_size=data.file_size_in_bytes,
            snapshot_id=snapshot_id,
            position_deletes=tuple(deletes),
            identity=() if table is None else self._identity(table, task),
        )

    def _scan_kwargs(self, table: Table) -> dict[str, Any]:
        return {
            "row_filter": self._planned_filter(table),
            "selected_fields": self.selected_fields or ("*",),
            "case_sensitive": self.case_sensitive,
        }

    def _planned_filter(self, table: Table) -> BooleanExpression:
        """The row filter with the table's current names of its columns (by field id).

        Raises:
            IcebergSourceError: A column of the filter was dropped from the table.
        """
        schema = table.schema()
        names = {}
        for name, field_id in self._filter_columns.items():
            current = schema.find_column_name(field_id)
            if current is None:
                raise IcebergSourceError(
                    f"IcebergSource row_filter {short_repr(self.row_filter)}: the column "
                    f"{name!r} (field id {field_id}) was dropped from {self.table!r} since the "
                    "source was made; make a new source (a stream: with a new source_id) with "
                    "a filter on the table's columns"
                )
            names[name] = current
        return with_names(self._scan_filter, names)

    def _plan_snapshot(self, table: Table, snapshot_id: int) -> list[IcebergSourceSplit]:
        scan = table.scan(snapshot_id=snapshot_id, **self._scan_kwargs(table))
        tasks = self._plan_files(table, scan, snapshot_id, added_only=False)
        return sorted((self._split(t, snapshot_id, table) for t in tasks), key=lambda s: s.path)

    def _plan_append(self, table: Table, snapshot: Snapshot) -> list[IcebergSourceSplit]:
        scan = table.incremental_append_scan(
            from_snapshot_id_exclusive=snapshot.parent_snapshot_id,
            to_snapshot_id_inclusive=snapshot.snapshot_id,
            **self._scan_kwargs(table),
        )
        tasks = self._plan_files(table, scan, snapshot.snapshot_id, added_only=True)
        splits = (self._split(t, snapshot.snapshot_id, table) for t in tasks)
        return sorted(splits, key=lambda s: s.path)

    def _plan_files(
        self, table: Table, scan: Any, snapshot_id: int, *, added_only: bool
    ) -> list[FileScanTask]:
        """``scan``'s file scan tasks; an equality-delete file pyiceberg refuses, named."""
        try:
            return list(scan.plan_files())
        except ValueError as error:
            refused = equality_delete_file(table, snapshot_id, added_only=added_only)
            if refused is None:
                raise
            delete, data = refused
            rows_of = (
                f"it deletes rows of {data}"
                if data is not None
                else "it deletes rows of the data files written before it in its partition"
            )
            raise IcebergSourceError(
                f"IcebergSource cannot apply the equality-delete file {delete} of "
                f"{self.table!r} in snapshot {snapshot_id} ({rows_of}); it never ignores "
                "deletes: rewrite the table's data files (compaction) to remove them",
                snapshot_id=snapshot_id,
            ) from error

    def _head(self, table: Table) -> Snapshot | None:
        if self.ref is None:
            return table.current_snapshot()
        return table.snapshot_by_name(self.ref)

    def _start_position(
        self, table: Table, head: Snapshot | None
    ) -> tuple[list[IcebergSourceSplit], int | None]:
        """The first splits and the position after them, by ``start``."""
        if self.start == "table":
            if head is None:
                return [], None
            return self._plan_snapshot(table, head.snapshot_id), head.snapshot_id
        if self.start == "earliest":
            return [], None
        if self.start == "latest":
            return [], None if head is None else head.parent_snapshot_id
        if isinstance(self.start, dt.datetime):
            after = _millis(self.start, "start", up=True)
            oldest = None
            kept = walk_new_snapshots(table, head, None, self.table)
            for snapshot in kept[::-1]:
                if snapshot.timestamp_ms < after:
                    break
                oldest = snapshot
            else:
                if oldest is not None and oldest.parent_snapshot_id is not None:
                    # Iceberg's oldestAncestorAfter: the snapshots before the oldest kept one
                    # were expired, and whether they were at or after the time is not known
                    raise IcebergSourceError(
                        f"IcebergSource start={self.start.isoformat()}: every snapshot "
                        f"{self.table!r} keeps is at or after that time, and the one before "
                        f"the oldest kept ({oldest.snapshot_id}), snapshot "
                        f"{oldest.parent_snapshot_id}, was expired: appends at or after the "
                        f"time may have been expired unread. Start from snapshot "
                        f"{oldest.snapshot_id} (start={oldest.snapshot_id}) or 'earliest' to "
                        "read from the oldest snapshot kept",
                        snapshot_id=oldest.parent_snapshot_id,
                    )
            if oldest is None:
                raise IcebergSourceError(
                    f"IcebergSource start={self.start.isoformat()}: {self.table!r} has no "
                    "snapshot at or after that time (Iceberg's INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP "
                    "needs one); start from 'latest' to read only appends to come"
                )
            return [], oldest.parent_snapshot_id
        assert isinstance(self.start, int)  # checked by monitor_continuously
        found = table.snapshot_by_id(self.start)
        if found is None:
            raise IcebergSourceError(
                f"IcebergSource start={self.start}: {self.table!r} has no snapshot "
                f"{self.start} (expired, or of another table)",
                snapshot_id=self.start,
            )
        lineage = walk_new_snapshots(table, head, None, self.table)
        if all(snapshot.snapshot_id != self.start for snapshot in lineage):
            followed = "the current snapshot" if self.ref is None else f"the ref {self.ref!r}"
            raise IcebergSourceError(
                f"IcebergSource start={self.start}: snapshot {self.start} of {self.table!r} is "
                f"not an ancestor of {followed} (it is on another branch, or was rolled back): "
                "the appends after it are not in the history the stream follows. Start from a "
                "snapshot of that history, or follow its branch with ref=",
                snapshot_id=self.start,
            )
        return [], found.parent_snapshot_id

    def _discover(self, position: IcebergEnumeratorState) -> Discovered:
        """The splits of every snapshot after ``position`` (see the enumerator's module)."""
        from pyiceberg.table.snapshots import Operation  # noqa: PLC0415  # optional extra

        table = self.load_table()
        self._check_same_table(table, position.table_uuid, "the stream's last checkpoint")
        head = self._head(table)
        if head is None and self.ref is not None:
            raise IcebergSourceError(
                f"IcebergSource on {self.table!r} follows the ref {self.ref!r}, which the table "
                f"no longer has (its refs: {sorted(table.refs())}); create it again, or start "
                "a new stream (a new source_id) on another ref",
                snapshot_id=position.last_snapshot_id,
            )
        splits: list[IcebergSourceSplit] = []
        last = position.last_snapshot_id
        if not position.started:
            splits, last = self._start_position(table, head)
        new = walk_new_snapshots(table, head, last, self.table)
        lost = new[0].parent_snapshot_id if new else None
        if position.started and last is None and lost is not None:
            # a stream that started on an empty table: every snapshot since is its to read
            raise IcebergSourceError(
                f"IcebergSource on {self.table!r}: the stream started when the table had no "
                f"snapshot, and snapshot {lost}, an ancestor of the current one, was expired "
                "before the stream read it: appends may have been expired unread. Keep "
                "snapshots longer than a stream may lag (expire_snapshots older_than), and "
                "start a new stream (a new source_id) to go on",
                snapshot_id=lost,
            )
        for snapshot in new:
            operation = None if snapshot.summary is None else snapshot.summary.operation
            deletes = added_delete_files(snapshot) if operation == Operation.APPEND else 0
            if operation == Operation.APPEND and not deletes:
                splits += self._plan_append(table, snapshot)
            elif operation == Operation.REPLACE:
                continue  # a compaction: the same rows in other files
            elif not self.skip_overwrites:
                kind = "an unknown operation" if operation is None else repr(operation.value)
                if deletes:
                    kind = f"an 'append' that also adds {deletes} delete file(s)"
                raise IcebergSourceError(
                    f"IcebergSource reads appends, and snapshot {snapshot.snapshot_id} of "
                    f"{self.table!r} is {kind}: "
                    "it removes or rewrites rows a stream of appends cannot retract. Set "
                    "monitor_continuously(..., skip_overwrites=True) to skip such snapshots "
                    "(their added files too), or start a new stream after it",
                    snapshot_id=snapshot.snapshot_id,
                )
        return Discovered(
            position.started,
            position.last_snapshot_id,
            tuple(splits),
            last if head is None else head.snapshot_id,
            str(table.metadata.table_uuid),
        )

    # --- FLIP-27 -----------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """``BOUNDED`` unless `monitor_continuously` was asked."""
        if self.monitor_interval is None:
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    def get_produced_type(self) -> pa.Schema:
        """The table's schema (or its selected fields) as Arrow; nullable unless ``required``."""
        return self._produced

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[IcebergSourceSplit]
    ) -> IcebergSplitEnumerator:
        """Bounded: plan the snapshot's file scan tasks now. Continuous: discover every interval."""
        if self.monitor_interval is not None:
            return self.restore_enumerator(enum_context, IcebergEnumeratorState())
        table = self.load_table()
        snapshot = self._resolve_snapshot(table)
        splits = [] if snapshot is None else self._plan_snapshot(table, snapshot.snapshot_id)
        state = IcebergEnumeratorState(
            remaining=tuple(splits),
            started=True,
            last_snapshot_id=None if snapshot is None else snapshot.snapshot_id,
            table_uuid=str(table.metadata.table_uuid),
        )
        return self.restore_enumerator(enum_context, state)

    def restore_enumerator(
        self,
        enum_context: SplitEnumeratorContext[IcebergSourceSplit],
        checkpoint: IcebergEnumeratorState,
    ) -> IcebergSplitEnumerator:
        """Go on from ``checkpoint``: its splits and its last snapshot read."""
        if self.monitor_interval is None:
            return IcebergSplitEnumerator(enum_context, checkpoint, planner=None)
        return IcebergSplitEnumerator(
            enum_context,
            checkpoint,
            planner=self._discover,
            interval_ms=max(1, int(self.monitor_interval * 1000)),
        )

    def create_reader(self, reader_context: SourceReaderContext) -> IcebergSourceReader:
        """A reader that reads one data file after another, as Arrow batches."""
        return IcebergSourceReader(reader_context, self._read)

    def _read(self, split: IcebergSourceSplit) -> Iterator[pa.RecordBatch]:
        batches = read_data_file(
            _file_io(self._io_properties, self._location),
            split.path,
            projection=self._projection,
            produced=self._produced,
            row_filter=self._filter,
            position_deletes=split.position_deletes,
            skip=split.records_read,
            batch_rows=self.batch_rows,
            name_mapping=self._name_mapping,
            identity=dict(split.identity),
            current_name_mapping=lambda: self.load_table().name_mapping(),
        )
        return until_stop(split, batches)

    # --- sinkv2.source.SupportsNativeRead ------------------------------------------------------

    def native_read(
        self, splits: Sequence[IcebergSourceSplit]
    ) -> NativeRead | NativeReadUnavailable:
        """The data files for the engine's Parquet reader, or why it cannot read them.

        See `reference_sinks.iceberg._source_native`: no row filter, no deletes,
        splits at record 0, local files whose columns match the table by name or
        by field id, with the table's types.
        """
        from reference_sinks.iceberg._source_native import plan_native_read  # noqa: PLC0415

        return plan_native_read(
            splits,
            io=_file_io(self._io_properties, self._location),
            projection=self._projection,
            produced=self._produced,
            has_row_filter=self._filter is not None,
            name_mapping=self._name_mapping,
        )

    def get_split_serializer(self) -> AttrsMsgpackSerializer[IcebergSourceSplit]:
        """Splits, positions included, as msgpack."""
        return split_serializer()

    def get_enumerator_checkpoint_serializer(
        self,
    ) -> AttrsMsgpackSerializer[IcebergEnumeratorState]:
        """The enumerator's checkpoint as msgpack."""
        return enumerator_state_serializer()

    # --- sinkv2.source.SupportsEndPositions ---------------------------------------------------

    def end_positions(self, splits: Sequence[IcebergSourceSplit]) -> Sequence[object | None]:
        """A data file's end is its record count; with a row filter there is none.

        The count is the manifest's ``record_count``; a file with position deletes is
        counted (its delete files read on the driver) only when a record limit cuts it
        (`reference_sinks._row_cut.COUNT_WHEN_CUT`). With a ``row_filter`` the records
        a file emits are not known before it is read: ``None``, each file is read whole
        and not counted by ``maxRecordsPerTrigger``.
        """
        if self._filter is not None:
            return [None] * len(splits)
        return [_end(split) for split in splits]

    def uncounted_splits(self) -> str | None:
        """Why `end_positions` gives no ends (`sinkv2.source.SupportsUncountedSplits`).

        ``None`` without a ``row_filter``; with one, the clause an engine's warning
        names: each data file is read whole, the records the filter keeps unknown
        until it is read.
        """
        if self._filter is None:
            return None
        return (
            f"it reads with row_filter {short_repr(self.row_filter)}, so the records a data "
            "file gives are not known before it is read: each data file is one split, read whole"
        )

    def cut_split(
        self, split: IcebergSourceSplit, end: object, max_records: int | None
    ) -> SplitCut[IcebergSourceSplit]:
        """The data file from its position to at most ``max_records`` records on, and the rest.

        Positions count records after deletes, as the reader emits them; a cut's read
        stops at one (`IcebergSourceSplit.stop`). The same split and end give the same
        cut, so a replay reads the same rows.

        Raises:
            SourceContractError: ``end`` is not one `end_positions` gives, or lies
                before the split's position.
            DataFileReadError: A position-delete file cannot be read.
        """
        return cut_counted(split, end, max_records, self._live_records, source="IcebergSource")

    def _live_records(self, split: IcebergSourceSplit) -> int:
        """The records ``split``'s data file holds after its position deletes."""
        io = _file_io(self._io_properties, self._location)
        deleted = deleted_positions(io, split.path, split.position_deletes)
        return split.record_count - int((deleted < split.record_count).sum())


def _load_table(catalog: Catalog, table: str) -> Table:
    """``table`` from ``catalog``; a name it does not have, or cannot be, is named."""
    from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415  # optional extra

    try:
        return catalog.load_table(table)
    except NoSuchTableError as error:
        raise SinkConfigurationError(
            f"Iceberg table {table!r} does not exist in catalog {catalog.name!r}; create it "
            "first, or name an existing table"
        ) from error
    except ValueError as error:  # pyiceberg's identifier checks: an empty part, for one
        raise SinkConfigurationError(
            f"IcebergSource table {table!r} is not an Iceberg table name: {error}; name it "
            "'namespace.table'"
        ) from error


def _end(split: IcebergSourceSplit) -> object:
    if split.records is not None:
        return split.records
    return COUNT_WHEN_CUT if split.position_deletes else split.record_count
