import pytest

from sinkv2 import END_OF_INPUT, CommittableSummary, CommittableWithLineage


def test_summary_exposes_flinks_getters_and_hides_pending():
    summary = CommittableSummary(2, 4, END_OF_INPUT, 3, number_of_pending_committables=9)
    assert summary.get_subtask_id() == 2
    assert summary.get_number_of_subtasks() == 4
    assert summary.get_checkpoint_id_or_eoi() == END_OF_INPUT
    assert summary.get_number_of_committables() == 3
    assert summary.get_number_of_pending_committables() == 0  # deprecated in Flink
    assert summary.get_number_of_failed_committables() == 0


@pytest.mark.parametrize("field", ["subtask_id", "number_of_subtasks", "checkpoint_id"])
def test_summary_rejects_negative_counts(field):
    values = {
        "subtask_id": 0,
        "number_of_subtasks": 1,
        "checkpoint_id": 1,
        "number_of_committables": 0,
    }
    values[field] = -1
    with pytest.raises(ValueError, match=f"CommittableSummary.{field} must be a non-negative int"):
        CommittableSummary(**values)


def test_lineage_maps_and_moves_between_subtasks():
    lineage = CommittableWithLineage("file-a", 7, 1)
    mapped = lineage.map(str.upper)
    assert mapped == CommittableWithLineage("FILE-A", 7, 1)
    assert lineage.with_subtask_id(0) == CommittableWithLineage("file-a", 7, 0)
    assert lineage.get_committable() == "file-a"
    assert lineage.get_checkpoint_id_or_eoi() == 7
    assert lineage.get_subtask_id() == 1


def test_lineage_refuses_a_none_committable():
    with pytest.raises(ValueError, match="must not be None"):
        CommittableWithLineage(None, 1, 0)
