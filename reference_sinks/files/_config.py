"""The FileSink's settings: rolling and compaction policies, checked when built.

Every setting is validated at construction, before any Spark job runs; a bad one
raises `SinkConfigurationError` saying what was expected, what arrived and what
to do.
"""

from __future__ import annotations

from typing import Any, Final, Literal, final

import attrs

from sinkv2.errors import SinkConfigurationError
from sinkv2.text import describe

# describe: re-exported for _sink.py until it imports sinkv2.text itself.
__all__ = ["FORMATS", "CompactionPolicy", "FileFormat", "RollingPolicy", "describe"]

FileFormat = Literal["parquet", "jsonl"]
FORMATS: Final = ("parquet", "jsonl")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_or_none(what: str) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None or (_is_int(value) and value > 0):  # type: ignore[operator]
            return
        raise SinkConfigurationError(
            f"{what}.{attribute.name} must be a positive int or None (got {describe(value)}); "
            f"set it to at least 1, or to None for no limit"
        )

    return check


def _positive(what: str, minimum: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if _is_int(value) and value >= minimum:  # type: ignore[operator]
            return
        raise SinkConfigurationError(
            f"{what}.{attribute.name} must be an int >= {minimum} (got {describe(value)}); "
            f"set it to at least {minimum}"
        )

    return check


def _boolean(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise SinkConfigurationError(
            f"RollingPolicy.{attribute.name} must be a bool (got {describe(value)}); "
            "pass True or False"
        )


@final
@attrs.frozen(kw_only=True)
class RollingPolicy:
    """When a writer closes its in-progress part file and starts a new one.

    A part file is rolled when it reaches ``max_rows`` rows (exactly: a batch that
    would take a file past it is split at the boundary, the rest starts the next
    file), when it reaches about ``max_bytes`` bytes (checked after each written
    batch, so a file may exceed it by up to one batch: a batch's encoded size is
    known only once written), and on every checkpoint if ``roll_on_checkpoint``. The
    end of input always closes every file.

    The default, no row and no byte limit, is what both engines do unasked: Spark's
    writer writes one file per task and partition (``maxRecordsPerFile=0``) and
    Flink's bulk formats roll on checkpoint only (``OnCheckpointRollingPolicy``). So a
    default `FileSink` takes Spark's writer (the native path) and writes as many files
    as ``df.write.parquet`` does. To bound file sizes set ``max_rows``, the unit Spark
    can roll by (a file is about ``max_rows`` x the bytes of an encoded row);
    ``max_bytes`` bounds them exactly but runs FileSink's own writers.

    Attributes:
        max_rows: Rows per part file at most (never exceeded), or ``None`` (default)
            for no limit.
        max_bytes: Bytes per part file, approximately: a file may pass it by one
            batch. ``None`` (default) for no limit. Only FileSink's own writers can
            roll by size: a value makes FileSink run them instead of Spark's writer.
        roll_on_checkpoint: Close every in-progress file at each checkpoint, so a
            checkpoint's committables hold everything written before it. FileSink
            requires ``True`` (Flink's rule for bulk formats; a Parquet file cannot
            be resumed, its footer is written on close).

    Raises:
        SinkConfigurationError: A limit is not a positive int or ``None``, or
            ``roll_on_checkpoint`` is not a bool.
    """

    max_rows: int | None = attrs.field(default=None, validator=_positive_or_none("RollingPolicy"))
    max_bytes: int | None = attrs.field(default=None, validator=_positive_or_none("RollingPolicy"))
    roll_on_checkpoint: bool = attrs.field(default=True, validator=_boolean)


@final
@attrs.frozen(kw_only=True)
class CompactionPolicy:
    """Merge a checkpoint's small files of one partition before they are committed.

    A file is small when it has fewer than ``target_bytes`` bytes. When a partition
    has at least ``min_files`` small files in one checkpoint, they are merged into
    files of about ``target_bytes`` each; only the merged files are committed.

    Attributes:
        min_files: Small files of a partition needed before they are merged (>= 2).
        target_bytes: The size below which a file is small, and the size merged
            files aim at.

    Raises:
        SinkConfigurationError: ``min_files`` < 2 or ``target_bytes`` < 1.
    """

    min_files: int = attrs.field(default=4, validator=_positive("CompactionPolicy", 2))
    target_bytes: int = attrs.field(
        default=128 * 1024 * 1024, validator=_positive("CompactionPolicy", 1)
    )
