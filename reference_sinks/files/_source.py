"""`FileSource`: Parquet, JSON-lines or CSV files as a FLIP-27 source, bounded or continuous.

Over 450 lines because `FileSource` is one configured class: its options, each
checked eagerly with a message naming it, and the FLIP-27 methods that use them;
listing, splits, formats, the enumerator and the reader live in their own modules.
"""

from __future__ import annotations

import datetime as dt
import os
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, final

import pyarrow as pa
import pyarrow.fs as pafs

from reference_sinks._arrow_types import rebuild_type
from reference_sinks._row_cut import COUNT_WHEN_CUT, cut_counted, until_stop
from reference_sinks.files._location import resolve_location
from reference_sinks.files._source_csv_infer import spark_csv_schema
from reference_sinks.files._source_dead_letters import DeadLetters
from reference_sinks.files._source_enumerator import Discovery, FileSplitEnumerator, make_cleaner
from reference_sinks.files._source_formats import (
    SOURCE_FORMATS,
    CsvOptions,
    FileReadError,
    SourceFormat,
    infer_schema,
    parquet_records,
    read_split,
)
from reference_sinks.files._source_json_infer import spark_json_schema
from reference_sinks.files._source_listing import (
    DEFAULT_EXTENSIONS,
    FileStatus,
    empty_partition_value,
    list_files,
    make_splits,
    partition_scalar,
    partition_type,
)
from reference_sinks.files._source_native import plan_native_read
from reference_sinks.files._source_reader import FileSourceReader
from reference_sinks.files._source_split import (
    FileEnumeratorState,
    FileSourceSplit,
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
from sinkv2.text import describe

__all__ = ["CleanSource", "FileSource"]

CleanSource = Literal["off", "archive", "delete"]

_MAX_SECONDS: Final = 100 * 365 * 24 * 3600.0
"""Intervals and ages up to a century; longer ones (or infinity) are a mistake."""

DEFAULT_SPLIT_BYTES: Final = 128 * 1024 * 1024
"""Parquet files larger than this are read as several splits (Spark's ``maxPartitionBytes``)."""


def _nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column and struct field nullable, as Spark reads files."""
    return pa.schema(
        [
            f.with_nullable(True).with_type(
                rebuild_type(f.type, struct_field=lambda field: field.with_nullable(True))
            )
            for f in schema
        ]
    )


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SinkConfigurationError(
            f"FileSource {name} must be a positive int (got {describe(value)}); "
            "set it to at least 1"
        )
    return value


def _seconds(name: str, value: object) -> float:
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds < _MAX_SECONDS
    ):
        raise SinkConfigurationError(
            f"FileSource {name} must be a positive number of seconds or a timedelta, finite and "
            f"at most a century (got {describe(value)}); e.g. 10 or datetime.timedelta(days=7)"
        )
    return float(seconds)


@final
class FileSource:
    """Files in a directory as a FLIP-27 source (Flink's ``FileSource``): Parquet, JSON lines, CSV.

    Bounded (the default): the files under ``path`` when the job starts, each read
    once. `monitor_continuously` makes it ``CONTINUOUS_UNBOUNDED``: new files are
    found every interval, each read exactly once (the processed paths are in the
    enumerator's checkpoint), with an optional discovery cut-off and clean-up. The
    rules for which files count, half-written files, the discovery cut-off and the
    clean-up are on the docs page (``FileSource`` beside ``FileSink``); in short:
    hidden names (``.``/``_`` prefixes, but not ``_key=value`` partition directories;
    ``.tmp``, ``.inprogress``) are never read, a
    continuously monitored file is read once it is one interval old or two listings
    saw it unchanged, and processed files are archived or deleted only after a
    completed checkpoint holds all of their records. Empty files hold no rows.

    Records are Arrow batches of `get_produced_type`: the data columns (``schema``,
    or inferred with Spark's rules: Parquet from the first file by path, JSON lines
    and CSV with ``infer_schema`` from every file, merged), then the partition
    columns of ``key=value`` directories (as Spark orders them).

    Args:
        path: A directory (read recursively) or one file: a local path or a URI
            pyarrow understands (``s3://``, ``gs://``, ``hdfs://``, ``file://``).
        format: ``"parquet"``, ``"jsonl"`` or ``"csv"``.
        schema: The data columns' ``pyarrow.Schema``; ``None`` infers it from the
            first non-empty file, or for JSON lines from every file, merged as Spark
            merges (required when there is none).
        partition_columns: The partition columns and their types, in order; ``None``
            infers them from the ``key=value`` directories listed at construction
            (integers, longer integers as decimals, doubles, dates, else strings, as
            Spark infers them); ``{}`` for none.
        filesystem: A ``pyarrow.fs.FileSystem``; ``path`` is then a path inside it.
        csv: How CSV files are read (`CsvOptions`).
        split_bytes: Parquet files larger than this are cut into runs of row groups.
        batch_rows: Rows per emitted Arrow batch, at most (large batches cost Spark less
            per row; a restored split still resumes at its exact row).
        extensions: File name endings to read; default: the format's usual ones.
        dead_letter_dir: Where records that do not parse go (JSON lines and CSV: the
            record, Parquet: the whole file whose footer cannot be read), each with a
            ``.bad.json`` sidecar saying why, while the rest is read; a local path or
            URI outside ``path``. ``None`` (default): such input fails the read,
            naming the file, line and column.

    Raises:
        SinkConfigurationError: A bad argument, named; an empty directory without a
            ``schema``.
        FileReadError: The first file, read for the schema, does not parse.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: SourceFormat = "parquet",  # the name users expect (Spark's)
        *,
        schema: pa.Schema | None = None,
        partition_columns: Mapping[str, pa.DataType] | None = None,
        filesystem: pafs.FileSystem | None = None,
        csv: CsvOptions | None = None,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        batch_rows: int = 65_536,
        extensions: Sequence[str] | None = None,
        dead_letter_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str) or not path.strip():
            raise SinkConfigurationError(
                f"FileSource path must be a non-empty str or os.PathLike (got {describe(path)}); "
                "pass a directory such as '/data/in' or a URI such as 's3://bucket/in'"
            )
        self.path = path
        if format not in SOURCE_FORMATS:
            raise SinkConfigurationError(
                f"FileSource format must be one of {list(SOURCE_FORMATS)} (got {describe(format)})"
            )
        self.format: SourceFormat = format
        if filesystem is not None and not isinstance(filesystem, pafs.FileSystem):
            raise SinkConfigurationError(
                f"FileSource filesystem must be a pyarrow.fs.FileSystem or None (got "
                f"{describe(filesystem)})"
            )
        self.filesystem = filesystem
        if csv is not None and not isinstance(csv, CsvOptions):
            raise SinkConfigurationError(
                f"FileSource csv must be a CsvOptions or None (got {describe(csv)})"
            )
        self.csv = csv or CsvOptions()
        self.split_bytes = _positive_int("split_bytes", split_bytes)
        self.batch_rows = _positive_int("batch_rows", batch_rows)
        if extensions is None:
            extensions = DEFAULT_EXTENSIONS[format]
        if (
            isinstance(extensions, str)
            or not isinstance(extensions, Sequence)
            or not extensions
            or not all(isinstance(e, str) and e for e in extensions)
        ):
            raise SinkConfigurationError(
                f"FileSource extensions must be a list of name endings such as ['.parquet'], not "
                f"empty (got {describe(extensions)}); None reads the format's usual ones"
            )
        self.extensions = tuple(extensions)
        if isinstance(dead_letter_dir, os.PathLike):
            dead_letter_dir = os.fspath(dead_letter_dir)
        if dead_letter_dir is not None:
            if not isinstance(dead_letter_dir, str) or not dead_letter_dir.strip():
                raise SinkConfigurationError(
                    f"FileSource dead_letter_dir must be a non-empty str, os.PathLike or None "
                    f"(got {describe(dead_letter_dir)})"
                )
            self._outside(dead_letter_dir, "dead_letter_dir", "dead letters would be listed")
            self._not_above(dead_letter_dir, "dead_letter_dir", "a dead letter")
        self.dead_letter_dir: str | None = dead_letter_dir
        self.max_file_age: float | None = None
        self.clean_source: CleanSource = "off"
        self.archive_dir: str | None = None
        self.monitor_interval: float | None = None
        fs, root = self.resolve()
        listed = self._list(fs, root)
        self._data_schema = _nullable(self._resolve_schema(fs, listed, schema))
        self._partitions = self._resolve_partitions(listed, partition_columns)
        self._produced = pa.schema(
            list(self._data_schema)
            + [pa.field(name, kind) for name, kind in self._partitions.items()]
        )

    # --- configuration -----------------------------------------------------------------------

    def monitor_continuously(
        self,
        interval: float | dt.timedelta,
        *,
        max_file_age: float | dt.timedelta | None = None,
        clean_source: CleanSource = "off",
        archive_dir: str | os.PathLike[str] | None = None,
    ) -> FileSource:
        """This source, continuous: list ``path`` every ``interval`` (seconds or a timedelta).

        Returns a new source (Flink's ``monitorContinuously`` on the builder); this one
        is unchanged. The other options exist for continuous sources only, as Spark's
        file stream options do.

        Args:
            interval: Time between two listings.
            max_file_age: Ignore files modified more than this (seconds or a
                ``timedelta``) before the newest file seen; processed paths older than
                that leave the processed-paths set, which holds then only files
                modified within ``max_file_age`` of the newest (Spark's ``maxFileAge``).
                ``None`` (default): every file counts, and the set keeps every path.
            clean_source: ``"off"`` (default), ``"archive"`` (move processed files to
                ``archive_dir``) or ``"delete"``; a file is cleaned once a completed
                checkpoint holds all of its records (Spark's ``cleanSource``). On
                Spark, the source coordinator tells the enumerator once the
                micro-batch that read a file is committed
                (`sinkv2.source.SupportsFinishedSplits`).
            archive_dir: Where ``"archive"`` moves files, their path below ``path``
                kept; must be outside ``path``.

        Raises:
            SinkConfigurationError: A bad argument, named.
        """
        seconds = _seconds("monitor_continuously interval", interval)
        age = None if max_file_age is None else _seconds("max_file_age", max_file_age)
        if clean_source not in ("off", "archive", "delete"):
            raise SinkConfigurationError(
                f"FileSource clean_source must be 'off', 'archive' or 'delete' (got "
                f"{describe(clean_source)})"
            )
        if isinstance(archive_dir, os.PathLike):
            archive_dir = os.fspath(archive_dir)
        if archive_dir is not None and (
            not isinstance(archive_dir, str) or not archive_dir.strip()
        ):
            raise SinkConfigurationError(
                f"FileSource archive_dir must be a non-empty str, os.PathLike or None (got "
                f"{describe(archive_dir)}); pass a directory beside path, e.g. '/data/done'"
            )
        if (clean_source == "archive") != (archive_dir is not None):
            raise SinkConfigurationError(
                "FileSource archive_dir is needed with clean_source='archive' and only then (got "
                f"clean_source={clean_source!r}, archive_dir={archive_dir!r})"
            )
        if archive_dir is not None:
            self._outside(archive_dir, "archive_dir", "archived files would be listed again")
            self._check_archive(archive_dir)
        other = _copy(self)
        other.monitor_interval = seconds
        other.max_file_age = age
        other.clean_source = clean_source
        other.archive_dir = archive_dir
        return other

    def _inside(self, location: str, what: str = "archive_dir") -> str:
        return resolve_location(location, self.filesystem, what=f"FileSource {what}")[1]

    def _outside(self, location: str, what: str, why: str) -> None:
        _, root = self.resolve()
        target = self._inside(location, what)
        if target == root or target.startswith(f"{root.rstrip('/')}/"):
            raise SinkConfigurationError(
                f"FileSource {what} {location!r} is inside path {self.path!r}: {why}; "
                "put it outside the source's directory"
            )

    def _check_archive(self, archive_dir: str) -> None:
        """Refuse an ``archive_dir`` the clean-up could not move files into safely.

        It must be on the source's filesystem (files are moved, not copied), and not
        above ``path``: a file ``<path>/<rel>`` goes to ``<archive_dir>/<rel>``, which
        lies inside ``path`` whenever ``rel`` starts with ``path``'s place below
        ``archive_dir``, and would be read again as a new file.
        """
        fs = self.resolve()[0]
        archive_fs = resolve_location(archive_dir, self.filesystem, what="FileSource archive_dir")[
            0
        ]
        if archive_fs.type_name != fs.type_name:
            raise SinkConfigurationError(
                f"FileSource archive_dir {archive_dir!r} is on the {archive_fs.type_name!r} "
                f"filesystem and path {self.path!r} on {fs.type_name!r}: the clean-up moves "
                "files within one filesystem; put the archive beside path"
            )
        self._not_above(archive_dir, "archive_dir", "a file archived")

    def _not_above(self, location: str, what: str, written: str) -> None:
        """Refuse a ``location`` above ``path`` on its filesystem.

        ``<location>/<rel>`` for a file ``<path>/<rel>`` lies inside ``path`` whenever
        ``rel`` starts with ``path``'s place below ``location``.
        """
        fs, root = self.resolve()
        other_fs, other = resolve_location(location, self.filesystem, what=f"FileSource {what}")
        if other_fs.type_name != fs.type_name:
            return
        if other == "/" or root.startswith(f"{other}/"):
            raise SinkConfigurationError(
                f"FileSource {what} {location!r} holds path {self.path!r}: {written} with its "
                "path below path kept could land inside path and be read again; put it beside "
                "path, not above it (e.g. '/data/in' and '/data/done')"
            )

    def _dead_letters(self) -> DeadLetters | None:
        if self.dead_letter_dir is None:
            return None
        fs, directory = resolve_location(
            self.dead_letter_dir, self.filesystem, what="FileSource dead_letter_dir"
        )
        return DeadLetters(fs, directory, self.resolve()[1])

    def resolve(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the root path inside it.

        Raises:
            SinkConfigurationError: ``path`` is not a path or URI pyarrow knows.
        """
        return resolve_location(self.path, self.filesystem, what="FileSource path")

    def _list(self, fs: pafs.FileSystem, root: str) -> list[FileStatus]:
        single = fs.get_file_info(root).type == pafs.FileType.File
        return list_files(fs, root, self.extensions, single_file=single)

    def _resolve_schema(
        self, fs: pafs.FileSystem, listed: list[FileStatus], schema: pa.Schema | None
    ) -> pa.Schema:
        if schema is not None:
            if not isinstance(schema, pa.Schema):
                raise SinkConfigurationError(
                    f"FileSource schema must be a pyarrow.Schema or None (got {describe(schema)})"
                )
            return schema
        first = next((status for status in listed if status.size > 0), None)
        if first is None and fs.get_file_info(self.resolve()[1]).type == pafs.FileType.NotFound:
            raise SinkConfigurationError(
                f"FileSource path {self.path!r} does not exist, so no schema can be inferred; "
                "fix the path, or pass schema=pyarrow.schema([...]) for a directory made later"
                + _no_globs(self.path)
            )
        if first is None:  # empty files hold no schema; Spark's reader skips them too
            empty = f" ({len(listed)} empty)" if listed else ""
            raise SinkConfigurationError(
                f"FileSource found no non-empty {self.format} files{empty} under {self.path!r} "
                f"(names ending {list(self.extensions)}, hidden ones skipped) to infer the "
                "schema from; pass schema=pyarrow.schema([...])"
            )
        inferred = self._inferred(fs, [status for status in listed if status.size > 0])
        if self.format == "jsonl":  # Spark infers JSON from every record, and merges
            return spark_json_schema(inferred)
        if self.format == "csv" and self.csv.infer_schema:  # so does it CSV: by column name
            return spark_csv_schema(inferred)
        return next(iter(inferred))

    def _inferred(self, fs: pafs.FileSystem, listed: list[FileStatus]) -> list[pa.Schema]:
        """Each file's schema (only the first's for Parquet and CSV's header).

        With a ``dead_letter_dir``, a file that does not parse is passed over (its read
        sets it aside, or names it); when none parses, the first one's error is raised.

        Raises:
            FileReadError: A file does not parse (without a ``dead_letter_dir``), or none.
        """
        every = self.format == "jsonl" or (self.format == "csv" and self.csv.infer_schema)
        found: list[pa.Schema] = []
        failure: FileReadError | None = None
        for status in listed:
            try:
                found.append(infer_schema(fs, status.path, self.format, self.csv))
            except FileReadError as error:
                if self.dead_letter_dir is None:
                    raise
                failure = failure or error
                continue
            if not every:
                break
        if not found and failure is not None:
            raise failure
        return found

    def _resolve_partitions(
        self, listed: list[FileStatus], given: Mapping[str, pa.DataType] | None
    ) -> dict[str, pa.DataType]:
        for status in listed:  # Spark refuses 'k=' (EMPTY_PARTITION_COLUMN_VALUE)
            for key, value in status.partition:
                if not value:
                    raise empty_partition_value(key, status.path)
        if given is not None:
            if not isinstance(given, Mapping) or not all(
                isinstance(k, str) and isinstance(v, pa.DataType) for k, v in given.items()
            ):
                raise SinkConfigurationError(
                    f"FileSource partition_columns must map column names to pyarrow types (got "
                    f"{describe(given)}); e.g. {{'day': pyarrow.date32()}}, or {{}} for none"
                )
            partitions = dict(given)
        else:
            values: dict[str, list[str]] = {}
            for status in listed:
                for key, value in status.partition:
                    values.setdefault(urllib.parse.unquote(key), []).append(value)
            partitions = {key: partition_type(found) for key, found in values.items()}
        clash = [name for name in partitions if name in self._data_schema.names]
        if clash:
            raise SinkConfigurationError(
                f"FileSource: {clash} are both data columns and partition directories under "
                f"{self.path!r}; rename one, or pass partition_columns={{}} to ignore directories"
            )
        return partitions

    def __repr__(self) -> str:
        mode = "" if self.monitor_interval is None else f", monitor={self.monitor_interval:g}s"
        return f"FileSource({self.path!r}, format={self.format!r}{mode})"

    # --- FLIP-27 -----------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """``BOUNDED`` unless `monitor_continuously` was asked."""
        if self.monitor_interval is None:
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    def get_produced_type(self) -> pa.Schema:
        """The data columns, then the partition columns; every column nullable."""
        return self._produced

    def _splitter(self, fs: pafs.FileSystem) -> Any:
        def split(status: FileStatus) -> list[FileSourceSplit]:
            return make_splits(fs, status, self.format, self.split_bytes)

        return split

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[FileSourceSplit]
    ) -> FileSplitEnumerator:
        """Bounded: list now and hand the splits out. Continuous: list every interval."""
        fs, root = self.resolve()
        if self.monitor_interval is not None:
            return self.restore_enumerator(enum_context, FileEnumeratorState())
        if fs.get_file_info(root).type == pafs.FileType.NotFound:
            raise SinkConfigurationError(
                f"FileSource path {self.path!r} does not exist: a bounded source reads the files "
                "there when the job starts (as spark.read does, it fails rather than read "
                "nothing); fix the path, or monitor_continuously() to wait for files"
                + _no_globs(self.path)
            )
        splitter = self._splitter(fs)
        splits = [split for status in self._list(fs, root) for split in splitter(status)]
        return self.restore_enumerator(enum_context, FileEnumeratorState(remaining=tuple(splits)))

    def restore_enumerator(
        self,
        enum_context: SplitEnumeratorContext[FileSourceSplit],
        checkpoint: FileEnumeratorState,
    ) -> FileSplitEnumerator:
        """Go on from ``checkpoint``: its splits, its processed paths, its clean-up."""
        fs, root = self.resolve()
        discovery = None
        if self.monitor_interval is not None:
            max_age = None if self.max_file_age is None else int(self.max_file_age * 1e9)
            discovery = Discovery(
                lambda: self._list(fs, root),
                self._splitter(fs),
                max(1, int(self.monitor_interval * 1000)),
                max_age,
            )
        cleaner = None
        if self.clean_source != "off":
            archive = None if self.archive_dir is None else self._inside(self.archive_dir)
            cleaner = make_cleaner(fs, root, archive)
        return FileSplitEnumerator(enum_context, checkpoint, discovery=discovery, cleaner=cleaner)

    def create_reader(self, reader_context: SourceReaderContext) -> FileSourceReader:
        """A reader that reads one split after another, as Arrow batches."""
        return FileSourceReader(
            reader_context, self._read, report_finished=self.clean_source != "off"
        )

    def _read(self, split: FileSourceSplit) -> Iterator[pa.RecordBatch]:
        fs, _ = self.resolve()
        batches = until_stop(
            split,
            read_split(
                fs,
                split,
                schema=self._data_schema,
                file_format=self.format,
                csv=self.csv,
                batch_rows=self.batch_rows,
                dead_letters=self._dead_letters(),
            ),
        )
        if not self._partitions:
            for batch in batches:
                yield batch.cast(self._produced) if batch.schema != self._produced else batch
            return
        raw = {urllib.parse.unquote(key): (key, value) for key, value in split.partition}
        scalars = [
            pa.scalar(None, kind)
            if name not in raw
            else partition_scalar(raw[name][1], kind, split.path, raw[name][0])
            for name, kind in self._partitions.items()
        ]
        for batch in batches:
            columns = list(batch.columns) + [
                pa.repeat(scalar, batch.num_rows) for scalar in scalars
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=self._produced)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[FileSourceSplit]:
        """Splits, positions included, as msgpack."""
        return split_serializer()

    def get_enumerator_checkpoint_serializer(self) -> AttrsMsgpackSerializer[FileEnumeratorState]:
        """The enumerator's checkpoint as msgpack."""
        return enumerator_state_serializer()

    # --- sinkv2.source.SupportsEndPositions ---------------------------------------------------

    def end_positions(self, splits: Sequence[FileSourceSplit]) -> Sequence[object | None]:
        """A Parquet split's end is its row count; a JSON lines or CSV split has none.

        A Parquet split counted at listing (a large file's row groups) ends at its
        count; another is counted from its footer only when a record limit cuts it
        (`reference_sinks._row_cut.COUNT_WHEN_CUT`). JSON lines and CSV files are not
        counted (that is a read of the whole file on the driver): ``None``, each is
        read whole and not counted by ``maxRecordsPerTrigger``.
        """
        if self.format != "parquet":
            return [None] * len(splits)
        return [COUNT_WHEN_CUT if split.records is None else split.records for split in splits]

    def uncounted_splits(self) -> str | None:
        """Why `end_positions` gives no ends (`sinkv2.source.SupportsUncountedSplits`).

        ``None`` for Parquet; for JSON lines and CSV the clause an engine's warning
        names: each file is read whole, its records unknown until it is read.
        """
        if self.format == "parquet":
            return None
        kind = "JSON lines" if self.format == "jsonl" else "CSV"
        return (
            f"its {kind} files are read whole, one split per file: their records are not "
            "known before a file is read (counting them would read every file on the driver)"
        )

    def cut_split(
        self, split: FileSourceSplit, end: object, max_records: int | None
    ) -> SplitCut[FileSourceSplit]:
        """The split from its position to at most ``max_records`` rows on, and the rest.

        A cut's read stops at a row (`FileSourceSplit.stop`); the same split and end
        give the same cut, so a replay reads the same rows.

        Raises:
            SourceContractError: ``end`` is not one `end_positions` gives, or lies
                before the split's position.
            FileReadError: The footer does not parse (without a dead_letter_dir).
        """
        fs, _ = self.resolve()
        return cut_counted(
            split,
            end,
            max_records,
            lambda whole: parquet_records(fs, whole, dead_letters=self.dead_letter_dir is not None),
            source="FileSource",
        )

    def native_read(self, splits: Sequence[FileSourceSplit]) -> NativeRead | NativeReadUnavailable:
        """Whole local Parquet files for Spark's reader (`SupportsNativeRead`): _source_native."""
        if self.dead_letter_dir is not None:
            return NativeReadUnavailable(
                "FileSource has a dead_letter_dir: its own readers set unreadable files "
                "aside, which Spark's reader cannot"
            )
        return plan_native_read(
            splits,
            (self.format, self.filesystem, *self.resolve()),
            self._data_schema,
            self._partitions,
        )


def _no_globs(path: str) -> str:
    """A hint for a path that does not exist because it is a glob pattern (Spark's are)."""
    if not set("*?[{").intersection(path):
        return ""
    return (
        ". It looks like a glob pattern, which FileSource does not expand: give the "
        "directory (read recursively) and extensions= for the names to read"
    )


def _copy(source: FileSource) -> FileSource:
    """A shallow copy of ``source`` (its configuration is immutable values)."""
    other = object.__new__(FileSource)
    other.__dict__.update(source.__dict__)
    return other
