"""Run Flink Sink V2 sinks on Apache Spark.

Needs ``pip install 'sinkv2[spark]'``. The entry point is
`SinkTopologyTranslator` (batch DataFrames, and streaming ones, which return a
`SinkStreamingQuery`); `register` adds the ``sinkv2`` data source to a session, so
``df.write.format("sinkv2")`` runs any sink too. The committable stream and its
helpers are in ``sinkv2_spark.committables``.
"""

from sinkv2.runtime import CommitStatus, SinkResult, StageListener
from sinkv2_spark._datasource import register
from sinkv2_spark._source_read import from_source
from sinkv2_spark._streaming import SinkStreamingQuery
from sinkv2_spark._translator import SinkTopologyTranslator

__all__ = [
    "CommitStatus",
    "SinkResult",
    "SinkStreamingQuery",
    "SinkTopologyTranslator",
    "StageListener",
    "from_source",
    "register",
]
