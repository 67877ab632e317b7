import pytest

from sinkv2 import NO_WATERMARK
from sinkv2.metrics import NUM_BYTES_SEND, NUM_RECORDS_SEND, NUM_RECORDS_SEND_ERRORS
from sinkv2.runtime import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
)


def test_writer_context_carries_subtask_facts():
    context = BasicWriterInitContext(
        subtask_id=1, number_of_parallel_subtasks=3, attempt_number=2, job_id="j"
    )
    assert context.get_subtask_id() == 1
    assert context.get_number_of_parallel_subtasks() == 3
    assert context.get_attempt_number() == 2
    assert context.get_job_id() == "j"
    assert context.get_restored_checkpoint_id() is None
    assert context.get_attempt_token() == "j-1-2"


def test_attempt_tokens_differ_between_runs_by_default():
    assert (
        BasicWriterInitContext().get_attempt_token() != BasicWriterInitContext().get_attempt_token()
    )


def test_writer_metrics_start_with_flinks_counters_at_zero():
    metrics = BasicWriterInitContext().metric_group()
    assert metrics.snapshot() == {
        NUM_RECORDS_SEND: 0,
        NUM_BYTES_SEND: 0,
        NUM_RECORDS_SEND_ERRORS: 0,
    }
    metrics.get_num_records_send_counter().inc(3)
    metrics.set_current_send_time_gauge(metrics.gauge_from(lambda: 12))
    assert metrics.snapshot()[NUM_RECORDS_SEND] == 3
    assert metrics.snapshot()["currentSendTime"] == 12


def test_gauge_must_have_get_value():
    metrics = BasicWriterInitContext().metric_group()
    with pytest.raises(TypeError, match=r"gauge 'g' must have a get_value\(\) method"):
        metrics.gauge("g", lambda: 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("subtask_id", "parallelism", "attempt"), [(3, 3, 0), (-1, 2, 0), (0, 0, 0), (0, 1, -1)]
)
def test_inconsistent_subtask_facts_are_rejected(subtask_id, parallelism, attempt):
    with pytest.raises(ValueError, match="must be"):
        BasicCommitterInitContext(
            subtask_id=subtask_id, number_of_parallel_subtasks=parallelism, attempt_number=attempt
        )


def test_element_context_defaults_to_no_watermark_and_no_timestamp():
    context = BasicSinkWriterContext()
    assert context.current_watermark() == NO_WATERMARK == -(2**63)
    assert context.timestamp() is None
