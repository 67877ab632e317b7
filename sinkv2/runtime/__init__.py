"""The engine-neutral runtime: the commit coordinator, its stores, Flink's commit loop.

What an engine (``sinkv2_spark``, the contract kit's local engine) builds on, kept
apart from the API a sink author implements, the way Flink keeps its commit
machinery out of ``connector.sink2``:

- `CommitCoordinator`: one job's use of a sink id - record the job, recover what
  dead jobs left, pre-commit, record Pending, commit, record Committed, clean up;
- `WriterSubtask`: one subtask's writer through Flink's writer-side checkpoint
  sequence (create or restore, feed, ``flush`` -> ``prepare_commit`` ->
  ``snapshot_state``, frame, close), which every engine runs; `drain_writer_states`,
  the draining stop, on it;
- `CheckpointRunner`: a stream's checkpoints on the coordinator - writer states
  restored and redistributed, recorded with the committables, commits in order
  (optionally on a commit thread while the next checkpoint writes);
- the commit state store contract (`CommitStateStore`, `SinkLease`, `EpochRecord`,
  `EpochStatus`), `SqliteCommitStateStore` (one host) and `PostgresCommitStateStore`
  (drivers on several hosts; needs psycopg, imported when a store is made);
- the source epoch store contract those two stores keep too (`SourceStateStore`,
  `SourceLease`, `SourceEpochRecord`): per source id a fenced lease, per epoch
  the enumerator checkpoint, split assignment and end positions, written once;
- `commit_with_retries`: Flink's commit semantics, with `CommitRetryPolicy`;
- `SinkResult`: what an epoch did; `JobOutcome` and `JobError`: what a job ended
  with, as both SQL stores keep it for an engine whose jobs run away from the
  driver (``record_outcome``, ``outcomes``; Spark's data-source doors);
- a bounded FLIP-27 read for engines that fix their tasks up front:
  `plan_bounded_read` (the enumerator run to "no more splits") and `read_subtask`
  (one task's reader read to the end, as Arrow batches of one schema);
- what an engine hands a sink: the contexts (`BasicWriterInitContext`,
  `BasicCommitterInitContext`, `BasicSinkWriterContext`), the timers
  (`CooperativeProcessingTimeService`), the metric groups
  (`InMemorySinkWriterMetricGroup`, `InMemorySinkCommitterMetricGroup`), and the
  attempt token of a native write (`native_attempt_token`);
- ``sinkv2.runtime.committables``: the committable table codec (needs pyarrow,
  imported only from there).

``import sinkv2.runtime`` loads neither pyspark, pyarrow nor psycopg.
"""

from sinkv2._context import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
)
from sinkv2._metrics import (
    InMemoryMetricGroup,
    InMemorySinkCommitterMetricGroup,
    InMemorySinkWriterMetricGroup,
)
from sinkv2._native import native_attempt_token
from sinkv2._public import publish as _publish
from sinkv2._time import CooperativeProcessingTimeService
from sinkv2.runtime._checkpoints import DEFAULT_RETAIN, CheckpointRunner, state_name
from sinkv2.runtime._commit import (
    CommitOutcome,
    CommitRequestImpl,
    CommitRequestState,
    CommitRetryPolicy,
    commit_with_retries,
)
from sinkv2.runtime._coordinator import CommitCoordinator, CoordinatorState
from sinkv2.runtime._drain import drain_writer_states
from sinkv2.runtime._epoch import EpochNeed, EpochPlan, PendingEpoch
from sinkv2.runtime._rescale import redistribute
from sinkv2.runtime._result import CommitStatus, SinkResult
from sinkv2.runtime._seam import (
    STAGE_EVENTS,
    CommittableStreams,
    EpochCommit,
    Recovery,
    Restore,
    StageListener,
    StreamWriterStage,
    WriterStage,
    WriterStageOutput,
)
from sinkv2.runtime._source_epochs import MAX_SPLITS_PER_EPOCH, SourceEpochCoordinator
from sinkv2.runtime._source_plan import (
    DEFAULT_PLANNING_TIMEOUT_S,
    BoundedPlan,
    plan_bounded_read,
)
from sinkv2.runtime._source_slices import (
    EpochSlice,
    ReadLimit,
    SourceOffset,
    check_streamable,
    read_epoch_slice,
)
from sinkv2.runtime._source_store import SourceEpochRecord, SourceLease, SourceStateStore
from sinkv2.runtime._source_task import (
    DEFAULT_BATCH_ROWS,
    ArrowBatchOutput,
    TaskReaderContext,
    read_subtask,
)
from sinkv2.runtime._sql.postgres_store import PostgresCommitStateStore, SinkHolder
from sinkv2.runtime._sql.results import JobError, JobOutcome
from sinkv2.runtime._sql.sqlite import SCHEMA_VERSION
from sinkv2.runtime._sql.sqlite_store import (
    DEFAULT_FILE_NAME,
    STATE_DIR_ENV,
    SqliteCommitStateStore,
    default_state_store_path,
)
from sinkv2.runtime._store import CommitStateStore, EpochRecord, EpochStatus, SinkLease
from sinkv2.runtime._subtask import SubtaskSnapshot, WriterSubtask
from sinkv2.runtime._writer_states import SubtaskStates, WriterStates

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_FILE_NAME",
    "DEFAULT_PLANNING_TIMEOUT_S",
    "DEFAULT_RETAIN",
    "MAX_SPLITS_PER_EPOCH",
    "SCHEMA_VERSION",
    "STAGE_EVENTS",
    "STATE_DIR_ENV",
    "ArrowBatchOutput",
    "BasicCommitterInitContext",
    "BasicSinkWriterContext",
    "BasicWriterInitContext",
    "BoundedPlan",
    "CheckpointRunner",
    "CommitCoordinator",
    "CommitOutcome",
    "CommitRequestImpl",
    "CommitRequestState",
    "CommitRetryPolicy",
    "CommitStateStore",
    "CommitStatus",
    "CommittableStreams",
    "CooperativeProcessingTimeService",
    "CoordinatorState",
    "EpochCommit",
    "EpochNeed",
    "EpochPlan",
    "EpochRecord",
    "EpochSlice",
    "EpochStatus",
    "InMemoryMetricGroup",
    "InMemorySinkCommitterMetricGroup",
    "InMemorySinkWriterMetricGroup",
    "JobError",
    "JobOutcome",
    "PendingEpoch",
    "PostgresCommitStateStore",
    "ReadLimit",
    "Recovery",
    "Restore",
    "SinkHolder",
    "SinkLease",
    "SinkResult",
    "SourceEpochCoordinator",
    "SourceEpochRecord",
    "SourceLease",
    "SourceOffset",
    "SourceStateStore",
    "SqliteCommitStateStore",
    "StageListener",
    "StreamWriterStage",
    "SubtaskSnapshot",
    "SubtaskStates",
    "TaskReaderContext",
    "WriterStage",
    "WriterStageOutput",
    "WriterStates",
    "WriterSubtask",
    "check_streamable",
    "commit_with_retries",
    "default_state_store_path",
    "drain_writer_states",
    "native_attempt_token",
    "plan_bounded_read",
    "read_epoch_slice",
    "read_subtask",
    "redistribute",
    "state_name",
]

_publish(__name__)
