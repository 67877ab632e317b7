"""The sink tables both databases hold, written once, and how a row becomes a record.

The sinks' tables (layout 3; each database numbers its layouts in its own way, see
``sqlite`` and ``postgres``):

- ``pending_sink_state``: one row per (sink id, epoch), `EPOCH_TABLE`;
- ``sink_fence``: one row per sink id, its fencing token and holder; its holder
  columns differ (SQLite keeps the holder as JSON, PostgreSQL in columns with the
  backend pid), so each database defines it;
- ``sink_job``: jobs that staged output and are not finished, `JOB_TABLE`;
- ``sink_origin``: the stream a sink id is bound to, `ORIGIN_TABLE`.

Layout 4 adds the sources' tables, in a key space of their own (`SOURCES`):

- ``source_epoch_state``: one row per (source id, epoch), `SOURCE_EPOCH_TABLE`;
- ``source_fence``: one row per source id, the same shape as ``sink_fence``.

Layout 5 adds ``sink_result`` (`RESULT_TABLE`): what the data-source doors' runs
ended with, one row per (sink id, job id), for the driver to read (``results``).

The definitions are templates for `render`: type words stand for the database's
type names. Two columns of ``pending_sink_state`` differ by history rather than by
database, so they are words too: ``{epoch_type}`` (PostgreSQL also checks the
epoch is positive) and ``{checkpoint_id_type}`` (nullable in SQLite, where layout
1 rows have none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sinkv2._text import describe
from sinkv2.errors import CommitStateError
from sinkv2.runtime._source_store import SourceEpochRecord
from sinkv2.runtime._sql.dialect import Dialect, render
from sinkv2.runtime._sql.fence import Keyspace
from sinkv2.runtime._store import EpochRecord, EpochStatus, default_checkpoint_id

__all__ = [
    "COLUMNS",
    "EPOCH_TABLE",
    "JOB_TABLE",
    "ORIGIN_TABLE",
    "RESULT_TABLE",
    "SINKS",
    "SOURCES",
    "SOURCE_COLUMNS",
    "SOURCE_EPOCH_TABLE",
    "record_from_row",
    "source_record_from_row",
    "source_tables",
]

SINKS: Final = Keyspace(noun="sink", key="sink_id", fence="sink_fence")
"""The sink leases' ids and fence table."""

SOURCES: Final = Keyspace(noun="source", key="source_id", fence="source_fence")
"""The source leases' ids and fence table."""

COLUMNS: Final = (
    "sink_id, epoch, status, explicit, serializer_version, payload, fencing_token, job_id, "
    "updated_at, checkpoint_id, writer_states"
)
"""The columns of ``pending_sink_state``, in the order `record_from_row` reads them."""

EPOCH_TABLE: Final = """
    CREATE TABLE {schema}pending_sink_state (
        sink_id TEXT NOT NULL,
        epoch {epoch_type},
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit {bool} NOT NULL,
        serializer_version {int64} NOT NULL,
        payload {bytes} NOT NULL,
        fencing_token {int64} NOT NULL,
        job_id TEXT NOT NULL,
        updated_at {float64} NOT NULL,
        checkpoint_id {checkpoint_id_type},
        writer_states {bytes} NOT NULL DEFAULT {empty_bytes},
        PRIMARY KEY (sink_id, epoch)
    )
    """

JOB_TABLE: Final = """
    CREATE TABLE {schema}sink_job (
        sink_id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        fencing_token {int64} NOT NULL,
        started_at {float64} NOT NULL,
        PRIMARY KEY (sink_id, job_id)
    )
    """

ORIGIN_TABLE: Final = """
    CREATE TABLE {schema}sink_origin (
        sink_id TEXT PRIMARY KEY NOT NULL,
        origin TEXT NOT NULL,
        bound_at {float64} NOT NULL
    )
    """

RESULT_TABLE: Final = """
    CREATE TABLE {schema}sink_result (
        sink_id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        recorded_at {float64} NOT NULL,
        outcome TEXT NOT NULL,
        PRIMARY KEY (sink_id, job_id)
    )
    """
"""Layout 5: a job's outcome (a `SinkResult` or an error, as JSON; see ``results``)."""


SOURCE_COLUMNS: Final = (
    "source_id, epoch, enumerator_checkpoint, assignment, end_positions, acknowledged, "
    "fencing_token, job_id, created_at"
)
"""The columns of ``source_epoch_state``, in the order `source_record_from_row` reads them."""

SOURCE_EPOCH_TABLE: Final = """
    CREATE TABLE {schema}source_epoch_state (
        source_id TEXT NOT NULL,
        epoch {int64} NOT NULL CHECK (epoch >= 0),
        enumerator_checkpoint {bytes} NOT NULL,
        assignment {bytes} NOT NULL,
        end_positions {bytes},
        acknowledged {bool} NOT NULL,
        fencing_token {int64} NOT NULL,
        job_id TEXT NOT NULL,
        created_at {float64} NOT NULL,
        PRIMARY KEY (source_id, epoch)
    )
    """


def source_tables(dialect: Dialect, fence_table: str) -> tuple[str, ...]:
    """The tables layout 4 adds, in ``dialect``: the sources' epochs and fence rows.

    ``fence_table`` is the database's fence table template (its holder columns
    differ), filled with `SOURCES`.
    """
    fence = render(dialect, fence_table, fence=SOURCES.fence, key=SOURCES.key)
    return (render(dialect, SOURCE_EPOCH_TABLE), fence)


def record_from_row(row: Sequence[Any], dialect: Dialect) -> EpochRecord:
    """The `EpochRecord` of a ``pending_sink_state`` row read as `COLUMNS`.

    Takes each driver's types: SQLite's integers for booleans and NULL
    ``checkpoint_id`` of layout 1 rows, psycopg's memoryviews for bytes.

    Raises:
        CommitStateError: The row does not hold what this release writes.
    """
    sink_id, epoch, status, explicit, version, payload, token, job_id, updated_at, cid, ws = row
    try:
        flag = _as_bool(explicit)
        return EpochRecord(
            sink_id=_as(str, sink_id),
            epoch=_as_int(epoch),
            status=EpochStatus(status),
            explicit=flag,
            serializer_version=_as_int(version),
            payload=_as_bytes(payload),
            fencing_token=_as_int(token),
            job_id=_as(str, job_id),
            updated_at=float(_as((int, float), updated_at)),
            checkpoint_id=(
                default_checkpoint_id(_as_int(epoch), explicit=flag)
                if cid is None
                else _as_int(cid)
            ),
            writer_states=_as_bytes(ws),
        )
    except (TypeError, ValueError) as error:
        raise CommitStateError(
            f"{dialect.where} holds an unreadable row for epoch {epoch!r} of sink {sink_id!r}: "
            f"{error}; {dialect.container} was changed by something other than this sinkv2 "
            "release"
        ) from error


def _as(kind: type[Any] | tuple[type[Any], ...], value: object) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        name = kind.__name__ if isinstance(kind, type) else kind[-1].__name__
        raise TypeError(f"expected a {name} column, got {describe(value)}")
    return value


def _as_int(value: object) -> int:
    return int(_as(int, value))


def _as_bool(value: object) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise TypeError(f"expected a bool column, got {describe(value)}")


def _as_bytes(value: object) -> bytes:
    if isinstance(value, memoryview):
        return value.tobytes()
    return bytes(_as(bytes, value))


def source_record_from_row(row: Sequence[Any], dialect: Dialect) -> SourceEpochRecord:
    """The `SourceEpochRecord` of a ``source_epoch_state`` row read as `SOURCE_COLUMNS`.

    Raises:
        CommitStateError: The row does not hold what this release writes.
    """
    source_id, epoch, checkpoint, assignment, ends, acknowledged, token, job_id, created = row
    try:
        return SourceEpochRecord(
            source_id=_as(str, source_id),
            epoch=_as_int(epoch),
            enumerator_checkpoint=_as_bytes(checkpoint),
            assignment=_as_bytes(assignment),
            end_positions=None if ends is None else _as_bytes(ends),
            acknowledged=_as_bool(acknowledged),
            fencing_token=_as_int(token),
            job_id=_as(str, job_id),
            created_at=float(_as((int, float), created)),
        )
    except (TypeError, ValueError) as error:
        raise CommitStateError(
            f"{dialect.where} holds an unreadable row for epoch {epoch!r} of source "
            f"{source_id!r}: {error}; {dialect.container} was changed by something other "
            "than this sinkv2 release"
        ) from error
