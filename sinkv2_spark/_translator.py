"""`SinkTopologyTranslator`: run a Sink V2 sink over a Spark DataFrame, exactly once.

One ``apply`` call is one epoch of the sink's commit history::

    inspect_sink(sink)                                   before any Spark job
    acquire the sink id in the commit state store        a second live driver fails here
    abort pending epochs of crashed runs                 sink.abort(committables)
    epoch committed already?  -> return, write nothing
    epoch pending (a run died before committing)?  -> commit its stored committables
    pre-write topology        DataFrame -> DataFrame
    writer stage              mapInArrow(WriterTask).toArrow(): one task per subtask
                              (the plan is executed once; its partitions are the subtasks);
                              Spark keeps the first successful attempt's output
    clean up losing attempts  sink.clean_up_attempts(job_id, winning tokens)
    pre-commit topology       committable DataFrame -> committable DataFrame (checked)
    record Pending            committables, serialized, in the state store
    commit                    Committer.commit with Flink's retry semantics (driver)
    post-commit topology      on the committed committables
    record Committed

Only committables, states and per-subtask counters reach the driver; rows never do.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, final

import msgpack
import pyarrow as pa

from sinkv2 import (
    END_OF_INPUT,
    BasicCommitterInitContext,
    CommitRetryPolicy,
    CommitStateStore,
    EpochRecord,
    EpochStatus,
    SimpleVersionedSerialization,
    SinkCapabilities,
    SinkConfigurationError,
    SinkLease,
    SinkWriterError,
    SqliteCommitStateStore,
    commit_with_retries,
    inspect_sink,
)
from sinkv2._local_stream import COMMITTABLE_COLUMNS, COMMITTABLE_SCHEMA, check_lineage
from sinkv2_spark._result import CommitStatus, SinkResult
from sinkv2_spark._writer_stage import (
    KIND_COMMITTABLE,
    KIND_SUBTASK,
    WRITER_OUTPUT_SCHEMA,
    WriterTask,
    writer_failure_marker,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SinkTopologyTranslator", "StageListener"]

StageListener = Callable[[str, int], None]
"""Called with (event, epoch) as a run progresses, in this order: ``"writers-finished"``,
``"pending-recorded"``, ``"committer-finished"``, ``"post-commit-finished"`` (sinks with
a post-commit topology), ``"committed-recorded"``. For progress reporting; also how
tests stop a driver at an exact point."""

_WRITER_DDL: Final = (
    "kind string, checkpoint_id long, subtask_id int, number_of_subtasks int, "
    "attempt_token string, index int, serializer_version int, payload binary, "
    "records long, metrics binary"
)
_FAILURE: Final = re.compile(
    re.escape(writer_failure_marker()) + r" subtask=(\d+) position=(-?\d+) \| ([^\n]*)"
)
_MAX_CHECKPOINT_ID: Final = END_OF_INPUT - 1


def _check_checkpoint_id(checkpoint_id: object) -> int | None:
    if checkpoint_id is None:
        return None
    if (
        not isinstance(checkpoint_id, int)
        or isinstance(checkpoint_id, bool)
        or not 1 <= checkpoint_id <= _MAX_CHECKPOINT_ID
    ):
        raise SinkConfigurationError(
            f"checkpoint_id must be a positive int below END_OF_INPUT (got {checkpoint_id!r} "
            f"of type {type(checkpoint_id).__name__}); use a number that identifies this "
            "run's data, such as a batch number, or leave it out"
        )
    return checkpoint_id


def _check_sink_id(sink_id: object, sink: object) -> str:
    if sink_id is None:
        cls = type(sink)
        return f"{cls.__module__}.{cls.__qualname__}"
    if not isinstance(sink_id, str) or not sink_id.strip():
        raise SinkConfigurationError(
            f"sink_id must be a non-empty str (got {sink_id!r} of type "
            f"{type(sink_id).__name__}); name the destination, e.g. 'orders-parquet'"
        )
    return sink_id


def _check_dataframe(df: object) -> DataFrame:
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    if not isinstance(df, DataFrame):
        raise SinkConfigurationError(
            f"apply() takes a pyspark.sql.DataFrame (got {type(df).__name__}); "
            "build one with spark.createDataFrame(...) or spark.read"
        )
    if getattr(df, "_jdf", None) is None:
        raise SinkConfigurationError(
            "apply() needs a classic (py4j) DataFrame; Spark Connect DataFrames are not "
            "supported yet. Run the job with a classic SparkSession"
        )
    if df.isStreaming:
        raise SinkConfigurationError(
            "apply() got a streaming DataFrame; this release runs batch DataFrames only. "
            "Use foreachBatch and call apply(batch_df, sink, sink_id=..., "
            "checkpoint_id=batch_id + 1) inside "
            "it (Spark numbers micro-batches from 0; checkpoint ids start at 1)"
        )
    return df


@final
class SinkTopologyTranslator:
    """Compiles a Sink V2 sink onto Spark stages and runs it (batch).

    Args:
        state_store: Where epochs are recorded. Defaults to
            `SqliteCommitStateStore` at its default path (``$SINKV2_STATE_DIR`` or
            ``./.sinkv2/commit_state.sqlite``).
        retry_policy: Commit retry budget and backoff (Flink's defaults).
    """

    def __init__(
        self,
        *,
        state_store: CommitStateStore | None = None,
        retry_policy: CommitRetryPolicy | None = None,
    ) -> None:
        self._store = state_store if state_store is not None else SqliteCommitStateStore()
        self._retry_policy = retry_policy or CommitRetryPolicy()

    @property
    def state_store(self) -> CommitStateStore:
        """The commit state store this translator records epochs in."""
        return self._store

    def apply(
        self,
        df: DataFrame,
        sink: object,
        *,
        sink_id: str | None = None,
        checkpoint_id: int | None = None,
        on_stage: StageListener | None = None,
    ) -> SinkResult:
        """Write ``df`` into ``sink`` and commit it, exactly once per epoch.

        Args:
            df: A batch DataFrame. Each partition (after the sink's pre-write
                topology) is one writer subtask.
            sink: Any Sink V2 sink.
            sink_id: The stable name of this sink's commit history. Defaults to the
                sink's class path; set it whenever one class writes to more than one
                destination. Required with ``checkpoint_id``.
            checkpoint_id: Makes the run idempotent: if this epoch of ``sink_id`` is
                committed, nothing is written again; if a run of it died after its
                writers finished, its stored committables are committed without
                rewriting. Without it, each run is a new epoch.
            on_stage: Progress callback, see `StageListener`.

        Returns:
            What was written and committed.

        Raises:
            SinkDefinitionError: The sink does not implement what it claims.
            SinkConfigurationError: An argument is invalid.
            ConcurrentCommitError: Another driver is running this sink id.
            SinkWriterError: A writer failed; nothing was committed. (A failure outside
                the writers, such as executors lost beyond Spark's retry budget, reaches
                the caller as Spark's own exception; nothing is committed then either.)
            CommitError: The commit failed; the epoch stays pending, and a re-run with
                the same ``checkpoint_id`` commits it.
        """
        capabilities = inspect_sink(sink)
        df = _check_dataframe(df)
        checkpoint = _check_checkpoint_id(checkpoint_id)
        if checkpoint is not None and sink_id is None:
            raise SinkConfigurationError(
                "checkpoint_id needs an explicit sink_id: the default (the sink's class path) "
                "is shared by every sink of that class, and another destination's committed "
                "epoch would make this run write nothing. Pass sink_id='<destination name>'"
            )
        name = _check_sink_id(sink_id, sink)
        run = _Run(
            sink=sink,
            capabilities=capabilities,
            sink_id=name,
            job_id=uuid.uuid4().hex[:16],
            policy=self._retry_policy,
            on_stage=on_stage or (lambda event, epoch: None),
        )
        with self._store.acquire(name, job_id=run.job_id) as lease:
            return run.execute(lease, df, checkpoint)


class _Run:
    """One apply() call, from acquiring the sink id to the post-commit topology."""

    def __init__(
        self,
        *,
        sink: Any,
        capabilities: SinkCapabilities,
        sink_id: str,
        job_id: str,
        policy: CommitRetryPolicy,
        on_stage: StageListener,
    ) -> None:
        self.sink = sink
        self.capabilities = capabilities
        self.sink_id = sink_id
        self.job_id = job_id
        self.policy = policy
        self.on_stage = on_stage
        self.stage_seconds: dict[str, float] = {}

    @contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + (
                time.perf_counter() - start
            )

    # --- the epoch decision --------------------------------------------------------------

    def execute(self, lease: SinkLease, df: DataFrame, checkpoint: int | None) -> SinkResult:
        aborted = self._abort_crashed_runs(lease, keep=checkpoint)
        epoch = checkpoint if checkpoint is not None else lease.next_epoch()
        checkpoint_id = checkpoint if checkpoint is not None else END_OF_INPUT
        existing = lease.get(epoch) if checkpoint is not None else None
        if existing is not None and not existing.explicit:
            raise SinkConfigurationError(
                f"epoch {epoch} of sink {self.sink_id!r} belongs to a run without a "
                f"checkpoint_id (assigned {existing.status.value}); checkpoint ids and "
                "assigned epochs share one history per sink id. Use checkpoint ids for every "
                "run of this sink id, or a different sink_id for runs with them"
            )
        if existing is not None and existing.status is EpochStatus.COMMITTED:
            return SinkResult(
                sink_id=self.sink_id,
                epoch=epoch,
                checkpoint_id=checkpoint_id,
                status=CommitStatus.ALREADY_COMMITTED,
                job_id=self.job_id,
                aborted_epochs=aborted,
            )
        if existing is not None and existing.status is EpochStatus.PENDING:
            committables = self._stored_committables(existing)
            return self._commit(
                lease,
                df.sparkSession,
                committables,
                status=CommitStatus.RECOMMITTED,
                explicit=True,
                aborted=aborted,
                epoch=epoch,
                checkpoint_id=checkpoint_id,
            )

        source = self._pre_write(df)
        written = self._write(source, checkpoint_id)
        self.on_stage("writers-finished", epoch)
        try:
            committables = self._pre_commit(df.sparkSession, written.committables)
        except BaseException:
            self._clean_up_attempts(kept=())  # nothing of this run will be committed
            raise
        return self._commit(
            lease,
            df.sparkSession,
            committables,
            status=CommitStatus.COMMITTED,
            explicit=checkpoint is not None,
            aborted=aborted,
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            written=written,
        )

    def _abort_crashed_runs(self, lease: SinkLease, keep: int | None) -> tuple[int, ...]:
        """Abort pending epochs that crashed runs without a checkpoint id left behind."""
        aborted = []
        for record in lease.epochs(EpochStatus.PENDING):
            if record.explicit or record.epoch == keep:
                continue  # an explicit epoch is finished by re-running it
            with self._timed("abort stale epochs"):
                if self.capabilities.abort:
                    self.sink.abort(self._stored_committables(record))
                lease.mark_aborted(record.epoch)
            aborted.append(record.epoch)
        return tuple(aborted)

    def _stored_committables(self, record: EpochRecord) -> list[Any]:
        if not self.capabilities.committer:
            return []
        return SimpleVersionedSerialization.read_version_and_deserialize_list(
            self.sink.get_committable_serializer(), record.payload
        )

    # --- stages ----------------------------------------------------------------------------

    def _pre_write(self, df: DataFrame) -> DataFrame:
        if not self.capabilities.pre_write_topology:
            return df
        from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

        with self._timed("pre-write topology"):
            result = self.sink.add_pre_write_topology(df)
        if not isinstance(result, DataFrame):
            raise SinkConfigurationError(
                f"{self.capabilities.sink_type}.add_pre_write_topology() must return a "
                f"pyspark.sql.DataFrame (got {type(result).__name__}); return the "
                "transformed input, e.g. input.repartition(8, 'key')"
            )
        return result

    def _write(self, source: DataFrame, checkpoint_id: int) -> _WriterOutput:
        _describe_jobs(source.sparkSession, f"sinkv2 {self.sink_id}: writers")
        with self._timed("write"):  # executing the plan may run the stages before a shuffle
            source, number_of_subtasks = _executed_once(source)
        task = WriterTask(
            sink=self.sink,
            capabilities=self.capabilities,
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            number_of_subtasks=number_of_subtasks,
            emits_write_results=self.capabilities.pre_commit_topology,
        )
        try:
            with self._timed("write"):
                table = source.mapInArrow(task, _WRITER_DDL).toArrow()
        except Exception as error:
            self._clean_up_attempts(kept=())
            raise _writer_error(error, self.capabilities.sink_type) from error
        output = _WriterOutput.from_table(table, number_of_subtasks)
        self._clean_up_attempts(kept=output.attempt_tokens)
        return output

    def _clean_up_attempts(self, kept: Collection[str]) -> None:
        if self.capabilities.attempt_cleanup:
            with self._timed("clean up attempts"):
                self.sink.clean_up_attempts(self.job_id, frozenset(kept))

    def _pre_commit(self, spark: SparkSession, written: pa.Table) -> list[Any]:
        if not self.capabilities.committer:
            return []
        serializer = self.sink.get_committable_serializer()
        if not self.capabilities.pre_commit_topology:
            return [
                SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload)
                for payload in written.column("payload").to_pylist()
            ]
        _describe_jobs(spark, f"sinkv2 {self.sink_id}: pre-commit topology")
        with self._timed("pre-commit topology"):
            stream = spark.createDataFrame(written) if written.num_rows else _empty_stream(spark)
            result = self.sink.add_pre_commit_topology(stream)
            produced = _topology_output(result, self.capabilities.sink_type)
        check_lineage(written, produced, self.capabilities.sink_type)
        return [
            SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload)
            for payload in produced.column("payload").to_pylist()
        ]

    def _commit(
        self,
        lease: SinkLease,
        spark: SparkSession,
        committables: list[Any],
        *,
        status: CommitStatus,
        explicit: bool,
        aborted: tuple[int, ...],
        epoch: int,
        checkpoint_id: int,
        written: _WriterOutput | None = None,
    ) -> SinkResult:
        """Record Pending, commit, record Committed, run the post-commit topology."""
        payload, version = b"", 0
        if self.capabilities.committer:
            serializer = self.sink.get_committable_serializer()
            version = serializer.get_version()
            payload = SimpleVersionedSerialization.write_version_and_serialize_list(
                serializer, committables
            )
        with self._timed("commit"):
            lease.record_pending(
                epoch, explicit=explicit, serializer_version=version, payload=payload
            )
        self.on_stage("pending-recorded", epoch)
        outcome = None
        if self.capabilities.committer:
            with self._timed("commit"):
                context = BasicCommitterInitContext(
                    job_id=self.job_id,
                    restored_checkpoint_id=(
                        checkpoint_id if status is CommitStatus.RECOMMITTED else None
                    ),
                )
                committer = self.sink.create_committer(context)
                self.capabilities.check_committer(committer)
                try:
                    outcome = commit_with_retries(
                        committer,
                        committables,
                        policy=self.policy,
                        metrics=context.metric_group(),
                        what=f"sink {self.sink_id!r} epoch {epoch}",
                    )
                finally:
                    committer.close()
        self.on_stage("committer-finished", epoch)
        if outcome is not None and self.capabilities.post_commit_topology:
            # Before Committed is recorded, as in Flink: if it fails, the epoch stays
            # pending, and a re-run commits again (idempotently) and re-runs it.
            with self._timed("post-commit topology"):
                _describe_jobs(spark, f"sinkv2 {self.sink_id}: post-commit topology")
                self.sink.add_post_commit_topology(
                    _committed_stream(spark, self.sink, outcome.successful, checkpoint_id)
                )
            self.on_stage("post-commit-finished", epoch)
        with self._timed("commit"):
            lease.mark_committed(epoch)
        self.on_stage("committed-recorded", epoch)
        return SinkResult(
            sink_id=self.sink_id,
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            status=status,
            job_id=self.job_id,
            aborted_epochs=aborted,
            stage_seconds=dict(self.stage_seconds),
            committed=len(outcome.committed) if outcome else 0,
            already_committed=len(outcome.already_committed) if outcome else 0,
            failed_with_known_reason=len(outcome.failed_with_known_reason) if outcome else 0,
            retries=outcome.retries if outcome else 0,
            records_written=written.records if written else 0,
            subtasks=written.subtasks if written else 0,
            writer_metrics=written.metrics if written else {},
        )


class _WriterOutput:
    """What the writer stage returned, split by kind."""

    def __init__(
        self,
        committables: pa.Table,
        attempt_tokens: frozenset[str],
        records: int,
        subtasks: int,
        metrics: dict[str, float],
    ) -> None:
        self.committables = committables
        self.attempt_tokens = attempt_tokens
        self.records = records
        self.subtasks = subtasks
        self.metrics = metrics

    @classmethod
    def from_table(cls, table: pa.Table, number_of_subtasks: int) -> _WriterOutput:
        table = table.cast(WRITER_OUTPUT_SCHEMA)
        kinds = table.column("kind").to_pylist()
        subtask_rows = [i for i, kind in enumerate(kinds) if kind == KIND_SUBTASK]
        committable_rows = [i for i, kind in enumerate(kinds) if kind == KIND_COMMITTABLE]
        # Typed indices: pa.array([]) would infer the null type, which take() refuses.
        subtasks = table.take(pa.array(subtask_rows, type=pa.int64())).to_pydict()
        if sorted(subtasks["subtask_id"]) != list(range(number_of_subtasks)):
            raise RuntimeError(
                f"writer stage returned subtasks {sorted(subtasks['subtask_id'])} for "
                f"{number_of_subtasks} partitions; this is a bug in sinkv2, please report it"
            )
        metrics: dict[str, float] = {}
        for packed in subtasks["metrics"]:
            shipped = msgpack.unpackb(packed)
            for name, count in shipped["counters"].items():
                metrics[name] = metrics.get(name, 0) + count  # counters add up
            for name, value in shipped["gauges"].items():
                metrics[name] = max(metrics.get(name, value), value)  # gauges: the worst subtask
        rows = table.take(pa.array(committable_rows, type=pa.int64()))
        lineage = pa.array(
            [
                [f"{s}:{i}"]
                for s, i in zip(
                    rows.column("subtask_id").to_pylist(),
                    rows.column("index").to_pylist(),
                    strict=True,
                )
            ],
            type=pa.list_(pa.string()),
        )
        committables = pa.Table.from_arrays(
            [
                rows.column("checkpoint_id"),
                rows.column("subtask_id"),
                rows.column("number_of_subtasks"),
                rows.column("serializer_version"),
                rows.column("payload"),
                lineage,
            ],
            schema=COMMITTABLE_SCHEMA,
        )
        return cls(
            committables=committables,
            attempt_tokens=frozenset(subtasks["attempt_token"]),
            records=sum(subtasks["records"]),
            subtasks=len(subtask_rows),
            metrics=metrics,
        )


def _executed_once(df: DataFrame) -> tuple[DataFrame, int]:
    """``df`` planned once, and its number of partitions, without running it twice.

    Writers need the parallelism before they start, but with adaptive query
    execution it is only known once the stages before the last shuffle ran. Asking
    ``df.rdd.getNumPartitions()`` runs them, and the writer job would run them
    again. Spark's own V2 writers avoid that by executing the plan to one RDD and
    reading its partitions; this does the same, then wraps that very RDD back into
    a DataFrame for the writer stage, so the finished stages are reused.
    """
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    jdf = df._jdf  # classic DataFrames only; _check_dataframe refused the others
    rows = jdf.queryExecution().toRdd()
    jvm_session = df.sparkSession._jsparkSession  # the classic session's JVM handle
    executed = jvm_session.internalCreateDataFrame(rows, jdf.schema(), False)
    return DataFrame(executed, df.sparkSession), int(rows.getNumPartitions())


def _describe_jobs(spark: SparkSession, description: str) -> None:
    try:
        spark.sparkContext.setJobDescription(description)
    except Exception:  # noqa: BLE001  # Spark Connect has no SparkContext; descriptions are cosmetic
        return


def _writer_error(error: Exception, sink_type: str) -> Exception:
    found = _FAILURE.findall(str(error))
    if not found:
        return error
    subtask, position, message = found[-1]
    return SinkWriterError(
        f"{message.strip()}. The job failed and nothing was committed.",
        subtask_id=int(subtask),
        position=None if int(position) < 0 else int(position),
    )


def _empty_stream(spark: SparkSession) -> DataFrame:
    from sinkv2_spark.committables import committable_stream_ddl  # noqa: PLC0415  # keeps the import list short

    return spark.createDataFrame([], committable_stream_ddl())


def _topology_output(result: object, sink_type: str) -> pa.Table:
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    if not isinstance(result, DataFrame):
        raise SinkConfigurationError(
            f"{sink_type}.add_pre_commit_topology() must return the committable DataFrame "
            f"(got {type(result).__name__}); return the stream it received, transformed"
        )
    missing = [c for c in COMMITTABLE_COLUMNS if c not in result.columns]
    if missing:
        raise SinkConfigurationError(
            f"{sink_type}.add_pre_commit_topology() returned a DataFrame without the "
            f"committable columns {missing}; keep every column of the committable schema "
            "(sinkv2_spark.committables.COMMITTABLE_SCHEMA), e.g. by using its helpers"
        )
    return result.select(*COMMITTABLE_COLUMNS).toArrow().cast(COMMITTABLE_SCHEMA)


def _committed_stream(
    spark: SparkSession, sink: Any, committables: Collection[Any], checkpoint_id: int
) -> DataFrame:
    serializer = sink.get_committable_serializer()
    version = serializer.get_version()
    table = pa.Table.from_pylist(
        [
            {
                "checkpoint_id": checkpoint_id,
                "subtask_id": 0,
                "number_of_subtasks": 1,
                "serializer_version": version,
                "payload": SimpleVersionedSerialization.write_version_and_serialize(serializer, c),
                "lineage": [f"committed:{index}"],
            }
            for index, c in enumerate(committables)
        ],
        schema=COMMITTABLE_SCHEMA,
    )
    return spark.createDataFrame(table) if table.num_rows else _empty_stream(spark)
