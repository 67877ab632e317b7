"""The engine-neutral runtime: the commit coordinator, its stores, Flink's commit loop.

What an engine (``sinkv2_spark``, the contract kit's local engine) builds on, kept
apart from the API a sink author implements, the way Flink keeps its commit
machinery out of ``connector.sink2``:

- `CommitCoordinator`: one job's use of a sink id - record the job, recover what
  dead jobs left, pre-commit, record Pending, commit, record Committed, clean up;
- `CheckpointRunner`: a stream's checkpoints on the coordinator - writer states
  restored and redistributed, recorded with the committables, commits in order
  (optionally on a commit thread while the next checkpoint writes);
- the commit state store contract (`CommitStateStore`, `SinkLease`, `EpochRecord`,
  `EpochStatus`), `SqliteCommitStateStore` (one host) and `PostgresCommitStateStore`
  (drivers on several hosts; needs psycopg, imported when a store is made);
- `commit_with_retries`: Flink's commit semantics, with `CommitRetryPolicy`;
- `SinkResult`: what an epoch did;
- ``sinkv2.runtime.committables``: the committable table codec (needs pyarrow,
  imported only from there).

``import sinkv2.runtime`` loads neither pyspark, pyarrow nor psycopg.
"""

from sinkv2.runtime._checkpoints import DEFAULT_RETAIN, CheckpointRunner, state_name
from sinkv2.runtime._commit import (
    CommitOutcome,
    CommitRequestImpl,
    CommitRequestState,
    CommitRetryPolicy,
    commit_with_retries,
)
from sinkv2.runtime._coordinator import CommitCoordinator, CoordinatorState
from sinkv2.runtime._epoch import EpochNeed, EpochPlan, PendingEpoch
from sinkv2.runtime._postgres_store import PostgresCommitStateStore, SinkHolder
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
from sinkv2.runtime._sqlite_schema import SCHEMA_VERSION
from sinkv2.runtime._sqlite_store import (
    DEFAULT_FILE_NAME,
    STATE_DIR_ENV,
    SqliteCommitStateStore,
    default_state_store_path,
)
from sinkv2.runtime._store import CommitStateStore, EpochRecord, EpochStatus, SinkLease
from sinkv2.runtime._writer_states import SubtaskStates, WriterStates

__all__ = [
    "DEFAULT_FILE_NAME",
    "DEFAULT_RETAIN",
    "SCHEMA_VERSION",
    "STAGE_EVENTS",
    "STATE_DIR_ENV",
    "CheckpointRunner",
    "CommitCoordinator",
    "CommitOutcome",
    "CommitRequestImpl",
    "CommitRequestState",
    "CommitRetryPolicy",
    "CommitStateStore",
    "CommitStatus",
    "CommittableStreams",
    "CoordinatorState",
    "EpochCommit",
    "EpochNeed",
    "EpochPlan",
    "EpochRecord",
    "EpochStatus",
    "PendingEpoch",
    "PostgresCommitStateStore",
    "Recovery",
    "Restore",
    "SinkHolder",
    "SinkLease",
    "SinkResult",
    "SqliteCommitStateStore",
    "StageListener",
    "StreamWriterStage",
    "SubtaskStates",
    "WriterStage",
    "WriterStageOutput",
    "WriterStates",
    "commit_with_retries",
    "default_state_store_path",
    "redistribute",
    "state_name",
]
