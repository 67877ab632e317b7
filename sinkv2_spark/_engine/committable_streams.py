"""The topologies' side of the engine: the pre-write plan, and committables as DataFrames.

- `pre_write`: the input through the sink's pre-write topology (a lazy plan);
- `SparkCommittableStreams`: a committable table as a ``pyspark.sql.DataFrame`` for
  pre- and post-commit topologies, and back (the coordinator's
  `sinkv2.runtime.CommittableStreams`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import pyarrow as pa

from sinkv2 import SinkCapabilities
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime.committables import COMMITTABLE_COLUMNS, COMMITTABLE_SCHEMA
from sinkv2_spark._engine.writer_stage import describe_jobs
from sinkv2_spark.committables import committable_stream_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkCommittableStreams", "pre_write"]


@final
class SparkCommittableStreams:
    """Committable tables as DataFrames in `COMMITTABLE_SCHEMA`, and back."""

    def __init__(self, spark: SparkSession, sink_id: str) -> None:
        self._spark = spark
        self._sink_id = sink_id

    def to_stream(self, table: pa.Table) -> DataFrame:
        """``table`` as a DataFrame (an empty one with the schema if it has no rows)."""
        describe_jobs(self._spark, f"sinkv2 {self._sink_id}: committable topology")
        if table.num_rows:
            return self._spark.createDataFrame(table)
        return self._spark.createDataFrame([], committable_stream_ddl())

    def to_table(self, stream: object, *, produced_by: str) -> pa.Table:
        """The committable columns of ``stream``, collected to the driver.

        Raises:
            SinkConfigurationError: ``stream`` is not a DataFrame or lacks columns.
        """
        from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

        if not isinstance(stream, DataFrame):
            raise SinkConfigurationError(
                f"{produced_by} must return the committable DataFrame (got "
                f"{type(stream).__name__}); return the stream it received, transformed"
            )
        missing = [c for c in COMMITTABLE_COLUMNS if c not in stream.columns]
        if missing:
            raise SinkConfigurationError(
                f"{produced_by} returned a DataFrame without the committable columns "
                f"{missing}; keep every column of the committable schema "
                "(sinkv2_spark.committables.COMMITTABLE_SCHEMA), e.g. by using its helpers"
            )
        return stream.select(*COMMITTABLE_COLUMNS).toArrow().cast(COMMITTABLE_SCHEMA)


def pre_write(df: DataFrame, sink: Any, capabilities: SinkCapabilities) -> DataFrame:
    """``df`` through the sink's pre-write topology (a lazy plan; no Spark job runs).

    Raises:
        SinkConfigurationError: The topology returned something other than a DataFrame.
    """
    if not capabilities.pre_write_topology:
        return df
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    result = sink.add_pre_write_topology(df)
    if not isinstance(result, DataFrame):
        raise SinkConfigurationError(
            f"{capabilities.sink_type}.add_pre_write_topology() must return a "
            f"pyspark.sql.DataFrame (got {type(result).__name__}); return the "
            "transformed input, e.g. input.repartition(8, 'key')"
        )
    return result
