"""AttrsMsgpackSerializer: round-trips, version upgrades, pinned bytes, clear errors."""

import datetime as dt
import enum
import math
import pickle
import typing
from pathlib import Path

import attrs
import cloudpickle
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2 import AttrsMsgpackSerializer, SimpleVersionedSerialization
from sinkv2.errors import (
    CorruptDataError,
    SerializationError,
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
        | st.just(dt.UTC)
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
        created=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
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


# --- field types are checked on write, never coerced -----------------------------------


@attrs.frozen
class Node:
    """A self-referring attrs class: the checks compile once, and terminate."""

    name: str
    children: tuple["Node", ...] = ()


@attrs.frozen
class Shapes:
    """The annotation forms the reference sinks' committables and states use."""

    flag: bool
    count: int
    ratio: float
    raw: bytes
    maybe: int | None
    pair: tuple[str, int]
    offsets: tuple[int, ...]
    parts: tuple[bytes | None, ...]
    names: list[str]
    bounds: dict[int, bytes]
    files: tuple[Location, ...]
    day: dt.date
    node: Node | None = None


shapes = st.builds(
    Shapes,
    flag=st.booleans(),
    count=INT64,
    ratio=st.floats(allow_nan=False),
    raw=st.binary(max_size=8),
    maybe=st.none() | INT64,
    pair=st.tuples(st.text(max_size=4), INT64),
    offsets=st.lists(INT64, max_size=4).map(tuple),
    parts=st.lists(st.none() | st.binary(max_size=4), max_size=4).map(tuple),
    names=st.lists(st.text(max_size=4), max_size=4),
    bounds=st.dictionaries(INT64, st.binary(max_size=4), max_size=3),
    files=st.lists(st.builds(Location, st.text(max_size=4), st.text(max_size=4)), max_size=3).map(
        tuple
    ),
    day=st.dates(),
    node=st.none() | st.builds(Node, st.text(max_size=4), st.just((Node("leaf"),))),
)

# A value of the wrong type for each field (or for an element, key or value inside it),
# and the path the error names.
WRONG = {
    "flag": (1, "Shapes.flag", "bool"),
    "count": (True, "Shapes.count", "int"),
    "ratio": (False, "Shapes.ratio", "float"),
    "raw": ("text", "Shapes.raw", "bytes"),
    "maybe": ("3", "Shapes.maybe", "int | None"),
    "pair": (("a", "b"), "Shapes.pair[1]", "int"),
    "offsets": ([1, 2], "Shapes.offsets", "tuple[int, ...]"),
    "parts": ((None, "x"), "Shapes.parts[1]", "bytes | None"),
    "names": (["a", 2], "Shapes.names[1]", "str"),
    "bounds": ({1: "x"}, "Shapes.bounds[1]", "bytes"),
    "files": ((Location("b", 3),), "Shapes.files[0].key", "str"),
    "day": (dt.datetime(2024, 1, 2), "Shapes.day", "date"),
    "node": (Node("n", (Node(7),)), "Shapes.node.children[0].name", "str"),
}


@given(shapes)
def test_values_of_the_annotated_types_round_trip(value):
    serializer = AttrsMsgpackSerializer(Shapes)
    assert serializer.deserialize(1, serializer.serialize(value)) == value


@given(shapes, st.sampled_from(sorted(WRONG)))
def test_a_value_of_a_wrong_type_is_refused_naming_the_field(value, field):
    wrong, path, expected = WRONG[field]
    serializer = AttrsMsgpackSerializer(Shapes)
    with pytest.raises(SerializationError) as caught:
        serializer.serialize(attrs.evolve(value, **{field: wrong}))
    message = str(caught.value)
    assert f"cannot serialize {path}: it must be {expected} (got " in message
    assert "convert the value before building the object" in message


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"size": "12"}, "PendingFile.size: it must be int (got '12' of type str)"),
        ({"size": 3.9}, "it must be int (got 3.9 of type float), and int(value) drops"),
        ({"size": True}, "it must be int (got True of type bool), and a bool is not a number"),
        ({"note": 5}, "PendingFile.note: it must be str | None (got 5 of type int)"),
        ({"tags": {1: "a"}}, "PendingFile.tags (the key 1): it must be str (got 1 of type int)"),
        ({"columns": ("a",)}, "PendingFile.columns: it must be list[str] (got ('a',) of type"),
        ({"location": None}, "PendingFile.location: it must be Location (got None of type"),
        ({"codec": "zstd"}, "PendingFile.codec: it must be Codec (got 'zstd' of type str)"),
    ],
)
def test_the_coercions_cattrs_would_make_are_refused(changes, shown):
    serializer = AttrsMsgpackSerializer(PendingFile)
    with pytest.raises(SerializationError, match="AttrsMsgpackSerializer") as caught:
        serializer.serialize(attrs.evolve(_sample(), **changes))
    assert shown in str(caught.value)
    assert caught.value.serializer == repr(serializer)


def test_an_int_fits_a_float_field_as_pep_484_says():
    serializer = AttrsMsgpackSerializer(PendingFile)
    read = serializer.deserialize(1, serializer.serialize(attrs.evolve(_sample(), ratio=3)))
    assert read.ratio == 3.0
    assert isinstance(read.ratio, float)


@attrs.frozen
class Loose:
    """Annotations that check nothing, or only the container."""

    anything: typing.Any
    mapping: typing.Mapping[str, typing.Any]
    number: typing.Annotated[int, "meta"]
    mode: typing.Literal["a", "b"] = "a"


def test_any_is_unchecked_and_annotated_and_literal_are_understood():
    serializer = AttrsMsgpackSerializer(Loose)
    value = Loose(anything=[1, "x"], mapping={"k": [1]}, number=2, mode="b")
    assert serializer.deserialize(1, serializer.serialize(value)) == value
    with pytest.raises(SerializationError, match=r"Loose.number: it must be int \(got '2'"):
        serializer.serialize(Loose(anything=None, mapping={}, number="2"))  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match=r"Loose.mode: it must be Literal\['a', 'b'\]"):
        serializer.serialize(Loose(anything=None, mapping={}, number=2, mode="c"))  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match=r"Loose.mapping \(the key 1\): it must be str"):
        serializer.serialize(Loose(anything=None, mapping={1: 1}, number=2))  # type: ignore[dict-item]


def test_a_pickled_serializer_checks_too():
    copy = pickle.loads(cloudpickle.dumps(AttrsMsgpackSerializer(FileV3)))
    with pytest.raises(SerializationError, match=r"FileV3.size_bytes: it must be int"):
        copy.serialize(FileV3("p", "1", 2))  # type: ignore[arg-type]


PICKLED_BY_VALUE = """
from __future__ import annotations

import attrs


@attrs.frozen
class Inner:
    name: str


@attrs.frozen
class Outer:
    path: str
    inner: Inner
    count: int = 0
"""


def test_classes_pickled_by_value_read_back_after_cloudpickle_restores_their_annotations():
    # A class defined in a script reaches Spark's workers pickled by value. A reused
    # worker unpickles it again into the same class object, and cloudpickle restores
    # its fields' string annotations (PEP 563) while attrs still marks it resolved:
    # cattrs then met 'str' and refused to read a split back.
    import sys
    import types

    import cloudpickle

    module = types.ModuleType("sinkv2_test_by_value")
    sys.modules[module.__name__] = module
    try:
        exec(PICKLED_BY_VALUE, module.__dict__)
        cloudpickle.register_pickle_by_value(module)
        payload = cloudpickle.dumps(module.Outer)  # annotations still strings
        outer = pickle.loads(payload)
        value = outer("p", pickle.loads(cloudpickle.dumps(module.Inner))("n"), 2)
        data = AttrsMsgpackSerializer(outer).serialize(value)  # resolves, marks resolved
        again = pickle.loads(payload)  # the same class object, string annotations back
        assert again is outer
        assert isinstance(attrs.fields(again).path.type, str)
        assert AttrsMsgpackSerializer(again).deserialize(1, data) == value
        assert AttrsMsgpackSerializer(again).serialize(value) == data
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[module.__name__]


def test_a_class_pickled_by_value_after_its_serializer_was_made_reads_where_its_module_is_not():
    # A source defined in a script or notebook: its checkpoint class nests its split
    # class under PEP 563 annotations, and reaches a Spark process where the script's
    # module does not exist. Made where the module is, the serializer resolves the
    # annotations there, so they travel as types: no name is looked up on arrival.
    import subprocess
    import sys
    import types

    import cloudpickle

    module = types.ModuleType("sinkv2_test_by_value_nested")
    sys.modules[module.__name__] = module
    try:
        exec(  # the classes of a script
            "from __future__ import annotations\n"
            "import attrs\n"
            "@attrs.frozen\nclass Split:\n    path: str\n    position: int = 0\n"
            "@attrs.frozen\nclass Pending:\n    splits: tuple[Split, ...]\n",
            module.__dict__,
        )
        cloudpickle.register_pickle_by_value(module)
        serializer = AttrsMsgpackSerializer(module.Pending)
        value = module.Pending((module.Split("a", 3),))
        payload = cloudpickle.dumps((serializer, value))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[module.__name__]
    elsewhere = (  # a process without the module
        "import pickle, sys\n"
        "serializer, value = pickle.loads(sys.stdin.buffer.read())\n"
        "data = serializer.serialize(value)\n"
        "assert serializer.deserialize(1, data) == value, value\n"
        "print(value)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", elsewhere], input=payload, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "Pending(splits=(Split(path='a', position=3),))"
