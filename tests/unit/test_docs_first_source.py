"""docs/examples/first_source.py runs as docs/tutorial/first-source.md says it does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "first_source.py"
PAGE = ROOT / "docs" / "tutorial" / "first-source.md"


def run(
    *args: str, expect_success: bool = True, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    # The example imports the sinkv2 of this checkout, installed or not.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **extra_env}
    env.pop("SINKV2_KIT_EXAMPLES", None)  # the example's own max_examples
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    if expect_success:
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_the_sample_files_are_read_exactly_once_across_a_restore(tmp_path: Path) -> None:
    data = tmp_path / "data"

    stdout = run(str(data)).stdout

    # The sample files were written into the empty directory.
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted(data.glob("*.jsonl"))}
    assert sizes == {"orders-1.jsonl": 10, "orders-2.jsonl": 5, "orders-3.jsonl": 8}
    orders = [
        json.loads(line)["order"]
        for path in sorted(data.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert orders == list(range(1, 24))
    # A checkpoint after about a third of the 23 records, showing each split's position.
    committed = int(re.search(r"^checkpoint 1: (\d+) records committed$", stdout, re.M)[1])
    assert 7 <= committed <= 23, stdout
    assert re.search(r"^  enumerator: not yet assigned \[.*\]$", stdout, re.M), stdout
    assert re.search(r"^  reader 0: ", stdout, re.M), stdout
    assert re.search(r"^  reader 1: ", stdout, re.M), stdout
    more = int(
        re.search(r"^restored with 3 readers: (\d+) more records committed$", stdout, re.M)[1]
    )
    assert committed + more == 23, stdout
    for name, size in sizes.items():
        assert f"  {name}: {size} of {size} records, each once, in order" in stdout
    assert "read 23 records from 3 files exactly once" in stdout
    assert "check_source: passed (23 records, 3 files)" in stdout
    assert "check_source_reader: passed" in stdout


def test_it_reads_the_output_of_the_first_sink_tutorial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "first_sink.py"), str(out)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
        check=True,
    )

    stdout = run(str(out)).stdout

    assert not list(out.glob("orders-*.jsonl"))  # no sample files: the sink's files were read
    assert "read 3 records from 2 files exactly once" in stdout
    assert "check_source: passed (3 records, 2 files)" in stdout


def test_without_an_argument_it_uses_a_fresh_temporary_directory(tmp_path: Path) -> None:
    stdout = run(TMPDIR=str(tmp_path), TEMP=str(tmp_path), TMP=str(tmp_path)).stdout

    (created,) = tmp_path.glob("first-source-*")
    assert f"JsonLinesSource: BOUNDED, {created.resolve()}" in stdout
    assert len(list(created.glob("*.jsonl"))) == 3
    assert not list(tmp_path.glob("first-source-reader-*"))  # the reader check cleans up


def test_a_line_that_is_not_json_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "bad.jsonl").write_text('{"order": 1, "item": "fig"}\n{"order": 2,\n')

    result = run(str(data), expect_success=False)

    assert result.returncode != 0
    assert "bad.jsonl, line 2: not JSON" in result.stderr, result.stderr


def test_every_snippet_the_page_includes_is_a_section_of_the_example() -> None:
    page = PAGE.read_text(encoding="utf-8")
    example = EXAMPLE.read_text(encoding="utf-8")
    sections = re.findall(r'--8<-- "docs/examples/first_source\.py:(\w+)"', page)
    assert sections, "the page includes no section of the example"
    for section in sections:
        assert f"# --8<-- [start:{section}]" in example, section
        assert f"# --8<-- [end:{section}]" in example, section


def test_the_kit_fails_the_source_the_page_breaks(tmp_path: Path) -> None:
    """The page's experiment: without the position update, the example and the kit fail."""
    line = "        split_state.position = element.number + 1\n"
    source = EXAMPLE.read_text(encoding="utf-8")
    assert source.count(line) == 1
    broken = tmp_path / "first_source.py"
    broken.write_text(source.replace(line, ""), encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k != "SINKV2_KIT_EXAMPLES"}

    result = subprocess.run(
        [sys.executable, str(broken), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": path},
        check=False,
    )

    assert result.returncode != 0
    assert "files NOT exactly once" in result.stdout, result.stdout
    # a Flink-named case (testSavepoint, as the page shows) or, when the reader's fetch
    # thread happens to finish its files before their checkpoints, a random schedule
    assert "AssertionError: check_source: case " in result.stderr, result.stderr
    assert "extra or repeated" in result.stderr, result.stderr
