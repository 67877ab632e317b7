"""The rules every door follows, written once and imported openly by each door.

- ``arguments``: checkpoint id, sink id and delivery guarantee, checked one way;
- ``options``: a data-source door's options - which sink (``load_factory``,
  ``make_sink``), its sink id and checkpoint id, and opening its store (``open_store``);
- ``checkpoint_location``: a stream's checkpoint location, claimed for one sink id and
  bound to Spark's query id;
- ``preflight``: before any Spark job, can the sink be pickled and loaded on workers.

The rules may use the engine (``sinkv2_spark._engine``), never a door
(``tests/unit/test_layout.py`` checks it).
"""
