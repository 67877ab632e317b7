"""Native reads: the engine's own file reader reads a bounded plan's files (sinkv2 extension).

Not in Flink. Flink reads every split with the source's own reader; so does sinkv2's
Python path on Spark, and there every row crosses from a Python worker into the JVM:
Spark 4.3 has no columnar Python reads, so a Python data source reaches at most
about 0.6 x ``spark.read.parquet`` on the same files (``benchmarks/RESULTS.md``). A
source whose splits are, in the end, whole files in a format the engine reads
itself can let the engine read them: the enumerator still plans on the driver, as
always, and the source only says what its splits are - these files, in this
format, with these options - or why the engine's reader would not give exactly the
rows its own readers give. The mirror of `sinkv2.SupportsNativeFileWrite`.

Only bounded reads use it: a bounded read has no positions to record (its splits
are read whole or not at all), so nothing is lost when the source's readers do not
run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final, runtime_checkable

import attrs

from sinkv2._text import describe
from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NativeRead", "NativeReadUnavailable", "SupportsNativeRead"]

SplitT_contra = TypeVar("SplitT_contra", contravariant=True)


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _check_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise SinkConfigurationError(
            f"NativeRead.{attribute.name} must be a non-empty str (got {describe(value)})"
        )


def _check_strings(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise SinkConfigurationError(
            f"NativeRead.{attribute.name} must hold non-empty strings (got {describe(value)})"
        )


def _check_options(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SinkConfigurationError(
            f"NativeRead.{attribute.name} must map str to str (got {describe(value)}); spell "
            "every option value as a string, e.g. {'mergeSchema': 'false'}"
        )


def _check_base(instance: NativeRead, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise SinkConfigurationError(
            f"NativeRead.base_path must be a non-empty str or None (got {describe(value)})"
        )
    if (value is None) != (not instance.partition_columns):
        raise SinkConfigurationError(
            "NativeRead.base_path is needed with partition_columns and only then (got "
            f"base_path={value!r}, partition_columns={list(instance.partition_columns)}): the "
            "engine finds partition values in the key=value directories below base_path"
        )


def _check_field_ids(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    import pyarrow as pa  # noqa: PLC0415  # only a source that gives field ids needs it

    if not isinstance(value, pa.Schema):
        raise SinkConfigurationError(
            f"NativeRead.field_ids must be a pyarrow Schema with PARQUET:field_id metadata, or "
            f"None (got {describe(value)})"
        )


@final
@attrs.frozen(kw_only=True)
class NativeRead:
    """What a bounded plan's splits are, as the engine's own file reader reads them.

    On Spark this is ``spark.read.format(format).schema(<the produced type>)
    .options(**options).load(paths)`` (with ``basePath`` when there are partition
    columns); the door then checks that the result's schema is exactly the
    source's produced type.

    Attributes:
        format: The engine reader's format: on Spark ``"parquet"`` or another
            registered file source.
        paths: Every file the plan's splits cover, whole, each once, as URIs the
            engine's filesystem opens (``"file:///data/in/day=2024-01-01/a.parquet"``),
            with no glob characters. Empty when the plan has no split.
        partition_columns: The produced type's columns whose values come from
            ``key=value`` directories between ``base_path`` and each file, in the
            order they end the produced type (the engine appends them).
        base_path: The directory the partition directories are below (Spark's
            ``basePath``); ``None`` exactly when there are no partition columns.
        options: Reader options (Spark's ``DataFrameReader.option``), values as
            strings.
        field_ids: Match the files' columns to the produced type by Parquet field
            id, not by name: the produced type with every field's id as
            ``PARQUET:field_id`` metadata, at every level of nesting (a table
            format whose columns are renamed, as Iceberg's). ``None``: by name. On
            Spark this sets ``spark.sql.parquet.fieldId.read.enabled`` in the
            session (it is read when the query runs; a schema without field ids is
            still read by name).

    Raises:
        SinkConfigurationError: A field has a bad value or type.
    """

    format: str = attrs.field(validator=_check_name)
    paths: tuple[str, ...] = attrs.field(converter=_as_tuple, validator=_check_strings)
    partition_columns: tuple[str, ...] = attrs.field(
        default=(), converter=_as_tuple, validator=_check_strings
    )
    base_path: str | None = attrs.field(default=None, validator=_check_base)
    options: Mapping[str, str] = attrs.field(factory=dict, validator=_check_options)
    field_ids: pa.Schema | None = attrs.field(default=None, validator=_check_field_ids)


@final
@attrs.frozen
class NativeReadUnavailable:
    """A source's answer that the engine's reader cannot read its splits: its readers run.

    Attributes:
        reason: Why, in words a user can act on (it is logged, and is the error of a
            read that required the native path), e.g. ``"FileSource reads 'csv' itself:
            Spark's CSV reader parses quotes and nulls by other rules"``.
    """

    reason: str


@runtime_checkable
class SupportsNativeRead(Protocol[SplitT_contra]):
    """Mixin: a bounded plan's splits are whole files the engine can read itself (extension).

    Extension, not in Flink: Flink runs a source's readers on every split, and so
    does an engine without a native file reader (the contract kit's local engine,
    Spark's ``format("sinkv2")`` data source, every stream). A source with this mixin
    must still be a complete FLIP-27 source; the mixin only lets an engine that
    has its own readers for files skip the source's readers where that gives the
    same rows (on Spark, several times faster: Spark's Parquet reader is
    vectorized and stays in the JVM).

    Required: `native_read`. Call order, per bounded read on an engine that can
    read natively: the enumerator plans every split on the driver (as for any
    bounded read), then `native_read` is called once, on the driver, with all the
    splits of the plan, before any task. A `NativeRead` is read by the engine's
    reader; a `NativeReadUnavailable` runs the source's readers on the same plan's
    splits (planned again by the Python path), and its reason is logged.
    """

    def native_read(self, splits: Sequence[SplitT_contra]) -> NativeRead | NativeReadUnavailable:
        """The files ``splits`` are, for the engine's reader, or why its reader cannot read them.

        Say `NativeReadUnavailable` whenever the engine's reader could give other
        rows or other values than the source's readers: a split that is part of a
        file, a position in the middle of a file, a format whose parsing options
        the engine's reader does not share, per-record handling (a dead-letter
        directory), a type the two read differently. It may read files' metadata
        (Parquet footers); it must not change anything.

        Raises:
            SinkV2Error: A file cannot be read by either path (its footer does not
                parse): the same error the source's readers would raise.
        """
        ...
