"""Run Flink Sink V2 sinks on Apache Spark.

Needs ``pip install 'sinkv2[spark]'``. The entry point is
`SinkTopologyTranslator` (batch DataFrames, and streaming ones, which return a
`SinkStreamingQuery`); `register` adds the ``sinkv2`` data source to a session, so
``df.write.format("sinkv2")`` runs any sink too, and `last_result` and
`SinkResultListener` bring what its jobs did to the driver. The committable stream and its
helpers are in ``sinkv2_spark.committables``. What a run returns (`SinkResult`,
`CommitStatus`) and the stage listener are engine-neutral: ``sinkv2.runtime``.
"""

from sinkv2.text import publish as _publish
from sinkv2_spark._doors.apply import SinkTopologyTranslator
from sinkv2_spark._doors.apply_stream import SinkStreamingQuery
from sinkv2_spark._doors.datasource import register
from sinkv2_spark._doors.results import SinkResultListener, last_result
from sinkv2_spark._doors.source_read import from_source

__all__ = [
    "SinkResultListener",
    "SinkStreamingQuery",
    "SinkTopologyTranslator",
    "from_source",
    "last_result",
    "register",
]

_publish(__name__)
