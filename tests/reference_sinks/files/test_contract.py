"""FileSink through the contract-test kit (in process, no Spark): exactly once.

Examples per configuration: 200 (the kit lets ``$SINKV2_KIT_EXAMPLES`` or
``--sinkv2-examples`` override it). The kit found real bugs here: a restore after a
scale-down lost one of two in-progress files of a partition; batches with the same
columns in another order failed to share a Parquet file; and it showed that resuming
in-progress JSON-lines files across checkpoints cannot survive ``clean_up_attempts``
of a crashed job, which is why FileSink now always rolls on checkpoint.

`check_sink` includes the streaming stage (`check_streaming`, 20 streams at 200
examples): micro-batches through the real `CheckpointRunner`, with restarts,
rescales, replays and drivers dying at each coordinator step.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st

from reference_sinks.files import (
    HIVE_DEFAULT_PARTITION,
    CompactionPolicy,
    FileSink,
    RollingPolicy,
)
from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkUnderTest, check_sink

GOLDEN = Path(__file__).parent / "golden"
# Each example makes, renames and removes dozens of files and directories: in RAM (tmpfs).
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

ELEMENTS = st.fixed_dictionaries(
    {
        "id": st.integers(-(2**63), 2**63 - 1),
        "key": st.sampled_from(["a", "b", "c/d=e%", None]),
        "value": st.floats(allow_nan=False),
    }
)


def _visible_files(base: Path, fmt: str) -> list[tuple[Path, dict]]:
    """The committed files (never _staging), each with its partition values decoded."""
    found = []
    for path in sorted(base.rglob(f"*.{fmt}")):
        relative = path.relative_to(base)
        if any(part.startswith(("_", ".")) for part in relative.parts):
            continue
        partition = {}
        for part in relative.parts[:-1]:
            column, value = part.split("=", 1)
            partition[unquote(column)] = None if value == HIVE_DEFAULT_PARTITION else unquote(value)
        found.append((path, partition))
    return found


def _read_file(path: Path, partition: dict, fmt: str) -> list[dict]:
    if fmt == "parquet":
        found = pq.read_table(path).to_pylist()
    else:
        found = [json.loads(line) for line in path.read_text().splitlines()]
        for row in found:  # infinities are spelled "Infinity", as Spark's JSON writer does
            if isinstance(row.get("value"), str):
                row["value"] = float(row["value"])
    return [{**row, **partition} for row in found]


def read_visible(base: Path, fmt: str) -> list[dict]:
    """What a reader sees: committed files only (never _staging), partition values decoded."""
    rows = []
    for path, partition in _visible_files(base, fmt):
        rows += _read_file(path, partition, fmt)
    return rows


class VisibleReader:
    """`read_visible`, parsing only the files that are new or changed since its last call.

    The kit reads the destination after every step; most steps publish nothing, and
    parsing every committed file each time was half of this test's time. Every call
    lists the directory afresh, as `read_visible` does, so a file published, removed
    or renamed shows at once; a file already listed is parsed again unless it has the
    same inode, size and modification time as when it was last parsed (FileSink
    publishes a file by renaming it into place: a new inode).
    """

    def __init__(self, base: Path, fmt: str) -> None:
        self.base, self.fmt = base, fmt
        self.parsed: dict[Path, tuple[tuple[int, int, int], list[dict]]] = {}

    def __call__(self) -> list[dict]:
        rows, parsed = [], {}
        for path, partition in _visible_files(self.base, self.fmt):
            found = path.stat()
            identity = (found.st_ino, found.st_size, found.st_mtime_ns)
            known = self.parsed.get(path)
            if known is None or known[0] != identity:
                known = (identity, _read_file(path, partition, self.fmt))
            parsed[path] = known
            rows += [dict(row) for row in known[1]]
        self.parsed = parsed
        return rows


def factory(fmt, **options):
    def make():
        base = Path(tempfile.mkdtemp(prefix="filesink-kit-", dir=FAST_TMP))
        return SinkUnderTest(
            FileSink(base / "out", fmt, **options),
            read_back=VisibleReader(base / "out", fmt),
            close=lambda: shutil.rmtree(base, ignore_errors=True),
        )

    return make


def golden(name):
    data = (GOLDEN / name).read_bytes()
    return data[8:]  # framed: 4-byte version, 4-byte length, payload


def golden_samples(options):
    from tests.reference_sinks.files.test_file_sink_units import PENDING_V1, STATE_V1

    samples = {
        "committable": {1: (golden("pending_file_v1.bin"), PENDING_V1)},
        "writer_state": {1: (golden("in_progress_file_v1.bin"), STATE_V1)},
    }
    if options.get("compaction"):  # only then is there a pre-commit topology
        samples["write_result"] = {1: (golden("pending_file_v1.bin"), PENDING_V1)}
    return samples


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("parquet", {"partition_by": ["key"], "rolling_policy": RollingPolicy(max_rows=3)}),
        ("parquet", {"compaction": CompactionPolicy(min_files=2, target_bytes=10**6)}),
        (
            "jsonl",
            {
                "partition_by": ["key"],
                "rolling_policy": RollingPolicy(max_rows=4),
            },
        ),
    ],
    ids=["parquet-partitioned-rolling", "parquet-compaction", "jsonl-partitioned-rolling"],
)
def test_file_sink_keeps_the_exactly_once_contract(fmt, options):
    check_sink(
        factory(fmt, **options),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=200,
        golden_samples=golden_samples(options),
    )
