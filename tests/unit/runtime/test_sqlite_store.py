"""The SQLite commit state store: what only it has - a file, its lock files, its layouts.

The contract every store keeps (transitions, exclusion, fencing, crashes, bad input)
is tested against this store and the PostgreSQL one in test_store_contract.py.
"""

import contextlib
import hashlib
import json
import os
import sqlite3

import pytest

from sinkv2 import END_OF_INPUT
from sinkv2.errors import CommitStateError, SinkConfigurationError
from sinkv2.runtime import SCHEMA_VERSION, SqliteCommitStateStore, default_state_store_path
from tests.unit.runtime.store_backends import SOURCE_EPOCH_COLUMNS


@pytest.fixture
def store(tmp_path):
    return SqliteCommitStateStore(tmp_path / "state" / "commit_state.sqlite")


@pytest.fixture
def lease(store):
    with store.acquire("orders", job_id="job-1") as held:
        yield held


def test_the_store_is_its_path(store):
    assert repr(store) == f"SqliteCommitStateStore({str(store.path)!r})"
    assert SqliteCommitStateStore(str(store.path)) == store


def test_the_lock_file_beside_the_database_names_the_holder(store, lease):
    digest = hashlib.sha256(b"orders").hexdigest()[:32]
    lock_file = store.path.with_name("commit_state.sqlite.locks") / f"{digest}.lock"
    holder = json.loads(lock_file.read_text())
    assert (holder["job_id"], holder["pid"]) == ("job-1", os.getpid())


@pytest.mark.parametrize("path", [b"/tmp/x.sqlite", 7, ""])
def test_the_store_rejects_a_path_of_the_wrong_type(path):
    with pytest.raises(SinkConfigurationError, match="'path' must be a non-empty str"):
        SqliteCommitStateStore(path)


def test_the_store_rejects_a_directory(tmp_path):
    with pytest.raises(SinkConfigurationError, match="is a directory; pass a file inside it"):
        SqliteCommitStateStore(tmp_path)


def test_a_corrupt_database_is_reported_with_its_path(tmp_path):
    path = tmp_path / "commit_state.sqlite"
    path.write_bytes(b"this is not a database, it only sits where one should be" * 100)
    store = SqliteCommitStateStore(path)
    with pytest.raises(CommitStateError) as caught:
        store.acquire("orders", job_id="j")
    assert str(path) in str(caught.value)
    assert "restore it from a backup" in str(caught.value)
    # the lock taken before opening the database was dropped
    path.unlink()
    store.acquire("orders", job_id="j").release()


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "app.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(CommitStateError, match=r"is not a commit state database: .*\['users'\]"):
        SqliteCommitStateStore(path).acquire("orders", job_id="j")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("users",)]


def test_the_layout_is_the_documented_one(store):
    store.acquire("orders", job_id="j").release()
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        columns = {
            table: [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
            for table in (
                "pending_sink_state",
                "sink_fence",
                "sink_job",
                "sink_origin",
                "source_epoch_state",
                "source_fence",
                "sink_result",
            )
        }
    assert columns == {
        "pending_sink_state": [
            "sink_id",
            "epoch",
            "status",
            "explicit",
            "serializer_version",
            "payload",
            "fencing_token",
            "job_id",
            "updated_at",
            "checkpoint_id",
            "writer_states",
        ],
        "sink_fence": ["sink_id", "fencing_token", "holder"],
        "sink_job": ["sink_id", "job_id", "fencing_token", "started_at"],
        "sink_origin": ["sink_id", "origin", "bound_at"],
        "source_epoch_state": SOURCE_EPOCH_COLUMNS,
        "source_fence": ["source_id", "fencing_token", "holder"],
        "sink_result": ["sink_id", "job_id", "recorded_at", "outcome"],
    }


LAYOUT_1 = (
    """CREATE TABLE pending_sink_state (
        sink_id TEXT NOT NULL, epoch INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit INTEGER NOT NULL, serializer_version INTEGER NOT NULL,
        payload BLOB NOT NULL, fencing_token INTEGER NOT NULL, job_id TEXT NOT NULL,
        updated_at REAL NOT NULL, PRIMARY KEY (sink_id, epoch))""",
    """CREATE TABLE sink_fence (
        sink_id TEXT PRIMARY KEY NOT NULL, fencing_token INTEGER NOT NULL,
        holder TEXT NOT NULL)""",
)


def test_a_layout_1_file_is_migrated_and_its_rows_keep_their_meaning(store):
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        for statement in LAYOUT_1:
            connection.execute(statement)
        connection.executemany(
            "INSERT INTO pending_sink_state VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                ("orders", 3, "pending", 1, 1, b"three", 1, "old", 1.0),
                ("orders", 4, "committed", 0, 1, b"four", 1, "old", 2.0),
            ],
        )
        connection.execute("INSERT INTO sink_fence VALUES ('orders', 1, '{}')")
        connection.execute("PRAGMA user_version = 1")
        connection.commit()
    with store.acquire("orders", job_id="new") as lease:
        explicit, assigned = lease.epochs()
        assert (explicit.payload, explicit.checkpoint_id) == (b"three", 3)
        assert (assigned.payload, assigned.checkpoint_id) == (b"four", END_OF_INPUT)
        assert explicit.writer_states == b""
        assert lease.fencing_token == 2
        lease.record_job()
        assert lease.mark_committed(3).checkpoint_id == 3
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


# -- default path -----------------------------------------------------------------


def test_the_default_path_honours_the_state_dir_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKV2_STATE_DIR", str(tmp_path / "states"))
    assert default_state_store_path() == tmp_path / "states" / "commit_state.sqlite"
    store = SqliteCommitStateStore()
    assert store.path == tmp_path / "states" / "commit_state.sqlite"
    assert store.path.parent.is_dir()


def test_the_default_path_is_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("SINKV2_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    store = SqliteCommitStateStore()
    assert store.path == tmp_path / ".sinkv2" / "commit_state.sqlite"
    assert store.path.parent.is_dir()
    # resolved at construction: moving elsewhere later changes nothing
    monkeypatch.chdir(tmp_path / ".sinkv2")
    assert store.path == tmp_path / ".sinkv2" / "commit_state.sqlite"
    store.acquire("orders", job_id="j").release()
    assert (tmp_path / ".sinkv2" / "commit_state.sqlite").is_file()


def test_a_relative_path_and_state_dir_resolve_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert SqliteCommitStateStore("a/b.sqlite").path == tmp_path / "a" / "b.sqlite"
    monkeypatch.setenv("SINKV2_STATE_DIR", "rel")
    assert SqliteCommitStateStore().path == tmp_path / "rel" / "commit_state.sqlite"
    monkeypatch.setenv("SINKV2_STATE_DIR", "")
    assert SqliteCommitStateStore().path == tmp_path / ".sinkv2" / "commit_state.sqlite"


# What main wrote before sources had tables, literally: layout 3.
LAYOUT_3 = (
    """CREATE TABLE pending_sink_state (
        sink_id TEXT NOT NULL, epoch INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'aborted', 'committed')),
        explicit INTEGER NOT NULL, serializer_version INTEGER NOT NULL,
        payload BLOB NOT NULL, fencing_token INTEGER NOT NULL, job_id TEXT NOT NULL,
        updated_at REAL NOT NULL, checkpoint_id INTEGER,
        writer_states BLOB NOT NULL DEFAULT x'', PRIMARY KEY (sink_id, epoch))""",
    """CREATE TABLE sink_fence (
        sink_id TEXT PRIMARY KEY NOT NULL, fencing_token INTEGER NOT NULL,
        holder TEXT NOT NULL)""",
    """CREATE TABLE sink_job (
        sink_id TEXT NOT NULL, job_id TEXT NOT NULL, fencing_token INTEGER NOT NULL,
        started_at REAL NOT NULL, PRIMARY KEY (sink_id, job_id))""",
    """CREATE TABLE sink_origin (
        sink_id TEXT PRIMARY KEY NOT NULL, origin TEXT NOT NULL, bound_at REAL NOT NULL)""",
)


def test_a_layout_3_file_gets_the_source_tables_and_keeps_its_sink_rows(store):
    rows = [
        ("orders", 1, "committed", 1, 2, b"one", 4, "old", 1.0, 1, b"states"),
        ("orders", 2, "pending", 0, 2, b"two", 4, "old", 2.0, END_OF_INPUT, b""),
    ]
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        for statement in LAYOUT_3:
            connection.execute(statement)
        connection.executemany(
            "INSERT INTO pending_sink_state VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
        )
        connection.execute("INSERT INTO sink_fence VALUES ('orders', 4, '{}')")
        connection.execute("INSERT INTO sink_job VALUES ('orders', 'old', 4, 1.0)")
        connection.execute("INSERT INTO sink_origin VALUES ('orders', 'query 1', 1.0)")
        connection.execute("PRAGMA user_version = 3")
        connection.commit()
    with store.acquire_source("orders", job_id="new") as source:
        assert source.fencing_token == 1
        source.record_epoch(0, enumerator_checkpoint=b"cp", assignment=b"as")
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (5,)
        assert connection.execute("SELECT * FROM pending_sink_state ORDER BY epoch").fetchall() == (
            rows
        )
    assert store.jobs("orders") == ["old"]
    assert store.origin("orders") == "query 1"
    with store.acquire("orders", job_id="new") as sink:
        assert sink.fencing_token == 5
        assert sink.get(1).writer_states == b"states"
        sink.mark_committed(2)
