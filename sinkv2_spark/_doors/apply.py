"""`SinkTopologyTranslator`: run a Sink V2 sink over a Spark DataFrame, exactly once.

One ``apply`` call is one job of the sink id and one epoch of its commit history,
driven by the engine-neutral `sinkv2.runtime.CommitCoordinator`::

    inspect_sink(sink), check the arguments             before any Spark job
    coordinator.open()        acquire the sink id, record the job, finish dead jobs
    coordinator.run_epoch()   skip / recommit / write (SparkWriterStage), pre-commit
                              (committable DataFrames), record Pending, commit, record
                              Committed
    coordinator.finish()      remove everything the job staged, forget the job

This module holds only the Spark-facing checks; the Spark engine is ``sinkv2_spark._engine``,
the argument rules every door shares are ``sinkv2_spark._rules.arguments``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final, overload

from sinkv2 import DeliveryGuarantee, inspect_sink
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    CommitCoordinator,
    CommitRetryPolicy,
    CommitStateStore,
    SinkResult,
    SqliteCommitStateStore,
    StageListener,
)
from sinkv2_spark._doors.apply_stream import SinkStreamingQuery, start_stream
from sinkv2_spark._engine.committable_streams import SparkCommittableStreams, pre_write
from sinkv2_spark._engine.connect import is_connect
from sinkv2_spark._engine.native_write import batch_writer_stage
from sinkv2_spark._rules.arguments import check_checkpoint_id, check_guarantee, check_sink_id
from sinkv2_spark._rules.options import check_state_store
from sinkv2_spark._rules.preflight import check_loadable, check_shippable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["SinkTopologyTranslator", "StageListener"]


def _check_dataframe(df: object, *, streaming: bool = False) -> DataFrame:
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    if not isinstance(df, DataFrame):
        raise SinkConfigurationError(
            f"apply() takes a pyspark.sql.DataFrame (got {type(df).__name__}); "
            "build one with spark.createDataFrame(...) or spark.read"
        )
    if streaming and is_connect(df):
        raise SinkConfigurationError(
            "a streaming apply() needs a classic SparkSession: Spark Connect runs a "
            "foreachBatch function in a Python process of the server, away from the "
            "driver's commit coordinator. Batch DataFrames of a Connect session are "
            "supported; for streams, use a classic session"
        )
    if not is_connect(df) and getattr(df, "_jdf", None) is None:
        raise SinkConfigurationError(
            f"apply() takes a classic or a Spark Connect DataFrame (got {type(df).__name__} "
            "without a JVM handle); build it with a SparkSession's own methods"
        )
    return df


@final
class SinkTopologyTranslator:
    """Compiles a Sink V2 sink onto Spark stages and runs it (batch).

    Args:
        state_store: Where epochs are recorded: a store, or a SQLite file or
            ``postgresql://`` URL (as the data source's ``state_store`` option).
            Defaults to `SqliteCommitStateStore` at its default path
            (``$SINKV2_STATE_DIR`` or ``./.sinkv2/commit_state.sqlite``).
        retry_policy: Commit retry budget and backoff (Flink's defaults).
    """

    def __init__(
        self,
        *,
        state_store: CommitStateStore | str | os.PathLike[str] | None = None,
        retry_policy: CommitRetryPolicy | None = None,
    ) -> None:
        store = check_state_store(state_store)
        self._explicit_store = store
        self._store = store if store is not None else SqliteCommitStateStore()
        self._retry_policy = retry_policy or CommitRetryPolicy()

    @property
    def state_store(self) -> CommitStateStore:
        """The commit state store this translator records epochs in."""
        return self._store

    @overload
    def apply(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str | None = None,
        checkpoint_id: int | None = None,
        on_stage: StageListener | None = None,
    ) -> SinkResult: ...

    @overload
    def apply(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str,
        checkpoint_location: str,
        trigger: Mapping[str, Any] | None = None,
        state_store: CommitStateStore | str | os.PathLike[str] | None = None,
        decoupled_commit: bool = False,
        query_name: str | None = None,
        guarantee: DeliveryGuarantee | None = None,
        on_stage: StageListener | None = None,
    ) -> SinkStreamingQuery: ...

    def apply(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str | None = None,
        checkpoint_id: int | None = None,
        on_stage: StageListener | None = None,
        checkpoint_location: str | None = None,
        trigger: Mapping[str, Any] | None = None,
        state_store: CommitStateStore | str | os.PathLike[str] | None = None,
        decoupled_commit: bool = False,
        query_name: str | None = None,
        guarantee: DeliveryGuarantee | None = None,
    ) -> SinkResult | SinkStreamingQuery:
        """Write ``df`` into ``sink`` and commit it, exactly once per epoch.

        A batch DataFrame is one epoch, written and committed before this returns.
        A streaming DataFrame starts a query (``foreachBatch``) and returns its
        handle; each micro-batch is a checkpoint (micro-batch ``b`` is checkpoint
        ``b + 1``), committed exactly once, with writer states carried from one to
        the next.

        Args:
            df: A batch or streaming DataFrame. Each partition (after the sink's
                pre-write topology) is one writer subtask. A batch DataFrame may be a
                Spark Connect one: its plan still runs once, but writers cannot ask
                for their parallelism (``get_number_of_parallel_subtasks()`` raises);
                streaming ones must be classic.
            sink: Any Sink V2 sink.
            sink_id: The stable name of this sink's commit history. Batch: defaults
                to the sink's class path; set it whenever one class writes to more
                than one destination; required with ``checkpoint_id``. Streaming:
                required, and one stream's own.
            checkpoint_id: Batch only. Makes the run idempotent: if this epoch of
                ``sink_id`` is committed, nothing is written again; if a run of it
                died after recording its committables (Pending), they are committed
                without rewriting. Without it, each run is a new epoch. (Any run of
                the sink id first commits the pending epochs that dead runs with a
                checkpoint id left, aborts those without one, and removes what dead
                runs staged.)
            on_stage: Progress callback, see `StageListener`.
            checkpoint_location: Streaming only, required: Spark's checkpoint
                location for the query. The commit state store lives in its
                ``sinkv2/`` directory unless ``state_store`` is given (required
                when the location is not a local path).
            trigger: Streaming only: one keyword of ``DataStreamWriter.trigger`` as
                a dict, e.g. ``{"availableNow": True}``; Spark's default otherwise.
            state_store: Streaming only: where epochs are recorded, instead of next
                to the checkpoint (or the translator's store, if it was given one):
                a store, or a SQLite file or ``postgresql://`` URL.
            decoupled_commit: Streaming only: commit micro-batch N on a driver
                thread while N + 1 writes, still in order; a failed commit fails the
                query at the next micro-batch, and a restart finishes it.
            query_name: Streaming only: Spark's query name.
            guarantee: Streaming only: the guarantee the query needs; refused before
                the query starts if the sink's shape cannot give it (exactly-once
                needs a committer). The source must be replayable too: a socket
                source is reported with a warning.

        Returns:
            Batch: what was written and committed. Streaming: the started query.

        Raises:
            SinkDefinitionError: The sink does not implement what it claims.
            SinkConfigurationError: An argument is invalid (a streaming DataFrame of
                a Spark Connect session too); or the sink does not
                pickle (the message names the attribute), or Spark's Python workers
                cannot load it (the message says how to ship its module); or
                (streaming) the checkpoint location belongs to another sink id, or
                the sink id to another stream.
            ConcurrentCommitError: Another driver (or query) is running this sink id.
            SinkWriterError: A writer failed; nothing was committed. (A failure outside
                the writers, such as executors lost beyond Spark's retry budget, reaches
                the caller as Spark's own exception; nothing is committed then either.)
            CommitError: The commit failed; the epoch stays pending, and the next run
                of the sink id commits it (or, without a ``checkpoint_id``, aborts it).
        """
        if getattr(df, "isStreaming", False) is True:
            return self._apply_stream(
                df,
                sink,
                sink_id=sink_id,
                checkpoint_id=checkpoint_id,
                on_stage=on_stage,
                checkpoint_location=checkpoint_location,
                trigger=trigger,
                state_store=check_state_store(state_store),
                decoupled_commit=decoupled_commit,
                query_name=query_name,
                guarantee=guarantee,
            )
        streaming_only = {
            "checkpoint_location": checkpoint_location,
            "trigger": trigger,
            "state_store": state_store,
            "query_name": query_name,
            "guarantee": guarantee,
        }
        given = [name for name, value in streaming_only.items() if value is not None]
        if decoupled_commit:
            given.append("decoupled_commit")
        if given:
            raise SinkConfigurationError(
                f"{', '.join(given)} apply to streaming DataFrames only, and this DataFrame "
                "is a batch one; drop them, or read the input with spark.readStream"
            )
        return self._apply_batch(
            df, sink, sink_id=sink_id, checkpoint_id=checkpoint_id, on_stage=on_stage
        )

    def _apply_stream(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str | None,
        checkpoint_id: int | None,
        on_stage: StageListener | None,
        checkpoint_location: str | None,
        trigger: Mapping[str, Any] | None,
        state_store: CommitStateStore | None,
        decoupled_commit: bool,
        query_name: str | None,
        guarantee: DeliveryGuarantee | None,
    ) -> SinkStreamingQuery:
        capabilities = inspect_sink(sink)
        check_guarantee(guarantee, capabilities)
        df = _check_dataframe(df, streaming=True)
        if checkpoint_id is not None:
            raise SinkConfigurationError(
                "checkpoint_id is for batch runs; a stream's checkpoint ids are its "
                "micro-batch ids plus one. Drop checkpoint_id"
            )
        if sink_id is None:
            raise SinkConfigurationError(
                "a streaming apply() needs sink_id: the stable name of the stream's commit "
                "history, e.g. sink_id='orders-to-iceberg'"
            )
        name = check_sink_id(sink_id, sink)
        if checkpoint_location is None:
            raise SinkConfigurationError(
                "a streaming apply() needs checkpoint_location, as Spark's writeStream does: "
                "name a durable directory, e.g. checkpoint_location='/data/checkpoints/orders'"
            )
        if not isinstance(decoupled_commit, bool):
            raise SinkConfigurationError(
                f"decoupled_commit must be a bool (got {decoupled_commit!r})"
            )
        shipped = check_shippable(sink, capabilities)
        check_loadable(df.sparkSession, sink, capabilities, shipped)
        return start_stream(
            df,
            sink,
            capabilities,
            sink_id=name,
            checkpoint_location=checkpoint_location,
            trigger=trigger,
            state_store=state_store if state_store is not None else self._explicit_store,
            retry_policy=self._retry_policy,
            on_stage=on_stage,
            decoupled_commit=decoupled_commit,
            query_name=query_name,
        )

    def _apply_batch(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str | None,
        checkpoint_id: int | None,
        on_stage: StageListener | None,
    ) -> SinkResult:
        capabilities = inspect_sink(sink)
        df = _check_dataframe(df)
        checkpoint = check_checkpoint_id(checkpoint_id)
        if checkpoint is not None and sink_id is None:
            raise SinkConfigurationError(
                "checkpoint_id needs an explicit sink_id: the default (the sink's class path) "
                "is shared by every sink of that class, and another destination's committed "
                "epoch would make this run write nothing. Pass sink_id='<destination name>'"
            )
        name = check_sink_id(sink_id, sink)
        shipped = check_shippable(sink, capabilities)
        check_loadable(df.sparkSession, sink, capabilities, shipped)
        started = time.perf_counter()
        source = pre_write(df, sink, capabilities)  # a plan: no Spark job runs
        planned = time.perf_counter() - started
        stage, schema = batch_writer_stage(source, sink, capabilities, name)
        coordinator = CommitCoordinator(
            sink,
            sink_id=name,
            store=self._store,
            streams=SparkCommittableStreams(df.sparkSession, name),
            retry_policy=self._retry_policy,
            on_stage=on_stage,
            capabilities=capabilities,
            input_schema=schema,
        )
        if capabilities.pre_write_topology:
            coordinator.stage_seconds["pre-write topology"] = planned
        # Ends normally: finish (the job's staging removed); raises: close only, and
        # the next run of the sink id commits or cleans up after this job.
        with coordinator as job:
            return job.run_epoch(stage, checkpoint_id=checkpoint, recovery=job.recovery)
