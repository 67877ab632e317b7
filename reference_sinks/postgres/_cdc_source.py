"""`PostgresCdcSource`: a table's changes from a logical replication slot, exactly once.

One split, the slot, that never ends; its position is an LSN. A micro-batch engine
cuts it (`sinkv2.source.SupportsEndPositions`) into ranges ``(start, stop]`` of whole
transactions, measured by each transaction's commit end LSN, and a range is read by
peeking the slot (``pg_logical_slot_peek_binary_changes(slot, stop, ...)``, pgoutput)
and keeping the transactions that commit in it. Peeking never moves the slot, so a
replayed micro-batch reads the same changes; the slot is advanced
(``pg_replication_slot_advance``) only by the enumerator's
``notify_checkpoint_complete(e)``, to the end of epoch ``e``, once the engine has
committed it downstream. See ``docs/sinks/postgres-cdc.md``.

How the enumerator learns where an epoch ends: the engine cuts the carried split on
the driver with this source's `cut_split` right before it snapshots the enumerator
for that epoch. Each cut is noted on the source (``from -> to``, on the driver only,
never pickled) and the enumerator's ``snapshot_state(e)`` follows the notes from its
own position, so its checkpoint for epoch ``e`` holds the end of ``e``. An engine that
never cuts (long-lived readers, the local engine) leaves no notes: the slot is then
never advanced, which is safe, never early.

Over 450 lines because the cuts of both split kinds (stream ranges, snapshot chunks)
leave notes on this one object (``_cuts``, ``_chunks_cut``) that its enumerator
follows and that pickling drops: they cannot move to a module of their own without
handing those notes around.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa

from reference_sinks.postgres._cdc_decode import Transaction, arrow_type, transactions
from reference_sinks.postgres._cdc_enumerator import CdcEnumerator
from reference_sinks.postgres._cdc_reader import BEFORE, CdcSourceReader
from reference_sinks.postgres._cdc_server import (
    check_server,
    check_slot,
    flush_lsn,
    format_lsn,
    peek_changes,
    qualified_table,
    unpublished_columns,
)
from reference_sinks.postgres._cdc_snapshot import row_filter
from reference_sinks.postgres._cdc_split import CdcEnumeratorState, CdcSplit
from reference_sinks.postgres._chunks import SESSION_OPTIONS
from reference_sinks.postgres._table import Column, TableName, describe_table
from sinkv2 import AttrsMsgpackSerializer
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import (
    Boundedness,
    SourceReaderContext,
    SplitCut,
    SplitEnumeratorContext,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CdcEnumerator",
    "CdcEnumeratorState",
    "CdcSplit",
    "PostgresCdcSource",
]

OP: Final = "_op"
LSN: Final = "_lsn"
SEQ: Final = "_seq"
_META: Final = (OP, LSN, SEQ, BEFORE)
_ROW: Final = "sinkv2_row"  # the snapshot copy's row number (``_cdc_snapshot``)
_DOMAIN_BASES: Final = """
WITH RECURSIVE d(name, oid, mod) AS (
    SELECT a.attname, a.atttypid, a.atttypmod FROM pg_attribute a JOIN pg_type t
    ON t.oid = a.atttypid WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
    AND t.typtype = 'd'
  UNION ALL
    SELECT d.name, t.typbasetype, t.typtypmod FROM d JOIN pg_type t ON t.oid = d.oid
    WHERE t.typtype = 'd'
)
SELECT d.name, d.oid::int8, format_type(d.oid, d.mod), b.typcategory, b.typname, e.typcategory
FROM d JOIN pg_type b ON b.oid = d.oid
LEFT JOIN pg_type e ON e.oid = b.typelem AND b.typcategory = 'A'
WHERE b.typtype <> 'd'
"""
"""Per domain column, its (innermost) base type as ``_table.describe_table`` describes one."""
IDLE_ADVANCE_BYTES: Final = 16 << 20
"""A range with no change of the table is read (empty) only once it spans this much WAL,
so that the slot still moves on, and frees WAL, while the table is idle."""


# --- the source ------------------------------------------------------------------------------


def _as_base_types(
    columns: tuple[Column, ...], oids: tuple[int, ...], bases: list[tuple[Any, ...]]
) -> tuple[tuple[int, ...], tuple[Column, ...]]:
    """The columns of domains as their base types (`_DOMAIN_BASES`'s rows).

    A domain's values are its base type's text. Returns the type oids values are read
    as, and the columns.
    """
    base = {name: row for name, *row in bases}
    value_oids = tuple(
        int(base[c.name][0]) if c.name in base else o for c, o in zip(columns, oids, strict=True)
    )
    described = tuple(
        attrs.evolve(
            c,
            type_name=base[c.name][1],
            category=base[c.name][2],
            base_type=base[c.name][3],
            element_category=base[c.name][4],
        )
        if c.name in base
        else c
        for c in columns
    )
    return value_oids, described


def _publication_exists(connection: psycopg.Connection[Any], publication: str) -> bool:
    found = connection.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
    return found.fetchone() is not None


def _drop_publication(connection: psycopg.Connection[Any], publication: str) -> None:
    from psycopg import sql  # noqa: PLC0415  # optional extra

    connection.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(publication)))


def _name(what: str, value: object) -> str:
    if isinstance(value, str) and value.strip() and "\0" not in value:
        return value
    raise SinkConfigurationError(f"{what} must be a non-empty str (got {value!r:.80})")


def _slot_name(value: object) -> str | None:
    if value is None:
        return None
    if (
        isinstance(value, str)
        and 0 < len(value) <= 63
        and all(c.islower() or c.isdigit() or c == "_" for c in value)
    ):
        return value
    raise SinkConfigurationError(
        f"slot_name must be a replication slot name: lower-case letters, digits and "
        f"underscores, at most 63 characters (got {value!r:.80}); or leave it out and the "
        "source makes a slot of its own"
    )


@final
class PostgresCdcSource:
    """A PostgreSQL table's inserts, updates and deletes, read from a logical replication slot.

    An unbounded FLIP-27 source with one split (the slot), read on Spark as a stream
    (``from_source(spark, source, source_id=..., streaming=True)``). Each row is one
    change: ``_op`` (``insert``, ``update`` or ``delete``), ``_lsn`` (the end LSN of
    the commit of its transaction, as an int), ``_seq`` (its index among the
    transaction's changes of the table), then the table's columns - the new values,
    or for a delete the old key (all old values under REPLICA IDENTITY FULL) - and,
    with ``before=True``, ``_before``: the old values of an update or delete.

    Micro-batches hold whole transactions; a replay reads the same ones; the slot is
    advanced only after the engine committed an epoch (see the module docstring and
    ``docs/sinks/postgres-cdc.md``). A stopped query's slot keeps WAL on the server
    until it is dropped.

    Args:
        connection: A libpq conninfo string or URL; the role needs REPLICATION (or
            superuser).
        table: ``"table"`` or ``"schema.table"``.
        publication: The publication whose changes are decoded; it must cover the table.
        create_publication: Create ``publication`` for the table if it is missing.
        slot_name: The slot to read (made if missing); default: a new slot of the
            source's own, named in its enumerator's checkpoint.
        before: Add ``_before`` (needs REPLICA IDENTITY FULL on the table).
        columns: Read only these columns (default: all).
        batch_rows: Rows per Arrow batch.
        snapshot: First read the rows the table holds when the query first starts,
            through the new slot's exported snapshot (``_op`` ``read``), then the
            changes after it; each row exactly once (``_cdc_snapshot``).
        snapshot_chunk_rows: Rows per snapshot chunk (one split each).

    Raises:
        SinkConfigurationError: An option is invalid, the table is missing, a column's
            type has no Arrow mapping, or a server requirement is not met.
    """

    def __init__(
        self,
        connection: str,
        table: str,
        *,
        publication: str,
        create_publication: bool = False,
        slot_name: str | None = None,
        before: bool = False,
        columns: Sequence[str] | None = None,
        batch_rows: int = 4096,
        snapshot: bool = False,
        snapshot_chunk_rows: int = 50_000,
    ) -> None:
        self.conninfo = _name("connection (a conninfo string or URL)", connection)
        self.table = TableName.parse(table)
        self.publication = _name("publication", publication)
        self.create_publication = bool(create_publication)
        self.slot_name = _slot_name(slot_name)
        self.before = bool(before)
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise SinkConfigurationError(f"batch_rows must be an int >= 1 (got {batch_rows!r})")
        self.batch_rows = batch_rows
        self.snapshot = bool(snapshot)
        if (
            isinstance(snapshot_chunk_rows, bool)
            or not isinstance(snapshot_chunk_rows, int)
            or snapshot_chunk_rows < 1
        ):
            raise SinkConfigurationError(
                f"snapshot_chunk_rows must be an int >= 1 (got {snapshot_chunk_rows!r})"
            )
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self._chunks_cut: set[tuple[str, int]] = set()
        self.poll_interval_s = 0.05
        self.idle_advance_bytes = IDLE_ADVANCE_BYTES
        self._cuts: dict[tuple[str, int], int] = {}
        with self._connect_checked() as conn:
            made = self.create_publication and not _publication_exists(conn, self.publication)
            self.check_server(conn)
            try:
                self._describe(conn, columns)
            except BaseException:
                if made:  # a bad option: the publication made for it goes again
                    _drop_publication(conn, self.publication)
                raise

    def _describe(self, connection: psycopg.Connection[Any], columns: Sequence[str] | None) -> None:
        """The table's columns as the WAL carries them, the wanted ones checked, the schema.

        Raises:
            SinkConfigurationError: The table is missing, ``columns`` is bad, or a
                column cannot be read.
        """
        self.schema_name, self.table_name, oid = qualified_table(connection, self.table)
        described = describe_table(connection, self.table)
        oids = dict(
            connection.execute(
                "SELECT attname, (atttypid::int8, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %s "
                "AND attnum > 0 AND NOT attisdropped",
                (oid,),
            ).fetchall()
        )
        bases = connection.execute(_DOMAIN_BASES, (oid,)).fetchall()
        unsent = unpublished_columns(connection, oid, self.publication)
        # what the publication sends of the table: checked again while the query runs
        self.published = self._published(connection)
        self.table_oid = oid
        # The columns the WAL carries: pgoutput leaves out generated columns and those
        # outside the publication's column list, and its relation messages must match.
        every = tuple(c for c in described.columns if c.name not in unsent)
        self.all_names = tuple(c.name for c in every)
        # the type oids and modifiers relation messages must match
        self.all_oids, self.all_typmods = (
            tuple(int(oids[c.name][i]) for c in every) for i in (0, 1)
        )
        self.value_oids, every = _as_base_types(every, self.all_oids, bases)
        if columns is not None and (
            isinstance(columns, str)
            or not isinstance(columns, Sequence)
            or not all(isinstance(name, str) for name in columns)
        ):
            raise SinkConfigurationError(
                f"columns must be a list of column names (got {columns!r:.80}); e.g. "
                "columns=['id', 'total']"
            )
        wanted = list(self.all_names) if columns is None else list(columns)
        not_sent = [name for name in wanted if name in unsent]
        if not_sent:
            raise SinkConfigurationError(
                f"columns {not_sent} of table {self.schema_name}.{self.table_name} are not in "
                f"the changes publication {self.publication!r} sends ("
                + "; ".join(f"{name!r}: {unsent[name]}" for name in not_sent)
                + "); leave them out with columns=[...] (compute a generated column downstream)"
            )
        unknown = [name for name in wanted if name not in self.all_names]
        if unknown or not wanted:
            raise SinkConfigurationError(
                f"columns must name columns of table {self.schema_name}.{self.table_name} "
                f"(got {columns!r}; unknown {unknown}); it has {list(self.all_names)}"
            )
        if self.snapshot and _ROW in self.all_names:
            raise SinkConfigurationError(
                f"snapshot=True copies table {self.schema_name}.{self.table_name} with a row "
                f"number column {_ROW!r}, and the table has a column of that name; rename "
                "it, or read without a snapshot"
            )
        clash = [name for name in wanted if name in _META]
        if clash:
            raise SinkConfigurationError(
                f"table columns {clash} clash with the change columns {list(_META)}; leave "
                "them out with columns=[...]"
            )
        self.column_index = tuple(self.all_names.index(name) for name in wanted)
        self.all_types = tuple(
            arrow_type(c) if i in self.column_index else pa.string() for i, c in enumerate(every)
        )
        fields = [pa.field(name, self.all_types[self.all_names.index(name)]) for name in wanted]
        meta = [
            pa.field(OP, pa.string(), nullable=False),
            pa.field(LSN, pa.int64(), nullable=False),
            pa.field(SEQ, pa.int32(), nullable=False),
        ]
        extra = [pa.field(BEFORE, pa.struct(fields))] if self.before else []
        self.schema = pa.schema(meta + fields + extra)

    # -- the server -----------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection, with the settings the changes' text is read in.

        pgoutput writes each value as text in the decoding session's settings: ISO
        dates (the only style psycopg reads a ``timestamptz`` in) and shortest-exact
        floats (``extra_float_digits`` below 1 rounds them), whatever the server, the
        database or the role set. The URL's own ``options`` come first.
        """
        import psycopg  # noqa: PLC0415  # optional extra
        from psycopg import conninfo  # noqa: PLC0415

        given = conninfo.conninfo_to_dict(self.conninfo).get("options")
        options = f"{given} {SESSION_OPTIONS}" if given else SESSION_OPTIONS
        return psycopg.connect(
            self.conninfo, autocommit=True, application_name="sinkv2-cdc", options=options
        )

    def _connect_checked(self) -> psycopg.Connection[Any]:
        """`connect`, with a refused or malformed connection a `SinkConfigurationError`."""
        import psycopg  # noqa: PLC0415  # optional extra

        try:
            return self.connect()
        except (psycopg.OperationalError, psycopg.ProgrammingError) as error:
            raise SinkConfigurationError(
                f"PostgresCdcSource could not connect with its connection string: "
                f"{str(error).strip()}; check the connection option (a libpq URL such as "
                "'postgresql://cdc@db:5432/shop' or a conninfo string) and that the server is up"
            ) from error

    def check_server(self, connection: psycopg.Connection[Any]) -> None:
        """``wal_level``, the role's privilege, the publication (made if asked).

        Raises:
            SinkConfigurationError: A requirement is not met.
        """
        check_server(
            connection,
            self.table,
            self.publication,
            create_publication=self.create_publication,
            needs_full_identity=self.before,
        )

    def transactions(
        self, connection: psycopg.Connection[Any], slot: str, upto: int, *, values: bool = True
    ) -> Iterator[Transaction]:
        """The slot's committed transactions up to ``upto`` (peeked: the slot stays)."""
        columns = list(zip(self.all_names, self.all_oids, self.all_typmods, strict=True))
        return transactions(
            peek_changes(connection, slot, upto, self.publication),
            self.schema_name,
            self.table_name,
            columns,
            values=values,
            oid=self.table_oid,
            full_identity=self.before,
        )

    def chunks_left(self, slot: str, left: tuple[int, ...]) -> tuple[int, ...]:
        """``left`` without the snapshot chunks cut to their end since it was taken."""
        done = {end for (name, end) in self._chunks_cut if name == slot}
        self._chunks_cut -= {(slot, end) for end in done}
        return tuple(end for end in left if end not in done)

    def cut_end(self, slot: str, position: int) -> int:
        """Where the cuts noted since ``position`` end (``position`` if none)."""
        seen = 0
        while (slot, position) in self._cuts and seen < 1_000_000:
            position = self._cuts[(slot, position)]
            seen += 1
        for key in [key for key in self._cuts if key[0] == slot and key[1] < position]:
            del self._cuts[key]
        return position

    # -- FLIP-27 ------------------------------------------------------------------------

    def get_boundedness(self) -> Boundedness:
        """Changes never end."""
        return Boundedness.CONTINUOUS_UNBOUNDED

    def create_enumerator(self, enum_context: SplitEnumeratorContext[CdcSplit]) -> CdcEnumerator:
        """A fresh enumerator: it takes (or makes) the slot when started."""
        return CdcEnumerator(enum_context, self, None)

    def restore_enumerator(
        self, enum_context: SplitEnumeratorContext[CdcSplit], checkpoint: CdcEnumeratorState
    ) -> CdcEnumerator:
        """An enumerator of the checkpoint's slot."""
        return CdcEnumerator(enum_context, self, checkpoint)

    def create_reader(self, reader_context: SourceReaderContext) -> CdcSourceReader:
        """A reader of the slot's split."""
        return CdcSourceReader(reader_context, self)

    def get_split_serializer(self) -> AttrsMsgpackSerializer[CdcSplit]:
        """Splits as msgpack."""
        return AttrsMsgpackSerializer(CdcSplit)

    def get_enumerator_checkpoint_serializer(self) -> AttrsMsgpackSerializer[CdcEnumeratorState]:
        """The enumerator's checkpoint as msgpack (a map: ``replication_slot`` is readable)."""
        return AttrsMsgpackSerializer(CdcEnumeratorState)

    def get_produced_type(self) -> pa.Schema:
        """``_op``, ``_lsn``, ``_seq``, the columns, and ``_before`` if asked."""
        return self.schema

    # -- SupportsEndPositions ---------------------------------------------------------------

    def end_positions(self, splits: Sequence[CdcSplit]) -> list[int | None]:
        """The WAL flush position for the open stream split, a chunk's last row for a chunk.

        ``None`` for a split that stops already (a cut's read part).

        Raises:
            SinkConfigurationError: The table was dropped, and every change up to the
                drop was read.
        """
        now = None
        streams = [split for split in splits if split.stop is None and split.chunk_end is None]
        if streams:
            with self.connect() as connection:
                now = flush_lsn(connection)
                if any(split.start >= now for split in streams):
                    self._check_table(connection)  # nothing is left to read: it must exist
        return [
            None if split.stop is not None else now if split.chunk_end is None else split.chunk_end
            for split in splits
        ]

    def cut_split(
        self, split: CdcSplit, end: object, max_records: int | None
    ) -> SplitCut[CdcSplit]:
        """Whole transactions committing in ``(split.start, end]``, at most ``max_records`` changes.

        The read stops at the last whole transaction's commit end; it stops at
        ``end`` itself only when no published transaction's commit record crosses
        ``end`` (then advancing the slot to ``end`` skips nothing of ours). A range
        with no change of the table is read only once it spans
        ``idle_advance_bytes`` of WAL (so the slot moves on while the table is idle).

        Raises:
            ValueError: ``end`` is not an LSN at or after the split's start, or the
                split already stops.
            SinkConfigurationError: A single transaction holds more changes than
                ``max_records`` (it cannot be split across micro-batches); the table was
                renamed, dropped, or its columns changed (DDL is not followed).
            CommitStateError: The slot is gone, invalidated, or past the split's start.
        """
        if split.stop is not None:
            raise ValueError(f"split {split.slot!r} already stops at {split.stop}; it is not cut")
        if split.chunk_end is not None:
            return self._cut_chunk(split, end, max_records)
        if not isinstance(end, int) or isinstance(end, bool) or end < split.start:
            raise ValueError(
                f"the end position of split {split.slot!r} must be an int LSN >= its start "
                f"{split.start} (got {end!r}); pass a value end_positions() returned"
            )
        if end == split.start or max_records == 0:
            return SplitCut(None, split, 0)
        count, stop, capped, crossed = 0, split.start, False, False
        with self.connect() as connection:
            check_slot(connection, split.slot, split.start)
            for transaction in self.transactions(connection, split.slot, end, values=False):
                if transaction.end_lsn <= split.start:
                    continue
                if transaction.end_lsn > end:
                    crossed = True
                    break
                size = len(transaction.changes)
                if max_records is not None and count + size > max_records:
                    if count == 0:
                        raise SinkConfigurationError(
                            f"the transaction committed at LSN {format_lsn(transaction.end_lsn)} "
                            f"changed {size} rows of {self.schema_name}.{self.table_name}, more "
                            f"than the {max_records} records a micro-batch may read "
                            "(maxRecordsPerTrigger); a transaction is never split across "
                            f"micro-batches: raise the limit to at least {size}"
                        )
                    capped = True
                    break
                count += size
                stop = transaction.end_lsn
            if count == 0:
                self._check_table(connection)
        if not capped and not crossed:
            stop = end
        if stop == split.start or (count == 0 and stop - split.start < self.idle_advance_bytes):
            return SplitCut(None, split, 0)
        self._cuts[(split.slot, split.start)] = stop
        return SplitCut(CdcSplit(split.slot, split.start, stop), CdcSplit(split.slot, stop), count)

    def _published(self, connection: psycopg.Connection[Any]) -> tuple[str, ...]:
        """The row changes the publication sends of the table (none: it does not cover it).

        Its row filter too (``WHERE ...``). Truncates are left out: a publication that
        stops sending them ignores them on purpose (see `transactions`).
        """
        row = connection.execute(
            "SELECT p.pubinsert, p.pubupdate, p.pubdelete FROM pg_publication p "
            "JOIN pg_publication_tables t ON t.pubname = p.pubname WHERE p.pubname = %s "
            "AND t.schemaname = %s AND t.tablename = %s",
            (self.publication, self.schema_name, self.table_name),
        ).fetchone()
        if row is None:
            return ()
        where = row_filter(connection, self.publication, self.schema_name, self.table_name)
        filtered = () if where is None else (f"WHERE {where}",)
        return (
            *(o for o, on in zip(("insert", "update", "delete"), row, strict=True) if on),
            *filtered,
        )

    def _check_table(self, connection: psycopg.Connection[Any]) -> None:
        """Once no change of the table is left to read, it must still exist and be published.

        Raises:
            SinkConfigurationError: The table was dropped (its changes up to the drop
                were all read), or the publication no longer sends what it sent when
                the source was made (its changes since were not decoded).
        """
        table = f"{self.schema_name}.{self.table_name}"
        row = connection.execute(
            "SELECT 1 FROM pg_class WHERE oid = %s", (self.table_oid,)
        ).fetchone()
        if row is None:
            raise SinkConfigurationError(
                f"table {table} was dropped while the query read its changes (all of them "
                "up to the drop were read); PostgresCdcSource does not follow DDL: stop the "
                "query, and start a new one (new source_id) on the table made again"
            )
        now = self._published(connection)
        lost = [o for o in self.published if o not in now]
        lost += [o for o in now if o.startswith("WHERE") and o not in self.published]
        if lost:
            what = (
                f"no longer covers table {table}"
                if not now
                else f"no longer publishes {list(self.published)} of table {table} (now "
                f"{list(now)})"
            )
            raise SinkConfigurationError(
                f"publication {self.publication!r} {what}: it was altered while the query "
                "ran, and the changes made since are not decoded, so this query cannot read "
                "them. Restore the publication and start a new query (new source_id, "
                "snapshot=True) to read the table afresh"
            )

    def _cut_chunk(
        self, split: CdcSplit, end: object, max_records: int | None
    ) -> SplitCut[CdcSplit]:
        """Rows ``(start, end]`` of a snapshot chunk, at most ``max_records`` of them."""
        assert split.chunk_end is not None
        if not isinstance(end, int) or isinstance(end, bool) or not split.start <= end:
            raise ValueError(
                f"the end of snapshot chunk {split.split_id()!r} must be a row number >= "
                f"{split.start} (got {end!r}); pass a value end_positions() returned"
            )
        stop = min(end, split.chunk_end)
        if max_records is not None:
            stop = min(stop, split.start + max_records)
        if stop == split.start:
            return SplitCut(None, split, 0)
        read = attrs.evolve(split, stop=stop)
        if stop == split.chunk_end:
            self._chunks_cut.add((split.slot, split.chunk_end))
            return SplitCut(read, None, stop - split.start)
        return SplitCut(read, attrs.evolve(split, start=stop), stop - split.start)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cuts"] = {}  # the driver's notes stay on the driver
        state["_chunks_cut"] = set()
        return state

    def __repr__(self) -> str:
        return (
            f"PostgresCdcSource({self.schema_name}.{self.table_name}, "
            f"publication={self.publication!r}, slot_name={self.slot_name!r})"
        )
