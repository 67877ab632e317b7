"""FileSource listing as Spark lists: ``_key=value`` directories, partition types, escaped
names, and the compressed names Spark's writers give (no Spark).

Each test failed before its fix; ``spark.read.parquet`` was run by hand on the same
directories and gives these types and values.
"""

from __future__ import annotations

import bz2
import decimal
import gzip
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.files import FileSource
from reference_sinks.files._source_listing import partition_type
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    read_all,
    rows,
    write_parquet,
)


def test_an_underscore_partition_directory_is_read_as_spark_reads_it(tmp_path: Path):
    write_parquet(tmp_path / "_region=eu" / "part-0.parquet", rows(0, 3))
    write_parquet(tmp_path / "_region=us" / "part-0.parquet", rows(3, 2))
    write_parquet(tmp_path / "_region=us" / "_temporary" / "x.parquet", rows(100, 2))
    write_parquet(tmp_path / "_region=us" / "_x.parquet", rows(200, 2))
    (tmp_path / "_SUCCESS").write_text("")
    source = FileSource(tmp_path)
    assert source.get_produced_type().names == ["id", "name", "score", "_region"]
    got = read_all(source)
    assert [(r["id"], r["_region"]) for r in got] == [
        (0, "eu"), (1, "eu"), (2, "eu"), (3, "us"), (4, "us"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["1", "2"], pa.int32()),
        (["+7", "007"], pa.int32()),
        (["1", "3000000000"], pa.int64()),
        (["12345678901234567890"], pa.decimal128(20, 0)),
        (["1", "12345678901234567890123"], pa.decimal128(23, 0)),
        (["1.5", "2"], pa.float64()),
        (["NaN", "-Infinity", "1e3"], pa.float64()),
        (["1e3", "2"], pa.decimal128(10, 0)),
        (["1.5e3"], pa.decimal128(4, 0)),
        (["1.25e1", "1.0"], pa.float64()),
        (["2024-01-31", "__HIVE_DEFAULT_PARTITION__"], pa.date32()),
        (["2024-01-31", "7"], pa.string()),
        (["2024-02-30"], pa.string()),
        (["__HIVE_DEFAULT_PARTITION__"], pa.string()),
        (["true"], pa.string()),
    ],
)
def test_partition_types_are_inferred_as_spark_infers_them(values: list[str], expected: Any):
    assert partition_type(values) == expected


def test_partition_values_read_with_their_inferred_types_and_escaped_names(tmp_path: Path):
    write_parquet(tmp_path / "x=1.5" / "a%3Ab=12345678901234567890" / "p.parquet", rows(0, 1))
    write_parquet(tmp_path / "x=2" / "a%3Ab=__HIVE_DEFAULT_PARTITION__" / "p.parquet", rows(1, 1))
    write_parquet(tmp_path / "x=NaN" / "a%3Ab=1e3" / "p.parquet", rows(2, 1))
    source = FileSource(tmp_path)
    produced = source.get_produced_type()
    assert [(f.name, f.type) for f in produced][3:] == [
        ("x", pa.float64()),
        ("a:b", pa.decimal128(20, 0)),
    ]
    got = read_all(source)
    assert [r["x"] for r in got[:2]] == [1.5, 2.0]
    assert math.isnan(got[2]["x"])
    assert [r["a:b"] for r in got] == [decimal.Decimal("12345678901234567890"), None, 1000]


def test_compressed_json_and_csv_files_spark_writes_are_read(tmp_path: Path):
    lines = [f'{{"id": {i}, "name": "n", "score": 0.5}}\n'.encode() for i in range(4)]
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "part-0.json.bz2").write_bytes(bz2.compress(b"".join(lines[:2])))
    (tmp_path / "json" / "part-1.ndjson.gz").write_bytes(gzip.compress(b"".join(lines[2:])))
    assert [r["id"] for r in read_all(FileSource(tmp_path / "json", "jsonl", schema=SCHEMA))] == [
        0, 1, 2, 3,
    ]  # fmt: skip
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "part-0.csv.bz2").write_bytes(bz2.compress(b"id,name,score\n9,n,1\n"))
    assert read_all(FileSource(tmp_path / "csv", "csv")) == [{"id": "9", "name": "n", "score": "1"}]
