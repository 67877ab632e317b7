"""The commit state store in SQL: one lease and one store over SQLite and PostgreSQL.

The contract is ``sinkv2.runtime._store`` (`CommitStateStore`, `SinkLease`). What
both databases share is written once here; what differs is a `Dialect`:

- ``dialect``: `Dialect`, a small data object (placeholders, schema prefix, row locks,
  type names, transactions, driver errors, lost connections) and `render`, which
  turns a statement written once into a database's SQL;
- ``fence``: `FencedLease`, a lease on one id of a `Keyspace` (the noun, the key
  column and the fence table): its lifecycle, and reads and fenced writes over
  the connection a `Hold` keeps; `Holder`, who holds an id;
- ``schema``: the sink and source tables, written once as templates, and
  `record_from_row` / `source_record_from_row`;
- ``lease``: `SqlSinkLease`, the `SinkLease` of both stores;
- ``source_lease``: `SqlSourceLease`, the `SourceLease` of both stores;
- ``store``: `SqlCommitStateStore`, acquiring written once over each store's
  lock, and the operator's read-only questions;
- ``sqlite``, ``sqlite_store``, ``file_lock``: SQLite's dialect, layouts and
  migrations, fence counter, ``flock`` per id, and `SqliteCommitStateStore`;
- ``postgres``, ``postgres_store``: PostgreSQL's dialect, layout, advisory lock
  keys, fence counter, and `PostgresCommitStateStore` with `SinkHolder`.

The source side (``shared/design/SOURCES.md``): a source's epochs (an
enumerator checkpoint, a split assignment and end positions per epoch; the
contract is ``sinkv2.runtime._source_store``) under a ``source_id`` lease with
the same fencing are one key space and one table more, not a copy:

1. `SOURCES` (``schema``): ``Keyspace(noun="source", key="source_id",
   fence="source_fence")``; its fence table is rendered from each database's
   fence template by ``schema.source_tables``, with ``SOURCE_EPOCH_TABLE``;
2. layout 4 holds them: SQLite migrates layout 3 to 4 (``sqlite``), PostgreSQL
   has its first migration step (``postgres``); both version numbers were raised
   together, and an existing store is migrated when it is opened;
3. ``source_lease``: `SqlSourceLease(FencedLease)`, ``lease_name =
   "SourceLease"``, reads through `FencedLease.reading` and writes through
   `FencedLease.writing`; an epoch is written once (a replay must be identical)
   and acknowledged once;
4. acquiring: ``store.SqlCommitStateStore.acquire_source`` goes through each
   store's ``_take`` (its lock, then its ``advance_fence``) with ``SOURCES``, as
   ``acquire`` does with ``SINKS``; the lock is the database's own (a lock file
   ``source-<digest>.lock`` beside the SQLite file, an advisory key from
   ``"sinkv2 source"`` in PostgreSQL), so that a source id and a sink id of the
   same name never exclude each other.
"""
