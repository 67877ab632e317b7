"""One writer subtask: Flink's writer-side checkpoint sequence, written once.

Every engine runs a sink's writers the same way, and this module is the one place
that says how: Spark's writer task (``sinkv2_spark``), the contract kit's local
engines (``sinkv2.testing``) and the draining stop (`drain_writer_states`) all
drive a `WriterSubtask`.

- `WriterSubtask.open`: ``restore_writer(context, states)`` when the subtask
  restores framed writer states, else ``create_writer(context)``; the writer is
  checked against the sink's mixins.
- `WriterSubtask.write` / `WriterSubtask.write_arrow_batch`: feed it (Python
  values or one Arrow batch), counting records, firing due timers after each batch
  when the engine owns a `CooperativeProcessingTimeService`.
- `WriterSubtask.snapshot`: a checkpoint (``flush(False)`` -> ``prepare_commit()``
  -> ``snapshot_state(N)``) or the end of input (``flush(True)`` -> ...
  ``snapshot_state(END_OF_INPUT)``), framed for the driver (Flink's version +
  length framing) into a `SubtaskSnapshot`.
- `WriterSubtask.close`.
- `WriterSubtask.run`: the whole life of one task attempt, as a Spark task lives
  it: open, feed, snapshot, close (``close()`` runs even when a step failed; its
  own failure then does not hide the first one).

An engine adapts it with two optional hooks instead of copying it: ``describe``
turns a failed step into the engine's error (Spark names the sink, subtask,
attempt and element); ``on_framed`` sees every value as it is framed (the kit
checks that the serializer round-trips it). A fault that the kit injects (a task
that dies after some elements, or after its checkpoint sequence without
reporting it) is the same steps, stopped early.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from sinkv2._capabilities import SinkCapabilities
from sinkv2._context import BasicSinkWriterContext
from sinkv2._messages import END_OF_INPUT
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2._text import short_repr

if TYPE_CHECKING:
    import pyarrow as pa

    from sinkv2._context import WriterInitContext
    from sinkv2._time import CooperativeProcessingTimeService

__all__ = [
    "KIND_COMMITTABLE",
    "KIND_STATE",
    "KIND_WRITE_RESULT",
    "Describe",
    "OnFramed",
    "SubtaskSnapshot",
    "WriterSubtask",
]

KIND_COMMITTABLE: Final = "committable"
KIND_WRITE_RESULT: Final = "write_result"
KIND_STATE: Final = "writer_state"

_MAX_ELEMENT_REPR: Final = 300

Describe = Callable[[str, Exception, int | None], Exception]
"""``(step, error, element position or None) -> the exception to raise instead``."""

OnFramed = Callable[[str, SimpleVersionedSerializer[Any], Any, bytes], None]
"""``(kind, serializer, value, framed bytes)``: called for each value framed."""


@attrs.frozen
class SubtaskSnapshot:
    """What one writer hands the driver at a checkpoint or the end of its input.

    Attributes:
        outputs: The framed committables, or write results when the sink has a
            pre-commit topology, in the order ``prepare_commit`` returned them.
        output_version: Their serializer's version; ``None`` without a committer.
        states: The framed writer states (empty without ``SupportsWriterState``).
        state_version: Their serializer's version; ``None`` without writer state.
    """

    outputs: tuple[bytes, ...] = ()
    output_version: int | None = None
    states: tuple[bytes, ...] = ()
    state_version: int | None = None


def _frame(
    kind: str,
    serializer: SimpleVersionedSerializer[Any],
    values: Iterable[Any],
    on_framed: OnFramed | None,
) -> tuple[bytes, ...]:
    framed = []
    for value in values:
        data = SimpleVersionedSerialization.write_version_and_serialize(serializer, value)
        if on_framed is not None:
            on_framed(kind, serializer, value, data)
        framed.append(data)
    return tuple(framed)


@attrs.define
class WriterSubtask:
    """One subtask's writer through one task attempt (see the module doc for the steps).

    Attributes:
        sink: The sink (the engine's own copy: each Spark task unpickles one).
        capabilities: What ``inspect_sink`` found.
        context: The writer's init context, built by the engine.
        emits_write_results: The sink has a pre-commit topology: ``prepare_commit``
            returns write results, framed with the write-result serializer.
        timers: The context's processing-time service if the engine fires its due
            timers after each batch (Spark does); ``None``: nobody fires them here.
        describe: Turns a failed step into the engine's error; ``None``: a failing
            call's exception propagates unchanged.
        on_framed: Sees every framed committable, write result and state.
        writer: The writer, once `open` made it.
        takes_arrow: Whether it takes Arrow batches (`write_arrow_batch`).
        records: Elements written so far.
    """

    sink: Any
    capabilities: SinkCapabilities
    context: WriterInitContext
    emits_write_results: bool = False
    timers: CooperativeProcessingTimeService | None = None
    describe: Describe | None = None
    on_framed: OnFramed | None = None
    writer: Any = None
    takes_arrow: bool = False
    records: int = 0

    @contextlib.contextmanager
    def _step(self, step: str) -> Iterator[None]:
        """Run one call into the writer; its failure as the engine describes it."""
        try:
            yield
        except Exception as error:
            if self.describe is None:
                raise
            raise self.describe(step, error, None) from error

    def open(self, restored: Sequence[bytes] | None = None) -> Any:
        """Create the writer, or restore it from framed ``restored`` states.

        A sink without ``SupportsWriterState`` is created even when ``restored`` is
        given. Returns the writer (also kept as `writer`).
        """
        restoring = restored is not None and self.capabilities.writer_state
        with self._step("restore_writer" if restoring else "create_writer"):
            if restoring:
                assert restored is not None
                serializer = self.sink.get_writer_state_serializer()
                states = [
                    SimpleVersionedSerialization.read_version_and_deserialize(serializer, data)
                    for data in restored
                ]
                writer = self.sink.restore_writer(self.context, states)
            else:
                writer = self.sink.create_writer(self.context)
            self.capabilities.check_writer(writer)
        self.writer = writer
        self.takes_arrow = SinkCapabilities.is_arrow_writer(writer)
        return writer

    def _batch_done(self, count: int) -> None:
        self.records += count
        if self.timers is not None:
            self.timers.fire_due_timers()

    def write(self, elements: Sequence[object]) -> None:
        """``write(element, context)`` for each element in order, as one batch."""
        context = BasicSinkWriterContext()
        remaining = iter(elements)
        try:
            # Built in C: the per-element cost is the writer's own.
            collections.deque(
                map(self.writer.write, remaining, itertools.repeat(context)), maxlen=0
            )
        except Exception as error:
            if self.describe is None:
                raise
            index = len(elements) - operator.length_hint(remaining) - 1
            step = f"write({short_repr(elements[index], _MAX_ELEMENT_REPR)})"
            raise self.describe(step, error, self.records + index) from error
        self._batch_done(len(elements))

    def write_arrow_batch(self, batch: pa.RecordBatch) -> None:
        """``write_arrow_batch(batch, context)`` on an Arrow writer."""
        last = self.records + batch.num_rows - 1
        with self._step(f"write_arrow_batch(rows {self.records}..{last})"):
            self.writer.write_arrow_batch(batch, BasicSinkWriterContext())
        self._batch_done(batch.num_rows)

    def write_values(self, elements: Sequence[object]) -> None:
        """Python values: one Arrow batch for an Arrow writer if they are all rows (dicts)."""
        if not elements:
            return
        if self.takes_arrow and all(isinstance(e, dict) for e in elements):
            import pyarrow as pa  # noqa: PLC0415  # only Arrow writers need it

            self.write_arrow_batch(pa.RecordBatch.from_pylist(list(elements)))
        else:
            self.write(elements)

    def snapshot(self, checkpoint_id: int) -> SubtaskSnapshot:
        """Flink's checkpoint sequence on the writer; `END_OF_INPUT` ends its input.

        ``flush(end_of_input)`` -> ``prepare_commit()`` (with a committer) ->
        ``snapshot_state(checkpoint_id)`` (with writer state), then framing.
        """
        capabilities = self.capabilities
        end_of_input = checkpoint_id == END_OF_INPUT
        writer = self.writer
        with self._step(f"flush(end_of_input={end_of_input})"):
            writer.flush(end_of_input)
        produced: list[Any] = []
        if capabilities.committer:
            with self._step("prepare_commit()"):
                produced = list(writer.prepare_commit())
        states: list[Any] = []
        if capabilities.writer_state:
            label = "END_OF_INPUT" if end_of_input else checkpoint_id
            with self._step(f"snapshot_state({label})"):
                states = list(writer.snapshot_state(checkpoint_id))
        return self._framed(produced, states)

    def _framed(self, produced: list[Any], states: list[Any]) -> SubtaskSnapshot:
        capabilities, sink = self.capabilities, self.sink
        snapshot = SubtaskSnapshot()
        if capabilities.committer:
            kind, serializer = (
                (KIND_WRITE_RESULT, sink.get_write_result_serializer())
                if self.emits_write_results
                else (KIND_COMMITTABLE, sink.get_committable_serializer())
            )
            snapshot = attrs.evolve(
                snapshot,
                outputs=_frame(kind, serializer, produced, self.on_framed),
                output_version=serializer.get_version(),
            )
        if capabilities.writer_state:
            serializer = sink.get_writer_state_serializer()
            snapshot = attrs.evolve(
                snapshot,
                states=_frame(KIND_STATE, serializer, states, self.on_framed),
                state_version=serializer.get_version(),
            )
        return snapshot

    def close(self) -> None:
        """``close()`` the writer."""
        with self._step("close()"):
            self.writer.close()

    def run(
        self,
        restored: Sequence[bytes] | None,
        feed: Callable[[WriterSubtask], None],
        checkpoint_id: int,
    ) -> SubtaskSnapshot:
        """One task attempt: `open`, ``feed(self)``, `snapshot`, `close`.

        ``close()`` runs whatever happened; if an earlier step failed, a failing
        ``close()`` is not reported over it.
        """
        self.open(restored)
        failed = True
        try:
            feed(self)
            snapshot = self.snapshot(checkpoint_id)
            failed = False
        finally:
            if failed:
                # The first failure is the one to report, not close()'s after it.
                with contextlib.suppress(Exception):
                    self.writer.close()
            else:
                self.close()
        return snapshot
