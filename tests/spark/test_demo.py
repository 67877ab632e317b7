"""The README's demo (``bash scripts/demo``, ``examples/demo.py``) runs, small, and counts right.

The demo's first driver is a process of its own, SIGKILLed mid-stream; its restart runs
here, in the test session (``spark=``), so the test starts one extra JVM, not two.
``scripts/test`` also runs the demo itself (small: six files), on a PATH without the servers.
"""

from __future__ import annotations

import pytest

from examples import demo

pytestmark = pytest.mark.spark


def test_the_demo_kills_its_driver_and_finds_every_record_once(spark, tmp_path):
    printed: list[str] = []
    summary = demo.run(
        tmp_path / "demo", files=6, rows_per_file=300, spark=lambda: spark, say=printed.append
    )
    text = "\n".join(printed)
    assert summary == demo.Summary(
        records_in=1800, records_out=1800, distinct_out=1800, staged_left=0
    ), text
    assert summary.exactly_once
    assert "== SIGKILL the driver" in text
    assert text.endswith("=> every record exactly once")
    assert (tmp_path / "demo" / "state" / "commit_state.sqlite").is_file()  # the embedded store


def test_the_demo_refuses_too_few_files(tmp_path):
    with pytest.raises(ValueError, match="files >= 6"):
        demo.run(tmp_path, files=3)
