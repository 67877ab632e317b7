"""A job's lifecycle on one sink id: open (acquire, record, recover), finish, close.

`JobCoordinator` adds to `EpochSteps` (``_coordinator_steps.py``) what a job does
before and after its epochs: acquire the sink id (refused if a planned fencing token
moved), bind a stream's origin, record the job, commit or abort what dead jobs left
Pending, remove what they staged; and at the end remove what this job staged,
forget it and release the sink id. `CommitCoordinator` (``_coordinator.py``) adds the
epoch procedure.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Self

from sinkv2.errors import (
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
    SerializationError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime._coordinator_steps import CoordinatorState, EpochSteps
from sinkv2.runtime._seam import (
    EpochCommit,
    Recovery,
)
from sinkv2.runtime._store import EpochStatus, SinkLease
from sinkv2.runtime._writer_states import WriterStates

if TYPE_CHECKING:
    pass


__all__ = ["JobCoordinator"]

logger = logging.getLogger("sinkv2.coordinator")


class JobCoordinator(EpochSteps):
    """A job's lifecycle on the sink id; see `CommitCoordinator` for the args."""

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
            self._recovery = self._recover(keep)
            return self._recovery
        except BaseException:
            self.close()
            raise

    @property
    def recovery(self) -> Recovery:
        """What `open` recovered of dead jobs.

        Raises:
            IllegalLifecycleError: The coordinator was never opened.
        """
        if self._recovery is None:
            self._check_open("ask what open() recovered")
        assert self._recovery is not None  # open() sets it before it returns
        return self._recovery

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

    def __enter__(self) -> Self:
        """Open (if not open yet); the block is the job's success path.

        ``with coordinator as job: job.run_epoch(write, checkpoint_id=..., recovery=
        job.recovery)``: a block that ends normally `finish`es the job; one that
        raises only `close`s it (the next run of the sink id commits what it left
        Pending and removes what it staged).
        """
        if self._state is CoordinatorState.NEW:
            self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self._state is CoordinatorState.OPEN:
            self.finish()
        else:
            self.close()
