"""The `IcebergSource` reader: Iceberg's ``IcebergSourceReader`` on the reader framework.

Splits (data files) are pulled one at a time, as in Iceberg's source, and read as
Arrow batches after their positions (`reference_sinks._split_reader`, shared with
the file and PostgreSQL sources).
"""

from __future__ import annotations

from typing import final

from reference_sinks._split_reader import BatchSplitReader, PullingBatchReader, ReadSplit
from reference_sinks.iceberg._source_split import IcebergSourceSplit
from sinkv2.source import SourceReaderContext

__all__ = ["IcebergSourceReader"]


@final
class IcebergSourceReader(PullingBatchReader[IcebergSourceSplit]):
    """Asks for a split at start (unless restored) and after each finished one.

    Args:
        context: The reader's context.
        read_split: Reads one split after its position.
    """

    def __init__(
        self, context: SourceReaderContext, read_split: ReadSplit[IcebergSourceSplit]
    ) -> None:
        super().__init__(context, lambda: BatchSplitReader(read_split))
