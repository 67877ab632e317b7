"""PostgresCdcSource red team (wt101): array types read as text, and a source id's table.

On a real PostgreSQL (the ``postgres_url`` fixture), no Spark.
"""

from __future__ import annotations

import datetime as dt
import secrets
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresCdcSource, PostgresSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import ReadLimit, SqliteCommitStateStore
from sinkv2.source import SourceReaderError
from tests.reference_sinks.postgres.test_cdc_source import Run, drop, flushed

# Arrays whose elements the docs read as text: uuid, json, jsonb, and unconstrained
# numeric (its exact text, NaN included), with NULL elements and JSON that needs quoting.
ARRAYS = (
    "u uuid[], j json[], jb jsonb[], n numeric[]",
    "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}', "
    """ARRAY['{"a": "x,}\\"y"}'::json, NULL], ARRAY['[1, {"b": null}]'::jsonb], """
    "'{1.50,NaN,NULL,-1e-30}'",
)


def _read_all(run: Run) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    epoch = run.coordinator.initial_epoch()
    return_after = epoch
    while True:
        after = run.coordinator.next_epoch(return_after, ReadLimit())
        if after == return_after:
            return rows
        return_after = after
        rows += run.read(after)


def test_arrays_of_types_read_as_text_are_their_elements_text_in_snapshot_and_stream(
    postgres_url, tmp_path
):
    columns, values = ARRAYS
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE TABLE arr (id int PRIMARY KEY, {columns})")
        db.execute("CREATE PUBLICATION arr_pub FOR TABLE arr")
        db.execute(f"INSERT INTO arr VALUES (1, {values}), (2, NULL, NULL, NULL, '{{}}')")
        source = PostgresCdcSource(
            postgres_url, "arr", publication="arr_pub", slot_name="arr", snapshot=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            db.execute(f"INSERT INTO arr VALUES (3, {values})")
            flushed(db)
            rows = _read_all(run)
        finally:
            run.coordinator.close()
            drop(db, "arr")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_arr")
        names = ("u", "j", "jb", "n")
        want = {
            id_: dict(zip(names, row, strict=True))
            for id_, *row in db.execute(
                "SELECT id, "
                + ", ".join(
                    f"CASE WHEN {c} IS NULL THEN NULL ELSE "
                    f"ARRAY(SELECT x::text FROM unnest({c}) AS x) END"
                    for c in names
                )
                + " FROM arr"
            ).fetchall()
        }
    assert want[1]["j"] == ['{"a": "x,}\\"y"}', None]
    assert [(r["_op"], r["id"]) for r in rows] == [("read", 1), ("read", 2), ("insert", 3)]
    for row in rows:
        assert {c: row[c] for c in names} == want[row["id"]]


def test_a_source_id_restored_with_another_table_or_slot_is_refused(postgres_url, tmp_path):
    """The checkpoint's slot was made for one table: another table would silently lose rows.

    Read through the old slot, the other table's rows from before the slot's creation
    (and its snapshot) would never come; a named slot that is not the checkpoint's would
    be ignored.
    """
    with psycopg.connect(postgres_url, autocommit=True) as db:
        for name in ("first", "second"):
            db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
            db.execute(f"INSERT INTO {name} VALUES (1, 'there before')")
        store = SqliteCommitStateStore(tmp_path / "s.sqlite")

        def source(table: str, **options: Any) -> PostgresCdcSource:
            return PostgresCdcSource(
                postgres_url,
                table,
                publication=f"{table}_pub",
                create_publication=True,
                **options,
            )

        run = Run(source("first", slot_name="mine"), store, source_id="orders")
        try:
            start = run.coordinator.initial_epoch()
            run.read(run.coordinator.next_epoch(start, ReadLimit()))
            run.coordinator.close()
            for again, says in (
                (source("second", slot_name="mine"), r"public\.first.*public\.second"),
                (source("first", slot_name="theirs"), r"'mine'.*'theirs'"),
                (source("first", snapshot=True), "started without snapshot=True"),
            ):
                run = Run(again, store, source_id="orders")
                with pytest.raises(SinkConfigurationError, match=says) as caught:
                    _read_all(run)  # epoch 1 was recorded: restored from it
                assert "new source_id" in str(caught.value)
                run.coordinator.close()
            db.execute("INSERT INTO first VALUES (2, 'after')")
            flushed(db)
            run = Run(source("first"), store, source_id="orders")  # as recorded: goes on
            assert [r["id"] for r in _read_all(run)] == [2]
        finally:
            run.coordinator.close()
            drop(db, "mine")
            drop(db, "theirs")


def _slots(db: Any) -> list[str]:
    return [row[0] for row in db.execute("SELECT slot_name FROM pg_replication_slots")]


def test_an_empty_table_s_snapshot_leaves_no_copy_while_the_stream_runs(postgres_url, tmp_path):
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE empty (id int PRIMARY KEY)")
        source = PostgresCdcSource(
            postgres_url,
            "empty",
            publication="empty_pub",
            create_publication=True,
            slot_name="empty",
            snapshot=True,
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            db.execute("INSERT INTO empty VALUES (1)")
            flushed(db)
            assert [(r["_op"], r["id"]) for r in _read_all(run)] == [("insert", 1)]
            assert db.execute("SELECT to_regclass('sinkv2_snap_empty')").fetchone()[0] is None
        finally:
            run.coordinator.close()
            drop(db, "empty")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_empty")


def test_a_snapshot_copy_that_cannot_be_made_is_a_clear_error_and_leaves_no_slot(
    postgres_url, tmp_path
):
    """The role may not create the copy (PostgreSQL 15's default on schema public), or the
    copy fails (the role may not read the table): the slot made for it goes too."""
    role = f"cdc_{tmp_path.name[-12:].replace('-', '_')}".lower()
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE t (id int PRIMARY KEY)")
        db.execute("CREATE PUBLICATION t_pub FOR TABLE t")
        db.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
        db.execute(f"GRANT SELECT ON t TO {role}")
        db.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        url = psycopg.conninfo.make_conninfo(postgres_url, user=role)
        try:
            for grant, says in (
                ("", f"role '{role}' may not create tables.*GRANT CREATE ON SCHEMA"),
                (
                    f"GRANT CREATE ON SCHEMA public TO {role}; REVOKE SELECT ON t FROM {role}",
                    "that failed: permission denied for table t. The slot was dropped again",
                ),
            ):
                if grant:
                    db.execute(grant)
                source = PostgresCdcSource(url, "t", publication="t_pub", snapshot=True)
                run = Run(source, SqliteCommitStateStore(tmp_path / f"{bool(grant)}.sqlite"))
                with pytest.raises(SinkConfigurationError, match=says):
                    run.coordinator.initial_epoch()
                run.coordinator.close()
                assert _slots(db) == []
        finally:
            for slot in _slots(db):
                drop(db, slot)
            db.execute(f"DROP OWNED BY {role}")
            db.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("ALTER PUBLICATION pub DROP TABLE watched", "no longer covers table public.watched"),
        ("ALTER PUBLICATION pub SET (publish = 'insert')", r"no longer publishes .*'update'"),
        (
            "ALTER PUBLICATION pub SET TABLE watched WHERE (id > 5), other",
            r"no longer publishes .* \(now .*'WHERE \(id > 5\)'",
        ),
    ],
    ids=["table-dropped-from-it", "fewer-operations", "a-row-filter"],
)
def test_a_publication_changed_under_the_running_query_stops_it(
    postgres_url, tmp_path, change, says
):
    """Changes the publication no longer sends were skipped silently, and the slot advanced."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE watched (id int PRIMARY KEY, v text)")
        db.execute("CREATE TABLE other (id int PRIMARY KEY)")
        db.execute("CREATE PUBLICATION pub FOR TABLE watched, other")
        source = PostgresCdcSource(postgres_url, "watched", publication="pub", slot_name="pub")
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            epoch = run.coordinator.initial_epoch()
            db.execute("INSERT INTO watched VALUES (1, 'a')")
            flushed(db)
            epoch = run.coordinator.next_epoch(epoch, ReadLimit())
            assert [r["id"] for r in run.read(epoch)] == [1]
            db.execute(change)
            db.execute("UPDATE watched SET v = 'b'")  # not sent any more
            db.execute("INSERT INTO other VALUES (1)")
            flushed(db)
            with pytest.raises(SinkConfigurationError, match=says) as caught:
                run.coordinator.next_epoch(epoch, ReadLimit())
            assert "new source_id" in str(caught.value)
        finally:
            run.coordinator.close()
            drop(db, "pub")


def test_a_column_whose_type_modifier_changed_is_named_as_ddl(postgres_url, tmp_path):
    """numeric(10,2) made numeric(12,4): the same type oid, another Arrow type."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE priced (id int PRIMARY KEY, p numeric(10,2))")
        db.execute("CREATE PUBLICATION priced_pub FOR TABLE priced")
        source = PostgresCdcSource(
            postgres_url, "priced", publication="priced_pub", slot_name="priced"
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            epoch = run.coordinator.initial_epoch()
            db.execute("INSERT INTO priced VALUES (1, 1.25)")
            db.execute("ALTER TABLE priced ALTER COLUMN p TYPE numeric(12,4)")
            db.execute("INSERT INTO priced VALUES (2, 1.2345)")
            flushed(db)
            with pytest.raises(SinkConfigurationError, match="changed since the source was made"):
                run.coordinator.next_epoch(epoch, ReadLimit())
        finally:
            run.coordinator.close()
            drop(db, "priced")


def test_domains_enums_and_network_types_are_read_as_postgres_source_reads_them(
    postgres_url, tmp_path
):
    """A domain as its base type (nested, and with the base's modifier on the domain);
    enums, inet, cidr, macaddr and xml as their text, as PostgresSource reads them."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE DOMAIN qty AS int CHECK (VALUE >= 0)")
        db.execute("CREATE DOMAIN small_qty AS qty CHECK (VALUE < 100)")
        db.execute("CREATE DOMAIN price AS numeric(10, 2)")
        db.execute("CREATE DOMAIN label AS varchar(8)")
        db.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        db.execute(
            "CREATE TABLE typed (id int PRIMARY KEY, q qty, s small_qty, p price, l label, "
            "m mood, ms mood[], ip inet, net cidr, mac macaddr, x xml)"
        )
        db.execute("CREATE PUBLICATION typed_pub FOR TABLE typed")
        values = (
            "5, 7, 12.5, 'tag', 'ok', '{sad,NULL,ok}', '10.0.0.1/8', '10.0.0.0/8', "
            "'08:00:2b:01:02:03', '<a>b</a>'"
        )
        db.execute(f"INSERT INTO typed VALUES (1, {values})")
        source = PostgresCdcSource(
            postgres_url, "typed", publication="typed_pub", slot_name="typed", snapshot=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            db.execute(f"INSERT INTO typed VALUES (2, {values})")
            flushed(db)
            rows = _read_all(run)
        finally:
            run.coordinator.close()
            drop(db, "typed")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_typed")
    read_by_postgres_source = PostgresSource(postgres_url, "typed").get_produced_type()
    assert source.schema.types[3:] == read_by_postgres_source.types
    assert [(r["_op"], r["id"]) for r in rows] == [("read", 1), ("insert", 2)]
    for row in rows:
        assert {k: v for k, v in row.items() if not k.startswith("_") and k != "id"} == {
            "q": 5,
            "s": 7,
            "p": Decimal("12.50"),
            "l": "tag",
            "m": "ok",
            "ms": ["sad", None, "ok"],
            "ip": "10.0.0.1/8",
            "net": "10.0.0.0/8",
            "mac": "08:00:2b:01:02:03",
            "x": "<a>b</a>",
        }


def test_a_snapshot_through_a_row_filtered_publication_holds_the_rows_its_stream_follows(
    postgres_url, tmp_path
):
    """``FOR TABLE t WHERE (...)`` sends the changes of the rows the filter keeps: the
    snapshot must hold those rows only, else rows whose changes never come stay stale."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE f (id int PRIMARY KEY, v int)")
        db.execute("INSERT INTO f SELECT n, n FROM generate_series(1, 6) AS n")
        db.execute("CREATE PUBLICATION f_pub FOR TABLE f WHERE (id > 3)")
        source = PostgresCdcSource(
            postgres_url, "f", publication="f_pub", slot_name="f", snapshot=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            db.execute("UPDATE f SET v = 100 WHERE id IN (2, 5)")  # 2: filtered out
            db.execute("INSERT INTO f VALUES (7, 7)")
            flushed(db)
            rows = _read_all(run)
        finally:
            run.coordinator.close()
            drop(db, "f")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_f")
        mirror: dict[int, int] = {}
        for row in rows:
            mirror[row["id"]] = row["v"]
        assert mirror == dict(db.execute("SELECT id, v FROM f WHERE id > 3").fetchall())
        assert sorted(r["id"] for r in rows if r["_op"] == "read") == [4, 5, 6]
        changes = [(r["_op"], r["id"]) for r in rows if r["_op"] != "read"]
        assert changes == [("update", 5), ("insert", 7)]


def test_an_unchanged_toasted_value_of_an_update_that_changed_the_key_is_not_made_null(
    postgres_url, tmp_path
):
    """Such an update logs the old key only (its other columns null): no value to take."""
    big = secrets.token_hex(8000)  # stored out of line (TOAST)
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE docs (id int PRIMARY KEY, body text)")
        db.execute("CREATE PUBLICATION docs_pub FOR TABLE docs")
        db.execute("INSERT INTO docs VALUES (1, %s)", (big,))
        source = PostgresCdcSource(postgres_url, "docs", publication="docs_pub", slot_name="docs")
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            epoch = run.coordinator.initial_epoch()
            db.execute("UPDATE docs SET id = 2")  # the body is unchanged, and not logged
            flushed(db)
            with pytest.raises(SourceReaderError, match="update did not carry column 'body'"):
                run.read(run.coordinator.next_epoch(epoch, ReadLimit()))
        finally:
            run.coordinator.close()
            drop(db, "docs")


def test_snapshot_rows_hold_the_text_the_stream_sends(postgres_url, tmp_path):
    """A cast to text is not always the output function pgoutput writes: char(n) keeps
    its padding in the stream, an inet its host form; the snapshot reads the same."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE padded (id int PRIMARY KEY, c char(3), ip inet, ok bool)")
        db.execute("CREATE PUBLICATION padded_pub FOR TABLE padded")
        db.execute("INSERT INTO padded VALUES (1, 'ab', '10.0.0.1', true)")
        source = PostgresCdcSource(
            postgres_url, "padded", publication="padded_pub", slot_name="padded", snapshot=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            db.execute("INSERT INTO padded VALUES (2, 'ab', '10.0.0.1', true)")
            flushed(db)
            rows = _read_all(run)
        finally:
            run.coordinator.close()
            drop(db, "padded")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_padded")
    assert [(r["_op"], r["c"], r["ip"], r["ok"]) for r in rows] == [
        ("read", "ab ", "10.0.0.1", True),
        ("insert", "ab ", "10.0.0.1", True),
    ]


def test_a_source_refused_when_made_leaves_no_publication_it_created(postgres_url):
    def publications() -> list[str]:
        return [r[0] for r in db.execute("SELECT pubname FROM pg_publication ORDER BY 1")]

    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE shaped (id int PRIMARY KEY, at point)")
        for columns, says in ((["id", "nope"], "unknown"), (None, "type point")):
            with pytest.raises(SinkConfigurationError, match=says):
                PostgresCdcSource(
                    postgres_url,
                    "shaped",
                    publication="made_pub",
                    create_publication=True,
                    columns=columns,
                )
            assert publications() == []
        db.execute("CREATE PUBLICATION theirs FOR TABLE shaped")  # not the source's to drop
        with pytest.raises(SinkConfigurationError, match="type point"):
            PostgresCdcSource(postgres_url, "shaped", publication="theirs", create_publication=True)
        assert publications() == ["theirs"]


def test_before_values_stop_when_the_table_leaves_replica_identity_full(postgres_url, tmp_path):
    """Its updates then log no old row: ``_before`` would be null without a word."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE ident (id int PRIMARY KEY, v text)")
        db.execute("ALTER TABLE ident REPLICA IDENTITY FULL")
        db.execute("CREATE PUBLICATION ident_pub FOR TABLE ident")
        db.execute("INSERT INTO ident VALUES (1, 'a')")
        source = PostgresCdcSource(
            postgres_url, "ident", publication="ident_pub", slot_name="ident", before=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            epoch = run.coordinator.initial_epoch()
            db.execute("UPDATE ident SET v = 'b'")
            flushed(db)
            epoch = run.coordinator.next_epoch(epoch, ReadLimit())
            assert [r["_before"] for r in run.read(epoch)] == [{"id": 1, "v": "a"}]
            db.execute("ALTER TABLE ident REPLICA IDENTITY DEFAULT")
            db.execute("UPDATE ident SET v = 'c'")
            flushed(db)
            with pytest.raises(SinkConfigurationError, match="REPLICA IDENTITY FULL"):
                run.coordinator.next_epoch(epoch, ReadLimit())
        finally:
            run.coordinator.close()
            drop(db, "ident")


INTERVALS = (
    "'0'",
    "'1 year 2 mons 3 days 04:05:06.789'",
    "'-1 year 3 days -00:00:00.000001'",
    "'13 mons -2 days +1000000:00:00'",
    "'-7 mons'",
    "NULL",
)


def test_intervals_are_read_as_postgres_source_reads_them_in_snapshot_and_stream(
    postgres_url, tmp_path
):
    """A year is 365.25 days and a month 30 (``extract(epoch ...)``), whatever the
    server's IntervalStyle; psycopg's loader would count a year as 365 days."""
    from sinkv2.testing import LocalSourceEngine

    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"ALTER DATABASE {db.info.dbname} SET IntervalStyle = 'sql_standard'")
        db.execute("CREATE TABLE iv (id int PRIMARY KEY, d interval, ds interval[])")
        db.execute("CREATE PUBLICATION iv_pub FOR TABLE iv")
        array = f"ARRAY[{', '.join(INTERVALS)}]::interval[]"
        for id_, value in enumerate(INTERVALS[:3]):
            db.execute(f"INSERT INTO iv VALUES ({id_}, {value}, {array})")
        source = PostgresCdcSource(
            postgres_url, "iv", publication="iv_pub", slot_name="iv", snapshot=True
        )
        run = Run(source, SqliteCommitStateStore(tmp_path / "s.sqlite"))
        try:
            run.coordinator.initial_epoch()
            for id_, value in enumerate(INTERVALS[3:], start=3):
                db.execute(f"INSERT INTO iv VALUES ({id_}, {value}, NULL)")
            flushed(db)
            rows = _read_all(run)
            engine = LocalSourceEngine(PostgresSource(postgres_url, "iv"), 1)
            engine.run()
            engine.finish()
        finally:
            run.coordinator.close()
            drop(db, "iv")
            db.execute("DROP TABLE IF EXISTS sinkv2_snap_iv")
    want = {r.record["id"]: (r.record["d"], r.record["ds"]) for r in engine.committed}
    assert [(r["_op"], r["id"]) for r in rows] == [("read", i) for i in range(3)] + [
        ("insert", i) for i in range(3, 6)
    ]
    assert {r["id"]: (r["d"], r["ds"]) for r in rows} == want
    assert want[1][0] == dt.timedelta(days=365.25 + 60 + 3, seconds=4 * 3600 + 5 * 60 + 6.789)
