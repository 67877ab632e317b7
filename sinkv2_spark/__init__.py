"""Run Flink Sink V2 sinks on Apache Spark (requires ``pip install 'sinkv2[spark]'``)."""
