"""The source: a factory for one enumerator and many readers (Flink's ``Source``).

A source is shipped to every process that runs a part of it (engines pickle it with
cloudpickle), so keep it plain configuration: open connections in the enumerator
and the readers, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from sinkv2._serialization import SimpleVersionedSerializer
from sinkv2.source._boundedness import Boundedness
from sinkv2.source._context import SourceReaderContext, SplitEnumeratorContext
from sinkv2.source._enumerator import SplitEnumerator
from sinkv2.source._reader import SourceReader

if TYPE_CHECKING:
    import pyarrow

__all__ = ["Source"]

T_co = TypeVar("T_co", covariant=True)
SplitT = TypeVar("SplitT")
EnumChkT = TypeVar("EnumChkT")


class Source(Protocol[T_co, SplitT, EnumChkT]):
    """A FLIP-27 source: splits found by one enumerator, read by parallel readers.

    Required: every method below. `inspect_source` checks them before a job runs.

    One class serves batch and streaming: `get_boundedness` says whether the data
    ends, and engines read a bounded source in a batch job or a stream, an unbounded
    one only in a stream.
    """

    def get_boundedness(self) -> Boundedness:
        """Whether this source's data ends."""
        ...

    def create_enumerator(
        self, enum_context: SplitEnumeratorContext[SplitT]
    ) -> SplitEnumerator[SplitT, EnumChkT]:
        """A new enumerator, for a job that starts from nothing."""
        ...

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[SplitT], checkpoint: EnumChkT
    ) -> SplitEnumerator[SplitT, EnumChkT]:
        """An enumerator that goes on from ``checkpoint`` (a `SplitEnumerator.snapshot_state`)."""
        ...

    def create_reader(self, reader_context: SourceReaderContext) -> SourceReader[T_co, SplitT]:
        """A new reader for ``reader_context``'s subtask (Flink's ``SourceReaderFactory``)."""
        ...

    def get_split_serializer(self) -> SimpleVersionedSerializer[SplitT]:
        """How splits (with positions) are stored; reads every version ever written."""
        ...

    def get_enumerator_checkpoint_serializer(self) -> SimpleVersionedSerializer[EnumChkT]:
        """How enumerator checkpoints are stored; reads every version ever written."""
        ...

    def get_produced_type(self) -> pyarrow.Schema:
        """The schema of the records (Flink's ``ResultTypeQueryable``), as a pyarrow schema."""
        ...
