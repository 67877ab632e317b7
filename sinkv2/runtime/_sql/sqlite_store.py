"""`SqliteCommitStateStore`: the commit state store in one SQLite file, for one host.

The contracts are `sinkv2.runtime.CommitStateStore` (see ``_store``) and
`sinkv2.runtime.SourceStateStore` (``_source_store``). Two mechanisms keep two
drivers from both proceeding on one sink id or source id: a ``flock`` per id
(``file_lock``), and a fencing token per id that every write checks in its own
transaction. ``flock`` and SQLite's WAL mode need a local filesystem, not a
network share: for drivers on several hosts use a server-backed store.

The lease and the operator's queries are the SQL stores' own (``lease``,
``store``); the file, its layouts (``sqlite``) and its lock files are SQLite's.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import sqlite3
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, final

from sinkv2._text import describe
from sinkv2.errors import CommitStateError, SinkConfigurationError
from sinkv2.runtime._source_store import SourceStateStore
from sinkv2.runtime._sql.dialect import Dialect, describe_error
from sinkv2.runtime._sql.fence import Hold, Holder, Keyspace
from sinkv2.runtime._sql.file_lock import drop_lock, lock_path, probe_lock, take_lock
from sinkv2.runtime._sql.sqlite import advance_fence, connect, hold, sqlite_dialect
from sinkv2.runtime._sql.store import SqlCommitStateStore
from sinkv2.runtime._store import CommitStateStore, SinkLease, check_name

__all__ = [
    "DEFAULT_FILE_NAME",
    "STATE_DIR_ENV",
    "SqliteCommitStateStore",
    "default_state_store_path",
]

STATE_DIR_ENV: Final = "SINKV2_STATE_DIR"
"""The environment variable naming the directory of the default database."""

DEFAULT_FILE_NAME: Final = "commit_state.sqlite"
"""The database's file name inside the state directory."""


def default_state_store_path() -> pathlib.Path:
    """Where `SqliteCommitStateStore` keeps its database when given no path.

    ``$SINKV2_STATE_DIR/commit_state.sqlite`` if that variable is set and not empty,
    else ``.sinkv2/commit_state.sqlite`` under the current working directory;
    resolved to an absolute path now.
    """
    state_dir = os.environ.get(STATE_DIR_ENV)
    base = pathlib.Path(state_dir).expanduser() if state_dir else pathlib.Path.cwd() / ".sinkv2"
    return (base / DEFAULT_FILE_NAME).resolve()


_UNRECORDED: Final = Holder(job_id="(not recorded yet)", pid=0, host="(unknown)", since=0.0)
"""The holder of a lock whose file is being written and whose sink id has no record yet."""


@final
class SqliteCommitStateStore(SqlCommitStateStore):
    """A `CommitStateStore` and `SourceStateStore` in one SQLite file, for drivers on one host.

    The store is only a path: it pickles, and every `acquire` (and
    `acquire_source`) opens its own connection. Beside the database,
    ``<file>.locks/`` holds one small lock file per sink id and per source id
    that was ever acquired; they are never deleted, because deleting a
    lock file that another process has open would let two drivers lock two
    different files.

    Besides the contract, the store answers an operator's questions without
    acquiring anything, as `PostgresCommitStateStore` does: which sink ids it
    knows (`sink_ids`), their `epochs`, `jobs` and `origin`, and who holds a sink
    id now (`holder`); which source ids it knows (`source_ids`) and their
    `source_epochs`.

    Args:
        path: The database file; created with its tables on first acquire. Defaults
            to `default_state_store_path`. Relative paths are resolved against the
            current working directory now, not at acquire.

    Raises:
        SinkConfigurationError: ``path`` is not a str or path, or names a directory.
        CommitStateError: The parent directory could not be created.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            resolved = default_state_store_path()
        else:
            raw = os.fspath(path) if isinstance(path, os.PathLike) else path
            if not isinstance(raw, str) or not raw:
                raise SinkConfigurationError(
                    f"'path' must be a non-empty str or os.PathLike[str] naming the commit "
                    f"state database file (got {describe(path)}); or pass None to use "
                    f"${STATE_DIR_ENV}/{DEFAULT_FILE_NAME}"
                )
            resolved = pathlib.Path(raw).expanduser().resolve()
        if resolved.is_dir():
            raise SinkConfigurationError(
                f"'path' must name the commit state database file, but {str(resolved)!r} is "
                f"a directory; pass a file inside it, e.g. {str(resolved / DEFAULT_FILE_NAME)!r}"
            )
        try:
            resolved.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CommitStateError(
                f"cannot create the directory of the commit state database {str(resolved)!r}: "
                f"{type(error).__name__}: {error}; pick a writable location"
            ) from error
        self._path = resolved

    @property
    def path(self) -> pathlib.Path:
        """The database file, absolute."""
        return self._path

    def acquire(self, sink_id: str, *, job_id: str) -> SinkLease:
        """Take the sink id for this driver, without waiting.

        Takes the sink id's OS lock, then, in one transaction, increments its
        fencing token and records this driver as the holder.

        Raises:
            SinkConfigurationError: ``sink_id`` or ``job_id`` is not a non-empty str.
            ConcurrentCommitError: Another live driver holds the sink id, or this
                process holds it through a lease not released yet.
            CommitStateError: The database is unreadable, of a newer layout, or not a
                commit state database; or the lock file could not be opened.
        """
        return self._acquire_sink(sink_id, job_id)

    def _take(self, keyspace: Keyspace, key: str, job_id: str) -> tuple[int, Hold]:
        """Lock ``key``'s file, then advance its fencing token; the token and the hold."""
        check_name("job_id", job_id, "pass this run's id, e.g. the Spark application id")
        holder = Holder(
            job_id=job_id, pid=os.getpid(), host=socket.gethostname(), since=time.time()
        )
        lock_fd = take_lock(lock_path(self._path, key, keyspace), key, holder, keyspace)
        connection: sqlite3.Connection | None = None
        try:
            connection = connect(self._path)
            token = advance_fence(connection, self._dialect, keyspace, key, holder)
        except BaseException:
            if connection is not None:
                connection.close()
            drop_lock(lock_fd)
            raise
        return token, hold(connection, lock_fd)

    # -- what an operator needs, without a lease -----------------------------------

    def holder(self, sink_id: str) -> Holder | None:
        """Who holds ``sink_id`` now, or ``None`` if no process holds its lock.

        The answer has ``job_id``, ``pid``, ``host`` and ``since`` (unix seconds);
        ``str()`` of it names them. The lock is probed with a shared ``flock``
        taken without waiting and dropped at once: a driver acquiring the sink id
        in that instant is refused with `ConcurrentCommitError` (a re-run
        proceeds). The holder's details come from its lock file, or, if that is
        being rewritten, from the store's record of the last acquire.

        Raises:
            SinkConfigurationError: ``sink_id`` is not a non-empty str.
            CommitStateError: The lock file cannot be opened, or the database read.
        """
        check_name("sink_id", sink_id, "pass the sink's stable id")
        held, holder = probe_lock(lock_path(self._path, sink_id))
        if not held:
            return None
        if holder is None:
            with self._reading(f"find the holder of sink {sink_id!r}") as connection:
                row = None
                if connection is not None:
                    row = connection.execute(
                        "SELECT holder FROM sink_fence WHERE sink_id = ?", (sink_id,)
                    ).fetchone()
            holder = None if row is None else Holder.load(str(row[0]))
        return holder if holder is not None else _UNRECORDED

    @property
    def _dialect(self) -> Dialect:
        return sqlite_dialect(self._path)

    @contextlib.contextmanager
    def _reading(self, action: str) -> Iterator[sqlite3.Connection | None]:
        """A short-lived connection; ``None`` if the database file does not exist."""
        if not self._path.exists():
            yield None
            return
        connection = connect(self._path)
        try:
            yield connection
        except sqlite3.Error as error:
            raise CommitStateError(
                f"{self._dialect.where}: could not {action}: {describe_error(error)}"
            ) from error
        finally:
            connection.close()

    def __repr__(self) -> str:
        return f"SqliteCommitStateStore({str(self._path)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SqliteCommitStateStore):
            return NotImplemented
        return self._path == other._path

    def __hash__(self) -> int:
        return hash((SqliteCommitStateStore, self._path))


if TYPE_CHECKING:
    _STORE_CONFORMS: type[CommitStateStore] = SqliteCommitStateStore
    _SOURCE_STORE_CONFORMS: type[SourceStateStore] = SqliteCommitStateStore
