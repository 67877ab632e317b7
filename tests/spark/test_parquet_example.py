"""The example Parquet sink through the translator: Arrow path, row path, read back by Spark."""

import pytest

from examples.parquet_sink import ParquetFile, ParquetSink
from sinkv2 import AttrsMsgpackSerializer, SupportsPreCommitTopology
from sinkv2_spark.committables import map_committables

pytestmark = pytest.mark.spark


def frame(spark, n):
    return (
        spark.range(n)
        .selectExpr(
            "id", "concat('k', cast(id % 13 as string)) as key", "cast(id as double) as value"
        )
        .repartition(3)
    )


@pytest.mark.parametrize("arrow", [True, False], ids=["arrow-path", "row-path"])
def test_spark_reads_back_exactly_the_input(spark, translator, tmp_path, arrow):
    out = tmp_path / "parquet"
    result = translator.apply(
        frame(spark, 30_000), ParquetSink(out, arrow=arrow), sink_id=f"pq-{arrow}"
    )
    back = spark.read.parquet(str(out))
    assert back.count() == 30_000
    assert back.select("id").distinct().count() == 30_000
    assert frame(spark, 30_000).exceptAll(back).count() == 0
    assert result.writer_metrics["numRecordsSend"] == 30_000
    assert list((out / "_staging").glob("*")) == []  # staging never shows up in reads


class RenamingSink(ParquetSink, SupportsPreCommitTopology[ParquetFile, ParquetFile]):
    """Uses map_committables to give every file a 'final-' prefix before commit."""

    def get_write_result_serializer(self):
        return AttrsMsgpackSerializer(ParquetFile)

    def add_pre_commit_topology(self, committables):
        def rename(file: ParquetFile) -> ParquetFile:
            final = file.final.rsplit("/", 1)
            return ParquetFile(file.staged, f"{final[0]}/final-{final[1]}", file.rows)

        return map_committables(
            committables,
            rename,
            read=self.get_write_result_serializer(),
            write=self.get_committable_serializer(),
        )


def test_map_committables_keeps_every_committable_and_its_lineage(spark, translator, tmp_path):
    out = tmp_path / "mapped"
    result = translator.apply(frame(spark, 3000), RenamingSink(out), sink_id="mapped")
    assert result.committed == 3
    assert sorted(p.name.startswith("final-part-") for p in out.glob("*.parquet")) == [True] * 3
    assert spark.read.parquet(str(out)).count() == 3000
