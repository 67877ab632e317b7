"""docs/examples/test_your_sink.py runs as the how-to says, and catches what the how-to shows."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkUnderTest, check_sink

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "test_your_sink.py"
COPIES = itertools.count()


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "SINKV2_KIT_EXAMPLES": "25"}
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_the_example_passes_as_a_script(tmp_path: Path) -> None:
    result = run(str(EXAMPLE), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "JsonLinesSink keeps the exactly-once contract" in result.stdout


def test_the_example_passes_as_pytest_tests(tmp_path: Path) -> None:
    copied = tmp_path / "examples"
    shutil.copytree(EXAMPLE.parent, copied)  # outside the repository's pytest config
    result = run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", str(copied / EXAMPLE.name),
        "--sinkv2-examples", "10", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout  # one test per stage


@pytest.fixture
def example_module(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    import test_your_sink

    return test_your_sink


def test_the_failure_the_how_to_shows_is_what_the_kit_reports(example_module) -> None:
    from first_sink import JsonLinesCommitter, JsonLinesSink

    class CopyingCommitter(JsonLinesCommitter):
        """Copies instead of renaming: every commit adds the records again."""

        def commit(self, requests):
            for request in requests:
                staged = request.get_committable()
                copy = staged.final_name.replace(".jsonl", f"-copy{next(COPIES)}.jsonl")
                shutil.copyfile(self._directory / staged.staged_name, self._directory / copy)

    class CopyingSink(JsonLinesSink):
        def create_committer(self, context):
            return CopyingCommitter(self.directory)

    def make() -> SinkUnderTest:
        sut = example_module.make_sink()
        return SinkUnderTest(CopyingSink(sut.sink.directory), sut.read_back, sut.close)

    with pytest.raises(AssertionError) as caught:
        check_sink(
            make,
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
            elements=example_module.ELEMENTS,
            max_examples=100,
        )
    message = str(caught.value)
    assert (
        "CopyingSink: Sink + SupportsCommitter + SupportsAttemptCleanup + SupportsAbort)" in message
    )
    assert (
        "changed what the destination shows" in message
        or "the destination shows duplicated elements" in message
    )
