"""FileSource reading what a directory really holds: empty files, a missing path, files
that change or break under it, and column names in another case (no Spark).

Each test failed before its fix; Spark's readers were checked by hand on the same
files (zero-byte files skipped, ``ID`` read as ``id``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reference_sinks.files import FileReadError, FileSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import NativeRead, SourceReaderError
from sinkv2.testing import LocalSourceEngine
from tests.reference_sinks.files.file_source_data import (
    SCHEMA,
    read_all,
    rows,
    write_csv,
    write_jsonl,
    write_parquet,
)


@pytest.mark.parametrize("file_format", ["parquet", "jsonl", "csv"])
def test_an_empty_file_is_read_as_no_rows_and_not_used_for_the_schema(
    tmp_path: Path, file_format: str
):
    (tmp_path / f"a-empty.{file_format}").write_bytes(b"")  # first by path: inference skips it
    write = {"parquet": write_parquet, "jsonl": write_jsonl, "csv": write_csv}[file_format]
    write(tmp_path / f"b.{file_format}", rows(0, 5))
    source = FileSource(tmp_path, file_format)
    got = read_all(source)
    if file_format == "csv":
        assert [r["id"] for r in got] == ["0", "1", "2", "3", "4"]
    else:
        assert got == rows(0, 5)
    if file_format == "parquet":  # Spark's own reader is handed only the file with rows
        engine = LocalSourceEngine(source, 1)
        native = source.native_read(list(engine.enumerator.snapshot_state(0).remaining))
        engine.close()
        assert isinstance(native, NativeRead)
        assert native.paths == (f"file://{tmp_path}/b.{file_format}",)


def test_a_directory_of_empty_files_asks_for_a_schema(tmp_path: Path):
    (tmp_path / "a.parquet").write_bytes(b"")
    with pytest.raises(SinkConfigurationError, match=r"no non-empty parquet files \(1 empty\)"):
        FileSource(tmp_path)
    assert read_all(FileSource(tmp_path, schema=SCHEMA)) == []


def test_a_parquet_column_in_another_case_is_read_not_nulled(tmp_path: Path):
    write_parquet(tmp_path / "a.parquet", rows(0, 2))
    pq.write_table(
        pa.table({"ID": pa.array([7], pa.int64()), "Score": [1.5]}), tmp_path / "b.parquet"
    )
    assert read_all(FileSource(tmp_path))[-1] == {"id": 7, "name": None, "score": 1.5}
    pq.write_table(pa.table({"Id": [8], "ID": [9]}), tmp_path / "c.parquet")
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(tmp_path))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert (problem.column, Path(problem.path).name) == ("id", "c.parquet")
    assert "['Id', 'ID'] all match the column 'id'" in str(problem)


def test_a_path_that_does_not_exist_is_named_not_read_as_empty(tmp_path: Path):
    missing = tmp_path / "typo"
    with pytest.raises(SinkConfigurationError, match="does not exist, so no schema"):
        FileSource(missing)
    with pytest.raises(SinkConfigurationError, match="does not exist: a bounded source"):
        read_all(FileSource(missing, schema=SCHEMA))
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="looks like a glob pattern"):
        FileSource(tmp_path / "*.parquet")  # Spark expands it; FileSource names it
    continuous = FileSource(missing, schema=SCHEMA).monitor_continuously(1)  # waits for files
    engine = LocalSourceEngine(continuous, 1)
    engine.run(until=lambda e: e.clock_ms >= 1000)
    assert engine.committed == []
    engine.close()


def test_a_truncated_large_parquet_file_is_named_or_set_aside_not_a_listing_crash(
    tmp_path: Path,
):
    """A file over split_bytes has its footer read at listing: a bad one is the reader's case."""
    base = tmp_path / "in"
    good = write_parquet(base / "a.parquet", rows(0, 40))
    (base / "b.parquet").write_bytes(good.read_bytes()[:-30])
    with pytest.raises(SourceReaderError) as caught:
        read_all(FileSource(base, split_bytes=100))
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert Path(problem.path).name == "b.parquet"
    dead = tmp_path / "dead"
    assert read_all(FileSource(base, split_bytes=100, dead_letter_dir=dead)) == rows(0, 40)
    assert (dead / "b.parquet").read_bytes() == (base / "b.parquet").read_bytes()


def test_a_parquet_file_rewritten_after_its_row_groups_were_listed_is_named(tmp_path: Path):
    path = write_parquet(tmp_path / "a.parquet", rows(0, 40))
    engine = LocalSourceEngine(FileSource(tmp_path, split_bytes=100), 1)  # lists: row groups
    try:
        assert len(engine.enumerator.snapshot_state(0).remaining) > 1
        write_parquet(path, rows(0, 8), row_group_size=8)  # rewritten in place: one row group
        with pytest.raises(SourceReaderError) as caught:
            engine.run()
    finally:
        engine.close()
    problem = caught.value.__cause__
    assert isinstance(problem, FileReadError)
    assert problem.path == str(path)
    assert "changed since it was listed" in str(problem)
