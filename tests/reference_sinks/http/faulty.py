"""A fault-injecting wrapper around a real HttpSink: a task attempt raises at an element.

``failures`` maps (subtask id, attempt number) to the index of the element at which
that attempt raises, after the real writer has written (and maybe sent) everything
before it; Spark then retries the task.

``with_committer=True`` adds a committer that does nothing (each writer's
committable is its element count): sinkv2_spark's translator fails when the writers
of a sink produce no committables at all (``table.take([])`` on an empty index
list, see test_spark.py), which is the case for every async sink.
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


class CountingWriter(FaultyWriter):
    def prepare_commit(self):
        return [self.seen]


class CountSerializer:
    def get_version(self) -> int:
        return 1

    def serialize(self, obj) -> bytes:
        return str(obj).encode()

    def deserialize(self, version, serialized) -> int:
        return int(serialized)


class NoOpCommitter:
    def commit(self, requests) -> None:
        pass

    def close(self) -> None:
        pass


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


class CommittingFaultyHttpSink(FaultyHttpSink):
    def _wrap(self, writer, context):
        fail_at = self.failures.get((context.get_subtask_id(), context.get_attempt_number()))
        return CountingWriter(writer, fail_at)

    def get_committable_serializer(self):
        return CountSerializer()

    def create_committer(self, context):
        return NoOpCommitter()


def faulty(inner, failures=(), *, with_committer=False):
    """The wrapper; ``with_committer`` works around the translator's zero-committables bug."""
    kind = CommittingFaultyHttpSink if with_committer else FaultyHttpSink
    return kind(inner, dict(failures))
