"""Custom messages between the enumerator and its readers (Flink's ``SourceEvent``)."""

from __future__ import annotations

__all__ = ["SourceEvent"]


class SourceEvent:
    """Base of a source's own messages between its enumerator and its readers.

    Subclass it with plain data (an attrs class). Events go through
    `SplitEnumeratorContext.send_event_to_source_reader` ->
    `SourceReader.handle_source_events`, and
    `SourceReaderContext.send_source_event_to_coordinator` ->
    `SplitEnumerator.handle_source_event`. Engines may pickle them, so they must
    survive cloudpickle. Events are not part of a checkpoint: one in flight when a job
    fails is gone, as in Flink.
    """

    __slots__ = ()
