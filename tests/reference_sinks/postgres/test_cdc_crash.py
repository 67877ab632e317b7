"""PostgresCdcSource's snapshot across a PostgreSQL crash (no Spark).

The snapshot copy is a logged table committed durably before any chunk is handed out,
so a server crash (``pg_ctl stop -m immediate``: crash recovery at the next start, which
would empty an UNLOGGED table) in the middle of the snapshot phase leaves it whole: the
restarted query replays the recorded epoch from it and goes on, every row once.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from reference_sinks.postgres._cdc_snapshot import copy_name, read_chunk, snapshot_into_copy
from sinkv2.errors import CommitStateError
from sinkv2.runtime import ReadLimit, SqliteCommitStateStore
from tests.reference_sinks.postgres.test_cdc_source import DDL, Run, drop, flushed, make

LIMIT = ReadLimit(max_records=12)


def test_a_server_crash_in_the_snapshot_phase_loses_no_row_and_doubles_none(
    postgres_server, postgres_url, tmp_path
):
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(DDL)
        db.execute("INSERT INTO items SELECT n, 'n' || n, n, '{}' FROM generate_series(1, 25) n")
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")

    def source() -> Any:
        return make(postgres_url, slot_name="crash", snapshot=True, snapshot_chunk_rows=10)

    run = Run(source(), store)
    epochs: list[list[dict[str, Any]]] = []
    try:
        epoch = run.coordinator.initial_epoch()
        epoch = run.coordinator.next_epoch(epoch, LIMIT)
        epochs.append(run.read(epoch))  # epoch 1: read, committed downstream
        epoch = run.coordinator.next_epoch(epoch, LIMIT)  # epoch 2: recorded, never read
        with psycopg.connect(postgres_url, autocommit=True) as db:
            persistence = db.execute(
                "SELECT relpersistence FROM pg_class WHERE relname = %s", (copy_name("crash"),)
            ).fetchone()
        assert persistence == ("p",), "the snapshot copy must be a logged table"
        postgres_server.restart(mode="immediate")  # a crash: recovery at the next start
        run.coordinator.close()
        run = Run(source(), store)  # the query starts again and replays epoch 2
        epochs.append(run.read(epoch))
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("UPDATE items SET name = 'changed' WHERE id = 1")  # after the point
            db.execute("DELETE FROM items WHERE id = 2")
            db.execute("INSERT INTO items VALUES (100, 'new', 1, NULL)")
            flushed(db)
        while (after := run.coordinator.next_epoch(epoch, LIMIT)) != epoch:
            epoch = after
            epochs.append(run.read(epoch))
        with psycopg.connect(postgres_url, autocommit=True) as db:
            assert db.execute("SELECT to_regclass(%s)", (copy_name("crash"),)).fetchone() == (None,)
            table = dict(db.execute("SELECT id, name FROM items").fetchall())
    finally:
        run.coordinator.close()
        with psycopg.connect(postgres_url, autocommit=True) as db:
            drop(db, "crash")
            db.execute(f"DROP TABLE IF EXISTS {copy_name('crash')}")
    rows = [row for part in epochs for row in part]
    assert sorted(row["id"] for row in rows if row["_op"] == "read") == list(range(1, 26))
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


def test_a_snapshot_copy_changed_by_hand_is_an_error_not_a_silent_loss(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        connection.execute("INSERT INTO t SELECT n, 'v' || n FROM generate_series(1, 10) n")
    try:
        _, rows = snapshot_into_copy(postgres_url, "hand_slot", "public", "t")
        assert rows == 10
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(f"DELETE FROM {copy_name('hand_slot')} WHERE sinkv2_row IN (5, 6)")
            with pytest.raises(CommitStateError, match=r"holds 2 of its rows 4\.\.7.*by hand"):
                read_chunk(connection, "hand_slot", ["id", "v"], 3, 7)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = 'hand_slot'"
            )
