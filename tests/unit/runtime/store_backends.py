"""The commit state stores the store contract tests run against, with raw access to each.

A backend makes stores on one location (a SQLite file, or a PostgreSQL database and
schema) and reads and changes the tables behind the store's back, the way a crash,
a takeover or an operator would.
"""

import contextlib
import itertools
import sqlite3
import subprocess
import sys
import textwrap

from sinkv2.runtime import PostgresCommitStateStore, SqliteCommitStateStore
from sinkv2.runtime._sql.postgres import LAYOUT_TABLE, LAYOUT_VERSION, TABLES

USURPER = ("usurper", 1, "elsewhere", 0.0)

SOURCE_EPOCH_COLUMNS = [
    "source_id",
    "epoch",
    "enumerator_checkpoint",
    "assignment",
    "end_positions",
    "acknowledged",
    "fencing_token",
    "job_id",
    "created_at",
]
"""The columns of ``source_epoch_state`` (layout 4), the same in both databases."""


class SqliteBackend:
    name = "sqlite"
    store_class = SqliteCommitStateStore

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.store = self.new_store()
        self._fresh = itertools.count()

    def new_store(self):
        """Another store object on the same file."""
        return SqliteCommitStateStore(self.tmp_path / "state" / "commit_state.sqlite")

    @property
    def arg(self):
        return str(self.store.path)

    @property
    def where(self):
        """How the store's error messages name its location."""
        return str(self.store.path)

    def fresh_store(self):
        """A store on a location of its own, empty."""
        return SqliteCommitStateStore(self.tmp_path / f"run-{next(self._fresh)}" / "s.sqlite")

    def empty_store(self):
        """A store with no rows, for one example of a model test: here a fresh one."""
        return self.fresh_store()

    def hold_connection(self):
        """Nothing to hold: SQLite opens no server connection."""

    def let_go(self):
        """Nothing held."""

    def _connect(self):
        return contextlib.closing(sqlite3.connect(self.store.path))

    def rows(self, store=None):
        """Every epoch row, and every fence row as (sink id, token, holder's job id)."""
        path = (store or self.store).path
        with contextlib.closing(sqlite3.connect(path)) as connection:
            epochs = connection.execute(
                "SELECT sink_id, epoch, status, explicit, serializer_version, payload, "
                "fencing_token, job_id, updated_at, checkpoint_id "
                "FROM pending_sink_state ORDER BY 1, 2"
            ).fetchall()
            fences = connection.execute(
                "SELECT sink_id, fencing_token, json_extract(holder, '$.job_id') "
                "FROM sink_fence ORDER BY 1"
            ).fetchall()
        return [(*row[:3], bool(row[3]), *row[4:]) for row in epochs], fences

    def bump_fence(self, sink_id, store=None, *, kind="sink"):
        """Advance an id's fencing token behind the store's back, as a takeover would.

        ``kind`` is ``sink`` or ``source``: whose fence table the id is in.
        """
        path = (store or self.store).path
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            connection.execute(
                f"UPDATE {kind}_fence SET fencing_token = fencing_token + 1, holder = ? "
                f"WHERE {kind}_id = ?",
                ('{"job_id": "usurper", "pid": 1, "host": "elsewhere", "since": 0}', sink_id),
            )

    def downgrade_to_layout_3(self):
        """Make the store what main wrote before sources had tables: layout 3."""
        with self._connect() as connection, connection:
            connection.execute("DROP TABLE source_epoch_state")
            connection.execute("DROP TABLE source_fence")
            connection.execute("DROP TABLE sink_result")
        self.set_layout(3)

    def tables(self):
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            ).fetchall()
        return [name for (name,) in rows]

    def layout(self):
        with self._connect() as connection:
            return connection.execute("PRAGMA user_version").fetchone()[0]

    def delete_fences(self):
        with self._connect() as connection, connection:
            connection.execute("DELETE FROM sink_fence")

    def corrupt_status(self, sink_id, epoch, status):
        """Write a status no sinkv2 release writes, as a foreign writer could."""
        with self._connect() as connection, connection:
            connection.execute("PRAGMA ignore_check_constraints = ON")
            connection.execute(
                "UPDATE pending_sink_state SET status = ? WHERE sink_id = ? AND epoch = ?",
                (status, sink_id, epoch),
            )

    def set_layout(self, version):
        with self._connect() as connection:
            connection.execute(f"PRAGMA user_version = {version}")

    def python(self, code, *args):
        """A driver subprocess; ``code`` finds ``store`` made on this backend's location."""
        return _python(
            "import sys\nfrom sinkv2.runtime import SqliteCommitStateStore\n"
            "store = SqliteCommitStateStore(sys.argv[1])\n" + textwrap.dedent(code),
            self.arg,
            *args,
            cwd=self.tmp_path,
        )


class PostgresBackend:
    name = "postgres"
    store_class = PostgresCommitStateStore

    def __init__(self, url, tmp_path):
        self.url = url
        self.tmp_path = tmp_path
        self.store = self.new_store()
        self._fresh = itertools.count()
        self._model_store = None  # `empty_store`'s schema, once made
        self._held = None  # `hold_connection`'s connection, until `let_go`

    def new_store(self):
        return PostgresCommitStateStore(self.url)

    @property
    def arg(self):
        return self.url

    @property
    def where(self):
        return self.store.target

    def fresh_store(self):
        return PostgresCommitStateStore(self.url, schema=f"run_{next(self._fresh)}")

    def empty_store(self):
        """A store with no rows, for one example of a model test.

        The first call gets a schema of its own (its first acquire creates the tables);
        each later call the same schema with every row deleted but the layout version's:
        what a new schema holds once an acquire made its tables. A schema per example
        instead spends most of a model test's server time on DDL, and hundreds of
        schemas pile up in the catalog, where every acquire's table lookup and the
        database's drop at the end scan them. The caller has released every lease
        of the previous example (its teardown), so no advisory lock is left.
        """
        store = self._model_store
        if store is None:
            self._model_store = store = self.fresh_store()
            return store
        schema = store.schema
        with self.connect() as connection:
            connection.execute(
                "".join(
                    f'DELETE FROM "{schema}".{table};' for table in TABLES if table != LAYOUT_TABLE
                )
            )
        return store

    def connect(self):
        """A connection behind the store's back: the held one (`hold_connection`), or a new one."""
        import psycopg

        if self._held is not None:
            return contextlib.nullcontext(self._held)
        return psycopg.connect(self.url, autocommit=True)

    def hold_connection(self):
        """Until `let_go`, `connect` (takeovers, emptying) reuses one connection.

        A model test takes over sink ids several times an example; a connection per
        takeover is a server backend started and ended each time.
        """
        import psycopg

        if self._held is None:
            self._held = psycopg.connect(self.url, autocommit=True)

    def let_go(self):
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def rows(self, store=None):
        schema = (store or self.store).schema
        with self.connect() as connection:
            epochs = connection.execute(
                f"SELECT sink_id, epoch, status, explicit, serializer_version, payload, "
                f"fencing_token, job_id, updated_at, checkpoint_id "
                f'FROM "{schema}".pending_sink_state ORDER BY 1, 2'
            ).fetchall()
            fences = connection.execute(
                f'SELECT sink_id, fencing_token, holder_job_id FROM "{schema}".sink_fence '
                "ORDER BY 1"
            ).fetchall()
        return epochs, fences

    def bump_fence(self, sink_id, store=None, *, kind="sink"):
        schema = (store or self.store).schema
        with self.connect() as connection:
            connection.execute(
                f'UPDATE "{schema}".{kind}_fence SET fencing_token = fencing_token + 1, '
                "holder_job_id = %s, holder_pid = %s, holder_host = %s, holder_since = %s "
                f"WHERE {kind}_id = %s",
                (*USURPER, sink_id),
            )

    def downgrade_to_layout_3(self):
        schema = self.store.schema
        with self.connect() as connection:
            connection.execute(f'DROP TABLE "{schema}".source_epoch_state')
            connection.execute(f'DROP TABLE "{schema}".source_fence')
            connection.execute(f'DROP TABLE "{schema}".sink_result')
        self.set_layout(3)

    def tables(self):
        with self.connect() as connection:
            rows = connection.execute(
                "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s "
                "ORDER BY tablename",
                (self.store.schema,),
            ).fetchall()
        return [name for (name,) in rows]

    def layout(self):
        with self.connect() as connection:
            row = connection.execute(
                f'SELECT version FROM "{self.store.schema}".sink_store_layout'
            ).fetchone()
        return row[0]

    def delete_fences(self):
        with self.connect() as connection:
            connection.execute(f'DELETE FROM "{self.store.schema}".sink_fence')

    def corrupt_status(self, sink_id, epoch, status):
        with self.connect() as connection:
            table = f'"{self.store.schema}".pending_sink_state'
            connection.execute(
                f"ALTER TABLE {table} DROP CONSTRAINT pending_sink_state_status_check"
            )
            connection.execute(
                f"UPDATE {table} SET status = %s WHERE sink_id = %s AND epoch = %s",
                (status, sink_id, epoch),
            )

    def set_layout(self, version):
        with self.connect() as connection:
            connection.execute(
                f'UPDATE "{self.store.schema}".sink_store_layout SET version = %s', (version,)
            )

    def python(self, code, *args):
        return _python(
            "import sys\nfrom sinkv2.runtime import PostgresCommitStateStore\n"
            "store = PostgresCommitStateStore(sys.argv[1])\n" + textwrap.dedent(code),
            self.arg,
            *args,
            cwd=self.tmp_path,
        )


def _python(code, *args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def make_backend(request, tmp_path):
    """The backend named by ``request.param``; PostgreSQL starts only when asked for."""
    if request.param == "sqlite":
        return SqliteBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("postgres_url"), tmp_path)


__all__ = [
    "LAYOUT_VERSION",
    "SOURCE_EPOCH_COLUMNS",
    "PostgresBackend",
    "SqliteBackend",
    "make_backend",
]
