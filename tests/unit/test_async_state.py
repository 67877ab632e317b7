"""Buffered request state and its serializers: round trips, framing, bad bytes."""

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2 import SimpleVersionedSerialization
from sinkv2.asyncsink import (
    AsyncSinkWriterStateSerializer,
    BufferedRequestState,
    MsgpackRequestStateSerializer,
    RequestEntryWrapper,
)
from sinkv2.errors import CorruptDataError, SerializationError, UnsupportedVersionError

MSGPACK_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
WRAPPERS = st.builds(
    RequestEntryWrapper,
    MSGPACK_VALUES,
    st.integers(0, 2**40),
    st.integers(0, 1_000),
)
STATES = st.lists(WRAPPERS, max_size=20).map(BufferedRequestState)


@given(STATES)
def test_msgpack_state_round_trips_entries_sizes_and_attempts(state):
    serializer = MsgpackRequestStateSerializer()
    restored = serializer.deserialize(1, serializer.serialize(state))
    assert restored == state
    assert restored.get_state_size() == state.get_state_size()


@given(st.lists(STATES, max_size=4))
def test_a_list_of_states_round_trips_through_flinks_list_framing(states):
    serializer = MsgpackRequestStateSerializer()
    data = SimpleVersionedSerialization.write_version_and_serialize_list(serializer, states)
    back = SimpleVersionedSerialization.read_version_and_deserialize_list(serializer, data)
    assert back == states


@given(st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_corrupt_data_error(data):
    serializer = MsgpackRequestStateSerializer()
    with contextlib.suppress(CorruptDataError):
        serializer.deserialize(1, data)


def test_a_state_that_is_not_a_list_of_rows_is_corrupt():
    serializer = MsgpackRequestStateSerializer()
    with pytest.raises(CorruptDataError, match=r"\[size, attempts, bytes\] rows"):
        serializer.deserialize(1, msgpack.packb({"not": "rows"}))


def test_an_unknown_version_is_refused_with_the_versions_it_reads():
    serializer = MsgpackRequestStateSerializer()
    with pytest.raises(UnsupportedVersionError, match=r"version 2; it reads \[1\]"):
        serializer.deserialize(2, serializer.serialize(BufferedRequestState.empty_state()))


def test_an_entry_msgpack_cannot_store_says_what_to_do():
    serializer = MsgpackRequestStateSerializer()
    state = BufferedRequestState([RequestEntryWrapper(object(), 1)])
    with pytest.raises(SerializationError, match="write an AsyncSinkWriterStateSerializer"):
        serializer.serialize(state)


@pytest.mark.parametrize(
    "entry",
    [
        {"status": {200: 5, 404: 1}},  # what json.dumps writes as {"200": 5, ...}
        {1.5: "x", None: "y", True: "z"},
        {(1, (2, 3)): [1, 2], "nested": {(4,): {5: 6}}},
    ],
    ids=["int keys", "float, None and bool keys", "tuple keys"],
)
def test_entries_with_keys_that_are_not_str_come_back_from_the_state(entry):
    # They were stored without complaint; a restore that then refused them would
    # leave the job unable to recover from its own checkpoint.
    serializer = MsgpackRequestStateSerializer()
    state = BufferedRequestState([RequestEntryWrapper(entry, 1)])
    assert serializer.deserialize(1, serializer.serialize(state)) == state


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1])
def test_an_int_beyond_64_bits_is_a_serialization_error_that_says_so(number):
    serializer = MsgpackRequestStateSerializer()
    state = BufferedRequestState([RequestEntryWrapper({"id": number}, 1)])
    with pytest.raises(SerializationError, match="ints within 64 bits"):
        serializer.serialize(state)


class UpperSerializer(AsyncSinkWriterStateSerializer[str]):
    """Version 2 writes upper case; version 1 wrote lower case."""

    def get_version(self):
        return 2

    def get_supported_versions(self):
        return (1, 2)

    def serialize_request_entry(self, request_entry):
        return request_entry.upper().encode()

    def deserialize_request_entry(self, version, serialized):
        text = serialized.decode()
        return text.lower() if version == 2 else text


def test_a_custom_entry_serializer_reads_its_old_versions():
    serializer = UpperSerializer()
    state = BufferedRequestState([RequestEntryWrapper("abc", 3, 2)])
    assert serializer.deserialize(2, serializer.serialize(state)) == state
    old = msgpack.packb([[3, 0, b"xyz"]])
    assert serializer.deserialize(1, old).get_buffered_request_entries() == [
        RequestEntryWrapper("xyz", 3, 0)
    ]


def test_an_entry_that_does_not_decode_is_corrupt_and_named_by_index():
    serializer = UpperSerializer()
    with pytest.raises(CorruptDataError, match="buffered entry 1 does not decode"):
        serializer.deserialize(2, msgpack.packb([[1, 0, b"a"], [1, 0, b"\xff"]]))


def test_the_size_is_stored_apart_from_the_entry_bytes():
    # Flink's format reads `size` bytes back, so sizes had to equal the byte length.
    serializer = MsgpackRequestStateSerializer()
    state = BufferedRequestState([RequestEntryWrapper("x" * 10, 1)])
    assert serializer.deserialize(1, serializer.serialize(state)) == state


def test_state_accessors_follow_flink():
    state = BufferedRequestState([RequestEntryWrapper("a", 2), RequestEntryWrapper("b", 3)])
    assert [w.get_request_entry() for w in state.get_buffered_request_entries()] == ["a", "b"]
    assert [w.get_size() for w in state.get_buffered_request_entries()] == [2, 3]
    assert state.get_state_size() == 5
    assert len(BufferedRequestState.empty_state()) == 0
