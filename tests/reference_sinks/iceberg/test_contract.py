"""IcebergSink through the contract-test kit, in process: one SqlCatalog per example.

Examples: 200 (``$SINKV2_KIT_EXAMPLES`` or ``--sinkv2-examples`` override it). The kit
found two real bugs here: a batch whose column was null in every row had no type
for pyiceberg, and batches mixing ``string`` and ``large_string`` could not share a
Parquet file. `check_sink`'s streaming stage (`check_streaming`, 20 streams) commits
micro-batches through the real `CheckpointRunner`, with restarts that replay the
interrupted micro-batch and drivers dying at each coordinator step.
"""

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from reference_sinks.iceberg import IcebergSink
from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkUnderTest, check_sink
from tests.reference_sinks.iceberg.test_model import GOLDEN, SAMPLE_COMMITTABLE, SAMPLE_RESULT

SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "key", StringType()),
    NestedField(3, "value", DoubleType()),
)
# SQLite syncs on every commit; in RAM (tmpfs) an example takes milliseconds, not seconds.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
ELEMENTS = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "key": st.none() | st.text(max_size=5),
        "value": st.floats(allow_nan=False),
    }
)


def fresh_sink(native_write: bool | None = None) -> SinkUnderTest:
    """An IcebergSink on a new table in a new local catalog, read back with a pyiceberg scan."""
    warehouse = Path(tempfile.mkdtemp(prefix="iceberg-kit-", dir=FAST_TMP))
    sink = IcebergSink.local(
        warehouse, "kit.rows", schema=SCHEMA, commit_attempts=2, native_write=native_write
    )

    def read_back() -> list[dict[str, object]]:
        return sink.load_table().scan().to_arrow().to_pylist()

    return SinkUnderTest(sink, read_back, lambda: shutil.rmtree(warehouse, ignore_errors=True))


def unframed(name: str) -> bytes:
    """A golden file without Flink's 8-byte frame (version, length): the payload."""
    return (GOLDEN / name).read_bytes()[8:]


def test_iceberg_sink_keeps_the_contract_exactly_once() -> None:
    check_sink(
        fresh_sink,
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=200,
        golden_samples={
            "committable": {1: (unframed("committable_v1.bin"), SAMPLE_COMMITTABLE)},
            "write_result": {1: (unframed("write_result_v1.bin"), SAMPLE_RESULT)},
        },
    )
