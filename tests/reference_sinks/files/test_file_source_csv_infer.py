"""A CSV directory's types with ``infer_schema``, inferred from every file as Spark infers them.

Spark's ``spark.read.option("inferSchema", True).csv(dir)`` reads every row: ``int``
for small integers, ``long``, ``decimal`` past a ``long``, ``double``, ``date``,
``timestamp``, ``boolean`` in any case, else ``string``, widened across rows and
files. The same with Spark itself: ``test_file_source_spark.py``.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.files import CsvOptions, FileReadError, FileSource
from reference_sinks.files._source_csv_infer import infer_strings
from sinkv2.source import SourceReaderError
from sinkv2.testing import LocalSourceEngine


def read_all(source: FileSource) -> list[dict[str, Any]]:
    engine = LocalSourceEngine(source, 1)
    engine.run()
    engine.finish()
    return [record.record for record in engine.committed]


def inferred(directory: Path) -> FileSource:
    return FileSource(directory, "csv", csv=CsvOptions(infer_schema=True))


def test_every_file_counts_and_types_widen_as_spark_widens(tmp_path: Path):
    (tmp_path / "a.csv").write_text(
        "i,l,mix,b,d,e,gone\n1,1,1,true,2024-01-01,,\n2,2,2,TRUE,2024-01-02,,\n"
    )
    (tmp_path / "b.csv").write_text(
        "l,i,mix,b,d,e,gone,late\n3000000000,3,2.5,False,2024-01-03 10:00,x,,9\n,,,,,,,\n"
    )
    source = inferred(tmp_path)
    utc = dt.UTC
    assert source.get_produced_type() == pa.schema(
        [
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("mix", pa.float64()),
            ("b", pa.bool_()),
            ("d", pa.timestamp("us", "UTC")),
            ("e", pa.string()),
            ("gone", pa.string()),
        ]
    )
    assert sorted(read_all(source), key=lambda r: (r["i"] is None, r["i"])) == [
        {"i": 1, "l": 1, "mix": 1.0, "b": True, "d": dt.datetime(2024, 1, 1, tzinfo=utc)}
        | {"e": None, "gone": None},
        {"i": 2, "l": 2, "mix": 2.0, "b": True, "d": dt.datetime(2024, 1, 2, tzinfo=utc)}
        | {"e": None, "gone": None},
        {"i": 3, "l": 3000000000, "mix": 2.5, "b": False}
        | {"d": dt.datetime(2024, 1, 3, 10, tzinfo=utc), "e": "x", "gone": None},
        dict.fromkeys(["i", "l", "mix", "b", "d", "e", "gone"]),
    ]


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (["1", "-2", "+3", "007"], pa.int32()),
        (["1", "3000000000"], pa.int64()),
        (["12345678901234567890"], pa.decimal128(20, 0)),
        (["1", "12345678901234567890"], pa.decimal128(20, 0)),
        (["1.", "100."], pa.decimal128(3, 0)),
        (["1", "1e5", ".5", " 1", "1d", "Inf", "-Inf", "NaN", "Infinity"], pa.float64()),
        (["12345678901234567890", "1.5"], pa.float64()),
        (["true", "FALSE", "tRuE"], pa.bool_()),
        (["2024-01-01", "2024-12-31"], pa.date32()),
        (["2024-01-01", "2024-1-2"], pa.timestamp("us", "UTC")),
        (
            ["2024-01", "2024-01-01T10:00:00.5Z", "2024-01-01 10:00+02:00"],
            pa.timestamp("us", "UTC"),
        ),
        (["1", "true"], pa.string()),
        (["1", "2024-01-01"], pa.string()),
        (["nan"], pa.string()),
        (["true "], pa.string()),
        (["0x10"], pa.string()),
        ([None, None], pa.null()),
    ],
)
def test_each_value_as_spark_infers_it(values: list[str | None], kind: pa.DataType):
    assert infer_strings(pa.array(values, pa.string())) == kind


def test_spark_spellings_are_read_as_the_inferred_type(tmp_path: Path):
    (tmp_path / "a.csv").write_text(
        "n,x,b,t,d\n+5,1d,tRuE,2024-01,1.\n"
        "6, 2,false,2024-1-2 03:04:05.1234567,12345678901234567890\n"
    )
    utc = dt.UTC
    assert read_all(inferred(tmp_path)) == [
        {"n": 5, "x": 1.0, "b": True, "t": dt.datetime(2024, 1, 1, tzinfo=utc)}
        | {"d": decimal.Decimal(1)},
        {"n": 6, "x": 2.0, "b": False, "t": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc)}
        | {"d": decimal.Decimal("12345678901234567890")},
    ]


def test_a_value_past_the_inferred_block_that_does_not_convert_is_named(tmp_path: Path):
    (tmp_path / "a.csv").write_text("id,v\n1,1\n")
    source = inferred(tmp_path)
    (tmp_path / "a.csv").write_text("id,v\n1,1\n2,x\n")  # changed after inference
    with pytest.raises(SourceReaderError) as caught:
        read_all(source)
    error = caught.value.__cause__
    assert isinstance(error, FileReadError)
    assert (error.line, error.column) == (3, "v")


def test_without_infer_schema_every_column_is_a_string(tmp_path: Path):
    (tmp_path / "a.csv").write_text("i\n1\n")
    (tmp_path / "b.csv").write_text("i\n1.5\n")
    source = FileSource(tmp_path, "csv")
    assert source.get_produced_type() == pa.schema([("i", pa.string())])
    assert sorted(r["i"] for r in read_all(source)) == ["1", "1.5"]
