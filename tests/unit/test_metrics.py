"""The in-memory metric groups: a counter nobody changed is not measured."""

from sinkv2.metrics import SimpleCounter
from sinkv2.runtime import BasicWriterInitContext


def test_writer_metric_group_reports_only_touched_counters():
    metrics = BasicWriterInitContext(subtask_id=0, number_of_parallel_subtasks=1).metric_group()
    metrics.get_num_records_send_counter().inc(3)
    metrics.get_num_records_send_errors_counter().inc(0)  # measured, and 0
    metrics.counter("mine")  # created, never changed

    assert metrics.touched_counts() == {"numRecordsSend": 3, "numRecordsSendErrors": 0}
    assert metrics.counts()["numBytesSend"] == 0  # counts() still lists every counter
    assert not metrics.get_num_bytes_send_counter().touched
    metrics.get_num_bytes_send_counter().dec(0)
    assert metrics.get_num_bytes_send_counter().touched


def test_a_counter_is_touched_by_any_inc_or_dec():
    counter = SimpleCounter()
    assert not counter.touched
    counter.inc(0)
    assert counter.touched
    assert counter.get_count() == 0
