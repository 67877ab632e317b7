"""Writer states of one checkpoint: the bytes the store keeps, Flink's redistribution, checks.

`redistribute` must split list state the way Flink's
``RoundRobinOperatorStateRepartitioner`` does: at the same parallelism every subtask
gets its own states back; otherwise all states, in old subtask order, are cut into
contiguous runs, the first ``total % parallelism`` one state longer.
"""

from __future__ import annotations

import attrs
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinkv2 import AttrsMsgpackSerializer, SimpleVersionedSerialization
from sinkv2.errors import CorruptDataError, SerializationError, UnsupportedVersionError
from sinkv2.runtime import SubtaskStates, WriterStates, redistribute


@attrs.frozen
class Held:
    element: int


V1 = AttrsMsgpackSerializer(Held, version=1)
V2 = AttrsMsgpackSerializer(Held, version=2)
WHAT = "sink 'orders' epoch 7"


def framed(serializer, element):
    return SimpleVersionedSerialization.write_version_and_serialize(serializer, Held(element))


@st.composite
def writer_states(draw, subtask_ids=None):
    number = draw(st.integers(1, 6))
    ids = draw(st.lists(st.integers(0, number - 1), unique=True)) if subtask_ids is None else None
    return WriterStates(
        state_name=draw(st.text(max_size=20)),
        number_of_subtasks=number,
        subtasks=tuple(
            SubtaskStates(
                subtask_id=subtask,
                attempt_token=draw(st.text(max_size=12)),
                states=tuple(draw(st.lists(st.binary(max_size=16), max_size=4))),
            )
            for subtask in (ids if ids is not None else range(number))
        ),
    )


# --- the bytes the store keeps -------------------------------------------------------------------


@given(states=writer_states())
def test_encode_then_decode_gives_back_the_same_states(states):
    assert WriterStates.decode(states.encode(), what=WHAT) == states


def test_empty_bytes_are_no_states():
    assert WriterStates.decode(b"", what=WHAT) is None


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # not msgpack
        b"\x94\x01",  # truncated
        msgpack.packb("states"),  # msgpack, but not the layout
        msgpack.packb([1, "name", 1]),  # a field short
        msgpack.packb([1, "name", 1, [[0, "token"]]]),  # a subtask without states
        msgpack.packb([1, "name", "many", []]),  # a subtask count that is not a number
        msgpack.packb([1, "name", float("inf"), []]),  # a count no int holds
        msgpack.packb([1, "name", 1, [[0, "token", [1, 2]]]]),  # states that are not bytes
    ],
)
def test_bytes_that_are_not_writer_states_are_corrupt_and_name_the_epoch(data):
    with pytest.raises(CorruptDataError, match=r"writer states recorded for sink 'orders' epoch 7"):
        WriterStates.decode(data, what=WHAT)


def test_states_of_a_newer_format_ask_for_an_upgrade():
    newer = msgpack.packb([2, "name", 1, []])
    with pytest.raises(CorruptDataError, match=r"format 2; this release reads format 1") as error:
        WriterStates.decode(newer, what=WHAT)
    assert "upgrade sinkv2" in str(error.value)
    assert "epoch 7" in str(error.value)


@settings(max_examples=200)
@given(data=st.binary(max_size=64))
def test_any_bytes_decode_or_are_reported_corrupt(data):
    try:
        states = WriterStates.decode(data, what=WHAT)
    except CorruptDataError:
        return
    if states is not None:
        assert all(isinstance(s, bytes) for sub in states.subtasks for s in sub.states)


MSGPACK_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=4)
    # a bytes leaf is what a state is
    | st.binary(max_size=4),
    lambda children: st.lists(children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200)
@given(fields=st.lists(MSGPACK_VALUES, min_size=3, max_size=3))
def test_format_1_with_any_fields_decodes_to_framed_states_or_is_reported_corrupt(fields):
    try:
        states = WriterStates.decode(msgpack.packb([1, *fields]), what=WHAT)
    except CorruptDataError:
        return
    assert states is not None
    assert all(isinstance(s, bytes) for sub in states.subtasks for s in sub.states)


# --- counting and attempts -----------------------------------------------------------------------


def test_count_and_referenced_attempts_cover_only_subtasks_with_states():
    states = WriterStates(
        state_name="s",
        number_of_subtasks=3,
        subtasks=(
            SubtaskStates(subtask_id=0, attempt_token="job-0", states=(b"a", b"b")),
            SubtaskStates(subtask_id=1, attempt_token="job-1"),
            SubtaskStates(subtask_id=2, attempt_token="job-2", states=(b"c",)),
        ),
    )
    assert states.count == 3
    assert states.referenced_attempts() == {"job-0", "job-2"}


# --- redistribution ------------------------------------------------------------------------------


@given(states=writer_states(subtask_ids=True), data=st.data())
def test_at_the_same_parallelism_each_subtask_gets_its_own_states_back(states, data):
    shuffled = data.draw(st.permutations(states.subtasks))
    recorded = attrs.evolve(states, subtasks=tuple(shuffled))
    runs = recorded.redistribute(states.number_of_subtasks)
    assert runs == [list(s.states) for s in states.subtasks]


def test_the_same_parallelism_keeps_uneven_runs_as_they_were():
    states = WriterStates(
        state_name="s",
        number_of_subtasks=2,
        subtasks=(
            SubtaskStates(subtask_id=0, attempt_token="t0", states=(b"a", b"b", b"c")),
            SubtaskStates(subtask_id=1, attempt_token="t1"),
        ),
    )
    assert states.redistribute(2) == [[b"a", b"b", b"c"], []]  # not rebalanced to 2 + 1


@given(states=writer_states(subtask_ids=True), parallelism=st.integers(1, 8), data=st.data())
def test_a_rescale_cuts_all_states_in_old_subtask_order(states, parallelism, data):
    shuffled = data.draw(st.permutations(states.subtasks))
    recorded = attrs.evolve(states, subtasks=tuple(shuffled))
    runs = recorded.redistribute(parallelism)
    in_subtask_order = [s for sub in states.subtasks for s in sub.states]
    if parallelism != states.number_of_subtasks:
        assert runs == redistribute(in_subtask_order, parallelism)
    assert [s for run in runs for s in run] == in_subtask_order


def test_subtasks_missing_from_the_record_restore_nothing():
    drained = WriterStates(
        state_name="s",
        number_of_subtasks=3,
        subtasks=(SubtaskStates(subtask_id=1, attempt_token="t1", states=(b"x",)),),
    )
    assert drained.redistribute(3) == [[], [b"x"], []]
    assert drained.redistribute(2) == [[b"x"], []]


def test_by_subtask_id_each_writer_restores_what_is_recorded_under_its_id():
    recorded = WriterStates(
        state_name="s",
        number_of_subtasks=2,
        subtasks=(
            SubtaskStates(subtask_id=1, attempt_token="t1", states=(b"b",)),
            SubtaskStates(subtask_id=0, attempt_token="t0", states=(b"a",)),
            SubtaskStates(subtask_id=0, attempt_token="t2", states=(b"c",)),  # carried to 0
        ),
    )
    assert [recorded.restore_by_subtask_id(i) for i in range(4)] == [(b"a", b"c"), (b"b",), (), ()]


def test_with_carried_records_the_states_no_writer_restored_under_i_mod_n():
    restored = WriterStates(
        state_name="s",
        number_of_subtasks=5,
        subtasks=tuple(
            SubtaskStates(subtask_id=i, attempt_token=f"old{i}", states=(bytes([i]),) * (i != 3))
            for i in range(5)
        ),
    )
    own = WriterStates(
        state_name="s",
        number_of_subtasks=2,
        subtasks=(
            SubtaskStates(subtask_id=0, attempt_token="new0", states=(b"x",)),
            SubtaskStates(subtask_id=1, attempt_token="new1", states=(b"y",)),
        ),
    )
    merged = own.with_carried(restored)
    assert merged.subtasks[:2] == own.subtasks
    assert [(s.subtask_id, s.attempt_token, s.states) for s in merged.subtasks[2:]] == [
        (0, "old2", (b"\x02",)),
        (0, "old4", (b"\x04",)),  # subtask 3 had no states: nothing to carry
    ]
    assert merged.by_subtask() == [[b"x", b"\x02", b"\x04"], [b"y"]]
    assert own.with_carried(attrs.evolve(restored, subtasks=restored.subtasks[:2])) is own


# --- readable before any writer starts -----------------------------------------------------------


def recorded(*subtask_states):
    return WriterStates(
        state_name="s",
        number_of_subtasks=len(subtask_states),
        subtasks=tuple(
            SubtaskStates(subtask_id=i, attempt_token=f"t{i}", states=tuple(states))
            for i, states in enumerate(subtask_states)
        ),
    )


def test_readable_states_pass():
    recorded([framed(V1, 1)], [], [framed(V1, 2), framed(V1, 3)]).check_readable(V1, what=WHAT)


def test_a_corrupt_state_names_its_subtask_and_the_epoch():
    states = recorded([framed(V1, 1)], [framed(V1, 2), framed(V1, 3)[:-2]])
    with pytest.raises(CorruptDataError) as error:
        states.check_readable(V1, what=WHAT)
    message = str(error.value)
    assert "writer state 1 of subtask 1 recorded for sink 'orders' epoch 7 cannot be restored" in (
        message
    )
    assert "truncated" in message  # the cause is kept in the message
    assert "start over under a new sink id" in message


def test_a_state_of_a_payload_that_does_not_decode_is_corrupt():
    garbage = b"\x00\x00\x00\x01\x00\x00\x00\x01\xc1"  # version 1, one byte of not-msgpack
    with pytest.raises(CorruptDataError, match=r"writer state 0 of subtask 0") as error:
        recorded([garbage]).check_readable(V1, what=WHAT)
    assert error.value.version == 1


def test_a_state_of_a_newer_serializer_version_is_unsupported_and_names_its_subtask():
    states = recorded([], [], [framed(V1, 1), framed(V2, 2)])
    with pytest.raises(UnsupportedVersionError) as error:
        states.check_readable(V1, what=WHAT)
    message = str(error.value)
    assert "writer state 1 of subtask 2 recorded for sink 'orders' epoch 7" in message
    assert "cannot read version 2" in message
    assert error.value.version == 2
    assert list(error.value.supported) == [1]
    upgraded = AttrsMsgpackSerializer(Held, version=2, upgrades={1: lambda data: data})
    states.check_readable(upgraded, what=WHAT)  # ... which the newer serializer reads


class Refusing:
    """A serializer whose reader refuses with the root serialization error."""

    def get_version(self):
        return 1

    def serialize(self, obj):
        return b"x"

    def deserialize(self, version, serialized):
        raise SerializationError("the reader refused", serializer="Refusing")


def test_a_serializer_error_of_another_kind_keeps_its_kind():
    state = SimpleVersionedSerialization.write_version_and_serialize(Refusing(), None)
    with pytest.raises(SerializationError) as error:
        recorded([state]).check_readable(Refusing(), what=WHAT)
    assert type(error.value) is SerializationError
    assert "subtask 0 recorded for sink 'orders' epoch 7" in str(error.value)
    assert "the reader refused" in str(error.value)
