"""The stream-a-source how-to's program (docs/examples/stream_files.py) runs as the page says.

Three runs of one query from one checkpoint location, a lost commit in between:
every order lands once, the replayed micro-batch writes nothing twice, and the
source id's records stay pruned to the last epochs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sinkv2.runtime import SqliteCommitStateStore

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "docs" / "examples" / "stream_files.py"


@pytest.fixture
def program():
    spec = importlib.util.spec_from_file_location("howto_stream_files", PROGRAM)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_every_order_lands_once_through_three_runs_and_a_lost_commit(spark, program, tmp_path):
    assert program.main(tmp_path) == 1500
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    epochs = store.source_epochs("landing-orders")
    assert len(epochs) <= 2  # pruned as the stream goes: O(1) records, not the history
    assert all(path.suffix == ".parquet" for path in (tmp_path / "orders").rglob("*.parquet"))
    assert not list((tmp_path / "orders").rglob("_staging/*"))
