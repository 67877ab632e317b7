r"""FLIP-27 sources in Python: Flink's ``Source`` API, engine-free.

A source is written once, in Flink's terms, and read by any engine: one
`SplitEnumerator` discovers splits and assigns them; parallel `SourceReader`\\ s
read them; every split carries its own position, so a checkpoint (the enumerator's
unassigned splits plus each reader's splits with their positions) lets a restarted
job go on exactly where it was. The same class serves batch and streaming: its
`Boundedness` says whether its data ends.

``sinkv2.source.reader`` is Flink's reader framework (``flink-connector-base``):
implement a `SplitReader` and get a `SourceReader` with a fetcher thread.
``sinkv2.source.lib`` has ready sources (`NumberSequenceSource`,
`DataGeneratorSource`). ``sinkv2.testing`` runs sources locally and checks them
(`check_source`). Nothing here imports pyspark or pyarrow.
"""

from sinkv2._public import publish as _publish
from sinkv2.source._boundedness import Boundedness, InputStatus
from sinkv2.source._context import SourceReaderContext, SplitEnumeratorContext, source_id_of
from sinkv2.source._end_positions import (
    SplitCut,
    SupportsEndPositions,
    SupportsUncountedSplits,
)
from sinkv2.source._enumerator import SplitEnumerator
from sinkv2.source._errors import SourceContractError, SourceDefinitionError, SourceReaderError
from sinkv2.source._event import SourceEvent
from sinkv2.source._finished_splits import SupportsFinishedSplits
from sinkv2.source._inspect import (
    SourceCapabilities,
    check_enumerator,
    check_reader,
    inspect_source,
)
from sinkv2.source._native_read import NativeRead, NativeReadUnavailable, SupportsNativeRead
from sinkv2.source._output import ReaderOutput, SourceOutput
from sinkv2.source._reader import SourceReader
from sinkv2.source._source import Source
from sinkv2.source._split import ReaderInfo, SourceSplit, SplitsAssignment

__all__ = [
    "Boundedness",
    "InputStatus",
    "NativeRead",
    "NativeReadUnavailable",
    "ReaderInfo",
    "ReaderOutput",
    "Source",
    "SourceCapabilities",
    "SourceContractError",
    "SourceDefinitionError",
    "SourceEvent",
    "SourceOutput",
    "SourceReader",
    "SourceReaderContext",
    "SourceReaderError",
    "SourceSplit",
    "SplitCut",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitsAssignment",
    "SupportsEndPositions",
    "SupportsFinishedSplits",
    "SupportsNativeRead",
    "SupportsUncountedSplits",
    "check_enumerator",
    "check_reader",
    "inspect_source",
    "source_id_of",
]

_publish(__name__)
