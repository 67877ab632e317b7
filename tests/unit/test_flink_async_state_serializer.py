"""Flink's ``AsyncSinkWriterStateSerializerTest``, one test per Java test."""

import pytest

from sinkv2.asyncsink import (
    AsyncSinkWriterStateSerializer,
    BufferedRequestState,
    RequestEntryWrapper,
)
from sinkv2.errors import UnsupportedVersionError
from tests.unit.flink_async_writers import assert_buffer_states_are_equal


class AsyncSinkWriterStateSerializerImpl(AsyncSinkWriterStateSerializer[str]):
    """Flink's serializer of the test: an entry is its UTF-8 bytes."""

    def serialize_request_entry(self, request_entry):
        return request_entry.encode("utf-8")

    def deserialize_request_entry(self, version, serialized):
        return serialized.decode("utf-8")

    def get_version(self):
        return 1


def get_test_state(element_converter, request_size_extractor):
    """Flink's ``AsyncSinkWriterTestUtils.getTestState``: 100 entries ``value:i``."""
    entries = [element_converter(f"value:{i}", None) for i in range(100)]
    return BufferedRequestState(
        [RequestEntryWrapper(entry, request_size_extractor(entry)) for entry in entries]
    )


def test_serialize_and_deserialize():
    """testSerializeAndDeSerialize

    Differs (state versions): Flink deserializes with version 0, which its
    serializer ignores; sinkv2 reads only the versions the serializer supports,
    so the round trip uses ``get_version()`` and version 0 is refused.
    """
    state_serializer = AsyncSinkWriterStateSerializerImpl()
    state = get_test_state(lambda element, context: element, len)
    serialized = state_serializer.serialize(state)
    deserialized_state = state_serializer.deserialize(state_serializer.get_version(), serialized)
    assert_buffer_states_are_equal(state, deserialized_state)
    with pytest.raises(UnsupportedVersionError):
        state_serializer.deserialize(0, serialized)
