"""Reading a `FileSource` split as Arrow batches: Parquet, JSON lines, CSV.

Over 450 lines because the three formats share one set of type rules (below) and
one path for bad input - fail naming the file, line and column, or set the record
aside in the dead-letter directory (``_source_dead_letters``) - which each reader
takes at its own point of failure.

Types, as Spark's readers give them for the same files:

- Parquet: the file's own types (FileSink's and Spark's files read back as written);
  Spark's ``timestamp`` columns stored as INT96 are in UTC, as Spark's metadata in
  the file says.
  Columns of the schema a file lacks are nulls (a column added later, as Spark's
  ``mergeSchema`` reads it); a column of another type is cast, or the read fails
  naming the file and the column.
- JSON lines with a schema given: the values as FileSink writes them (its type table)
  are read back, and so are Spark's own: decimals from their digit strings or
  numbers, dates and timestamps from ISO 8601 strings, binaries from base64
  strings. Nested dates, timestamps and binaries are read as pyarrow parses them.
  Maps have no pyarrow JSON type: read such files with Spark, or as strings.
- JSON lines inferred from every file, merged as Spark merges (``_source_json_infer``;
  ``inferTimestamp`` off): numbers are ``int64`` or ``double``, ISO dates and
  timestamps stay strings, a column of nulls only is a string, fields sorted by name.
- CSV: every column a string (Spark's default, ``inferSchema`` off), an empty field
  null, and a quoted empty one (``""``) too, as Spark reads it; with
  `CsvOptions.infer_schema`, Spark's inference over every file, merged as Spark
  merges (``_source_csv_infer``): ``int``, ``long``, ``decimal``, ``double``,
  ``date``, ``timestamp`` (UTC), ``boolean`` or ``string``. A typed CSV column is
  parsed as a string and converted, taking Spark's spellings (``+5``, ``1d``,
  ``TRUE``, ``2024-01``) as well as pyarrow's.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Literal, final

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.fs as pafs
import pyarrow.json as pjson
import pyarrow.parquet as pq

from reference_sinks._arrow_types import rebuild_type
from reference_sinks.files._source_csv_infer import infer_strings, spark_value, spark_values
from reference_sinks.files._source_csv_quotes import QuoteCounter, unclosed_quote
from reference_sinks.files._source_dead_letters import (
    BadRecord,
    DeadLetters,
    Record,
    csv_records,
    json_column,
    json_records,
    sift,
)
from reference_sinks.files._source_json_infer import (
    PAST_LONG,
    infer_records,
    spark_json_types,
    stringify_non_strings,
)
from reference_sinks.files._source_json_nonfinite import (
    NON_FINITE_MARK,
    cast_back,
    floats_as_text,
    has_floats,
    text_schema,
)
from reference_sinks.files._source_split import FileSourceSplit
from reference_sinks.files._source_variant import (
    VARIANT,
    MalformedVariant,
    spark_variants,
    stored_variant,
)
from sinkv2.errors import SinkConfigurationError, SinkV2Error
from sinkv2.text import describe

__all__ = [
    "SOURCE_FORMATS",
    "CsvOptions",
    "FileReadError",
    "SourceFormat",
    "infer_schema",
    "parquet_records",
    "read_split",
]

SourceFormat = Literal["parquet", "jsonl", "csv"]
SOURCE_FORMATS: Final = ("parquet", "jsonl", "csv")

_BLOCK_BYTES: Final = 8 << 20


class FileReadError(SinkV2Error, ValueError):
    """A file `FileSource` reads does not parse, or holds a value of another type.

    The message names the file, and the line and column when the problem is one
    record's or one value's; the task fails rather than skip a record (unless the
    source has a ``dead_letter_dir``, where such records go instead).

    Attributes:
        path: The file.
        column: The column, when the problem is one column's value; else ``None``.
        line: The record's first line (1-based), for JSON lines and CSV; else ``None``.
    """

    def __init__(
        self, message: str, *, path: str, column: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.column = column
        self.line = line


def _one_char(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or len(value) != 1 or value in "\r\n":
        raise SinkConfigurationError(
            f"CsvOptions.{attribute.name} must be a one-character str other than a line "
            f"break (got {describe(value)})"
        )


def _boolean(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise SinkConfigurationError(
            f"CsvOptions.{attribute.name} must be a bool (got {describe(value)}); "
            "pass True or False"
        )


@final
@attrs.frozen(kw_only=True)
class CsvOptions:
    """How `FileSource` reads CSV files.

    Attributes:
        header: The first line of each file names the columns (Spark's ``header``;
            Spark's default is ``False``, most files have one). Without it the
            columns are ``_c0``, ``_c1``, ... as Spark names them.
        delimiter: The field separator (Spark's ``sep``).
        quote_char: The quote character (Spark's ``quote``).
        infer_schema: Infer the columns' types from every file as Spark's
            ``inferSchema`` does (from each file's first 8 MiB); ``False`` (Spark's
            default): every column is a string.
    """

    header: bool = attrs.field(default=True, validator=_boolean)
    delimiter: str = attrs.field(default=",", validator=_one_char)
    quote_char: str = attrs.field(default='"', validator=_one_char)
    infer_schema: bool = attrs.field(default=False, validator=_boolean)

    def __attrs_post_init__(self) -> None:
        if self.delimiter == self.quote_char:
            raise SinkConfigurationError(
                f"CsvOptions.delimiter and quote_char are both {self.delimiter!r}: every "
                "field would be read as one; give them different characters"
            )


def _compression(path: str) -> str | None:
    """The compression a file's name ends with (``.gz``, ``.bz2``, ``.zst``, any case), if any."""
    try:
        return str(pa.Codec.detect(path.lower()).name)
    except (TypeError, ValueError):  # no compression's ending
        return None


def _failed(path: str, what: str, error: Exception) -> FileReadError:
    if isinstance(error, FileNotFoundError):
        return _gone(path, error)
    return FileReadError(
        f"FileSource cannot read {path!r} as {what}: {type(error).__name__}: {error}. Fix or "
        "move the file (a file that does not parse is never skipped silently), give a "
        "schema= that matches it, or a dead_letter_dir= to set such files aside",
        path=path,
    )


def _gone(path: str, error: Exception) -> FileReadError:
    return FileReadError(
        f"FileSource cannot read {path!r}: it is gone: deleted or moved after it was listed "
        f"({type(error).__name__}: {error}). Leave a file in place until the source has read "
        "it (clean_source= removes files once their records are committed), or restart the "
        "job without it",
        path=path,
    )


def _bad_record(path: str, what: str, bad: BadRecord) -> FileReadError:
    where = f"line {bad.line}" + ("" if bad.column is None else f", column {bad.column!r}")
    text = bad.text.decode("utf-8", errors="replace").rstrip("\r\n")
    return FileReadError(
        f"FileSource cannot read {path!r} as {what}: {where} ({text[:200]!r}) does not "
        f"parse: {bad.error}. Fix the file (a record that does not parse is never skipped "
        "silently), or give a dead_letter_dir= to set such records aside and read the rest",
        path=path,
        column=bad.column,
        line=bad.line,
    )


def _good_records(
    path: str,
    what: str,
    records: list[Record],
    *,
    parse: Callable[[Sequence[Record]], pa.Table],
    column_of: Callable[[Record, Exception], str | None],
    dead_letters: DeadLetters | None,
    error: Exception,
    all_good: bool = False,
) -> list[pa.Table]:
    """The tables of ``path``'s good records; the bad ones dead-lettered, or an error.

    With ``all_good``, records that all parse are read (``parse`` takes what the
    first reader did not); else that is an error (the file does not parse as a whole).
    """
    tables, bad = sift(records, parse, column_of)
    if not bad and all_good:
        return tables
    if not bad:  # no record fails alone: the file as a whole does not parse
        raise _failed(path, what, error) from error
    if dead_letters is None:
        raise _bad_record(path, what, bad[0]) from error
    dead_letters.records(path, what, bad)
    return tables


# --- schemas --------------------------------------------------------------------------------


_SPARK_SCHEMA_KEY: Final = b"org.apache.spark.sql.parquet.row.metadata"


def _spark_type(kind: pa.DataType, spark: object) -> pa.DataType:  # noqa: PLR0911  # per kind
    """``kind`` as Spark's stored type ``spark`` (JSON) says to read it.

    A ``timestamp`` (stored as INT96, no zone) is in UTC; a day-time interval (stored as
    INT64 microseconds, no Parquet annotation) is a duration, which Spark reads as
    ``interval day to second``; a ``variant`` group (shredded or not) is a variant.
    """
    if spark == "variant" and stored_variant(kind):
        return VARIANT
    if spark == "timestamp" and pa.types.is_timestamp(kind) and kind.tz is None:
        return pa.timestamp("us", "UTC")
    if _day_time_interval(spark) and pa.types.is_int64(kind):
        return pa.duration("us")
    if not isinstance(spark, dict):
        return kind
    if spark.get("type") == "struct" and pa.types.is_struct(kind):
        inner = {f.get("name"): f.get("type") for f in spark.get("fields", [])}
        return pa.struct([f.with_type(_spark_type(f.type, inner.get(f.name))) for f in kind])
    if spark.get("type") == "array" and pa.types.is_list(kind):
        value = kind.value_field
        return pa.list_(value.with_type(_spark_type(value.type, spark.get("elementType"))))
    if spark.get("type") == "map" and pa.types.is_map(kind):
        key, item = kind.key_field, kind.item_field
        return pa.map_(
            key.with_type(_spark_type(key.type, spark.get("keyType"))),
            item.with_type(_spark_type(item.type, spark.get("valueType"))),
        )
    return kind


def _day_time_interval(spark: object) -> bool:
    """Whether Spark's stored type is a day-time interval (``interval day to second``...)."""
    return (
        isinstance(spark, str)
        and spark.startswith("interval ")
        and spark.split()[1] in ("day", "hour", "minute", "second")
    )


def _with_spark_types(schema: pa.Schema) -> pa.Schema:
    """A Parquet file's schema as Spark reads it, by Spark's own schema in its metadata.

    Spark writes ``timestamp`` columns as INT96 by default, which pyarrow reads as
    zone-less timestamps; Spark's own schema, kept in the file's metadata, says which
    columns are ``timestamp`` (with a zone) rather than ``timestamp_ntz``, and which
    INT64 columns are day-time intervals.
    """
    spark = _spark_schema(schema)
    schema = schema.remove_metadata()
    if spark is None:
        return schema
    return pa.schema([f.with_type(_spark_type(f.type, _field_type(spark, f.name))) for f in schema])


_WIDER_THAN_UNSIGNED: Final = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
}
"""Spark's Parquet reader's types for unsigned integers (Spark has none), which every
value fits."""


def _signed(schema: pa.Schema) -> pa.Schema:
    """``schema`` with unsigned integers at any depth widened as Spark's reader widens them."""
    return pa.schema([f.with_type(rebuild_type(f.type, _signed_leaf)) for f in schema])


def _signed_leaf(kind: pa.DataType) -> pa.DataType:
    return _WIDER_THAN_UNSIGNED.get(kind, kind)


def _spark_schema(schema: pa.Schema) -> object:
    """Spark's own schema (JSON) kept in a Parquet file's metadata, or ``None``."""
    stored = (schema.metadata or {}).get(_SPARK_SCHEMA_KEY)
    if stored is None:
        return None
    try:
        return json.loads(stored)
    except ValueError:  # not Spark's: the file's own types
        return None


def _spark_values(batch: pa.RecordBatch, spark: object, path: str) -> pa.RecordBatch:
    """``batch`` (columns named as in the file) with Spark's variants rebuilt."""
    for index, name in enumerate(batch.schema.names):
        column = batch.column(index)
        try:
            rebuilt = spark_variants(column, _field_type(spark, name))
        except MalformedVariant as error:
            raise FileReadError(
                f"FileSource cannot read {path!r}: column {name!r} holds a malformed variant "
                f"({error}), which Spark's reader refuses too. Fix or move the file",
                path=path,
                column=name,
            ) from error
        if rebuilt is not column:
            batch = batch.set_column(index, pa.field(name, rebuilt.type), rebuilt)
    return batch


def parquet_file(handle: pa.NativeFile) -> pq.ParquetFile:
    """A Parquet file opened as Spark reads it: INT96 timestamps in microseconds.

    pyarrow's default, nanoseconds, cannot hold Spark's range (years 1 to 9999).
    """
    return pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")


def _field_type(spark: object, name: str) -> object:
    """The Spark type (JSON) of top-level field ``name`` in Spark's stored schema."""
    fields = spark.get("fields") if isinstance(spark, dict) else None
    if not isinstance(fields, list):
        return None
    return next(
        (f.get("type") for f in fields if isinstance(f, dict) and f.get("name") == name), None
    )


def infer_schema(
    fs: pafs.FileSystem, path: str, file_format: SourceFormat, csv: CsvOptions
) -> pa.Schema:
    """The data columns of the file at ``path``, as the module docstring says.

    Raises:
        FileReadError: The file does not parse.
    """
    try:
        if file_format == "parquet":
            with fs.open_input_file(path) as handle:
                return _signed(_with_spark_types(parquet_file(handle).schema_arrow))
        with fs.open_input_stream(path, compression=_compression(path)) as stream:
            if file_format == "jsonl":  # one file's part of the merge spark_json_schema does
                return _jsonl_schema(stream)
            if csv.infer_schema:  # one file's part of the merge spark_csv_schema does
                return _csv_types(stream, csv)
            found = pcsv.open_csv(stream, **_csv_inference_arguments(csv, None)).schema
            return pa.schema([(name, pa.string()) for name in _csv_names(found, csv)])
    except (pa.ArrowInvalid, OSError) as error:
        raise _failed(path, file_format, error) from error


def _csv_names(found: pa.Schema, csv: CsvOptions) -> list[str]:
    """The columns' names: the header's, or Spark's ``_c0``, ``_c1``, ... without one."""
    return spark_header(found.names) if csv.header else [f"_c{i}" for i in range(len(found))]


def spark_header(names: Sequence[str]) -> list[str]:
    """A CSV header's names as Spark's ``makeSafeHeader`` makes them unique.

    An empty name is ``_c<index>``; a name that occurs more than once, in any case,
    gets its index appended (``id,ID`` is ``id0,ID1``), so no column hides another.
    """
    lowered = [name.lower() for name in names]
    repeated = {name for name in lowered if lowered.count(name) > 1}
    return [
        f"_c{index}" if not name else f"{name}{index}" if name.lower() in repeated else name
        for index, name in enumerate(names)
    ]


def _zoned(kind: pa.DataType) -> bool:
    return pa.types.is_timestamp(kind) and kind.tz is not None


def _csv_types(stream: pa.NativeFile, csv: CsvOptions) -> pa.Schema:
    """One CSV file's types as Spark infers them, from its first block (null: no value)."""
    first = stream.read(_BLOCK_BYTES)
    if len(first) == _BLOCK_BYTES:  # whole lines only (a quoted line break may cut one)
        first = first[: first.rfind(b"\n") + 1] or first
    found = pcsv.open_csv(pa.BufferReader(first), **_csv_inference_arguments(csv, None)).schema
    names = _csv_names(found, csv)
    strings = pa.schema([(name, pa.string()) for name in names])
    header = names if csv.header else None
    table = pcsv.read_csv(pa.BufferReader(first), **_csv_inference_arguments(csv, strings, header))
    return pa.schema(
        [(name, infer_strings(column)) for name, column in zip(names, table.columns, strict=True)]
    )


def _jsonl_schema(stream: pa.NativeFile) -> pa.Schema:
    """One JSON lines file's types, from its first block; record by record if they differ."""
    first = stream.read(_BLOCK_BYTES)
    if len(first) == _BLOCK_BYTES and b"\n" not in first:  # a first record longer than
        more = [first]  # the block: read on to its end, or nothing would be inferred
        while more[-1] and b"\n" not in more[-1]:
            more.append(stream.read(_BLOCK_BYTES))
        first = b"".join(more)
    block = max(_BLOCK_BYTES, len(first))
    complete = first[: first.rfind(b"\n") + 1] if len(first) >= _BLOCK_BYTES else first
    options = pjson.ReadOptions(block)
    if PAST_LONG.search(first):  # pyarrow infers a double, Spark a decimal(n, 0): record by
        try:  # record; if no record parses, pyarrow says why
            found = infer_records(complete)
        except ValueError:
            found = pjson.open_json(pa.BufferReader(first), read_options=options).schema
    else:
        try:
            found = pjson.open_json(pa.BufferReader(first), read_options=options).schema
        except pa.ArrowInvalid as error:
            try:
                found = infer_records(complete)
            except ValueError:
                raise error from None
    return pa.schema([f.with_type(spark_json_types(f.type)) for f in found])


def _skip(row: object) -> str:
    return "skip"


def _csv_inference_arguments(
    csv: CsvOptions, schema: pa.Schema | None, header: Sequence[str] | None = None
) -> dict[str, object]:
    """`_csv_arguments` for inferring: records with a field too many or too few are skipped.

    The read names such a record by its line, or sets it aside in the dead-letter
    directory; failing the inference on it would refuse the source before either.
    """
    arguments = _csv_arguments(csv, schema, header=header)
    arguments["parse_options"] = pcsv.ParseOptions(
        delimiter=csv.delimiter, quote_char=csv.quote_char, invalid_row_handler=_skip
    )
    return arguments


def _csv_arguments(
    csv: CsvOptions,
    schema: pa.Schema | None,
    *,
    as_text: bool = False,
    header: Sequence[str] | None = None,
) -> dict[str, object]:
    """Pyarrow's CSV options; with ``schema`` its names (no header) and types are imposed.

    Timestamps with a zone are read as strings (`_typed` converts them: a value without
    an offset is in UTC); with ``as_text`` every column is. ``header``: the names of
    the file's header, made unique (`spark_header`), read in place of its own.
    """
    names = None if csv.header or schema is None else schema.names
    read = pcsv.ReadOptions(
        block_size=_BLOCK_BYTES,
        column_names=names if header is None else list(header),
        autogenerate_column_names=not csv.header and names is None and header is None,
        skip_rows=1 if header is not None else 0,
    )
    parse = pcsv.ParseOptions(delimiter=csv.delimiter, quote_char=csv.quote_char)
    types = None
    if schema is not None:
        types = {f.name: pa.string() if as_text or _zoned(f.type) else f.type for f in schema}
    convert = pcsv.ConvertOptions(
        column_types=types,
        strings_can_be_null=True,
        null_values=[""],
        quoted_strings_can_be_null=True,  # Spark's reader: "" is null, as an empty field is
    )
    return {"read_options": read, "parse_options": parse, "convert_options": convert}


# --- conforming a batch to the schema --------------------------------------------------------


def _cast(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """``column`` as ``kind``, never losing a timestamp's time of day to a date.

    Raises:
        pa.ArrowInvalid: A value does not convert, or only with a loss.
    """
    cast = column.cast(kind)
    if pa.types.is_timestamp(column.type) and pa.types.is_date(kind):
        back = cast.cast(column.type)
        if pc.all(pc.equal(back, column)).as_py() not in (True, None):
            raise pa.ArrowInvalid(
                "a timestamp with a time of day does not convert to a date without losing it"
            )
    return cast


def _conform(batch: pa.RecordBatch, schema: pa.Schema, path: str) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns: missing ones null, others cast."""
    if batch.schema.equals(schema):
        return batch
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(index)
        if not column.type.equals(field.type):
            try:
                column = _cast(column, field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise FileReadError(
                    f"FileSource: column {field.name!r} of {path!r} holds {column.type} values "
                    f"that do not convert to the source's {field.type} ({error}); give a "
                    "schema= of the files' types, or read these files with a source of their own",
                    path=path,
                    column=field.name,
                ) from error
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _after(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` without their first ``skip`` rows (a restored split's position)."""
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        yield batch.slice(skip) if skip else batch
        skip = 0


# --- Parquet --------------------------------------------------------------------------------


def _parquet(
    fs: pafs.FileSystem,
    split: FileSourceSplit,
    schema: pa.Schema,
    batch_rows: int,
    *,
    dead_letters: DeadLetters | None,
) -> Iterator[pa.RecordBatch]:
    with fs.open_input_file(split.path) as handle:
        if handle.size() == 0:  # an empty file holds no rows (Spark's reader skips it too)
            return
        try:
            parquet = parquet_file(handle)
        except (pa.ArrowInvalid, OSError) as error:
            if dead_letters is None:
                raise _failed(split.path, "Parquet", error) from error
            dead_letters.whole_file(fs, split.path, "parquet", f"{type(error).__name__}: {error}")
            return
        metadata = parquet.metadata
        if split.row_groups is not None and handle.size() != split.size:
            raise FileReadError(
                f"FileSource cannot read {split.path!r}: it changed since it was listed "
                f"({split.size} bytes then, {handle.size()} now), so its split of row groups "
                f"{list(split.row_groups)} no longer says which rows it holds. Write files "
                "under a hidden name (.tmp, or a . or _ prefix) and rename them when done; "
                "never rewrite a file in place",
                path=split.path,
            )
        groups = (
            list(split.row_groups)
            if split.row_groups is not None
            else list(range(metadata.num_row_groups))
        )
        skip = split.records_read
        while groups and metadata.row_group(groups[0]).num_rows <= skip:
            skip -= metadata.row_group(groups.pop(0)).num_rows
        if not groups:
            return
        read_as = _parquet_columns(parquet.schema_arrow.names, schema, split.path)
        batches = parquet.iter_batches(
            batch_size=batch_rows, row_groups=groups, columns=list(read_as)
        )
        renamed = any(name != read_as[name] for name in read_as)
        spark = _spark_schema(parquet.schema_arrow)
        try:
            for read in _after(batches, skip):
                if spark is not None:
                    read = _spark_values(read, spark, split.path)  # noqa: PLW2901  # rebuilt
                names = [read_as[name] for name in read.schema.names]
                yield _conform(read.rename_columns(names) if renamed else read, schema, split.path)
        except (pa.ArrowInvalid, OSError) as error:  # a row group that does not decode
            raise FileReadError(
                f"FileSource cannot read {split.path!r} as Parquet: row groups {groups} (of "
                f"{metadata.num_row_groups}) do not decode: {type(error).__name__}: {error}. "
                "Fix or move the file; its earlier rows were read, so it cannot be set aside",
                path=split.path,
            ) from error


def _parquet_columns(in_file: Sequence[str], schema: pa.Schema, path: str) -> dict[str, str]:
    """The file's columns to read, each to the schema column it is (file name -> schema name).

    A schema column the file lacks by its exact name is the file's column of the same
    name in another case, as Spark's Parquet reader matches them
    (``spark.sql.caseSensitive`` off, its default); none: the column is null.

    Raises:
        FileReadError: Several of the file's columns match one schema column by case.
    """
    present = set(in_file)
    by_lower: dict[str, list[str]] = {}
    for name in in_file:
        by_lower.setdefault(name.lower(), []).append(name)
    read_as = {}
    for name in schema.names:
        if name in present:
            read_as[name] = name
            continue
        found = by_lower.get(name.lower(), [])
        if len(found) > 1:
            raise FileReadError(
                f"FileSource cannot read {path!r}: its columns {found} all match the column "
                f"{name!r} when case is ignored (as Spark's reader matches names); rename them "
                "in the file, or give a schema= with the exact name to read",
                path=path,
                column=name,
            )
        if found:
            read_as[found[0]] = name
    return read_as


# --- JSON lines -----------------------------------------------------------------------------


def _needs_text(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _from_text(column: pa.Array, kind: pa.DataType) -> pa.Array:
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        values = [None if text is None else base64.b64decode(text) for text in column.to_pylist()]
        return pa.array(values, kind)
    return column.cast(kind)


def _read_json(data: bytes, schema: pa.Schema) -> pa.Table:
    options = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pjson.read_json(
        pa.BufferReader(data),
        read_options=pjson.ReadOptions(block_size=_BLOCK_BYTES),
        parse_options=options,
    )


def _read_json_as_spark(data: bytes, schema: pa.Schema) -> pa.Table:
    """`_read_json`, with a string column's numbers, booleans, objects as their JSON text."""
    try:
        return _read_json(data, schema)
    except pa.ArrowInvalid as error:
        if not _STRING_TAKES.search(str(error)):
            raise
        try:
            data = stringify_non_strings(data, schema)
        except ValueError:  # not JSON: pyarrow's error says where
            raise error from None
        return _read_json(data, schema)


_STRING_TAKES: Final = re.compile(r"changed from string to (number|boolean|object|array)")


def _not_a(name: str, path: str, error: Exception) -> FileReadError:
    return FileReadError(
        f"FileSource: column {name!r} of {path!r} holds a string that is not a number, nor "
        f"NaN or an infinity as Spark spells them ({error}); fix the file, or give a "
        "schema= with a string column",
        path=path,
        column=name,
    )


def _jsonl_table(data: bytes, schema: pa.Schema, path: str) -> pa.Table:
    """JSON lines ``data`` as a table of ``schema``; pyarrow's errors, or `FileReadError`."""
    textual = [field.name for field in schema if _needs_text(field.type)]
    parse_schema = pa.schema(
        [field.with_type(pa.string()) if field.name in textual else field for field in schema]
    )
    if not data.strip():
        return schema.empty_table()
    try:
        table = _read_json_as_spark(data, parse_schema)
    except pa.ArrowInvalid:  # NaN or an infinity as Spark spells them (strings)? else raise
        if not (has_floats(parse_schema) and NON_FINITE_MARK.search(data)):
            raise
        table = _read_json(floats_as_text(data, parse_schema), text_schema(parse_schema))
        table = cast_back(table, parse_schema, lambda name, error: _not_a(name, path, error))
    for name in textual:
        index = table.schema.get_field_index(name)
        kind = schema.field(name).type
        try:
            converted = _from_text(table.column(name).combine_chunks(), kind)
        except (pa.ArrowInvalid, ValueError) as error:
            raise FileReadError(
                f"FileSource: column {name!r} of {path!r} holds a value that is not a "
                f"{kind} ({error}); fix the file, or give a schema= with a string column",
                path=path,
                column=name,
            ) from error
        table = table.set_column(index, schema.field(name), converted)
    batches = [_conform(batch, schema, path) for batch in table.to_batches()]
    return pa.Table.from_batches(batches, schema=schema)


def _jsonl(
    fs: pafs.FileSystem,
    split: FileSourceSplit,
    schema: pa.Schema,
    batch_rows: int,
    *,
    dead_letters: DeadLetters | None,
) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_stream(split.path, compression=_compression(split.path)) as stream:
            data = stream.read()
    except OSError as error:
        raise _failed(split.path, "JSON lines", error) from error
    try:
        table = _jsonl_table(data, schema, split.path)
    except (pa.ArrowInvalid, FileReadError) as error:
        tables = _good_records(
            split.path,
            "JSON lines",
            json_records(data),
            parse=lambda group: _jsonl_table(b"".join(t for _, t in group), schema, split.path),
            column_of=json_column,
            dead_letters=dead_letters,
            error=error,
        )
        table = pa.concat_tables([schema.empty_table(), *tables])
    yield from table.slice(split.records_read).to_batches(max_chunksize=batch_rows)


# --- CSV ------------------------------------------------------------------------------------


def _csv(
    fs: pafs.FileSystem,
    split: FileSourceSplit,
    schema: pa.Schema,
    csv: CsvOptions,
    batch_rows: int,
    *,
    dead_letters: DeadLetters | None,
) -> Iterator[pa.RecordBatch]:
    skip, emitted = split.records_read, 0
    with contextlib.ExitStack() as closing:
        stream = closing.enter_context(
            fs.open_input_stream(split.path, compression=_compression(split.path))
        )
        counter = QuoteCounter(stream, csv.quote_char)
        held: pa.RecordBatch | None = None  # the last rows wait for the quotes' count
        try:
            reader = pcsv.open_csv(counter, **_csv_arguments(csv, schema))
            found = reader.schema.names
            if csv.header and spark_header(found) != found:  # a name twice, or empty: read
                again = fs.open_input_stream(
                    split.path, compression=_compression(split.path)
                )  # it as Spark
                closing.enter_context(again)  # names it
                counter = QuoteCounter(again, csv.quote_char)
                reader = pcsv.open_csv(
                    counter, **_csv_arguments(csv, schema, header=spark_header(found))
                )
            for read in _after(reader, skip):
                batch = _typed(read, schema)
                for start in range(0, batch.num_rows, batch_rows):
                    if held is not None:
                        emitted += held.num_rows
                        yield held
                    held = _conform(batch.slice(start, batch_rows), schema, split.path)
            if counter.balanced:
                if held is not None:
                    yield held
                return
            failure: Exception = pa.ArrowInvalid("a quote character without its pair")
        except pa.ArrowInvalid as error:
            failure = error
    # the rows before the failing block were emitted: go on after them, record by record
    with fs.open_input_stream(split.path, compression=_compression(split.path)) as stream:
        data = stream.read()
    if not data.strip():  # an empty file (no header either) holds no rows, as Spark reads it
        return
    records = csv_records(
        data, header=csv.header, delimiter=csv.delimiter, quote_char=csv.quote_char
    )
    header = records[:1] if csv.header else []
    body = records[1:] if csv.header else records
    names = _csv_header_names(header[0][1], csv) if header else None
    unclosed = bool(body) and unclosed_quote(
        body[-1][1].decode("utf-8", errors="surrogateescape"),
        delimiter=csv.delimiter,
        quote_char=csv.quote_char,
    )

    def parse(group: Sequence[Record]) -> pa.Table:
        if unclosed and group[-1] is body[-1]:
            raise ValueError(
                f"the quoted field opened on line {body[-1][0]} is never closed, so the rest "
                f"of the file would be one value; close it with {csv.quote_char!r} (a quote "
                "inside a value is doubled)"
            )
        text = b"".join(t for _, t in [*header, *group])
        try:
            read = pcsv.read_csv(
                pa.BufferReader(text), **_csv_arguments(csv, schema, as_text=True, header=names)
            )
            table = _typed(read, schema)
        except pa.ArrowInvalid as error:
            found = _csv_culprit(text, schema, csv, names) if len(group) == 1 else None
            if found is None:
                raise
            column, value = found
            raise FileReadError(
                f"column {column!r} holds {value!r}, which is not a {schema.field(column).type}",
                path=split.path,
                column=column,
            ) from error
        batches = [_conform(batch, schema, split.path) for batch in table.to_batches()]
        return pa.Table.from_batches(batches, schema=schema)

    tables = _good_records(
        split.path,
        "CSV",
        body,
        parse=parse,
        column_of=lambda record, error: None,
        dead_letters=dead_letters,
        error=failure,
        all_good=True,  # Spark's spellings (+5, 1d, 2024-01), which pyarrow's reader refuses
    )
    table = pa.concat_tables([schema.empty_table(), *tables]).slice(skip + emitted)
    yield from table.to_batches(max_chunksize=batch_rows)


def _typed(read: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.RecordBatch | pa.Table:
    """CSV columns read as strings, each as its schema type (`spark_values`).

    Spark's spellings too, which pyarrow's CSV parser refuses (the record-by-record
    read after its failure takes them).

    Raises:
        pa.ArrowInvalid: A value does not convert.
    """
    for field in schema:
        index = read.schema.get_field_index(field.name)
        if index < 0 or pa.types.is_string(field.type):
            continue
        if not pa.types.is_string(read.schema.field(index).type):
            continue
        column = spark_values(read.column(index), field.type)
        read = read.set_column(index, field.name, column)
    return read


def _csv_header_names(text: bytes, csv: CsvOptions) -> list[str]:
    """The names of a header record, made unique (`spark_header`)."""
    found = pcsv.read_csv(pa.BufferReader(text), **_csv_inference_arguments(csv, None))
    return spark_header(found.schema.names)


def _csv_culprit(
    text: bytes, schema: pa.Schema, csv: CsvOptions, header: Sequence[str] | None
) -> tuple[str, str] | None:
    """The first value of CSV ``text`` that does not convert: (column, value), if any."""
    text_schema = pa.schema([(name, pa.string()) for name in schema.names])
    try:
        table = pcsv.read_csv(
            pa.BufferReader(text), **_csv_arguments(csv, text_schema, header=header)
        )
    except pa.ArrowInvalid:  # the text does not parse either: no single value to name
        return None
    for field in schema:
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            continue
        for value in table.column(field.name).to_pylist():
            if value is None:
                continue
            try:
                spark_value(value, field.type)
            except pa.ArrowInvalid:
                return field.name, value
    return None


def parquet_records(fs: pafs.FileSystem, split: FileSourceSplit, *, dead_letters: bool) -> int:
    """The rows of a Parquet split (its row groups, or the whole file), by the footer.

    Read on the driver when a record limit cuts a split not counted at listing. A
    footer that does not parse counts 0 rows with ``dead_letters`` (the reader sets the
    file aside), and fails otherwise, as the reader would.

    Raises:
        FileReadError: The footer does not parse (and no ``dead_letters``).
    """
    try:
        with fs.open_input_file(split.path) as handle:
            if handle.size() == 0:  # an empty file: no rows (the reader reads none)
                return 0
            metadata = pq.ParquetFile(handle).metadata
    except (pa.ArrowInvalid, OSError) as error:
        if dead_letters:
            return 0
        raise _failed(split.path, "Parquet", error) from error
    if split.row_groups is None:
        return int(metadata.num_rows)
    return sum(metadata.row_group(group).num_rows for group in split.row_groups)


def read_split(
    fs: pafs.FileSystem,
    split: FileSourceSplit,
    *,
    schema: pa.Schema,
    file_format: SourceFormat,
    csv: CsvOptions,
    batch_rows: int,
    dead_letters: DeadLetters | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``split`` after its position, as batches of ``schema`` (data columns).

    With ``dead_letters``, what does not parse goes there and the rest is read
    (see ``_source_dead_letters``); without, it fails the read.

    Raises:
        FileReadError: The file does not parse, or a value does not convert;
            the message names the file (and the line and column).
    """
    if file_format == "parquet":
        batches = _parquet(fs, split, schema, batch_rows, dead_letters=dead_letters)
    elif file_format == "jsonl":
        batches = _jsonl(fs, split, schema, batch_rows, dead_letters=dead_letters)
    else:
        batches = _csv(fs, split, schema, csv, batch_rows, dead_letters=dead_letters)
    return _named_when_gone(split.path, batches)


def _named_when_gone(path: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, a file missing when opened named as such (`FileReadError`)."""
    try:
        yield from batches
    except FileNotFoundError as error:
        raise _gone(path, error) from error
