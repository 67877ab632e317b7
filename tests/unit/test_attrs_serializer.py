"""AttrsMsgpackSerializer: round-trips, version upgrades, pinned bytes, clear errors."""

import datetime as dt
import enum
import math
import pickle
from pathlib import Path

import attrs
import cloudpickle
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2 import (
    AttrsMsgpackSerializer,
    CorruptDataError,
    SerializationError,
    SimpleVersionedSerialization,
    SinkConfigurationError,
    UnsupportedVersionError,
)

GOLDEN = Path(__file__).parent / "golden"
INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)


class Codec(enum.Enum):
    NONE = "none"
    ZSTD = "zstd"


@attrs.frozen
class Location:
    bucket: str
    key: str


@attrs.frozen
class PendingFile:
    """A committable with most field kinds a real sink uses."""

    location: Location
    size: int
    records: int
    checksum: bytes
    codec: Codec
    ratio: float
    partition: tuple[str, ...]
    tags: dict[str, str]
    columns: list[str]
    created: dt.datetime
    note: str | None = None
    ok: bool = True


@attrs.define
class Mutable:
    values: list[int]
    name: str = ""


pending_files = st.builds(
    PendingFile,
    location=st.builds(Location, st.text(), st.text()),
    size=INT64,
    records=st.integers(min_value=0, max_value=2**63 - 1),
    checksum=st.binary(max_size=64),
    codec=st.sampled_from(Codec),
    ratio=st.floats(allow_nan=False),
    partition=st.lists(st.text(max_size=8), max_size=4).map(tuple),
    tags=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4),
    columns=st.lists(st.text(max_size=8), max_size=6),
    created=st.datetimes(
        timezones=st.none()
        | st.just(dt.timezone.utc)
        | st.builds(
            dt.timezone,
            st.timedeltas(min_value=dt.timedelta(hours=-23), max_value=dt.timedelta(hours=23)),
        )
    ),
    note=st.none() | st.text(),
    ok=st.booleans(),
)


@given(pending_files)
def test_round_trips_arbitrary_instances(value):
    serializer = AttrsMsgpackSerializer(PendingFile)
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, value)
    assert SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed) == value


@given(st.builds(Mutable, st.lists(INT64), st.text()))
def test_round_trips_mutable_attrs_classes(value):
    serializer = AttrsMsgpackSerializer(Mutable, version=3, upgrades={1: dict, 2: dict})
    assert serializer.deserialize(3, serializer.serialize(value)) == value


def test_nan_survives_as_nan():
    value = attrs.evolve(_sample(), ratio=math.nan)
    serializer = AttrsMsgpackSerializer(PendingFile)
    assert math.isnan(serializer.deserialize(1, serializer.serialize(value)).ratio)


def _sample() -> PendingFile:
    return PendingFile(
        location=Location("b", "k/part-0.parquet"),
        size=1234,
        records=10,
        checksum=b"\x00\xff",
        codec=Codec.ZSTD,
        ratio=0.5,
        partition=("2024", "01"),
        tags={"owner": "etl"},
        columns=["id", "v"],
        created=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    )


# --- versions and the migration recipe ------------------------------------------------


@attrs.frozen
class FileV3:
    path: str
    size_bytes: int
    records: int


def _v1_to_v2(data):
    # v1 had "file"; v2 renamed it to "path".
    return {"path": data["file"], "size_bytes": data["size_bytes"]}


def _v2_to_v3(data):
    # v3 added a record count; older files did not track it.
    return {**data, "records": -1}


def test_old_versions_read_through_the_upgrade_chain():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
    v1 = msgpack.packb({"file": "a.parquet", "size_bytes": 7})
    v2 = msgpack.packb({"path": "b.parquet", "size_bytes": 8})
    assert serializer.deserialize(1, v1) == FileV3("a.parquet", 7, -1)
    assert serializer.deserialize(2, v2) == FileV3("b.parquet", 8, -1)
    assert serializer.get_supported_versions() == (1, 2, 3)


def test_golden_v1_bytes_still_read_after_two_bumps():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
    golden = (GOLDEN / "attrs_msgpack_file_v1.bin").read_bytes()
    read = SimpleVersionedSerialization.read_version_and_deserialize(serializer, golden)
    assert read == FileV3("s3://bucket/data/part-00000.parquet", 4096, -1)


def test_current_version_bytes_match_golden():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
    framed = SimpleVersionedSerialization.write_version_and_serialize(
        serializer, FileV3("s3://bucket/data/part-00000.parquet", 4096, 100)
    )
    assert framed == (GOLDEN / "attrs_msgpack_file_v3.bin").read_bytes()


def test_newer_version_is_rejected_with_the_supported_versions():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={2: _v2_to_v3})
    with pytest.raises(UnsupportedVersionError) as caught:
        serializer.deserialize(4, b"\x80")
    assert caught.value.version == 4
    assert caught.value.supported == (2, 3)
    assert "AttrsMsgpackSerializer(FileV3, version=3)" in str(caught.value)


def test_version_older_than_the_chain_is_rejected():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={2: _v2_to_v3})
    with pytest.raises(UnsupportedVersionError, match=r"reads versions \[2, 3\]"):
        serializer.deserialize(1, b"\x80")


def test_failing_upgrade_is_corrupt_data_naming_the_step():
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
    with pytest.raises(CorruptDataError, match="upgrade from version 1 to 2 failed: KeyError"):
        serializer.deserialize(1, msgpack.packb({"path": "already new"}))


@pytest.mark.parametrize(
    ("upgrades", "missing"),
    [({1: _v1_to_v2}, "[2]"), ({0: dict, 2: _v2_to_v3}, "[1]"), ({3: dict}, "[]")],
)
def test_upgrade_chain_with_gaps_is_a_configuration_error(upgrades, missing):
    with pytest.raises(SinkConfigurationError, match="unbroken run ending at 2") as caught:
        AttrsMsgpackSerializer(FileV3, version=3, upgrades=upgrades)
    assert f"add the missing ones {missing}" in str(caught.value)


def test_non_callable_upgrade_is_rejected():
    with pytest.raises(SinkConfigurationError, match=r"upgrades\[1\] must be a function"):
        AttrsMsgpackSerializer(FileV3, version=2, upgrades={1: "v1"})  # type: ignore[dict-item]


@pytest.mark.parametrize("cls", [dict, int, "FileV3", None])
def test_non_attrs_class_is_rejected(cls):
    with pytest.raises(SinkConfigurationError, match="needs an attrs class"):
        AttrsMsgpackSerializer(cls)


@pytest.mark.parametrize("version", [-1, 2**31, True, "2"])
def test_bad_version_is_rejected(version):
    with pytest.raises(SinkConfigurationError, match=r"version must be an int in \[0, 2\*\*31\)"):
        AttrsMsgpackSerializer(FileV3, version=version)


# --- bad input ------------------------------------------------------------------------


def test_serializing_the_wrong_type_names_both():
    serializer = AttrsMsgpackSerializer(FileV3)
    with pytest.raises(
        SerializationError, match=r"serializes FileV3 instances \(got 'x' of type str"
    ):
        serializer.serialize("x")  # type: ignore[arg-type]


def test_int_beyond_msgpack_range_is_a_serialization_error():
    serializer = AttrsMsgpackSerializer(FileV3)
    with pytest.raises(SerializationError, match="could not encode"):
        serializer.serialize(FileV3("p", 2**64, 0))


@given(st.binary(max_size=64))
def test_arbitrary_payload_bytes_raise_only_corrupt_data(data):
    serializer = AttrsMsgpackSerializer(PendingFile)
    try:
        value = serializer.deserialize(1, data)
    except CorruptDataError:
        return
    assert isinstance(value, PendingFile)


def test_payload_missing_a_field_names_the_field():
    serializer = AttrsMsgpackSerializer(FileV3)
    with pytest.raises(CorruptDataError, match="records"):
        serializer.deserialize(1, msgpack.packb({"path": "p", "size_bytes": 1}))


def test_truncated_payload_is_corrupt_data():
    serializer = AttrsMsgpackSerializer(FileV3)
    payload = serializer.serialize(FileV3("p", 1, 2))
    with pytest.raises(CorruptDataError, match="not valid msgpack"):
        serializer.deserialize(1, payload[:-1])


# --- shipping to executors ------------------------------------------------------------


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_serializer_survives_pickling(dumps):
    serializer = AttrsMsgpackSerializer(FileV3, version=3, upgrades={1: _v1_to_v2, 2: _v2_to_v3})
    copy = pickle.loads(dumps(serializer))
    assert copy == serializer
    value = FileV3("p", 1, 2)
    assert copy.deserialize(3, serializer.serialize(value)) == value
    assert copy.deserialize(1, msgpack.packb({"file": "f", "size_bytes": 3})) == FileV3("f", 3, -1)
