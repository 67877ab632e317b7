"""What the data-source doors' jobs did, brought to the user's driver.

``df.write.format("sinkv2")`` and ``df.writeStream.format("sinkv2")`` run a job's
writers and commit in Spark's Python workers, which the driver never hears from
but through Spark's own exceptions. So the doors record each job's outcome where
it happens - its `SinkResult` after the commit, or the error a writer task or the
commit failed with, as a `sinkv2.runtime.JobOutcome` - in the commit state store,
which driver and workers share (its ``record_outcome`` and ``outcomes``). The
driver reads it:

- `last_result`: the newest job's `SinkResult`, or its error raised readably, as
  ``apply()`` returns or raises;
- `SinkResultListener`: a Spark ``StreamingQueryListener`` that collects (and hands
  to a callback) each micro-batch's result and a failed query's error.

Recording never fails a job: a store that cannot be written is logged (WARNING,
``sinkv2.spark``) and the job goes on. A SQLite store is recorded into only where
its file exists, so executors on other hosts record nothing (their errors still
reach the driver in Spark's exception).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

from pyspark.sql.streaming.listener import StreamingQueryListener

from sinkv2.errors import CommitError, SinkConfigurationError, SinkV2Error, SinkWriterError
from sinkv2.runtime import (
    CommitStateStore,
    JobError,
    JobOutcome,
    PostgresCommitStateStore,
    SinkResult,
    SqliteCommitStateStore,
)
from sinkv2.text import describe
from sinkv2_spark._doors.datasource_stream_options import stream_store
from sinkv2_spark._engine.failure import MAX_TRACEBACK_CHARS
from sinkv2_spark._rules.options import open_store

if TYPE_CHECKING:
    from sinkv2_spark._engine.failure import WriterFailure

__all__ = [
    "SinkResultListener",
    "last_result",
    "readable_error",
    "record_error",
    "record_result",
    "writer_error",
]

logger = logging.getLogger("sinkv2.spark")

SqlStore = SqliteCommitStateStore | PostgresCommitStateStore
"""The stores that keep job outcomes."""

_SEEN_LIMIT: Final = 20
"""How many of a sink id's newest outcomes the listener reads at each progress event."""


def record_result(
    store: CommitStateStore, job_id: str, result: SinkResult, *, batch_id: int | None = None
) -> None:
    """Record ``result`` as job ``job_id``'s outcome (a door's commit, after it finished)."""
    _record(store, result.sink_id, JobOutcome(job_id=job_id, batch_id=batch_id, result=result))


def record_error(
    store: CommitStateStore,
    sink_id: str,
    job_id: str,
    error: JobError,
    *,
    batch_id: int | None = None,
) -> None:
    """Record ``error`` as job ``job_id``'s outcome (where it happened, before Spark wraps it)."""
    _record(store, sink_id, JobOutcome(job_id=job_id, batch_id=batch_id, error=error))


def writer_error(failure: WriterFailure, payload: SinkWriterError | None) -> JobError:
    """What a writer task's failure records: the user's exception, and where it happened.

    Args:
        failure: What the writer task raised; its cause is the user's exception.
        payload: The failure decoded (its message says where, its traceback is the
            cause's), if it decodes.
    """
    cause = failure.__cause__ if failure.__cause__ is not None else failure
    headline = f"{type(cause).__name__}: {cause}"
    where = str(payload).split("\n\nIn the writer's worker", 1)[0] if payload else str(failure)
    where = where.removesuffix(". The job failed and nothing was committed.")
    return JobError(
        failed_in="writer",
        type_name=type(cause).__name__,
        message=str(cause),
        where=where.removesuffix(f": {headline}"),
        traceback=(payload.worker_traceback or "") if payload else "",
    )


def commit_error(error: BaseException, where: str) -> JobError:
    """What a failed commit records: its exception, and what was being committed."""
    return JobError(
        failed_in="commit",
        type_name=type(error).__name__,
        message=str(error),
        where=where,
        traceback="".join(traceback.format_exception(error))[-MAX_TRACEBACK_CHARS:],
    )


def readable_error(sink_id: str, job_id: str, error: JobError) -> SinkV2Error:
    """The exception the driver raises for a recorded error: the user's type and message first.

    A writer's error becomes `SinkWriterError` (the job committed nothing), a
    commit's `CommitError` (the epoch stays pending; the next run commits it).
    """
    if error.failed_in == "writer":
        return SinkWriterError(
            f"{error.headline()}\n  {error.where} (sink {sink_id!r}, job {job_id}). The "
            "job failed and nothing of it was committed.",
            subtask_id=-1,
            position=None,
            worker_traceback=error.traceback or None,
        )
    return CommitError(
        f"{error.headline()}\n  while committing {error.where} (sink {sink_id!r}, job "
        f"{job_id}). An epoch it recorded Pending stays pending, and the next run of the "
        "sink id commits it."
        + (
            f"\n\nIn the commit's worker (last lines):\n{error.traceback}"
            if error.traceback
            else ""
        )
    )


def last_result(
    sink_id: str,
    *,
    state_store: str | CommitStateStore | None = None,
    checkpoint_location: str | None = None,
) -> SinkResult | None:
    """The result of ``sink_id``'s newest job through ``format("sinkv2")``, read on the driver.

    What ``apply()`` returns, for the data-source doors: after ``df.write...save()``
    the run's `SinkResult` (``ALREADY_COMMITTED`` for a checkpoint id committed
    before, ``RECOMMITTED`` for one a crashed run left pending); after a stream's
    micro-batch, that checkpoint's. If the newest job failed, its error is raised
    as ``apply()`` would raise it, the user's exception type and message first.

    Args:
        sink_id: The ``sink_id`` option of the write.
        state_store: The ``state_store`` option of the write (a SQLite file or a
            ``postgresql://`` URL), or a store; by default the one the write used
            without it: ``apply()``'s, or, given ``checkpoint_location``, a
            stream's (next to its checkpoint).
        checkpoint_location: A stream's ``checkpointLocation`` option.

    Returns:
        The newest job's result; ``None`` if no job of ``sink_id`` recorded one in
        this store (a wrong store, or a write that failed before it started).

    Raises:
        SinkWriterError: The newest job's writer failed; nothing was committed.
        CommitError: The newest job's commit failed; it stays pending.
        SinkConfigurationError: A bad argument.
        CommitStateError: The store cannot be read.
    """
    outcomes = _outcomes(_store(sink_id, state_store, checkpoint_location), sink_id, limit=1)
    if not outcomes:
        return None
    (outcome,) = outcomes
    if outcome.error is not None:
        raise readable_error(sink_id, outcome.job_id, outcome.error)
    return outcome.result


@final
class SinkResultListener(StreamingQueryListener):
    """A Spark ``StreamingQueryListener`` that brings a sinkv2 stream's results to the driver.

    Add it to the session before starting a ``writeStream.format("sinkv2")``
    query: ``spark.streams.addListener(SinkResultListener("orders", ...))``. After
    each micro-batch it reads the new results of ``sink_id`` from the commit
    state store, appends them to `results` and calls ``on_result``; when the
    query fails, the error a writer or commit recorded goes to `errors` and
    ``on_error`` (readable: the user's exception type and message first). The
    first result after a restart says what recovery did (``RECOMMITTED``,
    ``recommitted_epochs``, ``cleaned_jobs``).

    Args:
        sink_id: The query's ``sink_id`` option.
        checkpoint_location: The query's ``checkpointLocation`` (finds its default
            store); or
        state_store: its ``state_store`` option, or a store.
        on_result: Called with each new `SinkResult` (e.g. ``print``).
        on_error: Called with each failed job's error; by default it is logged
            (ERROR, ``sinkv2.spark``).

    Raises:
        SinkConfigurationError: A bad argument, or neither a checkpoint location
            nor a store.
    """

    def __init__(
        self,
        sink_id: str,
        *,
        checkpoint_location: str | None = None,
        state_store: str | CommitStateStore | None = None,
        on_result: Callable[[SinkResult], object] | None = None,
        on_error: Callable[[SinkV2Error], object] | None = None,
    ) -> None:
        if checkpoint_location is None and state_store is None:
            raise SinkConfigurationError(
                "SinkResultListener needs the stream's checkpoint_location= (its store is "
                "next to it) or its state_store= option; pass the one the query uses"
            )
        self._sink_id = sink_id
        self._store = _store(sink_id, state_store, checkpoint_location)
        self._on_result = on_result
        self._on_error = on_error
        self.results: list[SinkResult] = []
        """Every result seen, oldest first."""
        self.errors: list[SinkV2Error] = []
        """Every failed job's error seen, oldest first."""
        self._seen = {o.job_id for o in _outcomes(self._store, sink_id, limit=_SEEN_LIMIT)}

    def onQueryStarted(self, event: Any) -> None:  # Spark's name
        """Nothing happened yet."""

    def onQueryProgress(self, event: Any) -> None:  # Spark's name
        """A micro-batch ended: report the results recorded since the last one."""
        self._report()

    def onQueryIdle(self, event: Any) -> None:  # Spark's name
        """No new data: nothing to report."""

    def onQueryTerminated(self, event: Any) -> None:  # Spark's name
        """The query stopped or failed: report what its last jobs recorded."""
        self._report()

    def _report(self) -> None:
        # A listener must not fail Spark's listener bus: a store it cannot read is logged.
        try:
            outcomes = _outcomes(self._store, self._sink_id, limit=_SEEN_LIMIT)
        except SinkV2Error as unreadable:
            logger.warning("sink %r: could not read the results: %s", self._sink_id, unreadable)
            return
        for outcome in reversed(outcomes):  # oldest first
            if outcome.job_id in self._seen:
                continue
            self._seen.add(outcome.job_id)
            if outcome.result is not None:
                self.results.append(outcome.result)
                if self._on_result is not None:
                    self._on_result(outcome.result)
            elif outcome.error is not None:
                error = readable_error(self._sink_id, outcome.job_id, outcome.error)
                self.errors.append(error)
                if self._on_error is not None:
                    self._on_error(error)
                else:
                    logger.error("sink %r: %s", self._sink_id, error)


def _store(
    sink_id: object,
    state_store: str | CommitStateStore | None,
    checkpoint_location: str | None,
) -> SqlStore:
    if not isinstance(sink_id, str) or not sink_id:
        raise SinkConfigurationError(
            f"'sink_id' must be the write's non-empty sink_id option (got {describe(sink_id)})"
        )
    if state_store is None and checkpoint_location is not None:
        store: object = stream_store(None, checkpoint_location)
    elif state_store is None or isinstance(state_store, str):
        store = open_store(state_store)
    else:
        store = state_store
    if not isinstance(store, (SqliteCommitStateStore, PostgresCommitStateStore)):
        raise SinkConfigurationError(
            f"'state_store' must be a SQLite file, a postgresql:// URL or a sinkv2 SQL store "
            f"(got {describe(state_store)}); pass the write's state_store option"
        )
    return store


def _outcomes(store: SqlStore, sink_id: str, *, limit: int) -> list[JobOutcome]:
    return store.outcomes(sink_id, limit=limit)


def _record(store: CommitStateStore, sink_id: str, outcome: JobOutcome) -> None:
    if not isinstance(store, (SqliteCommitStateStore, PostgresCommitStateStore)):
        return
    try:
        store.record_outcome(sink_id, outcome)
    except Exception as error:  # noqa: BLE001  # a report must never fail the job
        logger.warning(
            "sink %r: could not record job %s's outcome in %r (%s: %s); "
            "sinkv2_spark.last_result will not see it",
            sink_id,
            outcome.job_id,
            store,
            type(error).__name__,
            error,
        )
