"""A source stream's restarts, and the arguments of its doors, as a Spark user meets them.

A run under ``trigger(once=True)`` ends after its first micro-batch, before Spark asks
for the next offset: the source id's epoch 0 is still in the store then, and a query
from a new checkpoint location must still be refused rather than read epoch 1's rows
a second time.
"""

from __future__ import annotations

import pytest

from sinkv2.source.lib import NumberSequenceSource
from sinkv2_spark import from_source
from sinkv2_spark._doors.source_options import door_source
from sinkv2_spark._doors.source_read import source_store
from tests.spark.stream_reading import TIMEOUT_S, Collector, start

pytestmark = pytest.mark.spark


def numbers(spark, state):
    return from_source(
        spark,
        NumberSequenceSource(1, 60),
        source_id="once",
        streaming=True,
        state_store=str(state),
        parallelism=1,
    )


def test_a_new_checkpoint_after_a_trigger_once_run_is_refused(spark, tmp_path):
    state = tmp_path / "state.sqlite"
    first = Collector()
    query = start(numbers(spark, state), tmp_path / "checkpoint", first, once=True)
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None
    assert sorted(row["value"] for row in first.rows()) == list(range(1, 61))

    elsewhere = start(numbers(spark, state), tmp_path / "new-checkpoint", Collector(), once=True)
    with pytest.raises(Exception, match=r"'once' was read before, up to epoch 1"):
        elsewhere.awaitTermination(TIMEOUT_S)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"streaming": "no"}, "streaming must be None, True or False"),
        ({"streaming": 1}, "streaming must be None, True or False"),
        ({"batch_rows": None}, "batch_rows must be a positive int"),
    ],
)
def test_from_source_names_an_argument_of_the_wrong_type(spark, arguments, message):
    with pytest.raises(ValueError, match=message):
        from_source(spark, NumberSequenceSource(1, 10), **arguments)


def test_batch_rows_reaches_a_source_whose_factory_takes_it_too(tmp_path):
    """The files source reads Arrow batches of its own batch_rows: the door's option is it."""
    (tmp_path / "part-0.jsonl").write_text('{"a": 1}\n')
    options = {"source": "files", "path": str(tmp_path), "format": "jsonl"}
    assert door_source({**options, "batch_rows": "2"}).batch_rows == 2
    assert door_source(options).batch_rows == 65_536


def test_a_state_store_given_as_a_path_object_is_a_sqlite_file(tmp_path):
    """from_source(state_store=Path(...)): what it calls to open the store takes the path."""
    store = source_store(tmp_path / "state.sqlite")
    with store.acquire_source("path", job_id="test") as lease:
        assert lease.latest() is None
    assert (tmp_path / "state.sqlite").exists()
