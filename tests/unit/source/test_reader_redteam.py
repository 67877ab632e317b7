"""The reader framework given what a broken split serializer hands it."""

from __future__ import annotations

import pytest

from sinkv2.source import SourceContractError
from tests.unit.source.flink_reader_mocks import TestingReaderContext
from tests.unit.source.flip27_fixtures import ListSourceReader, ListSplit


@pytest.mark.parametrize("split", [None, b"\x01", ListSplit("a", (1, 2), 0).split_id()])
def test_a_reader_refuses_what_is_not_a_split_naming_the_serializer(split):
    # e.g. a deserialize() that returns None, or the bytes it was given
    reader = ListSourceReader(TestingReaderContext())
    try:
        with pytest.raises(SourceContractError, match=r"deserialize\(\) must return the split"):
            reader.add_splits([split])
    finally:
        reader.close()
