"""The README's first example runs, and prints what its comments say.

The example is run as the README shows it, with two changes a test needs: its output
directory is a fresh temporary one, and it runs in a fresh working directory, where
the default commit state store (``./.sinkv2/``) then lives. ``getOrCreate()`` reuses
the test session.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_python_block() -> str:
    match = re.search(r"^```python\n(.*?)^```", README, re.M | re.S)
    assert match is not None
    return match.group(1)


def test_the_readmes_example_commits_once_and_not_again(spark, tmp_path, monkeypatch):
    code = first_python_block()
    assert code.count('"/tmp/sinkv2-orders"') == 2
    output = tmp_path / "orders"
    code = code.replace('"/tmp/sinkv2-orders"', repr(str(output)))
    monkeypatch.chdir(tmp_path)

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # the README's own code

    promised = [comment.strip() for comment in re.findall(r"print\(.*\)\s+#(.*)", code)]
    assert printed.getvalue().splitlines() == promised
    assert (tmp_path / ".sinkv2" / "commit_state.sqlite").is_file()
    assert len(spark.read.parquet(str(output)).collect()) == 1000
