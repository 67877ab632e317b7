"""`CommitCoordinator`: one sink id's epoch protocol, the same for every engine.

RisingWave's lesson (seed 002): exactly-once logic embedded in one runtime cannot
be reused. Here every engine - the Spark translator, the contract kit's local
engine, streaming micro-batches - drives this one class, and supplies only what
is engine-specific (`CommittableStreams`: how a committable table becomes the
engine's stream for topologies and back; and the writer stage, a callable).

One job's use of a sink id, in order::

    open()               acquire the sink id (an exclusive lease)
                         record the job, before any writer runs        "job-recorded"
                         recover: commit pending epochs that have a checkpoint id,
                         abort pending epochs of batch runs without one,
                         clean_up_attempts(dead job, ()) for every dead job
    per epoch            run_epoch() (batch), or the steps it is made of:
      writer stage       the engine runs the writers                   "writers-finished"
      pre_commit()       pre-commit topology, lineage check, decode
      record_pending()   committables durable before anything commits  "pending-recorded"
      commit_pending()   Committer.commit with Flink's retries         "committer-finished"
                         post-commit topology                          "post-commit-finished"
                         mark the epoch committed                      "committed-recorded"
    finish()             clean_up_attempts(job, ()), forget the job, release the sink id
    close()              release the sink id; an unfinished job is cleaned by the next run

A driver that dies anywhere leaves either no record of an epoch (its staged output
is removed by the next run's clean-up of the dead job), a Pending record (the next
run commits it, or aborts it if it has no checkpoint id), or a Committed one.
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
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._committer import Committer
from sinkv2._context import BasicCommitterInitContext
from sinkv2._messages import END_OF_INPUT
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2.errors import (
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
    SerializationError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime._commit import CommitOutcome, CommitRetryPolicy, commit_with_retries
from sinkv2.runtime._epoch import EpochNeed, EpochPlan, PendingEpoch
from sinkv2.runtime._result import CommitStatus, SinkResult, epoch_result
from sinkv2.runtime._seam import (
    CommittableStreams,
    EpochCommit,
    Recovery,
    StageListener,
    WriterStage,
    WriterStageOutput,
)
from sinkv2.runtime._store import CommitStateStore, EpochRecord, EpochStatus, SinkLease
from sinkv2.runtime._writer_states import WriterStates

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CommitCoordinator", "CoordinatorState"]

logger = logging.getLogger("sinkv2.coordinator")

_BUG: Final = "this is a bug in sinkv2, please report it"

_NEEDS: Final = {
    EpochStatus.COMMITTED: EpochNeed.NOTHING,
    EpochStatus.PENDING: EpochNeed.RECOMMIT,
    EpochStatus.ABORTED: EpochNeed.WRITE,
}


class CoordinatorState(enum.Enum):
    """Where a `CommitCoordinator` is in its lifecycle."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_ILLEGAL: Final = {
    CoordinatorState.NEW: "it is not open yet; call open() (or use it in a `with` block) first",
    CoordinatorState.CLOSED: "it is closed; make a new CommitCoordinator for another job",
}


@final
class CommitCoordinator:
    """One job's use of one sink id: the exactly-once epoch protocol.

    Args:
        sink: Any Sink V2 sink.
        sink_id: The stable name of the sink's commit history.
        store: Where epochs and running jobs are recorded.
        streams: The engine's committable streams, for pre- and post-commit topologies.
        job_id: This job's id; attempt tokens start with it. A fresh one by default.
        retry_policy: Commit retry budget and backoff (Flink's defaults).
        on_stage: Progress callback, see `StageListener`.
        capabilities: The sink's checked capabilities, if already inspected.
        input_schema: The Arrow schema of the job's input, for the committer's
            ``get_input_schema()``.
        sleep: Waits between commit retries; tests pass a recorder.
        rng: Source of retry jitter.
        planned_fencing_token: The sink id's fencing token when this job was planned
            in another process (Spark's data sources plan on one worker and commit on
            another): `open` refuses if anyone acquired the sink id since then, since
            that run may have removed this job's staged output as a dead job's.

    Raises:
        SinkDefinitionError: The sink does not implement what it claims.
    """

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

    # --- the job ---------------------------------------------------------------------------

    def open(
        self,
        *,
        keep_attempt_tokens: Collection[str] = (),
        origin: str | None = None,
        keep_restorable: bool = False,
    ) -> Recovery:
        """Acquire the sink id, record this job, and finish what dead jobs left.

        Pending epochs are taken in epoch order: one with a checkpoint id (its data
        will not be written again) is committed from its stored committables; one
        of a batch run without a checkpoint id is aborted (``SupportsAbort.abort``
        with its committables; that run's data is written again by a re-run). Then
        every dead job's staged output is removed with
        ``clean_up_attempts(job_id, keep_attempt_tokens)``.

        Args:
            keep_attempt_tokens: Attempts whose staged output must survive the
                clean-up of dead jobs.
            origin: The stream that numbers this sink id's checkpoints (streaming):
                bound to the sink id by its first stream, checked by every later one
                before anything is recovered or written.
            keep_restorable: Also keep the staged output that the writer states of
                the latest recorded epoch refer to: a stream's next checkpoint
                restores them.

        Returns:
            What was recovered.

        Raises:
            SinkConfigurationError: ``origin`` differs from the sink id's, or the sink
                id has a history of runs that were not this stream's.
            ConcurrentCommitError: Another live driver holds the sink id.
            CommitError: A pending epoch failed to commit; it stays pending, and the
                next run tries again. Nothing of this job was written.
            IllegalLifecycleError: The coordinator was opened before.
        """
        if self._state is not CoordinatorState.NEW:
            raise IllegalLifecycleError(
                f"the commit coordinator of sink {self.sink_id!r} (job {self.job_id!r}) was "
                "opened before; make a new CommitCoordinator for another job"
            )
        self._lease = self._acquire()
        self._state = CoordinatorState.OPEN
        try:
            if origin is not None:
                self._bind(origin)
            # Batch histories only: a stream's checkpoint ids are its query's.
            self._marks_checkpoints = (
                self.capabilities.committed_checkpoints
                and origin is None
                and self._lease.origin() is None
            )
            self._lease.record_job()
            self._on_stage("job-recorded", 0)
            keep = frozenset(keep_attempt_tokens)
            if keep_restorable:
                keep |= self._restorable_attempts()
            return self._recover(keep)
        except BaseException:
            self.close()
            raise

    def _acquire(self) -> SinkLease:
        """The lease; with a planned fencing token, only if nobody acquired it since.

        Every acquire increments the sink id's fencing token (the store contract), so
        the lease has the planned token plus one exactly when no other run held the
        sink id in between.

        Raises:
            ConcurrentCommitError: Another driver holds the sink id, or took it since
                the job was planned.
        """
        lease = self._store.acquire(self.sink_id, job_id=self.job_id)
        planned = self._planned_token
        if planned is not None and lease.fencing_token != planned + 1:
            lease.release()
            raise ConcurrentCommitError(
                f"sink {self.sink_id!r}: another run took the sink id while this job's "
                f"({self.job_id}) writers wrote (fencing token {planned} when planned, "
                f"{lease.fencing_token} at commit), and may have removed their staged output "
                "as a dead job's; nothing of this run was committed. Run one job per sink id "
                "at a time, and run this one again"
            )
        return lease

    def _bind(self, origin: str) -> None:
        lease = self.lease
        bound = lease.origin()
        if bound is None and lease.next_epoch() > 1:
            raise SinkConfigurationError(
                f"sink id {self.sink_id!r} already has epochs of batch runs in this commit "
                "state store; a stream numbering its checkpoints from 1 would take them for "
                "its own and skip its data. Give the stream a sink_id of its own"
            )
        if bound is not None and bound != origin:
            raise SinkConfigurationError(
                f"sink id {self.sink_id!r} belongs to another stream ({bound}), not to this "
                f"one ({origin}); two streams numbering one sink id's checkpoints would "
                "skip each other's data as already committed. Give this stream its own "
                "sink_id (also when its checkpoint location was reset: the new stream's "
                "checkpoint ids start again at 1)"
            )
        if bound is None:
            lease.bind_origin(origin)

    def _restorable_attempts(self) -> frozenset[str]:
        records = self.lease.epochs(EpochStatus.PENDING, EpochStatus.COMMITTED)
        if not records:
            return frozenset()
        try:
            states = WriterStates.decode(
                records[-1].writer_states, what=f"sink {self.sink_id!r} epoch {records[-1].epoch}"
            )
        except SerializationError:
            return frozenset()  # the restore reports it, before anything is written
        return states.referenced_attempts() if states is not None else frozenset()

    def _recover(self, keep: frozenset[str]) -> Recovery:
        lease = self.lease
        recommitted: dict[int, EpochCommit] = {}
        aborted: list[int] = []
        for record in lease.epochs(EpochStatus.PENDING):
            if record.explicit:
                committables = self.stored_committables(record)
                recommitted[record.epoch] = self.commit_pending(
                    record.epoch, record.checkpoint_id, committables, recovering=True
                )
            else:
                self.abort_pending(record.epoch, self.stored_committables(record))
                aborted.append(record.epoch)
        cleaned = self._clean_up_dead_jobs(keep)
        if recommitted or aborted or cleaned:
            logger.info(
                "sink %r job %s: recovered what earlier jobs left: committed pending epochs "
                "%s, aborted %s, cleaned up jobs %s",
                self.sink_id,
                self.job_id,
                sorted(recommitted),
                aborted,
                cleaned,
            )
        return Recovery(
            recommitted=recommitted, aborted=tuple(aborted), cleaned_jobs=tuple(cleaned)
        )

    def clean_up_dead_jobs(self) -> tuple[str, ...]:
        """Remove what dead jobs staged, but what the newest epoch's writer states name.

        What `open(keep_restorable=True)` does after recovering, again: a stream's
        job kept recorded for the states of its checkpoint is dead once a newer
        checkpoint of the stream is committed. A failure only warns (see `open`).

        Returns:
            The jobs cleaned up.
        """
        return tuple(self._clean_up_dead_jobs(self._restorable_attempts()))

    def _clean_up_dead_jobs(self, keep: frozenset[str]) -> list[str]:
        lease = self.lease
        cleaned = []
        for job_id in lease.unfinished_jobs():
            if self._clean_up_dead_job(job_id, keep):
                cleaned.append(job_id)
                if not any(token.startswith(f"{job_id}-") for token in keep):
                    lease.finish_job(job_id)  # else the next run removes what was kept
        return cleaned

    def _clean_up_dead_job(self, job_id: str, keep: frozenset[str]) -> bool:
        """Remove what ``job_id`` staged; on failure, warn and leave it for the next run.

        A failed clean-up must not stop this job: the dead job's staged output is
        invisible garbage, and it stays recorded, so every later run tries again.
        """
        try:
            self._clean_up_attempts(job_id, keep)
        except Exception as error:  # noqa: BLE001  # reported, and retried by the next run
            logger.warning(
                "sink %r: could not remove what job %r staged (%s: %s); the next run of "
                "the sink id tries again",
                self.sink_id,
                job_id,
                type(error).__name__,
                error,
            )
            return False
        return True

    def clean_up_attempts(self, kept_attempt_tokens: Collection[str]) -> None:
        """``clean_up_attempts(job_id, kept)`` on this job: the writer stage is over."""
        self._clean_up_attempts(self.job_id, frozenset(kept_attempt_tokens))

    def _clean_up_attempts(self, job_id: str, kept: frozenset[str]) -> None:
        if self.capabilities.attempt_cleanup:
            with self.timed("clean up attempts"):
                self.sink.clean_up_attempts(job_id, kept)

    def finish(self, *, keep_attempt_tokens: Collection[str] = ()) -> None:
        """This job's epochs are committed (or it gave up writing): remove what it staged.

        Calls ``clean_up_attempts(job_id, keep_attempt_tokens)``, forgets the job
        unless something was kept, releases the sink id. If the clean-up (or
        forgetting the job) fails, a warning is logged and the job stays recorded:
        the next run of the sink id removes what it staged. Do not call it while an
        epoch of the job is pending and may be committed by a later run: `close`
        instead, and the next run cleans up after committing it.

        Args:
            keep_attempt_tokens: Attempts whose staged output the last checkpoint's
                writer states refer to (a stopped stream); the job then stays
                recorded, and the run that restores those states removes them.
        """
        self._check_open("finish the job")
        keep = frozenset(keep_attempt_tokens)
        try:
            if self._clean_up_dead_job(self.job_id, keep) and not keep:
                self.lease.finish_job(self.job_id)
        except (CommitStateError, StaleFencingTokenError) as error:
            # The epoch is committed; a job left recorded is only cleaned up again.
            logger.warning(
                "sink %r: job %s could not be marked finished (%s); the next run of the "
                "sink id cleans up after it again",
                self.sink_id,
                self.job_id,
                error,
            )
        finally:
            self.close()

    def close(self) -> None:
        """Release the sink id. Idempotent. An unfinished job is cleaned by the next run."""
        if self._state is CoordinatorState.OPEN and self._lease is not None:
            self._lease.release()
        self._state = CoordinatorState.CLOSED

    def __enter__(self) -> CommitCoordinator:
        if self._state is CoordinatorState.NEW:
            self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- one epoch: the procedure every door runs (see `sinkv2.runtime._epoch`) ------------

    def run_epoch(
        self, write: WriterStage, *, checkpoint_id: int | None, recovery: Recovery
    ) -> SinkResult:
        """One batch epoch: skip it, finish it, or write, pre-commit and commit it.

        `plan_epoch`, then `settle` or `write_epoch` + `commit_epoch`.

        Args:
            write: The engine's writer stage.
            checkpoint_id: The user's checkpoint id (the epoch), or ``None`` for a
                new epoch whose committables carry ``END_OF_INPUT``.
            recovery: What `open` returned: a pending ``checkpoint_id`` it committed
                makes this run ``RECOMMITTED``.

        Raises:
            SinkConfigurationError: ``checkpoint_id`` is an epoch of runs without one.
            SinkWriterError: A writer failed; nothing was committed.
            CommitError: The commit failed; the epoch stays pending.
        """
        plan = self.plan_epoch(checkpoint_id, recovery=recovery)
        if plan.need is not EpochNeed.WRITE:
            return self.settle(plan)
        pending = self.write_epoch(plan, lambda: write(self.job_id, plan.checkpoint_id))
        return self.commit_epoch(pending)

    def plan_epoch(self, checkpoint_id: int | None, *, recovery: Recovery) -> EpochPlan:
        """What a batch run's epoch needs: nothing (committed), a recommit, or writers.

        Args:
            checkpoint_id: The user's checkpoint id, or ``None`` (a new epoch, always
                written).
            recovery: What `open` returned.

        Raises:
            SinkConfigurationError: ``checkpoint_id`` is an epoch of runs without one.
        """
        lease = self.lease
        epoch = checkpoint_id if checkpoint_id is not None else lease.next_epoch()
        carried = checkpoint_id if checkpoint_id is not None else END_OF_INPUT
        base = self._base(
            epoch, carried, recovery, store_warning=self._no_history_warning(checkpoint_id)
        )
        plan = EpochPlan(
            epoch=epoch,
            checkpoint_id=carried,
            need=EpochNeed.WRITE,
            explicit=checkpoint_id is not None,
            base=base,
        )
        if checkpoint_id is None:
            return plan
        if epoch in recovery.recommitted:
            return attrs.evolve(
                plan, need=EpochNeed.NOTHING, recommitted=recovery.recommitted[epoch]
            )
        existing = lease.get(epoch)
        if existing is not None and not existing.explicit:
            raise SinkConfigurationError(
                f"epoch {epoch} of sink {self.sink_id!r} belongs to a run without a "
                f"checkpoint_id (assigned {existing.status.value}); checkpoint ids and "
                "assigned epochs share one history per sink id. Use checkpoint ids for every "
                "run of this sink id, or a different sink_id for runs with them"
            )
        if existing is None:
            if self._destination_holds(epoch):
                return attrs.evolve(plan, need=EpochNeed.NOTHING, held_by_destination=True)
            return plan
        return attrs.evolve(plan, need=_NEEDS[existing.status], record=existing)

    def plan_checkpoint(
        self,
        checkpoint_id: int,
        *,
        recovery: Recovery | None = None,
        recommitted: tuple[int, ...] = (),
    ) -> EpochPlan:
        """What a stream's checkpoint needs: nothing (committed), a recommit, or writers.

        Args:
            checkpoint_id: The checkpoint (its epoch).
            recovery: What `open` finished, for a stream's first checkpoint since then:
                its result reports it, and ``RECOMMITTED`` if this checkpoint is one
                of the epochs it committed.
            recommitted: Pending epochs below it just committed (its result says so).
        """
        epoch = checkpoint_id
        existing = self.lease.get(epoch)
        need = EpochNeed.WRITE if existing is None else _NEEDS[existing.status]
        if existing is not None and existing.status is EpochStatus.ABORTED:
            existing = None
        return EpochPlan(
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            need=need,
            explicit=True,
            base=self._base(epoch, checkpoint_id, recovery, recommitted=recommitted),
            record=existing,
            recommitted=(
                recovery.recommitted.get(epoch)
                if recovery is not None and need is EpochNeed.NOTHING
                else None
            ),
        )

    def settle(self, plan: EpochPlan) -> SinkResult:
        """Finish an epoch that needs no writers: report it, or commit it from the store.

        Raises:
            IllegalLifecycleError: The epoch needs writers (`write_epoch`).
            CommitError: A recommit failed; the epoch stays pending.
        """
        if plan.need is EpochNeed.WRITE:
            raise IllegalLifecycleError(
                f"epoch {plan.epoch} of sink {self.sink_id!r} is not recorded: its writers "
                f"must write it (write_epoch), it cannot be settled; {_BUG}"
            )
        if plan.recommitted is not None:
            return epoch_result(
                plan.base, CommitStatus.RECOMMITTED, plan.recommitted, None, self.stage_seconds
            )
        if plan.held_by_destination:
            return self._held_by_destination(plan.base, plan.epoch)
        if plan.need is EpochNeed.RECOMMIT:
            assert plan.record is not None  # a Pending record
            commit = self.commit_pending(
                plan.epoch,
                plan.checkpoint_id,
                self.stored_committables(plan.record),
                recovering=True,
            )
            return epoch_result(
                plan.base, CommitStatus.RECOMMITTED, commit, None, self.stage_seconds
            )
        return attrs.evolve(plan.base, stage_seconds=dict(self.stage_seconds))

    def write_epoch(
        self,
        plan: EpochPlan,
        write: Callable[[], WriterStageOutput],
        *,
        kept: frozenset[str] = frozenset(),
        state_name: str | None = None,
    ) -> PendingEpoch:
        """Write the epoch, remove the losing attempts' output, pre-commit, record Pending.

        Args:
            plan: An epoch that needs writers.
            write: Runs the engine's writer stage.
            kept: Attempts of this job whose staged output must survive the clean-ups
                (restored states name them; earlier checkpoints still committing).
            state_name: Record the writers' states under this name (streaming).

        Raises:
            IllegalLifecycleError: The epoch needs no writers (`settle`).
            SinkWriterError: A writer failed; nothing of the epoch is recorded.
        """
        if plan.need is not EpochNeed.WRITE:
            raise IllegalLifecycleError(
                f"epoch {plan.epoch} of sink {self.sink_id!r} is recorded "
                f"({plan.need.value} is all it needs): writing it again would commit its "
                f"data twice; {_BUG}"
            )
        epoch = plan.epoch
        start = time.perf_counter()
        try:
            written = write()
        except BaseException:
            self.clean_up_attempts(kept)  # nothing of this epoch will be committed
            raise
        engine_seconds = dict(written.stage_seconds)  # e.g. the pre-write topology
        self.stage_seconds.update(engine_seconds)
        self.stage_seconds["write"] = time.perf_counter() - start - sum(engine_seconds.values())
        self.clean_up_attempts(kept | written.attempt_tokens)
        self._on_stage("writers-finished", epoch)
        try:
            committables = self.pre_commit(written.table, final=written.final_committables)
        except BaseException:
            self.clean_up_attempts(kept)  # nothing of this epoch will be committed
            raise
        states = (
            attrs.evolve(written.states, state_name=state_name)
            if state_name is not None and written.states is not None
            else None
        )
        self.record_pending(
            epoch, plan.checkpoint_id, committables, explicit=plan.explicit, writer_states=states
        )
        return PendingEpoch(
            plan=plan,
            committables=committables,
            written=written,
            write_seconds=dict(self.stage_seconds),
        )

    def commit_epoch(
        self,
        pending: PendingEpoch,
        *,
        check_outcome: Callable[[CommitOutcome[Any]], None] | None = None,
        after_commit: Callable[[], None] | None = None,
    ) -> SinkResult:
        """Commit an epoch `write_epoch` recorded Pending; its result.

        Safe on another thread than the one that wrote it (a stream's commit
        thread): each thread times its own stages, and the result adds both.

        Args:
            pending: What `write_epoch` returned.
            check_outcome: See `commit_pending`.
            after_commit: Runs once the epoch is recorded Committed, timed with it.

        Raises:
            CommitError: The commit failed; the epoch stays pending.
        """
        plan = pending.plan
        self.stage_seconds.clear()
        commit = self.commit_pending(
            plan.epoch, plan.checkpoint_id, pending.committables, check_outcome=check_outcome
        )
        if after_commit is not None:
            after_commit()
        seconds = dict(pending.write_seconds)
        for stage, spent in self.stage_seconds.items():
            seconds[stage] = seconds.get(stage, 0.0) + spent
        return epoch_result(plan.base, CommitStatus.COMMITTED, commit, pending.written, seconds)

    def reset_stage_seconds(self) -> None:
        """Start timing a new epoch on this thread (a stream's next checkpoint)."""
        self.stage_seconds.clear()

    def _base(
        self,
        epoch: int,
        checkpoint_id: int,
        recovery: Recovery | None,
        *,
        recommitted: tuple[int, ...] = (),
        store_warning: str | None = None,
    ) -> SinkResult:
        """The epoch's result before anything is done; it reports what ``recovery`` did."""
        base = SinkResult(
            sink_id=self.sink_id,
            epoch=epoch,
            checkpoint_id=checkpoint_id,
            status=CommitStatus.ALREADY_COMMITTED,
            job_id=self.job_id,
            recommitted_epochs=recommitted,
            store_warning=store_warning,
        )
        if recovery is None:
            return base
        return attrs.evolve(
            base,
            recommitted_epochs=tuple(
                sorted({*recommitted, *(e for e in recovery.recommitted if e != epoch)})
            ),
            aborted_epochs=recovery.aborted,
            cleaned_jobs=recovery.cleaned_jobs,
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

    def _no_history_warning(self, checkpoint_id: int | None) -> str | None:
        """A WARNING, and its text, when a run with a checkpoint id finds no history.

        A checkpoint id makes a re-run idempotent only against the store that
        recorded the first run. A store with no epoch of the sink id is either the
        sink id's first run, or a store in the wrong place (the default one lives
        under the working directory, which schedulers change): say which store it
        is, loudly, so that the second case is found before a re-run duplicates.
        """
        if checkpoint_id is None or self.lease.epochs():
            return None
        text = (
            f"no earlier epoch of sink id {self.sink_id!r} in {self._store!r}, although "
            f"this run passed checkpoint_id={checkpoint_id}: expected on the sink id's first "
            "run. If it ran before, its history is in another store (e.g. the .sinkv2 "
            "directory of another working directory) and checkpoints it committed can be "
            "written twice: pass that store (state_store=... or $SINKV2_STATE_DIR), kept "
            "next to the job's output or in one explicit place"
        )
        logger.warning("sink %r job %s: %s", self.sink_id, self.job_id, text)
        return text

    def _destination_holds(self, checkpoint_id: int) -> bool:
        """Whether the destination says it holds ``checkpoint_id`` (second line of defence)."""
        if not self._marks_checkpoints:
            return False
        with self.timed("ask the destination"):
            return bool(self.sink.is_checkpoint_committed(self.sink_id, checkpoint_id))

    def _held_by_destination(self, base: SinkResult, epoch: int) -> SinkResult:
        """Write nothing: record the checkpoint committed, and say loudly why."""
        self.record_pending(epoch, epoch, [], explicit=True)
        with self.timed("commit"):
            self.lease.mark_committed(epoch)
        text = (
            f"the destination already holds checkpoint {epoch} of sink id {self.sink_id!r} "
            f"({self.capabilities.sink_type} marks each checkpoint it commits), but "
            f"{self._store!r} had no record of it: nothing was written again, and the store "
            "now records it committed. If earlier runs used another store (e.g. the .sinkv2 "
            "directory of another working directory), pass that one: only the destinations "
            "that mark their checkpoints catch this"
        )
        logger.warning("sink %r job %s: %s", self.sink_id, self.job_id, text)
        self._on_stage("committed-recorded", epoch)
        return attrs.evolve(base, store_warning=text, stage_seconds=dict(self.stage_seconds))

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
            CorruptDataError: The stored bytes do not decode.
            UnsupportedVersionError: They were written by a serializer version the
                sink no longer reads.
        """
        if self._committables is None:
            return []
        return SimpleVersionedSerialization.read_version_and_deserialize_list(
            self._committables, record.payload
        )

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
        """
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
