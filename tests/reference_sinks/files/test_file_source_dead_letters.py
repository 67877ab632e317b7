"""FileSource and bad input: fail naming file, line and column, or the dead-letter directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from reference_sinks.files import FileReadError, FileSource, file_source_from_options
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import SourceReaderError
from sinkv2.testing import check_source
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    read_all,
    rows,
    write_jsonl,
    write_parquet,
)

DATED = pa.schema([("id", pa.int64()), ("day", pa.date32())])


def failure(source: Any) -> FileReadError:
    with pytest.raises(SourceReaderError) as caught:
        read_all(source)
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    return problem


def sidecar(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def bad_csv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "id,name,score",
        "1,a,0.5",
        "2,b,1.5,extra",  # line 3: a field too many
        '3,"multi',  # lines 4-5: a quoted field across lines, good
        'line",2.5',
        "x,c,3.5",  # line 6: not a long
        "5,d,4.5",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_bad_csv_row_fails_naming_its_line_and_column(tmp_path: Path):
    path = tmp_path / "in" / "a.csv"
    path.parent.mkdir()
    path.write_text('id,name,score\n3,"multi\nline",2.5\nx,c,3.5\n')  # line 4: not a long
    problem = failure(FileSource(tmp_path / "in", "csv", schema=SCHEMA))
    assert (problem.line, problem.column) == (4, "id")
    assert "a.csv' as CSV: line 4, column 'id'" in str(problem)
    assert "holds 'x', which is not a int64" in str(problem)
    bad_csv(path)
    problem = failure(FileSource(tmp_path / "in", "csv", schema=SCHEMA))
    assert (problem.line, problem.column) == (3, None)
    assert "a.csv' as CSV: line 3 ('2,b,1.5,extra')" in str(problem)
    assert "Expected 3 columns, got 4" in str(problem)
    assert "dead_letter_dir=" in str(problem)


def test_bad_csv_rows_go_to_the_dead_letter_directory_and_the_rest_is_read(tmp_path: Path):
    path = bad_csv(tmp_path / "in" / "day=1" / "a.csv")
    dead = tmp_path / "dead"
    source = FileSource(tmp_path / "in", "csv", schema=SCHEMA, dead_letter_dir=dead, batch_rows=1)
    assert [(r["id"], r["name"]) for r in read_all(source)] == [
        (1, "a"),
        (3, "multi\nline"),
        (5, "d"),
    ]
    assert (dead / "day=1" / "a.csv.bad").read_text() == "2,b,1.5,extra\nx,c,3.5\n"
    why = sidecar(dead / "day=1" / "a.csv.bad.json")
    assert why["file"] == str(path)
    assert [(r["line"], r["column"]) for r in why["records"]] == [(3, None), (6, "id")]
    assert "Expected 3 columns, got 4" in why["records"][0]["error"]


def test_the_temporaries_a_killed_attempt_left_are_removed_when_the_split_is_read_again(
    tmp_path: Path,
):
    """A task killed between writing a dead letter's temporary and renaming it leaves
    ``.<name>.<hex>.tmp``; the next read of the split writes the same dead letters and
    removes it (another target's temporary is not touched)."""
    bad_csv(tmp_path / "in" / "day=1" / "a.csv")
    dead = tmp_path / "dead" / "day=1"
    dead.mkdir(parents=True)
    left = [dead / f".a.csv.bad.{'0' * 32}.tmp", dead / f".a.csv.bad.json.{'f' * 32}.tmp"]
    for orphan in left:
        orphan.write_text("half")
    other = dead / f".b.csv.bad.{'1' * 32}.tmp"
    other.write_text("another file's")
    source = FileSource(tmp_path / "in", "csv", schema=SCHEMA, dead_letter_dir=dead.parent)
    assert [r["id"] for r in read_all(source)] == [1, 3, 5]
    assert sorted(p.name for p in dead.iterdir()) == sorted(
        [other.name, "a.csv.bad", "a.csv.bad.json"]
    )


def test_a_bad_json_line_fails_naming_its_line_and_column(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1, "day": "2024-01-01"}\n{"id": 2, "day": "2024-02-30"}\n')
    problem = failure(FileSource(tmp_path, "jsonl", schema=DATED))
    assert (problem.line, problem.column) == (2, "day")
    path.write_text('{"id": 1}\n\n{"id": 2, "day": \n{"id": 3}\n')
    problem = failure(FileSource(tmp_path, "jsonl", schema=DATED))
    assert problem.line == 3
    assert "line 3" in str(problem)


def test_bad_json_lines_go_to_the_dead_letter_directory_and_the_rest_is_read(tmp_path: Path):
    lines = [
        '{"id": 1, "day": "2024-01-01"}',
        '{"id": 2, "day": "2024-02-30"}',  # not a date
        '{"id": 3, "day": ',  # not JSON
        '{"id": "four"}',  # not a long
        '{"id": 5}',
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    dead = tmp_path / "dead"
    source = FileSource(tmp_path / "in", "jsonl", schema=DATED, dead_letter_dir=dead)
    assert [r["id"] for r in read_all(source)] == [1, 5]
    assert (dead / "a.jsonl.bad").read_text().splitlines() == lines[1:4]
    why = sidecar(dead / "a.jsonl.bad.json")
    assert [(r["line"], r["column"]) for r in why["records"]] == [(2, "day"), (3, None), (4, "id")]


def test_an_unreadable_parquet_file_goes_whole_to_the_dead_letter_directory(tmp_path: Path):
    base, dead = tmp_path / "in", tmp_path / "dead"
    good = write_parquet(base / "a.parquet", rows(0, 10))
    bad = base / "sub" / "b.parquet"
    bad.parent.mkdir()
    bad.write_bytes(good.read_bytes()[:-20])  # a truncated footer
    problem = failure(FileSource(base))
    assert problem.path == str(bad)
    assert [r["id"] for r in read_all(FileSource(base, dead_letter_dir=dead))] == list(range(10))
    assert (dead / "sub" / "b.parquet").read_bytes() == bad.read_bytes()
    why = sidecar(dead / "sub" / "b.parquet.bad.json")
    assert why["whole_file"] is True
    assert why["file"] == str(bad)
    assert bad.exists()  # set aside by a copy; the clean-up decides about the original


def test_with_a_dead_letter_directory_the_source_kit_reads_every_good_record_once(tmp_path: Path):
    """Restores at any position, other parallelisms: the good records once, the bad set aside."""
    base, dead = tmp_path / "in", tmp_path / "dead"
    expected = []
    for index in range(3):
        records = rows(index * 20, 20)
        lines = [json.dumps(r) for r in records]
        lines[5 + index] = '{"id": ' + str(index)  # one broken line a file
        (base / f"f{index}.jsonl").parent.mkdir(exist_ok=True)
        (base / f"f{index}.jsonl").write_text("\n".join(lines) + "\n")
        expected += [r for n, r in enumerate(records) if n != 5 + index]
    write_jsonl(base / "g.jsonl", rows(100, 7))
    expected += rows(100, 7)
    check_source(
        lambda: FileSource(base, "jsonl", schema=SCHEMA, dead_letter_dir=dead, batch_rows=3),
        expected=expected,
    )
    assert len(list(dead.glob("*.bad"))) == 3


def test_the_dead_letter_directory_is_checked_and_given_by_option(tmp_path: Path):
    write_parquet(tmp_path / "in" / "a.parquet", rows(0, 2))
    with pytest.raises(SinkConfigurationError, match=r"dead_letter_dir .* is inside path"):
        FileSource(tmp_path / "in", dead_letter_dir=tmp_path / "in" / "bad")
    with pytest.raises(SinkConfigurationError, match="dead_letter_dir must be"):
        FileSource(tmp_path / "in", dead_letter_dir="")
    source = file_source_from_options(
        path=str(tmp_path / "in"), dead_letter_dir=str(tmp_path / "bad")
    )
    assert source.dead_letter_dir == str(tmp_path / "bad")


def test_a_quote_never_closed_fails_naming_its_line_not_one_value_holding_the_rest(
    tmp_path: Path,
):
    """pyarrow (and Python's csv, unless strict) read an unclosed quote as a value
    running to the end of the file: the rows after it would vanish into one field."""
    path = tmp_path / "in" / "a.csv"
    path.parent.mkdir()
    path.write_text('id,name,score\n1,a,0.5\n2,b,"1.5\n3,c,2.5\n4,d,3.5\n')
    strings = pa.schema([(f.name, pa.string()) for f in SCHEMA])
    problem = failure(FileSource(tmp_path / "in", "csv", schema=strings, batch_rows=1))
    assert problem.line == 3
    assert "the quoted field opened on line 3 is never closed" in str(problem)
    dead = tmp_path / "dead"
    source = FileSource(tmp_path / "in", "csv", schema=strings, dead_letter_dir=dead)
    assert [r["id"] for r in read_all(source)] == ["1"]
    assert (dead / "a.csv.bad").read_text() == '2,b,"1.5\n3,c,2.5\n4,d,3.5\n'
    assert [r["line"] for r in sidecar(dead / "a.csv.bad.json")["records"]] == [3]


def test_quotes_that_all_close_or_sit_inside_unquoted_fields_read_as_before(tmp_path: Path):
    """An odd count of quote characters (a stray one inside an unquoted field, a
    literal to Spark and pyarrow) costs a record-by-record read, never a record."""
    path = tmp_path / "in" / "a.csv"
    path.parent.mkdir()
    body = "".join(f'{i},"n ""{i}""\nx",{i}.5\n' for i in range(1, 2001))
    path.write_text("id,name,score\n" + body + '9,ab"c,1.0\n')
    got = read_all(FileSource(tmp_path / "in", "csv", schema=SCHEMA, batch_rows=7))
    assert [r["id"] for r in got] == sorted([*range(1, 2001), 9])  # read_all sorts by id
    assert got[0]["name"] == 'n "1"\nx'
    assert 'ab"c' in {r["name"] for r in got[8:10]}
    path.write_text("id,name,score\n" + body)  # even: the fast read, every row once
    got = read_all(FileSource(tmp_path / "in", "csv", schema=SCHEMA, batch_rows=7))
    assert [r["id"] for r in got] == list(range(1, 2001))
