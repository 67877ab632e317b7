"""A JSON lines directory's schema, inferred from every file and merged as Spark merges.

Spark's ``spark.read.json(dir)`` infers from every record: a column only a later file
has is kept, ``long`` and ``double`` give ``double``, structs merge, any other
disagreement gives a string column, whose other values are read as their JSON text.
The same with Spark itself: ``test_file_source_spark.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from reference_sinks.files import FileSource
from reference_sinks.files._source_json_infer import stringify_non_strings
from sinkv2.testing import LocalSourceEngine


def read_all(source: FileSource) -> list[dict[str, Any]]:
    engine = LocalSourceEngine(source, 1)
    engine.run()
    engine.finish()
    return [record.record for record in engine.committed]


def write(directory: Path, files: dict[str, list[str]]) -> None:
    for name, lines in files.items():
        (directory / name).write_text("\n".join(lines) + "\n")


def test_every_file_counts_and_fields_are_sorted_by_name(tmp_path: Path):
    write(
        tmp_path,
        {
            "a.jsonl": ['{"b": 1, "a": {"z": 1, "y": 2}, "gone": null}'],
            "b.jsonl": ['{"b": 1.5, "c": "only here", "a": {"x": [1]}}'],
        },
    )
    source = FileSource(tmp_path, "jsonl")
    assert source.get_produced_type() == pa.schema(
        [
            ("a", pa.struct([("x", pa.list_(pa.int64())), ("y", pa.int64()), ("z", pa.int64())])),
            ("b", pa.float64()),
            ("c", pa.string()),
            ("gone", pa.string()),
        ]
    )
    assert sorted(read_all(source), key=lambda r: r["b"]) == [
        {"a": {"x": None, "y": 2, "z": 1}, "b": 1.0, "c": None, "gone": None},
        {"a": {"x": [1], "y": None, "z": None}, "b": 1.5, "c": "only here", "gone": None},
    ]


def test_records_that_disagree_give_a_string_column_of_their_text(tmp_path: Path):
    write(
        tmp_path,
        {"a.jsonl": ['{"v": true}', '{"v": 2.50}', '{"v": {"k": [1, 2]}}', '{"v": "s"}', "{}"]},
    )
    source = FileSource(tmp_path, "jsonl")
    assert source.get_produced_type() == pa.schema([("v", pa.string())])
    assert sorted(str(r["v"]) for r in read_all(source)) == sorted(
        ["true", "2.50", '{"k": [1, 2]}', "s", "None"]
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from("abc"), JSON, min_size=1), st.sets(st.sampled_from("abc")))
def test_a_string_column_takes_each_value_as_its_text_and_the_rest_is_kept(
    record: dict[str, Any], strings: set[str]
):
    line = json.dumps(record, indent=None)
    schema = pa.schema([(name, pa.string()) for name in sorted(strings)])
    (rewritten,) = stringify_non_strings(line.encode(), schema).decode().splitlines()
    got = json.loads(rewritten)
    for name, value in record.items():
        if name in strings and value is not None and not isinstance(value, str):
            assert json.loads(got[name]) == value
        else:
            assert got[name] == value
