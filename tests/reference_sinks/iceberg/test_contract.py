"""IcebergSink through the contract-test kit, in process: one SqlCatalog per example.

Examples: 200 (``$SINKV2_KIT_EXAMPLES`` or ``--sinkv2-examples`` override it). The kit
found two real bugs here: a batch whose column was null in every row had no type
for pyiceberg, and batches mixing ``string`` and ``large_string`` could not share a
Parquet file. `check_sink`'s streaming stage (`check_streaming`, 20 streams) commits
micro-batches through the real `CheckpointRunner`, with restarts that replay the
interrupted micro-batch and drivers dying at each coordinator step.
"""

import contextlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


class TableReader:
    """Reads the table back with a pyiceberg scan, as a reader would; rescans only on change.

    The kit reads the destination after every step, and most steps (writes, flushes,
    snapshots) commit nothing: a full scan each time (load the metadata, plan the
    manifests, read every data file) was most of this test's time. An Iceberg table
    changes only by moving the catalog's pointer to a new metadata file, and neither
    metadata nor data files are ever rewritten in place; so while the pointer (read
    straight from the SQLite catalog, the JDBC catalog's ``iceberg_tables``) names
    the same metadata file, and that file and every data file the last scan read are
    still there with the same inode, size and modification time, the scan would
    return the same rows. Anything else - a new pointer, or a file of the last scan
    deleted or rewritten (say, by a clean-up hook gone wrong) - rescans: the table's
    rows as pyiceberg reads them, or pyiceberg's error about the missing file.
    """

    def __init__(self, sink: IcebergSink, warehouse: Path) -> None:
        self.sink = sink
        self.catalog = f"file:{warehouse.resolve() / 'catalog.sqlite'}?mode=ro"
        self.key: tuple[str | None, tuple[tuple[str, Any], ...]] | None = None
        self.rows: list[dict[str, object]] = []

    def _pointer(self) -> str | None:
        namespace, name = self.sink.table.rsplit(".", 1)
        with contextlib.closing(sqlite3.connect(self.catalog, uri=True)) as connection:
            row = connection.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? "
                "AND table_namespace = ? AND table_name = ?",
                (self.sink.catalog.name, namespace, name),
            ).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def _files(paths: list[str]) -> tuple[tuple[str, Any], ...]:
        def identity(path: str) -> Any:
            try:
                found = os.stat(urlsplit(path).path)
            except FileNotFoundError:
                return None
            return (found.st_ino, found.st_size, found.st_mtime_ns)

        return tuple((path, identity(path)) for path in paths)

    def __call__(self) -> list[dict[str, object]]:
        pointer = self._pointer()
        if (
            self.key is not None
            and self.key[0] == pointer
            and self._files([path for path, _ in self.key[1]]) == self.key[1]
        ):
            return [dict(row) for row in self.rows]
        table = self.sink.load_table()
        scan = table.scan()
        read = [table.metadata_location, *(task.file.file_path for task in scan.plan_files())]
        files = self._files(read)
        self.rows = scan.to_arrow().to_pylist()
        self.key = (table.metadata_location, files)
        return [dict(row) for row in self.rows]


def fresh_sink(native_write: bool | None = None) -> SinkUnderTest:
    """An IcebergSink on a new table in a new local catalog, read back with a pyiceberg scan."""
    warehouse = Path(tempfile.mkdtemp(prefix="iceberg-kit-", dir=FAST_TMP))
    sink = IcebergSink.local(
        warehouse, "kit.rows", schema=SCHEMA, commit_attempts=2, native_write=native_write
    )
    return SinkUnderTest(
        sink, TableReader(sink, warehouse), lambda: shutil.rmtree(warehouse, ignore_errors=True)
    )


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
