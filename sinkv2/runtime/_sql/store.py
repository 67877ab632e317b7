"""What both SQL stores answer an operator without acquiring anything, written once.

`SqlCommitStateStore` holds the read-only questions of ``sinkv2 state``: which
sink ids a store knows, their epochs, jobs and origin. Each store says how it
opens a short-lived connection for them (`SqlCommitStateStore._reading`) and in
which dialect; acquiring, and who holds a sink id, are its own.
"""

from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from typing import Any, Final

from sinkv2.runtime._sql.dialect import Connection, Dialect, render
from sinkv2.runtime._sql.lease import check_statuses, epochs_query
from sinkv2.runtime._sql.schema import record_from_row
from sinkv2.runtime._store import EpochRecord, EpochStatus, check_name

__all__ = ["SqlCommitStateStore"]

_SINK_IDS: Final = (
    "SELECT sink_id FROM {schema}sink_fence UNION SELECT sink_id FROM {schema}pending_sink_state "
    "UNION SELECT sink_id FROM {schema}sink_job UNION SELECT sink_id FROM {schema}sink_origin "
    "ORDER BY 1"
)


class SqlCommitStateStore(abc.ABC):
    """The operator's questions of a SQL commit state store; each store adds `acquire`.

    Besides the contract, the store answers an operator's questions without
    acquiring anything: which sink ids it knows (`sink_ids`), their `epochs`,
    `jobs` and `origin`.
    """

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

    def _rows(self, action: str, query: str, *params: object) -> list[Any]:
        """The rows ``query`` returns; none if the store has no tables yet."""
        with self._reading(action) as connection:
            return [] if connection is None else connection.execute(query, params).fetchall()

    @property
    @abc.abstractmethod
    def _dialect(self) -> Dialect:
        """The store's dialect."""

    @abc.abstractmethod
    def _reading(self, action: str) -> AbstractContextManager[Connection | None]:
        """A short-lived connection; ``None`` if the store has no tables yet.

        Driver errors inside become `CommitStateError` naming ``action``.
        """
