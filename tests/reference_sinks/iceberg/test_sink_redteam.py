"""IcebergSink red-teamed: files in the table location that nothing references.

After a crash, and once the next run of the sink id has done what the runtime does
(commit or abort the pending epoch, then clean up the dead job), the table's
directory holds exactly the files its snapshots reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from reference_sinks.iceberg import IcebergSink
from sinkv2.runtime import BasicCommitterInitContext, commit_with_retries
from tests.reference_sinks.iceberg.tables import SCHEMA, make_sink, read_back, rows, stage

ROOT = Path(__file__).resolve().parents[3]


def _files(warehouse: Path) -> set[str]:
    return {str(p.relative_to(warehouse)) for p in warehouse.rglob("*") if p.is_file()}


def _referenced(sink: IcebergSink) -> set[str]:
    """The table's files: its metadata JSON, manifest lists, manifests and data files."""
    table = sink.load_table()
    found = {
        table.metadata_location,
        *(entry.metadata_file for entry in table.metadata.metadata_log),
    }
    for snapshot in table.metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            found.update(
                entry.data_file.file_path for entry in manifest.fetch_manifest_entry(table.io)
            )
    return {location.rsplit("/", 1)[-1] for location in found}


def test_local_with_a_schema_on_an_existing_table_leaves_no_metadata_file(tmp_path):
    for _ in range(3):
        IcebergSink.local(tmp_path / "wh", "ns.events", schema=SCHEMA)
    metadata = list((tmp_path / "wh" / "ns" / "events" / "metadata").iterdir())
    assert len(metadata) == 1, metadata


CRASH = textwrap.dedent(
    """
    import os, pathlib, sys
    from pyiceberg.catalog.sql import SqlCatalog
    from sinkv2.runtime import BasicCommitterInitContext, commit_with_retries
    from tests.reference_sinks.iceberg.tables import make_sink, rows, stage

    warehouse, out = sys.argv[1:]
    sink = make_sink(pathlib.Path(warehouse))
    committable = stage(sink, [rows(0, 50)], job_id="dead", checkpoint_id=7)
    serializer = sink.get_committable_serializer()
    pathlib.Path(out).write_bytes(serializer.serialize(committable))
    SqlCatalog.commit_table = lambda *args, **kwargs: os._exit(3)  # manifests written
    commit_with_retries(sink.create_committer(BasicCommitterInitContext()), [committable])
    """
)


def test_a_committer_dying_after_writing_its_manifests_leaves_no_orphan(tmp_path):
    warehouse, out = tmp_path / "wh", tmp_path / "committable"
    make_sink(warehouse)
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH, str(warehouse), str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert crashed.returncode == 3, crashed.stderr[-3000:]
    sink = make_sink(warehouse)
    serializer = sink.get_committable_serializer()
    committable = serializer.deserialize(serializer.get_version(), out.read_bytes())
    # The next run commits the pending epoch (it has a checkpoint id), then cleans the
    # dead job up: the crashed attempt's manifests go, the committed ones stay.
    commit_with_retries(sink.create_committer(BasicCommitterInitContext()), [committable])
    sink.clean_up_attempts("dead", ())
    assert len(read_back(sink)) == 50
    names = {name.rsplit("/", 1)[-1] for name in _files(warehouse)} - {"catalog.sqlite"}
    assert names == _referenced(sink)


def test_the_clean_up_keeps_manifests_that_outlive_their_expired_snapshot(tmp_path):
    """A fast append carries earlier manifests forward: an expired snapshot's stay live."""
    sink = make_sink(tmp_path / "wh")
    committer = sink.create_committer(BasicCommitterInitContext())
    for checkpoint in (1, 2):
        committable = stage(
            sink,
            [rows(checkpoint * 10, 10)],
            job_id="job",
            attempt=checkpoint,
            checkpoint_id=checkpoint,
        )
        commit_with_retries(committer, [committable])
    table = sink.load_table()
    first = table.current_snapshot().parent_snapshot_id
    table.maintenance.expire_snapshots().by_id(first).commit()
    sink.clean_up_attempts("job", ())
    assert [row["id"] for row in read_back(sink)] == list(range(10, 30))


def test_a_nanosecond_timestamp_a_microsecond_column_would_cut_is_refused(tmp_path):

    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, TimestamptzType

    from sinkv2.errors import FatalDestinationError

    sink = IcebergSink.local(
        tmp_path / "wh", "ns.t", schema=Schema(NestedField(1, "t", TimestamptzType()))
    )

    def batch(nanos):
        return pa.RecordBatch.from_pydict(
            {"t": pa.array(nanos, pa.int64()).cast(pa.timestamp("ns", "UTC"))}
        )

    whole = stage(sink, [batch([1_000_000_000, None, -2_000])], job_id="ok", checkpoint_id=1)
    commit_with_retries(sink.create_committer(BasicCommitterInitContext()), [whole])
    assert [row["t"] for row in sink.load_table().scan().to_arrow().to_pylist()][1] is None
    with pytest.raises(FatalDestinationError, match=r"column 't' .* row 2 .*nanoseconds"):
        stage(sink, [batch([5_000, None, 1_000_000_001])], job_id="cut", checkpoint_id=2)


def test_a_column_renamed_after_the_check_fails_the_writer_naming_both_schemas(tmp_path):
    """The docs' schema changes, made between the driver's check and the writers: a rename
    is refused with the check's own message (it was pyiceberg's bare 'Could not find
    field with name: value'); an added optional column is null in the new rows."""
    from pyiceberg.types import StringType

    from sinkv2.errors import SinkConfigurationError

    sink = make_sink(tmp_path / "wh")
    batch = rows(0, 3)
    sink.check_schema(batch.schema)
    with sink.load_table().update_schema() as update:
        update.add_column("tag", StringType())
    committable = stage(sink, [batch], job_id="added", checkpoint_id=1)
    commit_with_retries(sink.create_committer(BasicCommitterInitContext()), [committable])
    assert [row["tag"] for row in read_back(sink)] == [None] * 3
    with sink.load_table().update_schema() as update:
        update.rename_column("value", "amount")
    with pytest.raises(
        SinkConfigurationError, match=r"schema changed after.*unexpected \['value'\]"
    ):
        stage(
            sink, [batch.append_column("tag", pa.array([None] * 3, pa.string()))], job_id="renamed"
        )
