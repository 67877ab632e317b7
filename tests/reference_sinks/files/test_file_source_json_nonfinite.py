"""FileSource reads back NaN and the infinities in JSON lines as Spark's writer and
FileSink spell them: the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (no Spark).

The test failed before the fix: such a record failed the read.
"""

from __future__ import annotations

import decimal
import math
from pathlib import Path

import pyarrow as pa
import pytest

from reference_sinks.files import FileReadError, FileSource
from reference_sinks.files._json_lines import JsonLinesEncoder
from sinkv2.source import SourceReaderError
from tests.reference_sinks.files.file_source_data import read_all


def test_non_finite_doubles_as_spark_and_file_sink_write_them_are_read_back(tmp_path: Path):
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("x", pa.float64()),
            ("xs", pa.list_(pa.float32())),
            ("s", pa.struct([("y", pa.float64()), ("label", pa.string())])),
            ("big", pa.decimal128(38, 10)),
        ]
    )
    records = [
        {"id": 0, "x": math.nan, "xs": [1.5, -math.inf, None], "s": {"y": math.inf, "label": "NaN"},
         "big": decimal.Decimal("1234567890123456789012345678.0123456789")},
        {"id": 1, "x": 2.25, "xs": None, "s": None, "big": None},
    ]  # fmt: skip
    batch = pa.RecordBatch.from_pylist(records, schema=schema)
    (tmp_path / "sink.jsonl").write_bytes(JsonLinesEncoder(schema).encode(batch))
    got = read_all(FileSource(tmp_path, "jsonl", schema=schema))
    assert math.isnan(got[0]["x"])
    assert got[0]["xs"] == [1.5, -math.inf, None]
    assert got[0]["s"] == {"y": math.inf, "label": "NaN"}  # a string "NaN" stays a string
    assert got[0]["big"] == records[0]["big"]
    assert got[1] == records[1]
    (tmp_path / "sink.jsonl").write_text(
        '{"id": 2, "x": "+INF"}\n{"id": 3, "x": "many"}\n', encoding="utf-8"
    )
    with pytest.raises(SourceReaderError) as caught:  # not a spelling Spark reads
        read_all(FileSource(tmp_path, "jsonl", schema=schema))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert (problem.line, problem.column) == (2, "x")
