"""Types a reference sink refuses are refused on the driver, before any Spark job.

The per-sink type matrices (``tests/reference_sinks/*/test_type_matrix.py``) check
that what a sink writes reads back as Spark's value. Here: a type a sink cannot
write (a day-time interval in HttpSink's and RedisSink's JSON) fails the call with
`SinkConfigurationError` naming the column and its Spark type, from both doors
(``apply`` and ``df.write.format("sinkv2")``), and not as a writer failure inside a
Spark task (`SinkWriterError`, naming the Arrow type ``duration[us]``). No server
runs: a refused write never connects.
"""

from __future__ import annotations

import pytest

from reference_sinks.http import HttpSink
from reference_sinks.redis import HashMode, RedisSink, SetMode
from sinkv2.errors import SinkConfigurationError
from sinkv2_spark import register

pytestmark = pytest.mark.spark

_NOWHERE_HTTP = "http://127.0.0.1:9/ingest"
_NOWHERE_REDIS = "redis://127.0.0.1:9/0"
_REFUSED = r"column 'span' of type (array<)?interval (day to )?second"


@pytest.fixture
def intervals(spark):  # type: ignore[no-untyped-def]
    return spark.sql(
        "SELECT id, INTERVAL '1 02:03:04.000005' DAY TO SECOND AS span FROM range(2)"
    ), spark.sql("SELECT id, array(INTERVAL '1' SECOND) AS span FROM range(2)")


@pytest.mark.parametrize(
    "make",
    [
        lambda: HttpSink(_NOWHERE_HTTP),
        lambda: RedisSink(_NOWHERE_REDIS, SetMode(key="k:{id}")),
        lambda: RedisSink(_NOWHERE_REDIS, HashMode(key="k:{id}")),
    ],
    ids=["http", "redis-set", "redis-hash"],
)
def test_a_json_sink_refuses_intervals_on_the_driver(spark, translator, intervals, make):  # type: ignore[no-untyped-def]
    for df in intervals:
        with pytest.raises(SinkConfigurationError, match=_REFUSED) as refused:
            translator.apply(df, make(), sink_id="intervals")
        assert "duration" not in str(refused.value)  # Spark's type, not Arrow's


def test_the_data_source_door_refuses_them_too(spark, intervals, tmp_path):  # type: ignore[no-untyped-def]
    register(spark)
    with pytest.raises(Exception, match=_REFUSED) as refused:
        (
            intervals[0]
            .write.format("sinkv2")
            .option("sink", "redis")
            .option("url", _NOWHERE_REDIS)
            .option("mode", "hash")
            .option("key", "k:{id}")
            .option("sink_id", "intervals-door")
            .option("state_store", str(tmp_path / "state.sqlite"))
            .mode("append")
            .save()
        )
    assert "writer failure" not in str(refused.value)
