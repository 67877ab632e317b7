"""The engine: Spark as the commit coordinator's writer stage and committable streams.

Nothing here is a door; every door hands its input to these. Reading order:

- ``writer_task``: what runs inside each Spark task (create or restore a writer,
  feed it its partition, flush / prepare-commit / snapshot, frame the metadata);
- ``writer_stage``: the driver side, ``mapInArrow(WriterTask).toArrow()`` as the
  coordinator's `sinkv2.runtime.WriterStage`;
- ``schema``: a Spark schema as the Arrow schema writers get (the check every door runs);
- ``committable_streams``: the pre-write topology on a DataFrame, and committable
  tables as DataFrames for pre- and post-commit topologies;
- ``native_write`` and ``native_faults``: Spark's own file writer as the writer stage,
  and the contract kit's task failures injected into it;
- ``failure``: a writer's failure carried whole from a task to the driver;
- ``ddl``: Spark DDL derived from an Arrow schema (each schema spelled once);
- ``connect``: how the writer stage works on Spark Connect, without py4j.

It imports neither ``sinkv2_spark._rules`` nor ``sinkv2_spark._doors``
(``tests/unit/test_layout.py`` checks it).
"""
