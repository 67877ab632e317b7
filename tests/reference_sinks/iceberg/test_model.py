"""The Iceberg sink's write results and committables: serializers, golden bytes, DataFile form."""

from pathlib import Path

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_sinks.iceberg import IcebergCommittable, IcebergDataFile, IcebergWriteResult
from reference_sinks.iceberg._model import (
    AggregateWriteResults,
    committable_serializer,
    write_result_serializer,
)
from sinkv2 import SimpleVersionedSerialization
from sinkv2.errors import UnsupportedVersionError

GOLDEN = Path(__file__).parent / "golden"

SAMPLE_FILE = IcebergDataFile(
    path="file:///wh/ns.db/events/data/key=k1/ts_day=2024-03-30/sinkv2-abc-00001-7-00000.parquet",
    spec_id=0,
    partition=(b"k1", b"\x06M\x00\x00", None),
    record_count=42,
    file_size_in_bytes=1234,
    column_sizes={1: 100, 2: 80},
    value_counts={1: 42, 2: 42},
    null_value_counts={1: 0, 2: 3},
    nan_value_counts={3: 0},
    lower_bounds={1: b"\x01\x00\x00\x00\x00\x00\x00\x00"},
    upper_bounds={1: b"\x2a\x00\x00\x00\x00\x00\x00\x00"},
    split_offsets=(4,),
)
SAMPLE_RESULT = IcebergWriteResult(job_id="abc", files=(SAMPLE_FILE,), checkpoint_id=7)
SAMPLE_COMMITTABLE = IcebergCommittable(
    sink_id="orders", job_id="abc", checkpoint_id=7, files=(SAMPLE_FILE, SAMPLE_FILE)
)

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
counts = st.dictionaries(st.integers(1, 10_000), st.integers(0, 2**62), max_size=4)
bounds = st.dictionaries(st.integers(1, 10_000), st.binary(max_size=16), max_size=4)
data_files = st.builds(
    IcebergDataFile,
    path=st.text(min_size=1),
    spec_id=st.integers(0, 1000),
    partition=st.tuples() | st.lists(st.none() | st.binary(max_size=8), max_size=4).map(tuple),
    record_count=st.integers(0, 2**62),
    file_size_in_bytes=st.integers(0, 2**62),
    column_sizes=counts,
    value_counts=counts,
    null_value_counts=counts,
    nan_value_counts=counts,
    lower_bounds=bounds,
    upper_bounds=bounds,
    split_offsets=st.lists(st.integers(0, 2**62), max_size=4).map(tuple),
)
checkpoints = st.none() | st.integers(1, 2**63 - 2)


@given(
    st.builds(
        IcebergWriteResult,
        job_id=st.text(),
        files=st.lists(data_files, max_size=3).map(tuple),
        checkpoint_id=checkpoints,
    )
)
def test_write_results_round_trip(result: IcebergWriteResult) -> None:
    serializer = write_result_serializer()
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, result)
    assert SimpleVersionedSerialization.read_version_and_deserialize(serializer, framed) == result


@given(
    st.builds(
        IcebergCommittable,
        sink_id=st.text(),
        job_id=st.text(),
        checkpoint_id=checkpoints,
        files=st.lists(data_files, max_size=3).map(tuple),
    )
)
def test_committables_round_trip_and_survive_cloudpickle(committable: IcebergCommittable) -> None:
    serializer = committable_serializer()
    assert serializer.deserialize(1, serializer.serialize(committable)) == committable
    assert cloudpickle.loads(cloudpickle.dumps(committable)) == committable
    assert cloudpickle.loads(cloudpickle.dumps(serializer)) == serializer


@pytest.mark.parametrize(
    ("name", "serializer", "sample"),
    [
        ("write_result_v1.bin", write_result_serializer(), SAMPLE_RESULT),
        ("committable_v1.bin", committable_serializer(), SAMPLE_COMMITTABLE),
    ],
)
def test_version_1_golden_bytes(name: str, serializer: object, sample: object) -> None:
    golden = (GOLDEN / name).read_bytes()
    assert SimpleVersionedSerialization.read_version_and_deserialize(serializer, golden) == sample  # type: ignore[arg-type]
    assert SimpleVersionedSerialization.write_version_and_serialize(serializer, sample) == golden  # type: ignore[arg-type]


def test_unknown_versions_are_refused_with_the_supported_ones() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"reads versions \[1\]"):
        committable_serializer().deserialize(2, b"")


def test_commit_id_is_the_set_of_files_not_their_order() -> None:
    other = IcebergDataFile(
        path="file:///x/other.parquet",
        spec_id=0,
        partition=(),
        record_count=1,
        file_size_in_bytes=1,
    )
    one = IcebergCommittable(sink_id="s", job_id="j", checkpoint_id=1, files=(SAMPLE_FILE, other))
    two = IcebergCommittable(sink_id="s", job_id="k", checkpoint_id=2, files=(other, SAMPLE_FILE))
    three = IcebergCommittable(sink_id="s", job_id="j", checkpoint_id=1, files=(other,))
    assert one.commit_id == two.commit_id
    assert one.commit_id != three.commit_id
    assert one.record_count == 43


def test_aggregation_keeps_every_file_and_the_checkpoint() -> None:
    first = IcebergWriteResult(job_id="j", files=(SAMPLE_FILE,), checkpoint_id=3)
    second = IcebergWriteResult(job_id="j", files=(SAMPLE_FILE, SAMPLE_FILE), checkpoint_id=3)
    committable = AggregateWriteResults("orders")([first, second])
    assert committable == IcebergCommittable(
        sink_id="orders", job_id="j", checkpoint_id=3, files=(SAMPLE_FILE,) * 3
    )
    with pytest.raises(ValueError, match="checkpoint ids"):
        AggregateWriteResults("orders")(
            [first, IcebergWriteResult(job_id="j", files=(), checkpoint_id=4)]
        )
