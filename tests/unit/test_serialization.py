"""Flink's version+length framing: round-trips, a pinned wire format, and clear errors."""

import contextlib
import struct
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sinkv2 import SimpleVersionedSerialization
from sinkv2.errors import CorruptDataError, SerializationError, UnsupportedVersionError

GOLDEN = Path(__file__).parent / "golden"
INT32 = st.integers(min_value=0, max_value=2**31 - 1)


class BytesSerializer:
    """Payload in, payload out, at any version; reads every version up to its own."""

    def __init__(self, version: int) -> None:
        self.version = version

    def get_version(self) -> int:
        return self.version

    def serialize(self, obj: bytes) -> bytes:
        return obj

    def deserialize(self, version: int, serialized: bytes) -> bytes:
        return serialized


class Utf8Serializer:
    """Version 2 writes UTF-8; version 1 (still readable) was Latin-1."""

    def get_version(self) -> int:
        return 2

    def get_supported_versions(self) -> tuple[int, ...]:
        return (1, 2)

    def serialize(self, obj: str) -> bytes:
        return obj.encode()

    def deserialize(self, version: int, serialized: bytes) -> str:
        return serialized.decode("latin-1" if version == 1 else "utf-8")


@given(payload=st.binary(max_size=4096), version=INT32)
def test_framing_round_trips_any_payload_at_any_version(payload, version):
    serializer = BytesSerializer(version)
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, payload)
    assert framed[:8] == struct.pack(">ii", version, len(payload))
    assert SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed) == payload


@given(payloads=st.lists(st.binary(max_size=256), max_size=20), version=INT32)
def test_list_framing_round_trips(payloads, version):
    serializer = BytesSerializer(version)
    framed = SimpleVersionedSerialization.write_version_and_serialize_list(serializer, payloads)
    read = SimpleVersionedSerialization.read_version_and_deserialize_list(serializer, framed)
    assert read == payloads


@given(payload=st.binary(max_size=512), cut=st.integers(min_value=1))
def test_truncated_bytes_always_raise_corrupt_data(payload, cut):
    serializer = BytesSerializer(1)
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, payload)
    truncated = framed[: len(framed) - 1 - cut % len(framed)]
    with pytest.raises(CorruptDataError) as caught:
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, truncated)
    assert "truncated" in str(caught.value)
    assert "BytesSerializer" in str(caught.value)


@given(payload=st.binary(max_size=512), extra=st.binary(min_size=1, max_size=16))
def test_trailing_bytes_raise_corrupt_data(payload, extra):
    serializer = BytesSerializer(1)
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, payload)
    with pytest.raises(CorruptDataError, match="length field says"):
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed + extra)


@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_documented_errors(data):
    serializer = Utf8Serializer()
    with contextlib.suppress(CorruptDataError, UnsupportedVersionError):
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, data)
    with contextlib.suppress(CorruptDataError, UnsupportedVersionError):
        SimpleVersionedSerialization.read_version_and_deserialize_list(serializer, data)


@given(version=st.integers(min_value=3, max_value=2**31 - 1), payload=st.binary(max_size=32))
def test_newer_version_than_known_raises_unsupported_version_naming_both(version, payload):
    framed = struct.pack(">ii", version, len(payload)) + payload
    with pytest.raises(UnsupportedVersionError) as caught:
        SimpleVersionedSerialization.read_version_and_deserialize(Utf8Serializer(), framed)
    error = caught.value
    assert error.version == version
    assert error.supported == (1, 2)
    assert f"cannot read version {version}" in str(error)
    assert "[1, 2]" in str(error)
    assert "Utf8Serializer" in str(error)
    assert "newer release" in str(error)


def test_unsupported_older_version_says_to_add_a_reader():
    framed = struct.pack(">ii", 0, 1) + b"x"
    with pytest.raises(UnsupportedVersionError, match="add a reader"):
        SimpleVersionedSerialization.read_version_and_deserialize(Utf8Serializer(), framed)


def test_negative_version_is_unsupported():
    framed = struct.pack(">ii", -1, 0)
    with pytest.raises(UnsupportedVersionError):
        SimpleVersionedSerialization.read_version_and_deserialize(BytesSerializer(5), framed)


def test_older_declared_version_still_reads():
    framed = struct.pack(">ii", 1, 2) + "é".encode("latin-1") + b"!"
    assert (
        SimpleVersionedSerialization.read_version_and_deserialize(Utf8Serializer(), framed) == "é!"
    )


def test_serializer_that_raises_while_reading_is_reported_as_corrupt_data():
    class Strict(BytesSerializer):
        def deserialize(self, version, serialized):
            raise KeyError("field 'path'")

    framed = SimpleVersionedSerialization.write_version_and_serialize(Strict(1), b"abc")
    with pytest.raises(CorruptDataError, match="could not read 3 bytes of version 1") as caught:
        SimpleVersionedSerialization.read_version_and_deserialize(Strict(1), framed)
    assert isinstance(caught.value.__cause__, KeyError)


def test_serializer_returning_non_bytes_is_rejected_with_what_it_returned():
    class Wrong(BytesSerializer):
        def serialize(self, obj):
            return "text"

    with pytest.raises(SerializationError, match=r"must return bytes \(got 'text' of type str\)"):
        SimpleVersionedSerialization.write_version_and_serialize(Wrong(1), b"")


@pytest.mark.parametrize("version", [-1, 2**31, "1", 1.0, True])
def test_bad_current_version_is_rejected_before_writing(version):
    with pytest.raises(SerializationError, match="get_version"):
        SimpleVersionedSerialization.write_version_and_serialize(BytesSerializer(version), b"")


def test_helpers_class_cannot_be_instantiated():
    with pytest.raises(TypeError, match="static methods"):
        SimpleVersionedSerialization()


def test_corrupt_list_count_is_reported():
    framed = struct.pack(">ii", 1, -3)
    with pytest.raises(CorruptDataError, match="negative count"):
        SimpleVersionedSerialization.read_version_and_deserialize_list(BytesSerializer(1), framed)


@given(
    payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=5), cut=st.integers(min_value=1)
)
def test_truncated_list_raises_corrupt_data(payloads, cut):
    serializer = BytesSerializer(1)
    framed = SimpleVersionedSerialization.write_version_and_serialize_list(serializer, payloads)
    truncated = framed[: len(framed) - 1 - cut % len(framed)]
    assume(len(truncated) < len(framed))
    with pytest.raises(CorruptDataError):
        SimpleVersionedSerialization.read_version_and_deserialize_list(serializer, truncated)


# --- golden bytes: the wire format must never drift silently -------------------------


def test_framed_value_matches_golden_bytes():
    framed = SimpleVersionedSerialization.write_version_and_serialize(Utf8Serializer(), "sinkv2 ✓")
    assert framed == (GOLDEN / "framed_utf8_v2.bin").read_bytes()


def test_framed_list_matches_golden_bytes():
    framed = SimpleVersionedSerialization.write_version_and_serialize_list(
        Utf8Serializer(), ["a", "", "ünïcode"]
    )
    assert framed == (GOLDEN / "framed_list_utf8_v2.bin").read_bytes()


def test_golden_bytes_read_back():
    golden = (GOLDEN / "framed_utf8_v2.bin").read_bytes()
    value = SimpleVersionedSerialization.read_version_and_deserialize(Utf8Serializer(), golden)
    assert value == "sinkv2 ✓"
