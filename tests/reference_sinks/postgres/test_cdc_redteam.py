"""PostgresCdcSource red team (wt101): array types read as text, and a source id's table.

On a real PostgreSQL (the ``postgres_url`` fixture), no Spark.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresCdcSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import ReadLimit, SqliteCommitStateStore
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
