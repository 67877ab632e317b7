"""FileSink red-teamed: partition values a local filesystem cannot name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from reference_sinks.files import FileSink
from sinkv2.errors import FatalDestinationError
from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext


def test_a_partition_directory_name_too_long_is_refused_by_the_writer(tmp_path):
    """Before: staged fine, then the committer failed after renaming the other
    partitions' files into place (visible), and again at every retry."""
    sink = FileSink(tmp_path, partition_by=["k"])
    writer = sink.create_writer(
        BasicWriterInitContext(job_id="j", subtask_id=0, number_of_parallel_subtasks=1)
    )
    batch = pa.RecordBatch.from_pydict({"k": ["a", "é" * 130], "v": [1, 2]})
    try:
        with pytest.raises(FatalDestinationError, match=r"partition column 'k'.* 262 bytes"):
            writer.write_arrow_batch(batch, BasicSinkWriterContext())
    finally:
        writer.close()
    sink.clean_up_attempts("j", ())
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []
