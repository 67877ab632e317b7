"""Structured Streaming: a Sink V2 sink behind ``foreachBatch``, exactly once per micro-batch.

Spark numbers micro-batches from 0 and replays the last one whose ``foreachBatch``
did not return (same id, same input); sinkv2 numbers checkpoints from 1
(``INITIAL_CHECKPOINT_ID``). Micro-batch ``b`` is checkpoint ``b + 1``, and each is
one epoch of the sink id, run by `sinkv2.runtime.CheckpointRunner` on one commit
coordinator held for the query's life::

    apply(streaming_df, ...)      checks; the coordinator opens (binds the stream,
                                  commits what a dead run left pending); the query starts
    foreachBatch(df, b)           checkpoint b + 1: skip / recommit / restore writers,
                                  write, record Pending (+ writer states), commit
    stop() / awaitTermination()   commits finish; the job's staging is removed

The commit state store defaults to ``<checkpoint_location>/sinkv2/commit_state.sqlite``,
next to Spark's own checkpoint, so the two are kept, moved and deleted together.

Over 450 lines because the query handle mirrors Spark's ``StreamingQuery`` name for
name (about half the module) next to the one ``foreachBatch`` function that drives it;
the two share the handle's private state (its locks, runner and drain), so splitting
them would only move that sharing across a module line. The epoch procedure itself is
the runtime's; the checkpoint-location claim is ``sinkv2_spark._rules``'.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    CheckpointRunner,
    CommitCoordinator,
    CommitRetryPolicy,
    CommitStateStore,
    Recovery,
    Restore,
    SinkResult,
    SqliteCommitStateStore,
    StageListener,
    drain_writer_states,
)
from sinkv2_spark._engine.committable_streams import SparkCommittableStreams, pre_write
from sinkv2_spark._engine.native_write import stream_writer_stage
from sinkv2_spark._engine.schema import arrow_schema
from sinkv2_spark._rules.checkpoint_location import STATE_DIR, claim_location, local_path, query_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["SinkStreamingQuery", "start_stream"]

logger = logging.getLogger("sinkv2.spark")

RECENT_RESULTS: Final = 100
"""How many `SinkResult`s a `SinkStreamingQuery` keeps (the oldest are dropped)."""

_TRIGGERS: Final = ("processingTime", "once", "availableNow", "continuous")
_NOT_REPLAYABLE: Final = re.compile(r"TextSocket|(?i:format: socket\b)")
"""Spark's socket source in a logical plan: by its class, or unresolved by its short
name. Not any "socket" in the plan, which names columns and file paths too."""

ResultListener = Callable[[SinkResult], None]


@final
class SinkStreamingQuery:
    """A started streaming query writing into a Sink V2 sink; wraps Spark's `StreamingQuery`.

    The Spark query's own methods are here under their Spark names; on top, the
    recent `SinkResult`s (one per micro-batch, the newest `RECENT_RESULTS`) and
    listeners for them. A failure of the sink (a writer, a commit) is reported as
    the sinkv2 error (`SinkWriterError`, `CommitError`, ...), not only as Spark's
    ``StreamingQueryException``.
    """

    def __init__(self, sink_id: str, coordinator: CommitCoordinator) -> None:
        self._sink_id = sink_id
        self._runner: CheckpointRunner  # set by start_stream, before the query starts
        self._coordinator = coordinator
        self._results: collections.deque[SinkResult] = collections.deque(maxlen=RECENT_RESULTS)
        self._listeners: list[ResultListener] = []
        self._lock = threading.Lock()
        self._batch_lock = threading.Lock()  # held by a running micro-batch
        self._query: StreamingQuery | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._stopping = False  # set by stop(): a micro-batch it cuts short is no failure
        self._drain: Callable[[], int] | None = None
        self._recovery = Recovery()

    # --- Spark's StreamingQuery -------------------------------------------------------------

    @property
    def query(self) -> StreamingQuery:
        """The Spark query."""
        assert self._query is not None  # set by start_stream before the handle is returned
        return self._query

    @property
    def id(self) -> str:
        """Spark's query id: the same across restarts from the checkpoint location."""
        return str(self.query.id)

    @property
    def runId(self) -> str:  # Spark's name
        """Spark's id of this run of the query."""
        return str(self.query.runId)

    @property
    def name(self) -> str | None:
        """The query name, if one was given."""
        return self.query.name

    @property
    def sink_id(self) -> str:
        """The sink id the query commits under."""
        return self._sink_id

    @property
    def isActive(self) -> bool:  # Spark's name
        """Whether the query is running."""
        return bool(self.query.isActive)

    @property
    def lastProgress(self) -> dict[str, Any] | None:  # Spark's name
        """Spark's progress report of the last micro-batch."""
        return self.query.lastProgress

    @property
    def recentProgress(self) -> list[dict[str, Any]]:  # Spark's name
        """Spark's recent progress reports."""
        return list(self.query.recentProgress)

    @property
    def status(self) -> dict[str, Any]:
        """Spark's query status."""
        return dict(self.query.status)

    def processAllAvailable(self) -> None:  # Spark's name
        """Block until everything available at the source is processed and committed.

        Raises:
            SinkV2Error: The sink failed (see `exception`).
        """
        try:
            self.query.processAllAvailable()
        except Exception as error:
            raise self._sink_error(error) from error
        self._runner.wait()
        self._runner.raise_commit_failure()

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait for the query to end (Spark's semantics), then finish the sink's job.

        Returns:
            With ``timeout``: whether the query ended in time; else ``None``.

        Raises:
            SinkV2Error: The query failed in the sink (a writer, a commit); the
                Spark exception is its ``__cause__``.
            StreamingQueryException: The query failed outside the sink.
        """
        try:
            ended = (
                self.query.awaitTermination()
                if timeout is None
                else self.query.awaitTermination(timeout)  # type: ignore[arg-type]  # seconds
            )
        except Exception as error:
            self._end(failed=True)
            raise self._sink_error(error) from error
        if timeout is None or ended:
            self._end(failed=False)
            self._runner.raise_commit_failure()
        return ended

    def stop(self, *, drain: bool = False) -> None:
        """Stop the query; a micro-batch running now is cut short, not failed.

        Spark cancels the Spark jobs of a micro-batch it stops, so that micro-batch
        is not committed in Spark's checkpoint and the next run replays it (its
        epoch is then skipped, recommitted or written, exactly once). Stopping is
        not a failure of the query: `exception` stays ``None``.

        Writer states of the last checkpoint stay in the commit state store and are
        restored when the query is started again from its checkpoint location: an
        async sink's buffered requests are sent then. With ``drain=True`` they are
        sent now: writers are restored from them on the driver, end their input
        (``flush(True)``), and the states left (requests that could not be sent)
        replace the recorded ones.

        The drain waits for a micro-batch still running in its callback, as the end
        of the job does. If it fails, the job ends as failed and the recorded states
        stay for the next run.

        Raises:
            SinkConfigurationError: ``drain`` on a sink with a committer, or after
                `awaitTermination` finished the sink's job (its commit coordinator is
                closed then): to drain a query that ends by itself (``availableNow``),
                call `processAllAvailable` and then ``stop(drain=True)``.
        """
        self._stopping = True
        self.query.stop()
        if not drain or self._drain is None:
            self._end(failed=self._error is not None)
            return
        with self._lock:
            ended = self._ended
        if ended:
            raise SinkConfigurationError(
                f"sink {self._sink_id!r}: stop(drain=True) after awaitTermination() finished "
                "the sink's job cannot drain; the writer states stay recorded and the next run "
                "of the query sends them. To drain a query that ends by itself, call "
                "processAllAvailable() and then stop(drain=True)"
            )
        try:
            with self._batch_lock:  # a micro-batch still running in a callback finishes first
                if self._error is None:
                    self._runner.wait()
                    drained = self._drain()
                    logger.info(
                        "sink %r: drained %d writer state(s) on stop", self._sink_id, drained
                    )
        except BaseException:
            self._end(failed=True)
            raise
        self._end(failed=self._error is not None)

    def exception(self) -> BaseException | None:
        """Why the query failed: the sinkv2 error if the sink failed, else Spark's; or ``None``.

        A decoupled commit that failed after the last micro-batch is the sink's
        failure too (``awaitTermination`` raises it), though Spark saw no error.
        """
        if self._error is not None:
            return self._error
        try:
            self._runner.raise_commit_failure()
        except BaseException as error:  # noqa: BLE001  # reported, not raised
            return error
        return self.query.exception()

    # --- sinkv2 -----------------------------------------------------------------------------

    @property
    def recovery(self) -> Recovery:
        """What starting the query finished of earlier runs.

        Pending checkpoints it committed, and dead jobs whose staging it removed.
        """
        return self._recovery

    @property
    def recent_results(self) -> list[SinkResult]:
        """The `SinkResult` of each recent micro-batch, oldest first."""
        with self._lock:
            return list(self._results)

    @property
    def last_result(self) -> SinkResult | None:
        """The newest micro-batch's `SinkResult`, or ``None`` before the first."""
        with self._lock:
            return self._results[-1] if self._results else None

    def add_result_listener(self, listener: ResultListener) -> None:
        """Call ``listener`` with each micro-batch's `SinkResult` once it is committed.

        Listeners run on the driver thread that committed (the commit thread with
        ``decoupled_commit``); an exception in one is logged, never raised.
        """
        if not callable(listener):
            raise SinkConfigurationError(
                f"add_result_listener() takes a callable (got {type(listener).__name__}); "
                "pass a function of one SinkResult"
            )
        with self._lock:
            self._listeners.append(listener)

    def _record(self, result: SinkResult) -> None:
        with self._lock:
            self._results.append(result)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(result)
            except Exception:
                logger.exception("sink %r: a result listener failed", self._sink_id)

    def _failed(self, error: BaseException) -> None:
        self._error = error

    def _sink_error(self, error: BaseException) -> BaseException:
        return self._error if self._error is not None else error

    def _end(self, *, failed: bool) -> None:
        """Finish the sink's job once: wait for commits, remove staging, release the id."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        with self._batch_lock:  # a micro-batch still running in a callback finishes first
            self._finish(failed=failed)

    def _finish(self, *, failed: bool) -> None:
        """Finish the job, or only close it if an epoch is left pending.

        A micro-batch cut short by `stop` may have left its epoch pending (recorded,
        not committed); its staged output must survive for the next run, which
        commits it. So the job is finished (its staging removed) only when no
        epoch is pending and nothing failed (checked again here: a micro-batch
        may have failed while `_end` waited for it).
        """
        self._runner.close()
        try:
            self._runner.raise_commit_failure()
            if failed or self._error is not None:
                raise RuntimeError("the query failed")
            if self._coordinator.pending_records():
                raise RuntimeError("an epoch is pending")
            keep = self._runner.referenced_attempts()
        except BaseException:  # noqa: BLE001  # pending epochs: the next run finishes them
            self._coordinator.close()
            return
        self._coordinator.finish(keep_attempt_tokens=keep)

    def __repr__(self) -> str:
        state = "active" if self._query is not None and self.isActive else "stopped"
        return f"<SinkStreamingQuery sink_id={self._sink_id!r} {state}>"


@final
class _MicroBatches:
    """The ``foreachBatch`` function: micro-batch ``b`` is checkpoint ``b + 1``."""

    def __init__(
        self,
        handle: SinkStreamingQuery,
        runner: CheckpointRunner,
        sink: Any,
        capabilities: SinkCapabilities,
        sink_id: str,
    ) -> None:
        self._handle = handle
        self._runner = runner
        self._sink = sink
        self._capabilities = capabilities
        self._sink_id = sink_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self._handle._batch_lock:
            self._run(batch, batch_id)

    def _run(self, batch: DataFrame, batch_id: int) -> None:
        if self._handle._ended:
            raise SinkConfigurationError(
                f"sink {self._sink_id!r}: micro-batch {batch_id} arrived after the query's "
                "handle was stopped; start the query again with apply()"
            )
        try:
            started = time.perf_counter()
            source = pre_write(batch, self._sink, self._capabilities)
            planned = time.perf_counter() - started
            stage = stream_writer_stage(source, self._sink, self._capabilities, self._sink_id)

            def write(job_id: str, checkpoint_id: int, restore: Restore | None) -> Any:
                output = stage(job_id, checkpoint_id, restore)
                if not self._capabilities.pre_write_topology:
                    return output
                seconds = {"pre-write topology": planned, **output.stage_seconds}
                return _with_seconds(output, seconds)

            self._runner.run(write, batch_id + 1)
        except BaseException as error:
            if self._handle._stopping:
                # Spark cancelled the micro-batch's jobs: not committed, replayed next run.
                logger.info(
                    "sink %r: micro-batch %d was cut short by stop() (%s); the next run of "
                    "the query replays it",
                    self._sink_id,
                    batch_id,
                    type(error).__name__,
                )
            else:
                self._handle._failed(error)
            raise


def _with_seconds(output: Any, seconds: Mapping[str, float]) -> Any:
    import attrs  # noqa: PLC0415

    return attrs.evolve(output, stage_seconds=dict(seconds))


def start_stream(
    df: DataFrame,
    sink: Any,
    capabilities: SinkCapabilities,
    *,
    sink_id: str,
    checkpoint_location: str,
    trigger: Mapping[str, Any] | None,
    state_store: CommitStateStore | None,
    retry_policy: CommitRetryPolicy,
    on_stage: StageListener | None,
    decoupled_commit: bool,
    query_name: str | None,
) -> SinkStreamingQuery:
    """Open the coordinator for the stream and start the query (see module doc).

    Raises:
        SinkConfigurationError: A bad argument, a checkpoint location that belongs to
            another sink id, or a sink id that belongs to another stream.
        ConcurrentCommitError: Another running query or job holds the sink id.
        CommitError: A checkpoint a dead run left pending failed to commit.
    """
    location = _check_location(checkpoint_location)
    trigger_kwargs = _check_trigger(trigger)
    local = local_path(location)
    if state_store is None:
        if local is None:
            raise SinkConfigurationError(
                f"the checkpoint location {location!r} is not a local path, so the commit "
                "state store cannot live next to it; pass state_store= explicitly (e.g. "
                "SqliteCommitStateStore('/durable/local/path/commit_state.sqlite'))"
            )
        state_store = SqliteCommitStateStore(local / STATE_DIR / "commit_state.sqlite")
    origin = f"checkpoint {location}"
    if local is not None:
        claim_location(local, sink_id)
        # Spark's query id moves with the checkpoint directory and changes when it is
        # reset (micro-batch ids start again at 0): the stream's identity.
        origin = f"spark query {query_id(local)}"
    _warn_if_not_replayable(df, sink_id, capabilities)
    coordinator = CommitCoordinator(
        sink,
        sink_id=sink_id,
        store=state_store,
        streams=SparkCommittableStreams(df.sparkSession, sink_id),
        retry_policy=retry_policy,
        on_stage=on_stage,
        capabilities=capabilities,
        input_schema=arrow_schema(df),
    )
    recovery = coordinator.open(origin=origin, keep_restorable=True)
    try:
        handle = SinkStreamingQuery(sink_id, coordinator)
        handle._recovery = recovery
        runner = CheckpointRunner(
            coordinator, decoupled=decoupled_commit, on_result=handle._record, recovery=recovery
        )
        handle._runner = runner
        handle._drain = lambda: runner.drain(
            lambda job_id, restore: drain_writer_states(sink, capabilities, job_id, restore)
        )
        writer = df.writeStream.foreachBatch(
            _MicroBatches(handle, runner, sink, capabilities, sink_id)
        ).option("checkpointLocation", location)
        if trigger_kwargs:
            writer = writer.trigger(**trigger_kwargs)
        if query_name is not None:
            writer = writer.queryName(query_name)
        handle._query = writer.start()
    except BaseException:
        coordinator.close()
        raise
    logger.info(
        "sink %r: streaming query %s started (checkpoint location %s, job %s)",
        sink_id,
        handle.id,
        location,
        coordinator.job_id,
    )
    return handle


def _check_location(location: object) -> str:
    if not isinstance(location, str) or not location.strip():
        raise SinkConfigurationError(
            f"checkpoint_location must be a non-empty str (got {location!r}); a streaming "
            "apply() needs one, as Spark's writeStream does: name a durable directory, e.g. "
            "'/data/checkpoints/orders'"
        )
    return location


def _check_trigger(trigger: object) -> dict[str, Any]:
    if trigger is None:
        return {}
    if not isinstance(trigger, Mapping) or len(trigger) != 1:
        raise SinkConfigurationError(
            f"trigger takes one keyword of DataStreamWriter.trigger as a dict (got "
            f"{trigger!r}); e.g. {{'processingTime': '10 seconds'}} or {{'availableNow': True}}"
        )
    (name,) = trigger
    if name not in _TRIGGERS:
        raise SinkConfigurationError(
            f"unknown trigger {name!r}; use one of {', '.join(_TRIGGERS[:3])}"
        )
    if name == "continuous":
        raise SinkConfigurationError(
            "the continuous trigger has no micro-batches, so there are no checkpoints to "
            "commit exactly once; use {'processingTime': ...} or {'availableNow': True}"
        )
    return dict(trigger)


def _warn_if_not_replayable(df: DataFrame, sink_id: str, capabilities: SinkCapabilities) -> None:
    try:
        plan = str(df._jdf.queryExecution().logical().toString())
    except Exception:  # noqa: BLE001  # best effort: the warning is advice
        return
    if _NOT_REPLAYABLE.search(plan):
        logger.warning(
            "sink %r: the stream reads a source Spark cannot replay (a socket); after a "
            "failure the micro-batch that was being written is lost, so the sink's %s cannot "
            "hold end to end. Read from a replayable source (files, Kafka, rate) for "
            "exactly-once",
            sink_id,
            "exactly-once" if capabilities.committer else "delivery guarantee",
        )
