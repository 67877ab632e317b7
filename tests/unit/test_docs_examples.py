"""The examples in docs/ run as the docs say they do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"

# The records docs/examples/first_sink.py writes, over both subtasks.
FIRST_SINK_RECORDS = [
    {"order": 1, "item": "apple"},
    {"order": 2, "item": "pear"},
    {"order": 3, "item": "plum"},
]


def run_first_sink(*args: str, **extra_env: str) -> str:
    # The example imports the sinkv2 of this checkout, installed or not.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **extra_env}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "first_sink.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def committed_records(directory: Path) -> list[dict[str, object]]:
    records = []
    for path in sorted(directory.iterdir()):
        with path.open(encoding="utf-8") as lines:
            records.extend(json.loads(line) for line in lines)
    return records


def test_first_sink_commits_every_record_exactly_once(tmp_path: Path) -> None:
    output = tmp_path / "out"

    stdout = run_first_sink(str(output))
    assert stdout.splitlines()[0] == (
        "JsonLinesSink: Sink + SupportsCommitter -> exactly-once capable - verify with "
        "sinkv2.testing"
    )

    # Only committed files are left: no hidden staged file survives the commit.
    names = sorted(path.name for path in output.iterdir())
    assert len(names) == 2, names
    assert all(name.startswith("part-") and name.endswith(".jsonl") for name in names), names
    records = committed_records(output)
    assert sorted(records, key=lambda r: r["order"]) == FIRST_SINK_RECORDS
    assert len(records) == len(FIRST_SINK_RECORDS)
    # The replay found both files committed and wrote nothing again.
    assert "commit: 2 committed, 0 already committed" in stdout
    assert "replay: 0 committed, 2 already committed" in stdout


def test_first_sink_defaults_to_a_fresh_temporary_directory(tmp_path: Path) -> None:
    stdout = run_first_sink(TMPDIR=str(tmp_path), TEMP=str(tmp_path), TMP=str(tmp_path))

    (created,) = tmp_path.iterdir()
    assert created.name.startswith("first-sink-")
    assert f"output in {created}:" in stdout
    assert sorted(committed_records(created), key=lambda r: r["order"]) == FIRST_SINK_RECORDS
