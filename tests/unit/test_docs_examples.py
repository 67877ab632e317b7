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
        "JsonLinesSink: Sink + SupportsCommitter + SupportsAttemptCleanup + SupportsAbort "
        "-> exactly-once capable - verify with sinkv2.testing"
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


def load_first_sink():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_first_sink", EXAMPLES / "first_sink.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs classes resolve their module
    spec.loader.exec_module(module)
    return module


def test_the_tutorial_hooks_remove_only_what_they_should(tmp_path: Path) -> None:
    from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext

    example = load_first_sink()
    sink = example.JsonLinesSink(tmp_path)

    def stage(job_id: str, attempt: int):  # type: ignore[no-untyped-def]
        init = BasicWriterInitContext(job_id=job_id, attempt_number=attempt)
        writer = sink.create_writer(init)
        writer.write({"order": attempt}, BasicSinkWriterContext())
        [staged] = writer.prepare_commit()
        writer.close()
        return init.get_attempt_token(), staged

    winner, kept = stage("job-a", 0)
    _, lost = stage("job-a", 1)
    _, other_job = stage("job-b", 0)
    sink.clean_up_attempts("job-a", [winner])
    assert (tmp_path / kept.staged_name).exists()
    assert not (tmp_path / lost.staged_name).exists()
    assert (tmp_path / other_job.staged_name).exists()  # another job's: untouched
    # abort: staged files go; a committed one (no longer staged) stays; idempotent.
    (tmp_path / kept.staged_name).rename(tmp_path / kept.final_name)
    sink.abort([kept, other_job])
    sink.abort([kept, other_job])
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.final_name]


def test_the_tutorial_shows_the_output_and_attempt_tokens_main_gives(tmp_path, capsys):
    import re

    page = (ROOT / "docs" / "tutorial" / "first-sink.md").read_text(encoding="utf-8")
    example = load_first_sink()

    assert example.main(["first_sink.py", str(tmp_path)]) == 0

    printed = capsys.readouterr().out.replace(str(tmp_path), "<dir>")
    [shown] = [b for b in re.findall(r"```text\n(.*?)```", page, re.S) if "replay:" in b]
    shown = re.sub(r"/tmp/first-sink-\w+", "<dir>", shown)
    assert printed == shown
    # "The file names contain the attempt token, here `...` and `...`."
    tokens = re.search(r"attempt token, here `([^`]+)`\s+and `([^`]+)`", page)
    assert tokens is not None
    names = [path.name for path in tmp_path.iterdir()]
    for token in tokens.groups():
        assert any(token in name for name in names), (token, names)
