"""The committable stream helpers that need only pyarrow (no Spark session)."""

import pyarrow as pa

from sinkv2 import CommittableSummary
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA, lineage_order, summarize


def rows(*entries):
    return pa.Table.from_pylist(
        [
            {
                "checkpoint_id": cp,
                "subtask_id": subtask,
                "number_of_subtasks": parallelism,
                "serializer_version": 1,
                "payload": b"",
                "lineage": [f"{subtask}:0"],
            }
            for cp, subtask, parallelism in entries
        ],
        schema=COMMITTABLE_SCHEMA,
    )


def test_summaries_count_per_checkpoint_and_subtask_and_keep_the_writer_parallelism():
    summaries = summarize(rows((1, 0, 4), (1, 0, 4), (1, 3, 4), (2, 1, 2)))
    assert summaries == [
        CommittableSummary(0, 4, 1, 2),
        CommittableSummary(3, 4, 1, 1),  # 4 writers, even if only 2 produced committables
        CommittableSummary(1, 2, 2, 1),
    ]


def test_lineage_orders_numerically():
    ids = ["0:10", "0:2", "1:0", "0:1"]
    assert sorted(ids, key=lambda item: lineage_order([item])) == ["0:1", "0:2", "0:10", "1:0"]
