"""The commit state store in SQL: one lease and one store over SQLite and PostgreSQL.

The contract is ``sinkv2.runtime._store`` (`CommitStateStore`, `SinkLease`). What
both databases share is written once here; what differs is a `Dialect`:

- ``dialect``: `Dialect`, a small data object (placeholders, schema prefix, row locks,
  type names, transactions, driver errors, lost connections) and `render`, which
  turns a statement written once into a database's SQL;
- ``fence``: `FencedLease`, a lease on one id of a `Keyspace` (the noun, the key
  column and the fence table): its lifecycle, and reads and fenced writes over
  the connection a `Hold` keeps; `Holder`, who holds an id;
- ``schema``: the sink tables, written once as templates, and `record_from_row`;
- ``lease``: `SqlSinkLease`, the `SinkLease` of both stores;
- ``store``: `SqlCommitStateStore`, the operator's read-only questions;
- ``sqlite``, ``sqlite_store``, ``file_lock``: SQLite's dialect, layouts and
  migrations, fence counter, ``flock`` per sink id, and `SqliteCommitStateStore`;
- ``postgres``, ``postgres_store``: PostgreSQL's dialect, layout, advisory lock
  keys, fence counter, and `PostgresCommitStateStore` with `SinkHolder`.

How the source side adds its records (not built yet): a source's epochs (an
enumerator checkpoint, a split assignment and end positions per epoch) under a
``source_id`` lease with the same fencing are one keyspace and one table more,
not a copy:

1. a `Keyspace` ``SOURCES = Keyspace(noun="source", key="source_id",
   fence="source_fence")``, and its fence table rendered from each database's
   fence template with ``fence="source_fence", key="source_id"``;
2. an epoch table template beside `EPOCH_TABLE` in ``schema`` (``source_id``,
   ``epoch``, ``status``, the checkpoint and assignment as ``{bytes}``, the
   fencing token, job and time), created by each database's layout code: a
   SQLite migration from layout 3 to 4 (``sqlite``), and in ``postgres`` a first
   migration step (``read_layout`` refuses any layout but its own today), with
   both version numbers raised together;
3. a ``SqlSourceLease(FencedLease)`` beside `SqlSinkLease`, with
   ``lease_name = "SourceLease"``: its reads go through `FencedLease.reading` and
   its writes through `FencedLease.writing`, which fences them against the
   source's token; the rules of ``_store.TRANSITIONS`` carry over (their
   messages name a sink and its calls, so the source's are worded for a source);
4. acquiring: the stores call their ``advance_fence`` with ``SOURCES``; the lock
   is the database's own (a lock file of its own name beside the SQLite file,
   an advisory key from ``"sinkv2 source"`` in PostgreSQL), so that a source id
   and a sink id of the same name never exclude each other.
"""
