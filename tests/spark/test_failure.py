"""A writer failure reaches the driver whole: message, position, the worker's traceback."""

import pytest

from sinkv2.errors import SinkWriterError
from sinkv2_spark._engine.failure import MAX_TRACEBACK_CHARS, decode_failure, encode_failure
from tests.spark.recording_sink import RecordingSink


def raise_and_catch(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:  # noqa: BLE001  # the test needs the traceback
        return caught


def test_a_multi_line_message_and_its_traceback_survive_spark_s_text():
    cause = raise_and_catch(ValueError("first line\nsecond line: the part that matters"))
    failure = encode_failure(subtask_id=3, position=17, message=f"boom: {cause}", cause=cause)
    spark_text = (
        "Traceback (most recent call last):\n  File ...\n"
        f"sinkv2_spark._engine.failure.WriterFailure: {failure}\n"
        "\tat org.apache.spark.api.python.BasePythonRunner...\n"
    )
    error = decode_failure(spark_text)
    assert isinstance(error, SinkWriterError)
    assert (error.subtask_id, error.position) == (3, 17)
    assert "second line: the part that matters" in str(error)
    assert "raise_and_catch" in error.worker_traceback
    assert "ValueError: first line" in error.worker_traceback


def test_the_traceback_is_bounded_and_the_last_failure_wins():
    cause = raise_and_catch(RuntimeError("x" * 20_000))
    first = encode_failure(subtask_id=0, position=None, message="first", cause=cause)
    last = encode_failure(subtask_id=1, position=None, message="last", cause=cause)
    error = decode_failure(f"{first}\nsomething\n{last}\n")
    assert str(error).startswith("last.")
    assert error.subtask_id == 1
    assert error.position is None
    assert len(error.worker_traceback) <= MAX_TRACEBACK_CHARS


def test_text_without_a_failure_decodes_to_nothing():
    assert decode_failure("py4j.protocol.Py4JJavaError: executor lost") is None
    assert decode_failure("[sinkv2 writer failure] {not json") is None


class MultiLineFailureSink(RecordingSink):
    def create_writer(self, context):
        writer = super().create_writer(context)

        def write(element, context, original=writer.write):
            if element["id"] == 500:
                raise ValueError(
                    "row 500 does not fit\ncolumn 'value' needs a decimal(10, 2)\n"
                    "cast it before writing"
                )
            original(element, context)

        writer.write = write
        return writer


@pytest.mark.spark
def test_on_spark_the_error_carries_every_line_and_the_worker_traceback(
    spark, translator, tmp_path
):
    df = spark.range(1000).selectExpr(
        "id", "cast(id % 7 as string) as key", "cast(id as double) as value"
    )
    with pytest.raises(SinkWriterError) as caught:
        translator.apply(df.repartition(2), MultiLineFailureSink(tmp_path / "out"), sink_id="ml")
    message = str(caught.value)
    assert "column 'value' needs a decimal(10, 2)" in message
    assert "cast it before writing" in message
    assert "In the writer's worker (last lines):" in message
    assert "in write" in caught.value.worker_traceback  # the frame that raised
    assert "org.apache.spark" not in message  # no JVM stack


@pytest.mark.spark
def test_a_date_past_9999_names_its_column_and_element_when_write_takes_python_values(
    spark, translator, tmp_path
):
    """Spark's dates reach past Python's; a row writer's ``write`` cannot get such a value."""
    df = spark.sql(
        "SELECT id, IF(id = 3, date_add(DATE'9999-12-31', 1), DATE'2024-01-01') AS day "
        "FROM range(5)"
    ).coalesce(1)
    with pytest.raises(SinkWriterError) as caught:
        translator.apply(df, RecordingSink(tmp_path / "out"), sink_id="far-date")
    message = str(caught.value)
    assert "column 'day' (date32[day]) of element 3 has no Python value" in message
    assert "Implement write_arrow_batch" in message
