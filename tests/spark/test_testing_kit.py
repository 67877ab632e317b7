"""check_sink_on_spark: the example Parquet sink through the translator under task failures."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from examples.parquet_sink import ArrowParquetWriter, ParquetSink, RowParquetWriter
from sinkv2 import DeliveryGuarantee, WriterInitContext
from sinkv2.errors import SinkConfigurationError
from sinkv2.testing import SinkUnderTest
from sinkv2_spark.testing import check_sink_on_spark, task_retries, with_task_failures

pytestmark = pytest.mark.spark

ROWS = 90


def data(spark):
    return spark.range(ROWS).selectExpr("id", "cast(id % 7 as string) as key").repartition(3)


EXPECTED = [{"id": i, "key": str(i % 7)} for i in range(ROWS)]


def read_parquet_files(directory: Path) -> list[dict]:
    # What a reader sees: committed files only; _staging is hidden from readers.
    return [
        row
        for path in sorted(directory.glob("*.parquet"))
        for row in pq.read_table(path).to_pylist()
    ]


def parquet_factory(sink_class=ParquetSink, **options):
    def make() -> SinkUnderTest:
        directory = Path(tempfile.mkdtemp(prefix="kit-parquet-"))
        return SinkUnderTest(
            sink_class(directory, **options),
            read_back=lambda: read_parquet_files(directory),
            close=lambda: shutil.rmtree(directory, ignore_errors=True),
        )

    return make


@pytest.mark.parametrize("arrow", [True, False], ids=["arrow-path", "row-path"])
def test_parquet_sink_is_exactly_once_under_task_failures(spark, arrow):
    check_sink_on_spark(
        spark,
        parquet_factory(arrow=arrow),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        data=data(spark),
        expected=EXPECTED,
        examples=2,
        # a failure mid-partition, one after everything was staged, and a second retry
        always=[{(0, 0): 5, (1, 0): 10_000, (1, 1): 0}],
    )


def test_spark_reads_back_what_the_kit_checked(spark, tmp_path):
    sut = parquet_factory()()
    try:
        from sinkv2_spark import SinkTopologyTranslator

        translator = SinkTopologyTranslator(state_store=_store(tmp_path))
        translator.apply(data(spark), with_task_failures(sut.sink, {(2, 0): 3}), sink_id="kit")
        back = spark.read.parquet(str(sut.sink.base))
        assert back.count() == ROWS
        assert data(spark).exceptAll(back.select("id", "key")).count() == 0
    finally:
        sut.close()


def _store(tmp_path):
    from sinkv2.runtime import SqliteCommitStateStore

    return SqliteCommitStateStore(tmp_path / "state.sqlite")


class VisibleAtOnceWriter(ArrowParquetWriter):
    """The bug: stages straight into the final, visible name, so a failed attempt shows."""

    def _write_batch(self, batch) -> None:
        if self._file is None:
            name = f"{self._token}-{self._sequence:04d}.parquet"
            self._final = self._staged = self._base / f"part-{self._subtask:05d}-{name}"
            self._schema = batch.schema
            self._file = pq.ParquetWriter(self._staged, batch.schema)
        super()._write_batch(batch)


class VisibleAtOnceSink(ParquetSink):
    def create_writer(self, context: WriterInitContext) -> RowParquetWriter:
        return VisibleAtOnceWriter(self.base, context)


def test_a_failed_attempt_whose_output_stays_visible_is_caught(spark):
    with pytest.raises(AssertionError) as caught:
        check_sink_on_spark(
            spark,
            parquet_factory(VisibleAtOnceSink),
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
            data=data(spark),
            expected=EXPECTED,
            examples=1,
            always=[{(1, 0): 10_000}],
        )
    message = str(caught.value)
    assert "EXACTLY_ONCE violated after apply() with task failures {(1, 0): 10000}" in message
    assert "the destination shows more than expected" in message


class IgnoresEndOfInput(RowParquetWriter):
    """The bug: flush(True) writes nothing, so the rows still buffered at the end are lost."""

    def flush(self, end_of_input: bool) -> None:
        pass


class IgnoresEndOfInputSink(ParquetSink):
    def create_writer(self, context: WriterInitContext) -> RowParquetWriter:
        return IgnoresEndOfInput(self.base, context)


def test_a_writer_ignoring_flush_at_the_end_of_input_is_caught_and_told_what_to_check(spark):
    with pytest.raises(AssertionError) as caught:
        check_sink_on_spark(
            spark,
            parquet_factory(IgnoresEndOfInputSink),
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
            data=data(spark),
            expected=EXPECTED,
            examples=1,
            always=[{}],  # no failure needed: every row is lost
        )
    message = str(caught.value)
    assert "EXACTLY_ONCE violated after apply() with task failures none" in message
    assert "expected elements are missing" in message
    assert "flush(True) writes what is still buffered" in message
    assert "check_sink_on_spark(..., always=[{}])" in message  # how to replay it


@pytest.mark.parametrize(
    ("master", "max_failures", "retries"),
    [("local[2,4]", None, 3), ("local[*, 2]", None, 1), ("spark://h:7077", "5", 4)],
)
def test_the_retry_budget_comes_from_the_master(master, max_failures, retries):
    assert task_retries(master, max_failures) == retries


@pytest.mark.parametrize("master", ["local[2]", "local", "local[*]"])
def test_a_master_without_retries_is_refused(master):
    with pytest.raises(SinkConfigurationError, match=r"use e\.g\. local\[2,4\]"):
        task_retries(master, None)


def test_a_sink_that_changes_values_on_spark_gets_a_diff(spark):
    def make() -> SinkUnderTest:
        directory = Path(tempfile.mkdtemp(prefix="kit-parquet-"))
        # the bug: every key comes back changed (a "!" appended)
        return SinkUnderTest(
            ParquetSink(directory, arrow=True),
            read_back=lambda: [
                {**row, "key": row["key"] + "!"} for row in read_parquet_files(directory)
            ],
            close=lambda: shutil.rmtree(directory, ignore_errors=True),
        )

    with pytest.raises(AssertionError) as caught:
        check_sink_on_spark(
            spark,
            make,
            guarantee=DeliveryGuarantee.EXACTLY_ONCE,
            data=data(spark),
            expected=EXPECTED,
            examples=1,
            always=[{}],
        )
    message = str(caught.value)
    assert "EXACTLY_ONCE violated" in message
    assert "field 'key'" in message
