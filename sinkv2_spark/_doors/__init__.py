"""The doors: the ways a user hands Spark data to a sink, or reads a source into Spark.

- ``apply`` (`SinkTopologyTranslator.apply` on a batch DataFrame) and ``apply_stream``
  (the same on a streaming DataFrame: ``foreachBatch``, one coordinator per query);
- ``datasource``: ``df.write.format("sinkv2")``, the batch data source, and
  ``datasource_stream`` (with ``datasource_stream_options``):
  ``df.writeStream.format("sinkv2")``; ``datasource_shared`` holds what these two
  share, ``datasource_topologies`` what they offer topologies without a SparkSession;
- ``source_read``: `from_source` and ``spark.read``/``readStream.format("sinkv2")``:
  a FLIP-27 source read as a DataFrame, batch or stream; ``source_stream``: the
  stream reader, one recorded epoch per micro-batch.

Each door is built from the engine (``sinkv2_spark._engine``) and the shared rules
(``sinkv2_spark._rules``); nothing below imports a door.
"""
