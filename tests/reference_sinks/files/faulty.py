"""A fault-injecting wrapper around a real FileSink (the writes still go to real files).

``failures`` maps (subtask id, attempt number) to the index of the batch (Arrow path)
or element (row path) at which that attempt raises, after having staged real files
for everything before it. ``arrow=False`` hides ``write_arrow_batch`` so the
translator takes the per-element path.
"""

from __future__ import annotations

from sinkv2 import (
    CommittingSinkWriter,
    Sink,
    StatefulSinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    SupportsPreCommitTopology,
    SupportsWriterState,
)


class InjectedFault(RuntimeError):
    pass


class RowWriter(CommittingSinkWriter, StatefulSinkWriter):
    def __init__(self, inner, fail_at) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.seen = 0

    def _tick(self) -> None:
        if self.fail_at is not None and self.seen == self.fail_at:
            raise InjectedFault(f"injected failure at input {self.seen}")
        self.seen += 1

    def write(self, element, context) -> None:
        self._tick()
        self.inner.write(element, context)

    def flush(self, end_of_input) -> None:
        self.inner.flush(end_of_input)

    def prepare_commit(self):
        return self.inner.prepare_commit()

    def snapshot_state(self, checkpoint_id):
        return self.inner.snapshot_state(checkpoint_id)

    def close(self) -> None:
        self.inner.close()


class ArrowWriter(RowWriter):
    def write_arrow_batch(self, batch, context) -> None:
        self._tick()
        self.inner.write_arrow_batch(batch, context)


class FaultySink(
    Sink,
    SupportsWriterState,
    SupportsCommitter,
    SupportsAttemptCleanup,
    SupportsAbort,
):
    def __init__(self, inner, failures=None, *, arrow=True) -> None:
        self.inner = inner
        self.failures = dict(failures or {})
        self.arrow = arrow

    def _wrap(self, writer, context):
        fail_at = self.failures.get((context.get_subtask_id(), context.get_attempt_number()))
        return (ArrowWriter if self.arrow else RowWriter)(writer, fail_at)

    def create_writer(self, context):
        return self._wrap(self.inner.create_writer(context), context)

    def restore_writer(self, context, recovered_state):
        return self._wrap(self.inner.restore_writer(context, recovered_state), context)

    def get_writer_state_serializer(self):
        return self.inner.get_writer_state_serializer()

    def get_committable_serializer(self):
        return self.inner.get_committable_serializer()

    def create_committer(self, context):
        return self.inner.create_committer(context)

    def clean_up_attempts(self, job_id, kept_attempt_tokens) -> None:
        self.inner.clean_up_attempts(job_id, kept_attempt_tokens)

    def abort(self, committables) -> None:
        self.inner.abort(committables)


class FaultyCompactingSink(FaultySink, SupportsPreCommitTopology):
    def get_write_result_serializer(self):
        return self.inner.get_write_result_serializer()

    def add_pre_commit_topology(self, committables):
        return self.inner.add_pre_commit_topology(committables)


def faulty(inner, failures=None, *, arrow=True):
    """The wrapper with the same capabilities as ``inner``."""
    kind = FaultyCompactingSink if hasattr(inner, "add_pre_commit_topology") else FaultySink
    return kind(inner, failures, arrow=arrow)
