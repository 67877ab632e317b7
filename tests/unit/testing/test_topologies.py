"""Pre- and post-commit topologies in the kit's harness, on LocalCommittableStream."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

import attrs
import pyarrow as pa
import pytest
from kit_jsonl_sink import ELEMENTS, JsonLinesSink, StagedFile, make

from sinkv2 import (
    END_OF_INPUT,
    AttrsMsgpackSerializer,
    CommittableSummary,
    Committer,
    CommitterInitContext,
    DeliveryGuarantee,
    SupportsPostCommitTopology,
    SupportsPreCommitTopology,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime.committables import (
    COMMITTABLE_SCHEMA,
    LocalCommittableStream,
    check_lineage,
    decode_committables,
    encode_committables,
    summarize,
)
from sinkv2.testing import check_sink
from sinkv2_spark import committables as spark_committables
from sinkv2_spark.committables import (
    aggregate_committables,
    map_committables,
    repartition_committables,
)


@attrs.frozen
class StagedFiles:
    """One checkpoint's staged files, committed together."""

    files: tuple[StagedFile, ...]


FILE = AttrsMsgpackSerializer(StagedFile)
FILES = AttrsMsgpackSerializer(StagedFiles)


class BatchCommitter(Committer[StagedFiles]):
    def commit(self, requests: Collection[Committer.CommitRequest[StagedFiles]]) -> None:
        for request in requests:
            files = request.get_committable().files
            if all(not os.path.exists(f.staged) and os.path.exists(f.final) for f in files):
                request.signal_already_committed()
                continue
            for file in files:
                if os.path.exists(file.staged):
                    os.replace(file.staged, file.final)

    def close(self) -> None:
        pass


class AggregatingSink(
    JsonLinesSink,
    SupportsPreCommitTopology[StagedFile, StagedFiles],
    SupportsPostCommitTopology[StagedFiles],
):
    """Writers emit staged files; the pre-commit topology makes one committable per checkpoint."""

    def get_write_result_serializer(self) -> AttrsMsgpackSerializer[StagedFile]:
        return FILE

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[StagedFiles]:  # type: ignore[override]
        return FILES

    def create_committer(self, context: CommitterInitContext) -> Committer[StagedFiles]:  # type: ignore[override]
        return BatchCommitter()

    def add_pre_commit_topology(self, committables):
        return aggregate_committables(committables, self.combine, read=FILE, write=FILES)

    @staticmethod
    def combine(files: Sequence[StagedFile]) -> StagedFiles:
        return StagedFiles(tuple(files))

    def add_post_commit_topology(self, committables) -> None:
        # Post-commit sees committed committables only: every file must be in place.
        for committed in decode_committables(committables.toArrow(), FILES):
            for file in committed.get_committable().files:
                assert os.path.exists(file.final), f"post-commit got uncommitted {file}"
                marker = Path(file.final).parent / "_compacted" / Path(file.final).name
                marker.parent.mkdir(exist_ok=True)
                marker.touch()  # idempotent, like a compaction that may run twice

    def abort(self, committables: Collection[StagedFiles]) -> None:  # type: ignore[override]
        for batch in committables:
            for file in batch.files:
                Path(file.staged).unlink(missing_ok=True)


@pytest.mark.parametrize("threshold", [0, 3], ids=["write-through", "buffer-in-state"])
def test_a_sink_with_pre_and_post_commit_topologies_passes_the_kit(threshold: int) -> None:
    check_sink(
        lambda: make(AggregatingSink, threshold=threshold),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=100,
    )


class DroppingSink(AggregatingSink):
    """The bug: the pre-commit topology keeps only the first write result."""

    def add_pre_commit_topology(self, committables):
        first = LocalCommittableStream(committables.toArrow().slice(0, 1))
        return aggregate_committables(first, self.combine, read=FILE, write=FILES)


@pytest.mark.usefixtures("unshrunk")
def test_a_topology_that_loses_write_results_is_caught_by_lineage() -> None:
    with pytest.raises(AssertionError) as caught:
        check_sink(
            lambda: make(DroppingSink, threshold=0),
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
            elements=ELEMENTS,
            max_examples=100,
            max_parallelism=2,
        )
    message = str(caught.value)
    assert "DroppingSink's pre-commit topology lost 1 writer output(s)" in message
    assert "lifecycle so far" in message


# --- LocalCommittableStream and the helpers ------------------------------------------------------


def stream(*entries: tuple[int, int, str]) -> LocalCommittableStream:
    return LocalCommittableStream(
        encode_committables(
            [
                (checkpoint, subtask, 2, f"{subtask}:{i}", StagedFile(name, name + ".final", 1))
                for i, (checkpoint, subtask, name) in enumerate(entries)
            ],
            FILE,
        )
    )


def test_the_stream_offers_what_topologies_use() -> None:
    local = stream((1, 0, "a"), (1, 1, "b"))
    assert local.columns == list(COMMITTABLE_SCHEMA.names)
    assert local.count() == 2
    assert local.repartition(8) is local
    assert repartition_committables(local, 3) is local
    assert local.select("payload", "lineage").columns == ["payload", "lineage"]
    with pytest.raises(SinkConfigurationError, match=r"no column\(s\) \['nope'\]"):
        local.select("nope")
    with pytest.raises(SinkConfigurationError, match=r"needs a pyarrow\.Table"):
        LocalCommittableStream([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_partitions must be a positive int"):
        repartition_committables(local, 0)
    assert "2 rows" in repr(local)


def test_map_keeps_lineage_and_position() -> None:
    local = stream((1, 0, "a"), (1, 1, "b"))
    mapped = map_committables(local, lambda f: StagedFiles((f,)), read=FILE, write=FILES)
    assert isinstance(mapped, LocalCommittableStream)
    table = mapped.toArrow()
    assert table.column("lineage").to_pylist() == [["0:0"], ["1:1"]]
    assert [c.get_committable().files[0].staged for c in decode_committables(table, FILES)] == [
        "a",
        "b",
    ]
    check_lineage(local.toArrow(), table, "MapSink")


def test_aggregate_makes_one_committable_per_checkpoint() -> None:
    local = stream((2, 1, "c"), (1, 1, "b"), (1, 0, "a"), (END_OF_INPUT, 0, "z"))
    combined = aggregate_committables(
        local, lambda files: StagedFiles(tuple(files)), read=FILE, write=FILES
    )
    table = combined.toArrow()
    decoded = decode_committables(table, FILES)
    assert [c.get_checkpoint_id_or_eoi() for c in decoded] == [1, 2, END_OF_INPUT]
    assert [f.staged for f in decoded[0].get_committable().files] == ["a", "b"]  # by subtask
    assert summarize(table) == [
        CommittableSummary(0, 1, 1, 1),
        CommittableSummary(0, 1, 2, 1),
        CommittableSummary(0, 1, END_OF_INPUT, 1),
    ]
    check_lineage(local.toArrow(), table, "AggregateSink")
    empty = aggregate_committables(
        LocalCommittableStream.empty(), lambda files: StagedFiles(()), read=FILE, write=FILES
    )
    assert empty.count() == 0


def test_the_lineage_check_names_what_went_wrong() -> None:
    local = stream((1, 0, "a"), (1, 1, "b"))
    doubled = pa.concat_tables([local.toArrow(), local.toArrow().slice(0, 1)])
    with pytest.raises(SinkConfigurationError, match=r"BadSink's pre-commit topology duplicated 1"):
        check_lineage(local.toArrow(), doubled, "BadSink")


def test_spark_committables_leaves_the_arrow_definitions_to_their_one_home() -> None:
    import sinkv2.runtime.committables as local_stream

    for name in ("COMMITTABLE_COLUMNS", "COMMITTABLE_SCHEMA", "decode_committables", "summarize"):
        assert name in local_stream.__all__
        assert name not in spark_committables.__all__
