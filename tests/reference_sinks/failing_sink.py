"""A fault-injecting wrapper around a real stateful sink: a task attempt raises at an element.

``failures`` maps (subtask id, attempt number) to the index of the element at which
that attempt raises, after the real writer has written (and maybe sent) everything
before it; Spark then retries the task. Used by the async reference sinks' Spark
tests: the destination is real, only the failure is injected.
"""

from __future__ import annotations

from sinkv2 import Sink, StatefulSinkWriter, SupportsWriterState


class InjectedFault(RuntimeError):
    pass


class FailingWriter(StatefulSinkWriter):
    """Raises at element ``fail_at`` (after the rows before it may have landed)."""

    def __init__(self, inner, fail_at) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.seen = 0

    def write(self, element, context) -> None:
        if self.seen == self.fail_at:
            raise InjectedFault(f"injected failure at element {self.seen}")
        self.seen += 1
        self.inner.write(element, context)

    def flush(self, end_of_input) -> None:
        self.inner.flush(end_of_input)

    def write_watermark(self, watermark) -> None:
        self.inner.write_watermark(watermark)

    def snapshot_state(self, checkpoint_id):
        return self.inner.snapshot_state(checkpoint_id)

    def close(self) -> None:
        self.inner.close()


class FailingSink(Sink, SupportsWriterState):
    """``inner`` with ``failures``: (subtask, attempt) -> element index at which it raises."""

    def __init__(self, inner, failures) -> None:
        self.inner = inner
        self.failures = dict(failures)

    def create_writer(self, context):
        return self.restore_writer(context, ())

    def restore_writer(self, context, recovered_state):
        inner = self.inner.restore_writer(context, recovered_state)
        fail_at = self.failures.get((context.get_subtask_id(), context.get_attempt_number()))
        return FailingWriter(inner, fail_at)

    def get_writer_state_serializer(self):
        return self.inner.get_writer_state_serializer()
