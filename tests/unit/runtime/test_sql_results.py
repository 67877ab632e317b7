"""Jobs' outcomes in the commit state store (layout 5's ``sink_result``), both databases."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2.errors import CommitStateError, SinkConfigurationError
from sinkv2.runtime import CommitStatus, JobError, JobOutcome, SinkResult
from sinkv2.runtime._sql.results import decode_outcome, encode_outcome
from sinkv2.runtime._sql.store import KEPT_OUTCOMES
from tests.unit.runtime.store_backends import make_backend


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    return make_backend(request, tmp_path)


RESULTS = st.builds(
    SinkResult,
    sink_id=st.text(min_size=1, max_size=8),
    epoch=st.integers(1, 2**40),
    checkpoint_id=st.integers(1, 2**62),
    status=st.sampled_from(CommitStatus),
    job_id=st.text(min_size=1, max_size=8),
    records_written=st.integers(0, 10**9),
    subtasks=st.integers(0, 64),
    committed=st.integers(0, 100),
    aborted_epochs=st.lists(st.integers(1, 99), max_size=3).map(tuple),
    recommitted_epochs=st.lists(st.integers(1, 99), max_size=3).map(tuple),
    cleaned_jobs=st.lists(st.text(max_size=5), max_size=3).map(tuple),
    stage_seconds=st.dictionaries(st.text(max_size=5), st.floats(0, 1e6), max_size=3),
    writer_metrics=st.dictionaries(st.text(max_size=5), st.floats(0, 1e6), max_size=3),
    native_write=st.booleans(),
    native_write_unavailable=st.none() | st.text(max_size=10),
    store_warning=st.none() | st.text(max_size=10),
)


@given(result=RESULTS, batch_id=st.none() | st.integers(0, 2**40))
def test_a_result_reads_back_equal(result, batch_id):
    outcome = JobOutcome(job_id=result.job_id, batch_id=batch_id, result=result)
    assert decode_outcome(encode_outcome(outcome), where="here") == outcome


def test_an_error_reads_back_equal_and_prints_as_python_does():
    error = JobError(
        failed_in="writer", type_name="ValueError", message="bad 5", where="write() of x"
    )
    outcome = JobOutcome(job_id="j", error=error)
    assert decode_outcome(encode_outcome(outcome), where="here") == outcome
    assert error.headline() == "ValueError: bad 5"


def test_fields_of_another_release_are_dropped_or_defaulted():
    data = json.loads(
        encode_outcome(
            JobOutcome(
                job_id="j",
                result=SinkResult(
                    sink_id="s", epoch=1, checkpoint_id=1, status=CommitStatus.COMMITTED, job_id="j"
                ),
            )
        )
    )
    data["result"]["added_later"] = 1
    del data["result"]["retries"]
    assert decode_outcome(json.dumps(data), where="here").result.retries == 0


@pytest.mark.parametrize("text", ["{", "[]", '{"job_id": "j", "result": {"status": "odd"}}'])
def test_an_unreadable_outcome_names_the_store(text):
    with pytest.raises(CommitStateError, match="the store holds an unreadable job outcome"):
        decode_outcome(text, where="the store")


def outcome(job_id, text):
    return JobOutcome(
        job_id=job_id,
        error=JobError(failed_in="writer", type_name="E", message=text, where="w"),
    )


def messages(outcomes):
    return [(o.job_id, o.error.message) for o in outcomes]


def test_outcomes_are_kept_per_job_newest_first_and_pruned(backend):
    store = backend.store
    assert store.record_outcome("orders", outcome("j0", "")) is False  # no store: none made
    assert store.outcomes("orders") == []
    store.acquire("orders", job_id="make").release()
    assert store.record_outcome("orders", outcome("j1", "one")) is True
    store.record_outcome("orders", outcome("j2", "two"))
    store.record_outcome("other", outcome("j1", "elsewhere"))
    store.record_outcome("orders", outcome("j1", "one again"))  # replaces the job's last
    assert messages(store.outcomes("orders")) == [("j1", "one again"), ("j2", "two")]
    assert messages(store.outcomes("orders", limit=1)) == [("j1", "one again")]
    for index in range(KEPT_OUTCOMES + 5):
        store.record_outcome("orders", outcome(f"k{index:03}", str(index)))
    kept = messages(store.outcomes("orders", limit=KEPT_OUTCOMES * 2))
    assert len(kept) == KEPT_OUTCOMES
    assert kept[0] == (f"k{KEPT_OUTCOMES + 4:03}", str(KEPT_OUTCOMES + 4))
    assert messages(store.outcomes("other")) == [("j1", "elsewhere")]


def test_outcome_calls_check_their_names(backend):
    with pytest.raises(SinkConfigurationError, match="'sink_id' must be a non-empty str"):
        backend.store.record_outcome("", outcome("j", ""))
    with pytest.raises(SinkConfigurationError, match="'job_id' must be a non-empty str"):
        backend.store.record_outcome("s", outcome("", ""))
    with pytest.raises(SinkConfigurationError, match="'sink_id' must be a non-empty str"):
        backend.store.outcomes("")
