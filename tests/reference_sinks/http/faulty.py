"""A fault-injecting wrapper around a real HttpSink: a task attempt raises at an element.

``failures`` maps (subtask id, attempt number) to the index of the element at which
that attempt raises, after the real writer has written (and maybe sent) everything
before it; Spark then retries the task.
"""

from __future__ import annotations


class InjectedFault(RuntimeError):
    pass


class FaultyWriter:
    def __init__(self, inner, fail_at) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.seen = 0

    def write(self, element, context) -> None:
        if self.fail_at is not None and self.seen == self.fail_at:
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


class FaultyHttpSink:
    def __init__(self, inner, failures) -> None:
        self.inner = inner
        self.failures = dict(failures)

    def _wrap(self, writer, context):
        fail_at = self.failures.get((context.get_subtask_id(), context.get_attempt_number()))
        return FaultyWriter(writer, fail_at)

    def create_writer(self, context):
        return self._wrap(self.inner.create_writer(context), context)

    def restore_writer(self, context, recovered_state):
        return self._wrap(self.inner.restore_writer(context, recovered_state), context)

    def get_writer_state_serializer(self):
        return self.inner.get_writer_state_serializer()
