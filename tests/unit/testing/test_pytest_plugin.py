"""The kit's pytest plugin: registered under pytest11, sets the number of examples."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

PROBE = """
import sys
from sinkv2.testing._settings import resolve_examples

def test_probe():
    assert resolve_examples(200) == {expected}
    assert "pyspark" not in sys.modules
"""


def test_the_plugin_is_registered_under_pytest11() -> None:
    (plugin,) = [e for e in entry_points(group="pytest11") if e.name == "sinkv2"]
    assert plugin.value == "_sinkv2_pytestplugin"


def test_loading_the_plugin_imports_nothing_of_sinkv2() -> None:
    # pytest loads the plugin in every session of every project installed next to sinkv2.
    code = (
        "import sys, _sinkv2_pytestplugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sinkv2', 'sinkv2_spark', 'reference_sinks', 'hypothesis', 'pyspark', 'pyarrow')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_a_session_without_the_option_never_imports_sinkv2(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(
        "import sys\n\ndef test_probe():\n    assert 'sinkv2' not in sys.modules\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "SINKV2_KIT_EXAMPLES"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def run_pytest(tmp_path: Path, expected: int, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE.format(expected=expected), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SINKV2_KIT_EXAMPLES"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


def test_the_option_sets_the_examples_of_every_check(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, 3, "--sinkv2-examples", "3")
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_the_option_the_code_decides(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, 200)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_value_is_refused_with_the_option_name(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, 0, "--sinkv2-examples", "0")
    assert result.returncode != 0
    assert "--sinkv2-examples must be a positive int (got 0 of type int)" in (
        result.stdout + result.stderr
    )
