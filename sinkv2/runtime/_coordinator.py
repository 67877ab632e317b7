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
    per epoch            run_epoch() (batch; CheckpointRunner.run for a stream's checkpoint):
      plan_epoch()       what does it need? nothing / recommit / write (`EpochPlan`)
      settle()           nothing: report it; recommit: commit its stored committables
      write_epoch()      the engine runs the writers                   "writers-finished"
                         remove the losing attempts' output
                         pre-commit topology, lineage check, decode
                         committables (+ states) durable as Pending    "pending-recorded"
      commit_epoch()     Committer.commit with Flink's retries         "committer-finished"
                         post-commit topology                          "post-commit-finished"
                         mark the epoch committed                      "committed-recorded"
    finish()             clean_up_attempts(job, ()), forget the job, release the sink id
    close()              release the sink id; an unfinished job is cleaned by the next run

The success path is a ``with`` block: entering opens, a block that ends normally
finishes, one that raises only closes::

    with CommitCoordinator(sink, sink_id=..., store=..., streams=...) as job:
        result = job.run_epoch(write, checkpoint_id=7, recovery=job.recovery)

The class is layered over three modules, each a concern wrapping the one below:
`EpochSteps` (``_coordinator_steps.py``: the lease, timings and the single steps),
`JobCoordinator` (``_coordinator_job.py``: open, recover, finish, close) and
`CommitCoordinator` here (the epoch procedure every door runs).

A driver that dies anywhere leaves either no record of an epoch (its staged output
is removed by the next run's clean-up of the dead job), a Pending record (the next
run commits it, or aborts it if it has no checkpoint id), or a Committed one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final, final

import attrs

from sinkv2._messages import END_OF_INPUT
from sinkv2.errors import (
    CommitStateError,
    IllegalLifecycleError,
    SinkConfigurationError,
)
from sinkv2.runtime._commit import CommitOutcome
from sinkv2.runtime._coordinator_job import JobCoordinator
from sinkv2.runtime._coordinator_steps import CoordinatorState
from sinkv2.runtime._epoch import EpochNeed, EpochPlan, PendingEpoch
from sinkv2.runtime._result import CommitStatus, SinkResult, epoch_result
from sinkv2.runtime._seam import (
    Recovery,
    WriterStage,
    WriterStageOutput,
)
from sinkv2.runtime._store import EpochStatus

__all__ = ["CommitCoordinator", "CoordinatorState"]

logger = logging.getLogger("sinkv2.coordinator")

_BUG: Final = "this is a bug in sinkv2, please report it"

_NEEDS: Final = {
    EpochStatus.COMMITTED: EpochNeed.NOTHING,
    EpochStatus.PENDING: EpochNeed.RECOMMIT,
    EpochStatus.ABORTED: EpochNeed.WRITE,
}


@final
class CommitCoordinator(JobCoordinator):
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

        Raises:
            CommitStateError: The checkpoint is not recorded but a later one is (its
                record was pruned, or the stream's checkpoint ids went back).
        """
        epoch = checkpoint_id
        existing = self.lease.get(epoch)
        need = EpochNeed.WRITE if existing is None else _NEEDS[existing.status]
        if existing is not None and existing.status is EpochStatus.ABORTED:
            existing = None
        if need is EpochNeed.WRITE:
            self._check_forward(epoch)
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

    def _check_forward(self, epoch: int) -> None:
        """Refuse to write a stream's checkpoint below one that is recorded already.

        A stream's checkpoints go forward: an unrecorded checkpoint below a Pending
        or Committed one had its record pruned (or the stream's checkpoint ids went
        back), and writing it again could make data visible twice.

        Raises:
            CommitStateError: A later checkpoint is recorded Pending or Committed.
        """
        if self.lease.next_epoch() <= epoch + 1:  # nothing recorded above it: the usual case
            return
        later = self.latest_record()
        if later is None or later.epoch <= epoch:
            return
        raise CommitStateError(
            f"checkpoint {epoch} of sink {self.sink_id!r} has no record in {self._store!r}, "
            f"but the later checkpoint {later.epoch} is {later.status.value}: a stream's "
            "checkpoints go forward, so this one was recorded and then pruned (the store "
            "keeps only the newest ones), or the stream's checkpoint ids went back (its "
            "checkpoint location was restored from an older copy, or reset). Writing it "
            "again could make its data visible twice, so nothing was written. Restart the "
            "stream from its latest checkpoint, or start it over under a new sink_id"
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
