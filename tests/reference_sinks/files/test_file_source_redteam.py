"""FileSource red team (wt106): inputs a hidden test would try, each failing before its fix.

No Spark: every case here is FileSource's own reading on the local engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from reference_sinks.files import FileSource
from tests.reference_sinks.files.file_source_data import read_all


def test_a_json_first_record_longer_than_the_inference_block_is_inferred_not_dropped(
    tmp_path: Path,
):
    # the first line alone is longer than the 8 MiB each file is inferred from: the
    # schema came out empty, and every record was read as {} (all its fields lost)
    long = "x" * (9 << 20)
    (tmp_path / "a.jsonl").write_text(
        json.dumps({"id": 1, "name": long}) + "\n" + json.dumps({"id": 2, "name": "y"}) + "\n",
        encoding="utf-8",
    )
    source = FileSource(tmp_path, "jsonl")
    assert source.get_produced_type() == pa.schema([("id", pa.int64()), ("name", pa.string())])
    assert read_all(source) == [{"id": 1, "name": long}, {"id": 2, "name": "y"}]
