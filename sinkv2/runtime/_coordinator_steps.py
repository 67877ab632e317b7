"""The steps of an epoch on one sink id's lease, below `CommitCoordinator`.

`EpochSteps` holds what every step needs (the sink and its serializers, the lease,
the stage timings and listener) and the steps themselves: pre-commit, record
Pending, commit (Committer with Flink's retries, post-commit topology, record
Committed), abort, and the lease's history. `JobCoordinator`
(``_coordinator_job.py``) adds the job's lifecycle on top, and `CommitCoordinator`
(``_coordinator.py``) the epoch procedure every door runs.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._committer import Committer
from sinkv2._context import BasicCommitterInitContext
from sinkv2._messages import END_OF_INPUT
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.errors import (
    IllegalLifecycleError,
    SerializationError,
)
from sinkv2.runtime._commit import CommitOutcome, CommitRetryPolicy, commit_with_retries
from sinkv2.runtime._seam import (
    CommittableStreams,
    EpochCommit,
    Recovery,
    StageListener,
)
from sinkv2.runtime._store import CommitStateStore, EpochRecord, EpochStatus, SinkLease
from sinkv2.runtime._unreadable import unreadable_committables
from sinkv2.runtime._writer_states import WriterStates

if TYPE_CHECKING:
    import pyarrow as pa


__all__ = ["CoordinatorState", "EpochSteps"]

logger = logging.getLogger("sinkv2.coordinator")


class CoordinatorState(enum.Enum):
    """Where a `CommitCoordinator` is in its lifecycle."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_ILLEGAL: Final = {
    CoordinatorState.NEW: "it is not open yet; call open() (or use it in a `with` block) first",
    CoordinatorState.CLOSED: "it is closed; make a new CommitCoordinator for another job",
}


class EpochSteps:
    """The steps of an epoch on the sink id's lease; see `CommitCoordinator` for the args."""

    def __init__(
        self,
        sink: Any,
        *,
        sink_id: str,
        store: CommitStateStore,
        streams: CommittableStreams,
        job_id: str | None = None,
        retry_policy: CommitRetryPolicy | None = None,
        on_stage: StageListener | None = None,
        capabilities: SinkCapabilities | None = None,
        input_schema: pa.Schema | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        planned_fencing_token: int | None = None,
    ) -> None:
        self.capabilities = capabilities if capabilities is not None else inspect_sink(sink)
        self.sink = sink
        self.sink_id = sink_id
        self.job_id = job_id if job_id is not None else uuid.uuid4().hex[:16]
        self._store = store
        self._streams = streams
        self._policy = retry_policy or CommitRetryPolicy()
        self._listener = on_stage or (lambda event, epoch: None)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._input_schema = input_schema
        self._planned_token = planned_fencing_token
        self._lease: SinkLease | None = None
        self._marks_checkpoints = False
        self._state = CoordinatorState.NEW
        self._recovery: Recovery | None = None
        self._timings = threading.local()
        caps = self.capabilities
        self._committables: SimpleVersionedSerializer[Any] | None = (
            self.sink.get_committable_serializer() if caps.committer else None
        )
        self._write_results: SimpleVersionedSerializer[Any] | None = (
            self.sink.get_write_result_serializer() if caps.pre_commit_topology else None
        )

    def report_stage(self, event: str, epoch: int) -> None:
        """Report a `STAGE_EVENTS` event of ``epoch`` (INFO log, then the listener)."""
        self._on_stage(event, epoch)

    def _on_stage(self, event: str, epoch: int) -> None:
        """Log the event (INFO, ``sinkv2.coordinator``), then tell the listener."""
        seconds = sum(self.stage_seconds.values())
        logger.info(
            "sink %r job %s: %s (epoch %d, %.3f s in stages so far)",
            self.sink_id,
            self.job_id,
            event,
            epoch,
            seconds,
        )
        self._listener(event, epoch)

    @property
    def stage_seconds(self) -> dict[str, float]:
        """Wall time per stage, added up by `timed`; one dict per thread.

        A decoupled streaming commit runs on its own thread while the next
        checkpoint writes; each keeps its own timings.
        """
        seconds: dict[str, float] | None = getattr(self._timings, "seconds", None)
        if seconds is None:
            seconds = self._timings.seconds = {}
        return seconds

    @property
    def state(self) -> CoordinatorState:
        """The lifecycle state."""
        return self._state

    @property
    def lease(self) -> SinkLease:
        """The lease on the sink id, while open.

        Raises:
            IllegalLifecycleError: The coordinator is not open.
        """
        self._check_open("use the lease")
        assert self._lease is not None  # open means acquired
        return self._lease

    def _check_open(self, action: str) -> None:
        if self._state is not CoordinatorState.OPEN:
            raise IllegalLifecycleError(
                f"cannot {action} on the commit coordinator of sink {self.sink_id!r} (job "
                f"{self.job_id!r}): {_ILLEGAL[self._state]}"
            )

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the wall time of the block to `stage_seconds` under ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + (
                time.perf_counter() - start
            )

    # --- the sink id's history -------------------------------------------------------------

    def record(self, epoch: int) -> EpochRecord | None:
        """``epoch``'s record in the store, if any."""
        return self.lease.get(epoch)

    def latest_record(self, *, below: int | None = None) -> EpochRecord | None:
        """The newest Pending or Committed epoch (below ``below``, if given)."""
        records = self.lease.epochs(EpochStatus.PENDING, EpochStatus.COMMITTED)
        if below is not None:
            records = [r for r in records if r.epoch < below]
        return records[-1] if records else None

    def recorded_epochs(self) -> frozenset[int]:
        """Every Pending or Committed epoch."""
        return frozenset(
            r.epoch for r in self.lease.epochs(EpochStatus.PENDING, EpochStatus.COMMITTED)
        )

    def pending_records(self) -> list[EpochRecord]:
        """The Pending epochs, in epoch order."""
        return self.lease.epochs(EpochStatus.PENDING)

    def prune(self, below: int) -> None:
        """Forget the Committed epochs below ``below`` (a stream keeps its newest ones)."""
        with self.timed("commit"):
            self.lease.prune(below)

    def replace_writer_states(self, epoch: int, encoded: bytes) -> None:
        """Replace ``epoch``'s recorded writer states (a draining stop sent some)."""
        with self.timed("drain"):
            self.lease.replace_writer_states(epoch, encoded)

    def clean_up_attempts(self, kept_attempt_tokens: Collection[str]) -> None:
        """``clean_up_attempts(job_id, kept)`` on this job: the writer stage is over."""
        self._clean_up_attempts(self.job_id, frozenset(kept_attempt_tokens))

    def _clean_up_attempts(self, job_id: str, kept: frozenset[str]) -> None:
        if self.capabilities.attempt_cleanup:
            with self.timed("clean up attempts"):
                self.sink.clean_up_attempts(job_id, kept)

    # --- the steps of an epoch ---------------------------------------------------------------

    def pre_commit(self, written: pa.Table, *, final: bool = False) -> list[Any]:
        """The epoch's committables from the writers' outputs.

        Without a pre-commit topology the outputs are the committables. With one,
        the outputs are write results: they go through the topology on the
        engine's stream, and every writer output must come out in exactly one
        committable's lineage. ``final``: the outputs are committables already (a
        native write, `SupportsNativeFileWrite`); no topology runs.

        Raises:
            SinkConfigurationError: The topology returned something other than the
                committable stream, or lost, duplicated or invented lineage.
            SerializationError: An output does not read with its serializer.
        """
        if self._committables is None:
            return []
        if self._write_results is None or final:
            return self._decode(written)
        from sinkv2.runtime.committables import check_lineage  # noqa: PLC0415  # loads pyarrow

        sink_type = self.capabilities.sink_type
        with self.timed("pre-commit topology"):
            result = self.sink.add_pre_commit_topology(self._streams.to_stream(written))
            produced = self._streams.to_table(
                result, produced_by=f"{sink_type}.add_pre_commit_topology()"
            )
        check_lineage(written, produced, sink_type)
        try:
            return self._decode(produced)
        except SerializationError as error:
            raise SerializationError(
                f"{sink_type}'s pre-commit topology returned rows that do not read with the "
                f"committable serializer: {error}. The topology must turn write results into "
                "committables (e.g. with aggregate_committables or map_committables, "
                "write=get_committable_serializer()). Nothing was committed",
                serializer=error.serializer,
            ) from error

    def _decode(self, table: pa.Table) -> list[Any]:
        assert self._committables is not None
        serializer = self._committables
        return [
            SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload)
            for payload in table.column("payload").to_pylist()
        ]

    def stored_committables(self, record: EpochRecord) -> list[Any]:
        """The committables recorded with ``record``.

        Raises:
            CorruptDataError: The stored bytes do not decode (named with the store).
            UnsupportedVersionError: They were written by a serializer version the
                sink no longer reads.
        """
        if self._committables is None:
            return []
        try:
            return SimpleVersionedSerialization.read_version_and_deserialize_list(
                self._committables, record.payload
            )
        except SerializationError as error:
            sink_type = self.capabilities.sink_type
            raise unreadable_committables(error, record, self._store, sink_type) from error

    def record_pending(
        self,
        epoch: int,
        checkpoint_id: int,
        committables: Sequence[Any],
        *,
        explicit: bool,
        writer_states: WriterStates | None = None,
    ) -> EpochRecord:
        """Make the epoch's committables durable as Pending, before any of them commits.

        Args:
            epoch: The epoch in the sink's history.
            checkpoint_id: The checkpoint id the committables carry.
            committables: Everything to commit for the epoch.
            explicit: Whether a later run must commit the epoch if this job dies
                (``True``: its data is not written again) or abort it (``False``).
            writer_states: The writers' states at the checkpoint (streaming),
                recorded in the same transaction.
        """
        payload, version = b"", 0
        if self._committables is not None:
            version = self._committables.get_version()
            payload = SimpleVersionedSerialization.write_version_and_serialize_list(
                self._committables, committables
            )
        with self.timed("commit"):
            record = self.lease.record_pending(
                epoch,
                explicit=explicit,
                serializer_version=version,
                payload=payload,
                checkpoint_id=checkpoint_id,
                writer_states=writer_states.encode() if writer_states is not None else b"",
            )
        self._on_stage("pending-recorded", epoch)
        return record

    def commit_pending(
        self,
        epoch: int,
        checkpoint_id: int,
        committables: Sequence[Any],
        *,
        recovering: bool = False,
        wrap_committer: Callable[[Committer[Any]], Committer[Any]] | None = None,
        check_outcome: Callable[[CommitOutcome[Any]], None] | None = None,
    ) -> EpochCommit:
        """Commit a pending epoch, run the post-commit topology, record it committed.

        The post-commit topology runs before Committed is recorded, as in Flink: if
        it fails, the epoch stays pending and the next run commits it again
        (idempotently) and re-runs the topology. ``check_outcome``, if given, sees
        what the committer did before anything is recorded; what it raises
        propagates, and the epoch stays pending.

        Raises:
            CommitError: The commit failed; the epoch stays pending.
            StaleFencingTokenError: A newer driver took the sink id; nothing was committed.
        """
        with self.timed("commit"):
            self.lease.record_job()  # a fenced no-op: a zombie driver stops before committing
        outcome = self.run_committer(
            committables,
            checkpoint_id=checkpoint_id,
            recovering=recovering,
            what=f"sink {self.sink_id!r} epoch {epoch}",
            wrap_committer=wrap_committer,
        )
        if check_outcome is not None:
            check_outcome(outcome)
        self._on_stage("committer-finished", epoch)
        if self.run_post_commit(outcome.successful, checkpoint_id):
            self._on_stage("post-commit-finished", epoch)
        with self.timed("commit"):
            if self._marks_checkpoints and checkpoint_id != END_OF_INPUT:
                # Before the store's Committed: a crash in between leaves the epoch
                # pending, and the next run commits and marks it again.
                self.sink.mark_checkpoint_committed(self.sink_id, checkpoint_id)
            self.lease.mark_committed(epoch)
        logger.info(
            "sink %r job %s: epoch %d (checkpoint %d) committed: %s",
            self.sink_id,
            self.job_id,
            epoch,
            checkpoint_id,
            outcome,
        )
        self._on_stage("committed-recorded", epoch)
        return EpochCommit(epoch=epoch, checkpoint_id=checkpoint_id, outcome=outcome)

    def abort_pending(self, epoch: int, committables: Sequence[Any]) -> None:
        """Abort pending ``epoch``: ``SupportsAbort.abort(committables)``, then record it.

        Its committables are never committed afterwards; its data is written again
        by whoever re-runs the epoch.
        """
        with self.timed("abort stale epochs"):
            if self.capabilities.abort:
                self.sink.abort(list(committables))
            self.lease.mark_aborted(epoch)

    def run_committer(
        self,
        committables: Sequence[Any],
        *,
        checkpoint_id: int,
        recovering: bool,
        what: str,
        wrap_committer: Callable[[Committer[Any]], Committer[Any]] | None = None,
    ) -> CommitOutcome[Any]:
        """Run the sink's committer over ``committables`` with Flink's semantics.

        No store transition: `commit_pending` records the epoch around it.

        Args:
            committables: What to commit.
            checkpoint_id: Their checkpoint id; the committer's context reports it as
                restored when ``recovering``.
            recovering: Whether an earlier job produced them (Flink: committables
                restored from a checkpoint).
            what: Names the commit in errors and logs.
            wrap_committer: Wraps the sink's committer (the kit injects faults so).

        Raises:
            CommitError: The commit failed.
        """
        if not self.capabilities.committer:
            return CommitOutcome()
        with self.timed("commit"):
            context = BasicCommitterInitContext(
                job_id=self.job_id,
                restored_checkpoint_id=checkpoint_id if recovering else None,
                input_schema=self._input_schema,
            )
            committer = self.sink.create_committer(context)
            self.capabilities.check_committer(committer)
            try:
                return commit_with_retries(
                    wrap_committer(committer) if wrap_committer else committer,
                    committables,
                    policy=self._policy,
                    metrics=context.metric_group(),
                    what=what,
                    sleep=self._sleep,
                    rng=self._rng,
                )
            finally:
                committer.close()

    def run_post_commit(self, successful: Sequence[Any], checkpoint_id: int) -> bool:
        """Hand the committed committables to the post-commit topology, if the sink has one.

        Returns:
            Whether a post-commit topology ran.
        """
        if self._committables is None or not self.capabilities.post_commit_topology:
            return False
        from sinkv2.runtime.committables import encode_committables  # noqa: PLC0415  # pyarrow

        table = encode_committables(
            [(checkpoint_id, 0, 1, f"committed:{i}", c) for i, c in enumerate(successful)],
            self._committables,
        )
        with self.timed("post-commit topology"):
            self.sink.add_post_commit_topology(self._streams.to_stream(table))
        return True
