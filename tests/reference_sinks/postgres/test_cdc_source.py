"""PostgresCdcSource on a real PostgreSQL (the ``postgres_url`` fixture), no Spark.

The epochs are planned by the engine-neutral `SourceEpochCoordinator` exactly as
Spark's stream reader plans them, and read with `read_epoch_slice` as a task reads
them; the source contract kit runs the source on its local engine.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import time
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresCdcSource, PostgresSource
from reference_sinks.postgres._cdc_server import parse_lsn
from reference_sinks.postgres._cdc_source import CdcSplit
from sinkv2._cli import main
from sinkv2._serialization import SimpleVersionedSerialization
from sinkv2.errors import CommitStateError, ConcurrentCommitError, SinkConfigurationError
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from sinkv2.source import SourceReaderError, SupportsEndPositions
from sinkv2.testing import check_source

DDL = "CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), tags int[])"


@pytest.fixture
def db(postgres_url: str) -> Any:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(DDL)
        yield connection


def make(url: str, **options: Any) -> PostgresCdcSource:
    options.setdefault("publication", "items_pub")
    options.setdefault("create_publication", True)
    return PostgresCdcSource(url, "items", **options)


def flushed(connection: Any) -> None:
    """Wait until the WAL written so far is flushed (the test server commits asynchronously)."""
    row = connection.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    want = parse_lsn(row[0])
    deadline = time.monotonic() + 60  # a loaded machine is slow, not broken
    while time.monotonic() < deadline:
        now = connection.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        if parse_lsn(now[0]) >= want:
            return
        time.sleep(0.02)
    raise AssertionError("the WAL was not flushed in 60 s")


def workload(connection: Any) -> list[tuple[str, int, str | None]]:
    """Single changes, a transaction of several, updates and deletes; (op, id, name) in order."""
    connection.execute("INSERT INTO items VALUES (1, 'a', 1.50, '{1,2}')")
    with connection.transaction():
        connection.execute("INSERT INTO items VALUES (2, 'b', NULL, NULL)")
        connection.execute("UPDATE items SET name = 'a2' WHERE id = 1")
        connection.execute("INSERT INTO items VALUES (3, 'c', 3, '{}')")
    connection.execute("DELETE FROM items WHERE id = 2")
    with connection.transaction():
        connection.execute("UPDATE items SET price = 9.99 WHERE id = 3")
        connection.execute("INSERT INTO items VALUES (4, 'd', 4, '{4}')")
    flushed(connection)
    return [
        ("insert", 1, "a"),
        ("insert", 2, "b"),
        ("update", 1, "a2"),
        ("insert", 3, "c"),
        ("delete", 2, None),
        ("update", 3, "c"),
        ("insert", 4, "d"),
    ]


def slot_position(connection: Any, slot: str) -> int:
    row = connection.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return parse_lsn(row[0])


def drop(connection: Any, slot: str) -> None:
    connection.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )


class Run:
    """One query run on the coordinator; each epoch read as a task reads it."""

    def __init__(self, source: PostgresCdcSource, store: Any, source_id: str = "cdc") -> None:
        self.source = source
        self.coordinator = SourceEpochCoordinator(source, store, source_id, parallelism=2)

    def read(self, epoch: int) -> list[dict[str, Any]]:
        return [
            row
            for piece in self.coordinator.slices(epoch)
            for batch in read_epoch_slice(self.source, self.source.schema, piece)
            for row in batch.to_pylist()
        ]

    def slot(self) -> str:
        record = self.coordinator._lease_now().get(0)  # the recorded checkpoint
        assert record is not None
        state = SimpleVersionedSerialization.read_version_and_deserialize(
            self.source.get_enumerator_checkpoint_serializer(), record.enumerator_checkpoint
        )
        return str(state.replication_slot)


def test_changes_are_whole_transactions_typed_and_a_replay_reads_the_same(
    db, postgres_url, tmp_path
):
    source = make(postgres_url, slot_name="items_slot")
    assert isinstance(source, SupportsEndPositions)
    assert source.schema.names == ["_op", "_lsn", "_seq", "id", "name", "price", "tags"]
    run = Run(source, SqliteCommitStateStore(tmp_path / "state.sqlite"))
    try:
        start = run.coordinator.initial_epoch()
        expected = workload(db)
        epoch = run.coordinator.next_epoch(start, ReadLimit(max_records=3))
        first = run.read(epoch)
        assert [(r["_op"], r["id"]) for r in first] == [("insert", 1)]  # 3 whole ones do not fit
        assert run.read(epoch) == first  # the same range read again: the same changes
        after_first = CdcSplit("items_slot", first[0]["_lsn"])
        (end,) = source.end_positions([after_first])
        with pytest.raises(SinkConfigurationError, match="never split across micro-batches"):
            source.cut_split(after_first, end, 2)  # the next transaction has 3 changes
        rows = list(first)
        while (after := run.coordinator.next_epoch(epoch, ReadLimit())) != epoch:
            epoch = after
            rows += run.read(epoch)
        assert [(r["_op"], r["id"], r["name"]) for r in rows] == expected
        assert rows[0]["price"] == Decimal("1.50")
        assert rows[0]["tags"] == [1, 2]
        by_transaction = [(r["_lsn"], r["_seq"]) for r in rows]
        assert by_transaction == sorted(by_transaction)
        assert len(set(by_transaction)) == 7
        assert [r["_seq"] for r in rows] == [0, 0, 1, 2, 0, 0, 1]
    finally:
        run.coordinator.close()
        drop(db, "items_slot")


def test_the_slot_is_advanced_only_after_an_epoch_is_acknowledged(
    db, postgres_url, tmp_path, capsys
):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    run = Run(make(postgres_url), store)
    try:
        start = run.coordinator.initial_epoch()
        slot = run.slot()
        assert slot.startswith("sinkv2_cdc_")  # made by the source, named in its checkpoint
        created = slot_position(db, slot)
        workload(db)
        epoch = run.coordinator.next_epoch(start, ReadLimit())
        rows = run.read(epoch)
        assert len(rows) == 7
        assert slot_position(db, slot) == created  # planned and read, not acknowledged
        assert run.read(epoch) == rows
        db.execute("INSERT INTO items VALUES (5, 'e', 5, NULL)")
        flushed(db)
        later = run.coordinator.next_epoch(epoch, ReadLimit())  # proves `epoch` committed
        assert slot_position(db, slot) == rows[-1]["_lsn"]  # exactly its end, no further
        assert [r["id"] for r in run.read(later)] == [5]
        run.coordinator.acknowledge(later)
        assert slot_position(db, slot) > rows[-1]["_lsn"]
        run.coordinator.close()  # a stopped query: its slot stays, and the CLI names it
        assert main(["state", "show-source", str(tmp_path / "state.sqlite"), "cdc"]) == 0
        out = capsys.readouterr().out
        assert any(line.startswith("replication slot") and slot in line for line in out.split("\n"))
        assert f"pg_drop_replication_slot('{slot}')" in out
    finally:
        run.coordinator.close()
        drop(db, slot)


def test_one_slot_is_read_by_one_query(db, postgres_url, tmp_path):
    """The same source id: the coordinator's lease; another source id: the slot's lock."""
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    first = Run(make(postgres_url, slot_name="shared"), store)
    try:
        first.coordinator.initial_epoch()
        second = Run(make(postgres_url, slot_name="shared"), store)
        with pytest.raises(ConcurrentCommitError):
            second.coordinator.initial_epoch()
        other = Run(make(postgres_url, slot_name="shared"), store, source_id="other")
        with pytest.raises(CommitStateError, match="'shared' is read by another query"):
            other.coordinator.initial_epoch()
        other.coordinator.close()
    finally:
        first.coordinator.close()
        drop(db, "shared")


def test_a_slot_dropped_or_moved_behind_the_query_is_a_clear_error(db, postgres_url, tmp_path):
    source = make(postgres_url, slot_name="gone")
    run = Run(source, SqliteCommitStateStore(tmp_path / "state.sqlite"))
    try:
        start = run.coordinator.initial_epoch()
        workload(db)
        epoch = run.coordinator.next_epoch(start, ReadLimit(max_records=1))
        assert len(run.read(epoch)) == 1
        db.execute("SELECT pg_replication_slot_advance('gone', pg_current_wal_flush_lsn())")
        moved = r"'gone' has confirmed LSN .* past the position"
        with pytest.raises(SourceReaderError, match=moved):
            run.read(epoch)  # a replay of a range the slot no longer has
    finally:
        run.coordinator.close()
    drop(db, "gone")
    again = Run(make(postgres_url, slot_name="gone"), run.coordinator._store)
    try:
        with pytest.raises(CommitStateError, match="'gone' does not exist"):
            again.coordinator.next_epoch(epoch, ReadLimit())  # restored: never made anew
    finally:
        again.coordinator.close()
    assert db.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def test_server_requirements_are_checked_before_anything_runs(db, postgres_url):
    with pytest.raises(SinkConfigurationError, match="publication 'nope' does not exist"):
        make(postgres_url, publication="nope", create_publication=False)
    db.execute("CREATE TABLE other (id int PRIMARY KEY)")
    db.execute("CREATE PUBLICATION other_pub FOR TABLE other")
    with pytest.raises(SinkConfigurationError, match=r"does not cover table public\.items"):
        make(postgres_url, publication="other_pub")
    with pytest.raises(SinkConfigurationError, match="REPLICA IDENTITY FULL"):
        make(postgres_url, before=True)
    db.execute("ALTER TABLE items REPLICA IDENTITY FULL")
    assert make(postgres_url, before=True).schema.names[-1] == "_before"
    role = f"r_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        url = re.sub(r"://[^@]+@", f"://{role}@", postgres_url)
        with pytest.raises(SinkConfigurationError, match="needs the REPLICATION privilege"):
            make(url)
    finally:
        db.execute(f"DROP ROLE {role}")
    db.execute("CREATE TABLE odd (id int PRIMARY KEY, spot point)")
    with pytest.raises(SinkConfigurationError, match="column 'spot' is of type point"):
        PostgresCdcSource(postgres_url, "odd", publication="odd_pub", create_publication=True)
    with pytest.raises(SinkConfigurationError, match="slot_name must be"):
        make(postgres_url, slot_name="Bad-Name")


def test_before_values_under_replica_identity_full(db, postgres_url, tmp_path):
    db.execute("ALTER TABLE items REPLICA IDENTITY FULL")
    source = make(postgres_url, slot_name="full", before=True, columns=["id", "name"])
    run = Run(source, SqliteCommitStateStore(tmp_path / "state.sqlite"))
    try:
        start = run.coordinator.initial_epoch()
        workload(db)
        rows = run.read(run.coordinator.next_epoch(start, ReadLimit()))
    finally:
        run.coordinator.close()
        drop(db, "full")
    assert [(r["_op"], r["id"], r["name"], r["_before"]) for r in rows] == [
        ("insert", 1, "a", None),
        ("insert", 2, "b", None),
        ("update", 1, "a2", {"id": 1, "name": "a"}),
        ("insert", 3, "c", None),
        ("delete", 2, "b", {"id": 2, "name": "b"}),
        ("update", 3, "c", {"id": 3, "name": "c"}),
        ("insert", 4, "d", None),
    ]


def test_the_source_passes_the_contract_kit(db, postgres_url):
    """Flink's SourceTestSuiteBase cases and the cut checks, on the local engine."""
    db.execute("CREATE PUBLICATION items_pub FOR TABLE items")  # before the slot decodes
    db.execute("SELECT pg_create_logical_replication_slot('kit', 'pgoutput')")
    try:
        with db.transaction():
            pass
        for n in range(40):
            if n % 5 == 4:
                with db.transaction():
                    db.execute("UPDATE items SET name = name || '+' WHERE id = %s", (n - 1,))
                    db.execute("INSERT INTO items VALUES (%s, %s, %s, NULL)", (n, f"n{n}", n))
            else:
                db.execute("INSERT INTO items VALUES (%s, %s, %s, '{}')", (n, f"n{n}", n))
        db.execute("DELETE FROM items WHERE id < 10")
        flushed(db)

        def factory() -> PostgresCdcSource:
            made = make(postgres_url, slot_name="kit", batch_rows=7)
            made.poll_interval_s = 0.005  # an idle reader of the open split looks again soon
            return made

        source = factory()
        split = CdcSplit("kit", slot_position(db, "kit"))
        (end,) = source.end_positions([split])
        whole = source.cut_split(split, end, None)
        records = _read(source, whole.read)
        assert len(records) == whole.records == 40 + 8 + 10
        check_source(
            factory,
            split_records=lambda split_id: iter(records),
            records_to_read=len(records),
            max_parallelism=2,
            max_examples=3,
        )
        assert slot_position(db, "kit") == split.start  # the local engine never cuts: no ack
    finally:
        drop(db, "kit")


def _read(source: PostgresCdcSource, split: CdcSplit) -> list[dict[str, Any]]:
    from sinkv2.testing._source_end_check import _read_alone

    return list(_read_alone(source, split, split.slot))


def test_a_snapshot_then_the_stream_gives_each_row_exactly_once(db, postgres_url, tmp_path):
    """The exported-snapshot copy, read in chunks, then the changes after its point.

    A restart in the middle of the snapshot goes on from the recorded epoch; the stream
    starts only once every chunk's epoch is acknowledged; the copy is dropped then.
    """
    db.execute("INSERT INTO items SELECT n, 'n' || n, n, '{}' FROM generate_series(1, 25) AS n")
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")

    def source() -> PostgresCdcSource:
        return make(postgres_url, slot_name="snap", snapshot=True, snapshot_chunk_rows=10)

    run = Run(source(), store)
    epochs: list[list[dict[str, Any]]] = []
    try:
        epoch = run.coordinator.initial_epoch()
        copy = "sinkv2_snap_snap"
        assert db.execute("SELECT count(*) FROM sinkv2_snap_snap").fetchone()[0] == 25
        change_after_the_snapshot(db)
        epoch = run.coordinator.next_epoch(epoch, ReadLimit(max_records=12))
        epochs.append(run.read(epoch))
        run.coordinator.close()  # a restart in the middle of the snapshot
        run = Run(source(), store)
        while (after := run.coordinator.next_epoch(epoch, ReadLimit(max_records=12))) != epoch:
            epoch = after
            epochs.append(run.read(epoch))
        assert db.execute("SELECT to_regclass(%s)", (copy,)).fetchone()[0] is None  # dropped
    finally:
        run.coordinator.close()
        drop(db, "snap")
        db.execute("DROP TABLE IF EXISTS sinkv2_snap_snap")
    assert all(len(rows) <= 12 for rows in epochs)
    kinds = [{row["_op"] for row in rows} for rows in epochs if rows]
    first_change = next(i for i, ops in enumerate(kinds) if ops != {"read"})
    assert all(ops == {"read"} for ops in kinds[:first_change])
    assert all("read" not in ops for ops in kinds[first_change:])  # never mixed, never after
    check_snapshot_then_changes(epochs, dict(db.execute("SELECT id, name FROM items").fetchall()))


def change_after_the_snapshot(db: Any) -> None:
    """The changes `check_snapshot_then_changes` expects after the 25 rows of the snapshot."""
    db.execute("UPDATE items SET name = 'changed' WHERE id = 1")  # after the point
    db.execute("DELETE FROM items WHERE id = 2")
    db.execute("INSERT INTO items VALUES (100, 'new', 1, NULL)")
    flushed(db)


def check_snapshot_then_changes(epochs: list[list[dict[str, Any]]], table: dict[int, str]) -> None:
    """The snapshot's 25 rows once, then `change_after_the_snapshot`'s changes: ``table``."""
    rows = [row for part in epochs for row in part]
    read = sorted(row["id"] for row in rows if row["_op"] == "read")
    assert read == list(range(1, 26))  # every row of the snapshot once, as it was
    assert [(r["_op"], r["id"]) for r in rows if r["_op"] != "read"] == [
        ("update", 1),
        ("delete", 2),
        ("insert", 100),
    ]
    mirror: dict[int, str] = {}
    for row in rows:
        if row["_op"] == "delete":
            mirror.pop(row["id"])
        else:
            mirror[row["id"]] = row["name"]
    assert mirror == table


# --- fault, data and peer cases (issue 25's red team) ---------------------------------------


def _epoch_rows(source: PostgresCdcSource, store: Any, source_id: str) -> list[dict[str, Any]]:
    """Everything the slot has for ``source``, read as one epoch (the slot is not advanced)."""
    run = Run(source, store, source_id=source_id)
    try:
        start = run.coordinator.initial_epoch()
        return run.read(run.coordinator.next_epoch(start, ReadLimit()))
    finally:
        run.coordinator.close()


def test_generated_columns_and_column_lists_are_what_the_publication_sends(
    db, postgres_url, tmp_path
):
    """pgoutput sends neither generated columns nor those outside a column list: not "DDL"."""
    db.execute(
        'CREATE TABLE "Gen" (id int PRIMARY KEY, n int, '
        "twice int GENERATED ALWAYS AS (n * 2) STORED, secret text)"
    )
    db.execute('CREATE PUBLICATION gen_some FOR TABLE "Gen" (id, n)')
    every = PostgresCdcSource(postgres_url, "Gen", publication="gen_all", create_publication=True)
    some = PostgresCdcSource(postgres_url, "Gen", publication="gen_some", slot_name="gen")
    assert every.schema.names[3:] == ["id", "n", "secret"]
    assert some.schema.names[3:] == ["id", "n"]
    with pytest.raises(SinkConfigurationError, match="columns must be a list of column names"):
        PostgresCdcSource(postgres_url, "Gen", publication="gen_all", columns="id")
    db.execute('ALTER TABLE "Gen" RENAME secret TO sinkv2_row')
    with pytest.raises(SinkConfigurationError, match="a row number column 'sinkv2_row'"):
        PostgresCdcSource(postgres_url, "Gen", publication="gen_all", snapshot=True)
    db.execute('ALTER TABLE "Gen" RENAME sinkv2_row TO secret')
    with pytest.raises(SinkConfigurationError, match="'twice': a generated column"):
        PostgresCdcSource(postgres_url, "Gen", publication="gen_all", columns=["id", "twice"])
    with pytest.raises(SinkConfigurationError, match="'secret': outside the publication's column"):
        PostgresCdcSource(postgres_url, "Gen", publication="gen_some", columns=["secret"])
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    db.execute("SELECT pg_create_logical_replication_slot('gen', 'pgoutput')")
    try:
        db.execute("INSERT INTO \"Gen\" (id, n, secret) VALUES (1, 5, 's'), (2, 6, 't')")
        db.execute('UPDATE "Gen" SET n = 7 WHERE id = 1')
        db.execute('DELETE FROM "Gen" WHERE id = 2')
        flushed(db)
        want = [("insert", 1, 5), ("insert", 2, 6), ("update", 1, 7), ("delete", 2, None)]
        rows = _epoch_rows(some, store, "some")
        assert [(r["_op"], r["id"], r["n"]) for r in rows] == want
        every.slot_name = "gen"  # the same slot, decoded with the other publication
        rows = _epoch_rows(every, store, "every")
        assert [(r["_op"], r["id"], r["n"]) for r in rows] == want
        assert [r["secret"] for r in rows] == ["s", "t", "s", None]
    finally:
        drop(db, "gen")


def test_a_partitioned_table_publishes_its_changes_as_its_own(db, postgres_url, tmp_path):
    db.execute(
        "CREATE TABLE parts (id int, region text, PRIMARY KEY (id, region)) "
        "PARTITION BY LIST (region)"
    )
    db.execute("CREATE TABLE parts_eu PARTITION OF parts FOR VALUES IN ('eu')")
    db.execute("CREATE TABLE parts_us PARTITION OF parts FOR VALUES IN ('us')")
    db.execute("CREATE PUBLICATION leaves FOR TABLE parts")  # as its partitions' changes
    with pytest.raises(SinkConfigurationError, match="publish_via_partition_root = true"):
        PostgresCdcSource(postgres_url, "parts", publication="leaves")
    source = PostgresCdcSource(
        postgres_url, "parts", publication="parts_pub", create_publication=True, slot_name="parts"
    )
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    db.execute("SELECT pg_create_logical_replication_slot('parts', 'pgoutput')")
    try:
        db.execute("INSERT INTO parts VALUES (1, 'eu'), (2, 'us')")
        db.execute("DELETE FROM parts WHERE id = 2")
        flushed(db)
        rows = _epoch_rows(source, store, "parts")
        assert [(r["_op"], r["id"], r["region"]) for r in rows] == [
            ("insert", 1, "eu"),
            ("insert", 2, "us"),
            ("delete", 2, "us"),
        ]
    finally:
        drop(db, "parts")


def test_values_arrow_cannot_hold_fail_the_read_naming_the_column(db, postgres_url, tmp_path):
    db.execute("CREATE TABLE odd (id int PRIMARY KEY, p numeric(6,2), at timestamp, grid int[])")
    db.execute("CREATE PUBLICATION odd_pub FOR TABLE odd")
    db.execute("SELECT pg_create_logical_replication_slot('odd', 'pgoutput')")
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    try:
        db.execute("INSERT INTO odd VALUES (1, 'NaN', 'infinity', '{{1,2},{3,4}}')")
        flushed(db)
        for column, value in (("p", "Decimal('NaN')"), ("at", "infinity"), ("grid", "[[1, 2]")):
            source = PostgresCdcSource(
                postgres_url, "odd", publication="odd_pub", slot_name="odd", columns=["id", column]
            )
            with pytest.raises(SourceReaderError) as caught:
                _epoch_rows(source, store, column)
            message = str(caught.value.__cause__)
            assert f"split 'odd' of public.odd: column {column!r}: the value" in message
            assert value in message
            assert "leave the column out" in message
    finally:
        drop(db, "odd")


def test_a_renamed_recreated_or_dropped_table_is_a_clear_error(db, postgres_url, tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    source = make(postgres_url, slot_name="ddl")
    db.execute("SELECT pg_create_logical_replication_slot('ddl', 'pgoutput')")
    running = Run(source, store, source_id="renamed")
    try:
        start = running.coordinator.initial_epoch()
        db.execute("INSERT INTO items VALUES (1, 'a', 1, NULL)")
        db.execute("ALTER TABLE items RENAME TO items_old")  # while the query runs
        db.execute("INSERT INTO items_old VALUES (2, 'b', 2, NULL)")
        flushed(db)
        with pytest.raises(SinkConfigurationError, match=r"was renamed to public\.items_old"):
            running.coordinator.next_epoch(start, ReadLimit())
        running.coordinator.close()
        db.execute(DDL)  # a new table of the old name
        db.execute("ALTER PUBLICATION items_pub ADD TABLE items")
        again = make(postgres_url, slot_name="ddl")
        db.execute("INSERT INTO items VALUES (3, 'c', 3, NULL)")
        flushed(db)
        with pytest.raises(SinkConfigurationError, match="was dropped and created again"):
            _epoch_rows(again, store, "recreated")
        db.execute("SELECT pg_replication_slot_advance('ddl', pg_current_wal_flush_lsn())")
        running = Run(again, store, source_id="dropped")
        start = running.coordinator.initial_epoch()
        db.execute("INSERT INTO items VALUES (4, 'd', 4, NULL)")
        db.execute("DROP TABLE items")
        flushed(db)
        epoch = running.coordinator.next_epoch(start, ReadLimit())
        assert [r["id"] for r in running.read(epoch)] == [4]  # the changes up to the drop
        with pytest.raises(SinkConfigurationError, match="items was dropped while the query"):
            running.coordinator.next_epoch(epoch, ReadLimit())
    finally:
        running.coordinator.close()
        drop(db, "ddl")


def test_a_table_without_a_replica_identity_is_refused_before_its_updates_would_fail(
    db, postgres_url
):
    db.execute("CREATE TABLE bag (id int, v text)")
    with pytest.raises(SinkConfigurationError, match=r"bag has no replica identity \(no primary"):
        PostgresCdcSource(postgres_url, "bag", publication="bag_pub", create_publication=True)
    db.execute("UPDATE bag SET v = 'x'")  # no publication was made: the table's updates still run
    assert db.execute("SELECT count(*) FROM pg_publication").fetchone()[0] == 0
    db.execute("CREATE PUBLICATION bag_ins FOR TABLE bag WITH (publish = 'insert')")
    assert PostgresCdcSource(postgres_url, "bag", publication="bag_ins").table_name == "bag"
    db.execute("ALTER TABLE bag REPLICA IDENTITY FULL")
    PostgresCdcSource(postgres_url, "bag", publication="bag_pub", create_publication=True)


def test_a_connection_that_fails_is_a_configuration_error_naming_the_option():
    for connection in ("postgresql://nobody@127.0.0.1:1/none", "host=127.0.0.1 bogus=1"):
        with pytest.raises(SinkConfigurationError, match="could not connect with its connection"):
            PostgresCdcSource(connection, "items", publication="p")
        with pytest.raises(SinkConfigurationError, match="PostgresSource could not connect"):
            PostgresSource(connection, "items")


def test_a_slot_the_server_invalidated_is_a_clear_error(db, postgres_url, tmp_path):
    """``max_slot_wal_keep_size`` passed: the slot lost its WAL, and the query says so."""
    run = Run(make(postgres_url, slot_name="lost"), SqliteCommitStateStore(tmp_path / "s.sqlite"))
    try:
        start = run.coordinator.initial_epoch()
        db.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        db.execute("SELECT pg_reload_conf()")
        for n in range(4):  # WAL segments past the limit, then a checkpoint removes them
            db.execute("INSERT INTO items VALUES (%s, 'x', 1, NULL)", (n,))
            db.execute("SELECT pg_switch_wal()")
        db.execute("CHECKPOINT")
        status = db.execute("SELECT wal_status FROM pg_replication_slots").fetchone()[0]
        assert status == "lost"
        with pytest.raises(CommitStateError, match=r"'lost' is invalidated \(wal_status 'lost'\)"):
            run.coordinator.next_epoch(start, ReadLimit())
    finally:
        db.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        db.execute("SELECT pg_reload_conf()")
        run.coordinator.close()
        drop(db, "lost")


def test_values_are_exact_whatever_date_style_and_float_digits_the_database_sets(
    db, postgres_url, tmp_path
):
    """pgoutput writes values in the decoding session's settings: the source sets its own."""
    name = db.info.dbname
    db.execute(f"ALTER DATABASE \"{name}\" SET DateStyle = 'SQL, DMY'")
    db.execute(f'ALTER DATABASE "{name}" SET extra_float_digits = 0')
    db.execute("CREATE TABLE at (id int PRIMARY KEY, t timestamptz, d date, f float8)")
    source = PostgresCdcSource(postgres_url, "at", publication="at_pub", create_publication=True)
    source.slot_name = "at"
    db.execute("SELECT pg_create_logical_replication_slot('at', 'pgoutput')")
    try:
        db.execute(
            "INSERT INTO at VALUES (1, '2024-03-04 05:06:07.123456+00', '2024-03-04', %s)",
            (0.1 + 0.2,),
        )
        flushed(db)
        (row,) = _epoch_rows(source, SqliteCommitStateStore(tmp_path / "s.sqlite"), "at")
    finally:
        drop(db, "at")
    assert row["t"] == dt.datetime(2024, 3, 4, 5, 6, 7, 123456, tzinfo=dt.UTC)
    assert row["d"] == dt.date(2024, 3, 4)
    assert row["f"] == 0.1 + 0.2


def test_an_unchanged_toasted_value_is_read_under_full_identity_and_named_without(
    db, postgres_url, tmp_path
):
    big = secrets.token_hex(8000)  # 16,000 random hex digits: stored out of line (TOAST)
    db.execute("CREATE TABLE docs (id int PRIMARY KEY, n int, body text)")
    db.execute("SELECT pg_create_logical_replication_slot('toast', 'pgoutput')")
    source = PostgresCdcSource(
        postgres_url, "docs", publication="docs_pub", create_publication=True
    )
    source.slot_name = "toast"
    store = SqliteCommitStateStore(tmp_path / "s.sqlite")
    try:
        db.execute("INSERT INTO docs VALUES (1, 0, %s)", (big,))
        db.execute("UPDATE docs SET n = 1")  # the body is not logged: unchanged and toasted
        flushed(db)
        with pytest.raises(SourceReaderError, match="update did not carry column 'body'"):
            _epoch_rows(source, store, "default")
        without = PostgresCdcSource(postgres_url, "docs", publication="docs_pub", columns=["n"])
        without.slot_name = "toast"
        assert [r["n"] for r in _epoch_rows(without, store, "without")] == [0, 1]
        db.execute("SELECT pg_replication_slot_advance('toast', pg_current_wal_flush_lsn())")
        db.execute("ALTER TABLE docs REPLICA IDENTITY FULL")
        db.execute("UPDATE docs SET n = 2")
        flushed(db)
        rows = _epoch_rows(source, store, "full")
    finally:
        drop(db, "toast")
    assert [(r["_op"], r["n"], r["body"] == big) for r in rows] == [("update", 2, True)]


@pytest.mark.parametrize("made_by", ["user", "source"])
def test_a_published_truncate_stops_the_query_and_the_changes_before_it_are_read(
    db, postgres_url, tmp_path, made_by
):
    """A publication of the user's that publishes truncates, or the one the source makes."""
    if made_by == "user":
        db.execute("CREATE PUBLICATION every_change FOR TABLE items")  # truncates too
        db.execute("SELECT pg_create_logical_replication_slot('trunc', 'pgoutput')")
    run = Run(
        make(postgres_url, publication="every_change", slot_name="trunc"),
        SqliteCommitStateStore(tmp_path / "s.sqlite"),
    )
    try:
        start = run.coordinator.initial_epoch()
        db.execute("INSERT INTO items VALUES (1, 'a', 1, NULL)")
        flushed(db)
        epoch = run.coordinator.next_epoch(start, ReadLimit())
        assert [r["id"] for r in run.read(epoch)] == [1]
        db.execute("TRUNCATE items")
        flushed(db)
        with pytest.raises(SinkConfigurationError, match=r"public\.items was truncated"):
            run.coordinator.next_epoch(epoch, ReadLimit())
    finally:
        run.coordinator.close()
        drop(db, "trunc")


@pytest.mark.parametrize("snapshot", [False, True], ids=["stream", "snapshot"])
def test_a_first_start_that_crashed_before_its_first_epoch_leaves_no_slot_behind(
    db, postgres_url, tmp_path, snapshot
):
    """Without ``slot_name`` the slot is named after the source id: the next start finds it.

    The crash: the enumerator made its slot (and, with a snapshot, the copy) and the
    driver died before epoch 0 was recorded. The next first start under the same source
    id takes that slot over (from its creation point: the change made in between is
    read) or, with a snapshot, drops it and its copy and takes the snapshot again.
    """
    from sinkv2._metrics import InMemoryMetricGroup
    from sinkv2.runtime._source_plan import PlanningContext

    def slots() -> list[str]:
        return [row[0] for row in db.execute("SELECT slot_name FROM pg_replication_slots")]

    db.execute("INSERT INTO items VALUES (1, 'before', 1, '{}')")
    source = make(postgres_url, snapshot=snapshot)
    crashed = source.create_enumerator(PlanningContext(1, InMemoryMetricGroup(), "orders-cdc"))
    crashed.start()
    made = crashed.slot
    crashed.close()  # the driver died: nothing recorded
    assert slots() == [made]
    db.execute("INSERT INTO items VALUES (2, 'in between', 2, '{}')")
    flushed(db)
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    run = Run(make(postgres_url, snapshot=snapshot), store, source_id="orders-cdc")
    try:
        epoch = run.coordinator.initial_epoch()
        assert run.slot() == made
        assert slots() == [made]
        rows: list[dict[str, Any]] = []
        while (after := run.coordinator.next_epoch(epoch, ReadLimit())) != epoch:
            epoch = after
            rows += run.read(epoch)
        assert sorted(r["id"] for r in rows) == ([1, 2] if snapshot else [2])
    finally:
        run.coordinator.close()
        drop(db, made)
    other = source.create_enumerator(PlanningContext(1, InMemoryMetricGroup(), "other-id"))
    other.start()
    try:
        assert other.slot != made  # another source id: another slot
    finally:
        other.close()
        drop(db, other.slot)
