"""What both SQL stores answer an operator without acquiring anything, written once.

`SqlCommitStateStore` holds the read-only questions of ``sinkv2 state``: which
sink ids a store knows, their epochs, jobs and origin; which source ids it knows
and their epochs. It also keeps what the data-source doors' jobs ended with
(`record_outcome`, `outcomes`), for their driver to read. Each store says how it
opens a short-lived connection for them (`SqlCommitStateStore._reading`) and in
which dialect.

Acquiring is written once too, over each store's `SqlCommitStateStore._take` (its
lock and its ``advance_fence``): `SqlCommitStateStore.acquire_source` makes a
`SqlSourceLease`, and each store's ``acquire`` a lease of its `_sink_lease` class.
Who holds an id is each store's own.
"""

from __future__ import annotations

import abc
import time
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Final

from sinkv2.runtime._source_store import SourceEpochRecord, SourceLease
from sinkv2.runtime._sql.dialect import Connection, Dialect, render
from sinkv2.runtime._sql.fence import Hold, Keyspace
from sinkv2.runtime._sql.lease import SqlSinkLease, check_statuses, epochs_query
from sinkv2.runtime._sql.results import JobOutcome, decode_outcome, encode_outcome
from sinkv2.runtime._sql.schema import SINKS, SOURCES, record_from_row, source_record_from_row
from sinkv2.runtime._sql.source_lease import SqlSourceLease, source_epochs_query
from sinkv2.runtime._store import EpochRecord, EpochStatus, check_name

__all__ = ["KEPT_OUTCOMES", "SqlCommitStateStore"]

_SINK_IDS: Final = (
    "SELECT sink_id FROM {schema}sink_fence UNION SELECT sink_id FROM {schema}pending_sink_state "
    "UNION SELECT sink_id FROM {schema}sink_job UNION SELECT sink_id FROM {schema}sink_origin "
    "ORDER BY 1"
)

_RECORD_OUTCOME: Final = (
    "INSERT INTO {schema}sink_result (sink_id, job_id, recorded_at, outcome) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (sink_id, job_id) DO UPDATE SET recorded_at = excluded.recorded_at, "
    "outcome = excluded.outcome"
)

_PRUNE_OUTCOMES: Final = (
    "DELETE FROM {schema}sink_result WHERE sink_id = ? AND job_id NOT IN ("
    "SELECT job_id FROM {schema}sink_result WHERE sink_id = ? "
    "ORDER BY recorded_at DESC, job_id DESC LIMIT ?)"
)

_OUTCOMES: Final = (
    "SELECT job_id, recorded_at, outcome FROM {schema}sink_result WHERE sink_id = ? "
    "ORDER BY recorded_at DESC, job_id DESC LIMIT ?"
)

KEPT_OUTCOMES: Final = 100
"""How many jobs' outcomes a store keeps per sink id; older ones are deleted."""

_SOURCE_IDS: Final = (
    "SELECT source_id FROM {schema}source_fence "
    "UNION SELECT source_id FROM {schema}source_epoch_state ORDER BY 1"
)


class SqlCommitStateStore(abc.ABC):
    """The operator's questions of a SQL commit state store; each store adds `acquire`.

    Besides the contract, the store answers an operator's questions without
    acquiring anything: which sink ids it knows (`sink_ids`), their `epochs`,
    `jobs` and `origin`; which source ids it knows (`source_ids`) and their
    `source_epochs`.
    """

    _sink_lease: ClassVar[type[SqlSinkLease]] = SqlSinkLease
    """The class of the store's sink leases."""

    def acquire_source(self, source_id: str, *, job_id: str) -> SourceLease:
        """Take the source id for this driver, without waiting.

        As ``acquire`` for a sink id, with a lock of the source id's own (a lock
        file ``source-<digest>.lock`` beside the SQLite file; in PostgreSQL an
        advisory key from ``"sinkv2 source"``) and a fencing token of its own in
        ``source_fence``: a sink id of the same name is independent of it.

        Raises:
            SinkConfigurationError: ``source_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the source id, or this
                process holds it through a lease not released yet; the message
                names the holder.
            CommitStateError: The store is unreadable, of a newer layout, or cannot
                be reached.
        """
        check_name("source_id", source_id, "pass the source's stable id, the same in every run")
        token, hold = self._take(SOURCES, source_id, job_id)
        return SqlSourceLease(
            dialect=self._dialect,
            keyspace=SOURCES,
            key=source_id,
            job_id=job_id,
            fencing_token=token,
            hold=hold,
        )

    def _acquire_sink(self, sink_id: str, job_id: str) -> SqlSinkLease:
        """What each store's ``acquire`` does, with the checks in its order."""
        check_name("sink_id", sink_id, "pass the sink's stable id, the same in every run")
        token, hold = self._take(SINKS, sink_id, job_id)
        lease_class = self._sink_lease
        return lease_class(
            dialect=self._dialect, sink_id=sink_id, job_id=job_id, fencing_token=token, hold=hold
        )

    def sink_ids(self) -> list[str]:
        """Every sink id the store has a record of (acquired, epochs, jobs or origin), sorted.

        Read-only; takes no lock, so it works while drivers hold sink ids. An empty
        list if the store does not exist yet (it is not created).

        Raises:
            CommitStateError: The store cannot be read, or is of another layout.
        """
        rows = self._rows("list sink ids", render(self._dialect, _SINK_IDS))
        return [str(sink_id) for (sink_id,) in rows]

    def epochs(self, sink_id: str, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of ``sink_id`` with one of ``statuses`` (all if none), by epoch.

        What `SinkLease.epochs` returns, read without acquiring the sink id: a
        snapshot that a driver holding it may change at any moment.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str, or a status
                is not an `EpochStatus`.
            CommitStateError: The store cannot be read, or is of another layout.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        wanted = check_statuses(statuses)
        query = epochs_query(self._dialect, len(wanted))
        rows = self._rows(f"list the epochs of sink {sink_id!r}", query, sink_id, *wanted)
        return [record_from_row(row, self._dialect) for row in rows]

    def jobs(self, sink_id: str) -> list[str]:
        """Every job recorded for ``sink_id`` and not finished, oldest first.

        Unlike `SinkLease.unfinished_jobs`, the holder's own running job is included.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
            CommitStateError: The store cannot be read, or is of another layout.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        query = render(
            self._dialect,
            "SELECT job_id FROM {schema}sink_job WHERE sink_id = ? ORDER BY started_at, job_id",
        )
        rows = self._rows(f"list the jobs of sink {sink_id!r}", query, sink_id)
        return [str(job_id) for (job_id,) in rows]

    def origin(self, sink_id: str) -> str | None:
        """The stream ``sink_id`` is bound to (`SinkLease.bind_origin`), or ``None``.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
            CommitStateError: The store cannot be read, or is of another layout.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        query = render(self._dialect, "SELECT origin FROM {schema}sink_origin WHERE sink_id = ?")
        rows = self._rows(f"read the origin of sink {sink_id!r}", query, sink_id)
        return str(rows[0][0]) if rows else None

    def record_outcome(self, sink_id: str, outcome: JobOutcome) -> bool:
        """Keep what job ``outcome.job_id`` of ``sink_id`` ended with, replacing its last.

        Not fenced, and not part of any epoch's transaction: an outcome is a report
        for the driver (``sinkv2_spark.last_result``), recorded after the fact. Only
        the newest `KEPT_OUTCOMES` jobs of a sink id are kept. Nothing is recorded
        when the store does not exist yet (a process that does not share it, such
        as an executor on another host with a SQLite store): ``False``.

        Raises:
            SinkConfigurationError: ``sink_id`` or ``job_id`` is not a non-empty str.
            CommitStateError: The store cannot be written.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        job_id = outcome.job_id
        check_name("job_id", job_id, "pass the job's id")
        text = encode_outcome(outcome)
        dialect = self._dialect
        with self._reading(f"record an outcome of sink {sink_id!r}") as connection:
            if connection is None:
                return False
            with dialect.transaction(connection):
                connection.execute(
                    render(dialect, _RECORD_OUTCOME), (sink_id, job_id, time.time(), text)
                )
                connection.execute(
                    render(dialect, _PRUNE_OUTCOMES), (sink_id, sink_id, KEPT_OUTCOMES)
                )
        return True

    def outcomes(self, sink_id: str, *, limit: int = KEPT_OUTCOMES) -> list[JobOutcome]:
        """The newest ``limit`` recorded job outcomes of ``sink_id``, newest first.

        Read-only, as the other questions; an empty list if none was recorded.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
            CommitStateError: The store cannot be read, is of another layout, or
                holds an outcome this release cannot read.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        query = render(self._dialect, _OUTCOMES)
        rows = self._rows(f"read the outcomes of sink {sink_id!r}", query, sink_id, limit)
        where = self._dialect.where
        return [decode_outcome(str(text), where=where) for _, _, text in rows]

    def source_ids(self) -> list[str]:
        """Every source id the store has a record of (acquired, or epochs), sorted.

        Read-only; takes no lock, so it works while drivers hold source ids. An
        empty list if the store does not exist yet (it is not created).

        Raises:
            CommitStateError: The store cannot be read, or is of another layout.
        """
        rows = self._rows("list source ids", render(self._dialect, _SOURCE_IDS))
        return [str(source_id) for (source_id,) in rows]

    def source_epochs(self, source_id: str) -> list[SourceEpochRecord]:
        """The records of ``source_id``, by epoch, read without acquiring it.

        A snapshot that a driver holding the source id may change at any moment.

        Raises:
            SinkConfigurationError: ``source_id`` is not a non-empty str.
            CommitStateError: The store cannot be read, or is of another layout.
        """
        check_name("source_id", source_id, "pass the source's stable id")
        query = source_epochs_query(self._dialect)
        rows = self._rows(f"list the epochs of source {source_id!r}", query, source_id)
        return [source_record_from_row(row, self._dialect) for row in rows]

    def _rows(self, action: str, query: str, *params: object) -> list[Any]:
        """The rows ``query`` returns; none if the store has no tables yet."""
        with self._reading(action) as connection:
            return [] if connection is None else connection.execute(query, params).fetchall()

    @property
    @abc.abstractmethod
    def _dialect(self) -> Dialect:
        """The store's dialect."""

    @abc.abstractmethod
    def _take(self, keyspace: Keyspace, key: str, job_id: str) -> tuple[int, Hold]:
        """Lock ``key`` of ``keyspace`` without waiting, advance its fencing token.

        Checks ``job_id`` first. Returns the new token and what keeps the id.

        Raises:
            SinkConfigurationError: ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the id.
            CommitStateError: The store cannot be opened or written.
        """

    @abc.abstractmethod
    def _reading(self, action: str) -> AbstractContextManager[Connection | None]:
        """A short-lived connection; ``None`` if the store has no tables yet.

        Driver errors inside become `CommitStateError` naming ``action``.
        """
