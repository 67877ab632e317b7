"""PostgresCdcSource across crashes, no Spark: the server's, and the driver's at every step.

The snapshot copy is a logged table committed durably before any chunk is handed out,
so a server crash (``pg_ctl stop -m immediate``: crash recovery at the next start, which
would empty an UNLOGGED table) in the middle of the snapshot phase leaves it whole: the
restarted query replays the recorded epoch from it and goes on, every row once.

Then a hypothesis-chosen workload (transactions of inserts, updates and deletes, one
held open across epochs) read in epochs by the engine-neutral coordinator, as Spark
plans and reads them, with the driver restarted after planning an epoch, after reading
it, or after its commit downstream: every transaction once, whole, in commit order, and
the slot never confirms what was not committed. (The Spark stream, real sinks, SIGKILL
and a server restart: ``tests/integration/test_cdc_stream_kill.py``.)
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks.postgres import PostgresCdcSource
from reference_sinks.postgres._cdc_server import parse_lsn
from reference_sinks.postgres._cdc_snapshot import copy_name, read_chunk, snapshot_into_copy
from sinkv2.errors import CommitStateError
from sinkv2.runtime import ReadLimit, SqliteCommitStateStore
from tests.reference_sinks.postgres.test_cdc_source import (
    DDL,
    Run,
    change_after_the_snapshot,
    check_snapshot_then_changes,
    drop,
    make,
)

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
            change_after_the_snapshot(db)
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
    check_snapshot_then_changes(epochs, table)


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


# --- hypothesis: a workload and driver restarts at every step, no Spark ----------------------

EXAMPLES = 5
"""Each example makes a table, a slot and several coordinators (about 1-3 s on a loaded
2-core machine): few examples, each with many steps."""

SYNC = "-c synchronous_commit=on"
"""The workload's commits are flushed when they return (the test server commits
asynchronously, and an open transaction's records may stay unflushed): an epoch planned
after them reads up to them."""
Step = tuple[Any, ...]
TRANSACTION = st.lists(st.sampled_from(("insert", "update", "delete")), min_size=1, max_size=3)
"""A transaction's changes (the Spark kill test, ``test_cdc_stream_kill``, draws them too)."""
STEPS = st.one_of(
    st.tuples(st.just("txn"), TRANSACTION),
    st.tuples(st.just("hold"), st.sampled_from(("insert", "update", "delete"))),
    st.tuples(st.just("release")),
    st.tuples(
        st.just("epoch"),
        st.integers(min_value=3, max_value=7),
        st.sampled_from((None, None, "planned", "read", "committed")),
    ),
)


class Workload:
    """Transactions on ``t`` and the changes they make, in commit order: (op, id, v)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.db = psycopg.connect(url, autocommit=True, options=SYNC)
        self.held: Any = None
        self.held_changes: list[tuple[str, int, int]] = []
        self.live: set[int] = set()
        self.next_id = 1
        self.changes: list[list[tuple[str, int, int]]] = []  # per transaction, commit order

    def change(self, connection: Any, op: str, out: list[tuple[str, int, int]]) -> None:
        busy = {c[1] for c in self.held_changes}  # rows the held transaction locks
        free = sorted(self.live - busy) if connection is self.db else sorted(self.live)
        if op == "insert" or not free:
            key, self.next_id = self.next_id, self.next_id + 1
            connection.execute("INSERT INTO t VALUES (%s, 0)", (key,))
            self.live.add(key)
            out.append(("insert", key, 0))
        elif op == "update":
            key = free[len(out) % len(free)]
            row = connection.execute("UPDATE t SET v = v + 1 WHERE id = %s RETURNING v", (key,))
            out.append(("update", key, int(row.fetchone()[0])))
        else:
            key = free[-1]
            connection.execute("DELETE FROM t WHERE id = %s", (key,))
            self.live.discard(key)
            out.append(("delete", key, 0))

    def transaction(self, ops: list[str]) -> None:
        out: list[tuple[str, int, int]] = []
        with self.db.transaction():
            for op in ops:
                self.change(self.db, op, out)
        self.changes.append(out)

    def hold(self, op: str) -> None:
        if len(self.held_changes) == 3:  # as large as a TRANSACTION: the smallest epoch reads it
            self.release()
        if self.held is None:
            self.held = psycopg.connect(self.url, options=SYNC)
        self.change(self.held, op, self.held_changes)

    def release(self) -> None:
        if self.held is not None:
            self.held.commit()
            self.held.close()
            self.held = None
            self.changes.append(self.held_changes)
            self.held_changes = []

    def apply(self, step: Step) -> bool:
        """Run a workload step; False for an epoch step (the test's)."""
        if step[0] == "txn":
            self.transaction(list(step[1]))
        elif step[0] == "hold":
            self.hold(step[1])
        elif step[0] == "release":
            self.release()
        return step[0] != "epoch"

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
        self.db.close()


def confirmed(db: Any, slot: str) -> int:
    row = db.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return parse_lsn(row[0])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEPS, min_size=8, max_size=30))
def test_a_random_workload_read_with_driver_restarts_at_every_step_lands_each_change_once(
    postgres_url, tmp_path_factory, steps
):
    """Hypothesis chooses transactions (one held open across epochs), epoch limits, and
    where the driver dies: after planning an epoch, after reading it, after the sink
    committed it (before Spark's commit log, so the engine replays it). The change log
    committed downstream (one entry per epoch, replaced by a replay, as an idempotent
    sink) ends equal to the transactions in commit order, each whole in one epoch, a
    replay reads exactly what the first read did, and the slot's confirmed position
    never passes what was committed downstream."""
    url = postgres_url
    work = Workload(url)
    work.db.execute("DROP TABLE IF EXISTS t")
    work.db.execute("DROP PUBLICATION IF EXISTS t_pub")
    work.db.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    work.db.execute("CREATE PUBLICATION t_pub FOR TABLE t")
    store = SqliteCommitStateStore(tmp_path_factory.mktemp("cdc") / "state.sqlite")

    def source() -> PostgresCdcSource:
        return PostgresCdcSource(url, "t", publication="t_pub", slot_name="prop")

    run = Run(source(), store)
    downstream: dict[int, list[dict[str, Any]]] = {}
    problems: list[str] = []

    def restart() -> None:
        nonlocal run
        run.coordinator.close()
        run = Run(source(), store)

    def epoch_step(limit: int, crash: str | None) -> bool:
        last = max(downstream, default=0)
        planned = run.coordinator.next_epoch(last, ReadLimit(max_records=limit))
        if planned == last:
            return False
        if crash == "planned":
            restart()
        rows = run.read(planned)
        if crash == "read":
            restart()
            again = run.read(planned)
            if again != rows:
                problems.append(f"epoch {planned} replayed differently")
            rows = again
        downstream[planned] = rows
        if crash == "committed":
            restart()
            if run.read(planned) != rows:
                problems.append(f"epoch {planned} replayed differently after its commit")
        committed = {r["_lsn"] for part in downstream.values() for r in part}
        samples.append((confirmed(work.db, "prop"), committed))
        return True

    samples: list[tuple[int, set[int]]] = []

    try:
        run.coordinator.initial_epoch()  # makes the slot: the changes after it
        for step in steps:
            if not work.apply(step):
                epoch_step(step[1], step[2])
        work.release()
        while epoch_step(7, None):
            pass
        table = dict(work.db.execute("SELECT id, v FROM t").fetchall())
    finally:
        run.coordinator.close()
        work.close()
        with psycopg.connect(url, autocommit=True) as db:
            drop(db, "prop")
    assert problems == []
    rows = [r for epoch in sorted(downstream) for r in downstream[epoch]]
    by_lsn: dict[int, list[tuple[str, int, int]]] = {}
    epoch_of: dict[int, set[int]] = {}
    for epoch in sorted(downstream):
        for r in downstream[epoch]:
            by_lsn.setdefault(r["_lsn"], []).append((r["_op"], r["id"], r["v"] or 0))
            epoch_of.setdefault(r["_lsn"], set()).add(epoch)
    assert all(len(epochs) == 1 for epochs in epoch_of.values()), "a transaction was split"
    for position, committed in samples:  # the slot never gave up a change not committed
        assert {lsn for lsn in by_lsn if lsn <= position} <= committed, position
    got = [by_lsn[lsn] for lsn in sorted(by_lsn)]
    want = [changes for changes in work.changes if changes]
    assert got == want
    assert [(r["_lsn"], r["_seq"]) for r in rows] == sorted((r["_lsn"], r["_seq"]) for r in rows)
    mirror: dict[int, int] = {}
    for r in rows:
        if r["_op"] == "delete":
            mirror.pop(r["id"])
        else:
            mirror[r["id"]] = r["v"]
    assert mirror == table


def test_long_slot_names_sharing_a_prefix_get_their_own_snapshot_copy():
    # A copy shared by two slots would be read (and dropped) by both queries.
    first, second = "s" * 55 + "_orders", "s" * 55 + "_refunds"
    assert copy_name(first) != copy_name(second)
    assert max(len(copy_name(first)), len(copy_name(second)), len(copy_name("x" * 63))) == 63
    assert copy_name("crash") == "sinkv2_snap_crash"  # short names as before
