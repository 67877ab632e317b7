"""Ready sources: Flink's `NumberSequenceSource` and `DataGeneratorSource`.

Both are engine-free and replay exactly: a split's position is the next index.
"""

from sinkv2._public import publish as _publish
from sinkv2.source.lib._datagen import DataGeneratorSource
from sinkv2.source.lib._number_sequence import NumberSequenceSource
from sinkv2.source.lib._sequence_splits import NumberSequenceSplit

__all__ = ["DataGeneratorSource", "NumberSequenceSource", "NumberSequenceSplit"]

_publish(__name__)
