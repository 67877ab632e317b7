"""Open the commit state store an operator names, and what ``sinkv2 state`` asks of it.

A location starting with ``postgresql://`` or ``postgres://`` is a
`PostgresCommitStateStore` (psycopg imported only then); anything else is the path
of a `SqliteCommitStateStore` file, which must exist: an operator's typo must not
create an empty store that says a sink has no history.
"""

from __future__ import annotations

import os
import pathlib
import socket
from typing import Final, Protocol

from sinkv2._cli._errors import CliError
from sinkv2.runtime import (
    DEFAULT_FILE_NAME,
    STATE_DIR_ENV,
    CommitStateStore,
    EpochRecord,
    EpochStatus,
    JobOutcome,
    PostgresCommitStateStore,
    SourceEpochRecord,
    SourceStateStore,
    SqliteCommitStateStore,
    default_state_store_path,
)

__all__ = [
    "POSTGRES_SCHEMES",
    "HolderInfo",
    "OperatorStore",
    "driver_state",
    "open_store",
    "store_location",
]

POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


class HolderInfo(Protocol):
    """Who holds a sink id, as either store reports it (``str()`` describes it)."""

    @property
    def job_id(self) -> str | None:
        """The holder's job, if recorded."""
        ...

    @property
    def pid(self) -> int | None:
        """The driver's process id on its host, if recorded."""
        ...

    @property
    def host(self) -> str | None:
        """The driver's host name, if recorded."""
        ...

    @property
    def since(self) -> float | None:
        """When the driver acquired the sink id, in unix seconds, if recorded."""
        ...


class OperatorStore(CommitStateStore, SourceStateStore, Protocol):
    """A store that answers an operator's questions without acquiring anything.

    Required: `acquire` and `acquire_source` (the contracts) and the read-only
    queries below; both
    `SqliteCommitStateStore` and `PostgresCommitStateStore` have them.
    """

    def sink_ids(self) -> list[str]:
        """Every sink id the store has a record of, sorted."""
        ...

    def source_ids(self) -> list[str]:
        """Every source id the store has a record of, sorted."""
        ...

    def source_epochs(self, source_id: str) -> list[SourceEpochRecord]:
        """The epoch records of ``source_id``, by epoch."""
        ...

    def epochs(self, sink_id: str, *statuses: EpochStatus) -> list[EpochRecord]:
        """The records of ``sink_id``, by epoch."""
        ...

    def jobs(self, sink_id: str) -> list[str]:
        """The jobs recorded for ``sink_id`` and not finished, oldest first."""
        ...

    def origin(self, sink_id: str) -> str | None:
        """The stream ``sink_id`` is bound to, if any."""
        ...

    def holder(self, sink_id: str) -> HolderInfo | None:
        """Who holds ``sink_id`` now, or ``None``."""
        ...

    def outcomes(self, sink_id: str, *, limit: int = ...) -> list[JobOutcome]:
        """The newest recorded job outcomes of ``sink_id``, newest first."""
        ...


def open_store(location: str | None, *, schema: str | None = None) -> OperatorStore:
    """The store at ``location``: a PostgreSQL URL, or the path of an existing SQLite file.

    A directory holding ``commit_state.sqlite`` stands for that file. ``None`` is the
    store ``apply()`` uses by default (`default_state_store_path`: under
    ``$SINKV2_STATE_DIR``, else ``./.sinkv2/``), which must exist too.

    Raises:
        CliError: The SQLite file does not exist, ``schema`` was given for a SQLite
            store, or psycopg is missing for a PostgreSQL one.
        SinkConfigurationError: The store refused its settings.
    """
    if location is None:
        return _default_store(schema)
    if location.startswith(POSTGRES_SCHEMES):
        try:
            if schema is None:
                return PostgresCommitStateStore(location)
            return PostgresCommitStateStore(location, schema=schema)
        except ImportError as error:
            raise CliError(str(error)) from error
    if schema is not None:
        raise CliError(
            f"--schema names a PostgreSQL schema, but {location!r} is a SQLite file; drop "
            "--schema, or pass a postgresql:// URL"
        )
    path = pathlib.Path(location).expanduser()
    if path.is_dir() and (path / DEFAULT_FILE_NAME).is_file():
        path = path / DEFAULT_FILE_NAME
    if not path.is_file():
        raise CliError(
            f"no commit state database at {str(path)!r}: pass the SQLite file a job used "
            f"(by default ${STATE_DIR_ENV}/{DEFAULT_FILE_NAME}, or .sinkv2/{DEFAULT_FILE_NAME} "
            "in the job's working directory), or a postgresql:// URL"
        )
    return SqliteCommitStateStore(path)


def _default_store(schema: str | None) -> OperatorStore:
    if schema is not None:
        raise CliError(
            "--schema names a PostgreSQL schema, but no STORE was given (the default store "
            "is a SQLite file); pass the store's postgresql:// URL before the other arguments"
        )
    path = default_state_store_path()
    if not path.is_file():
        where = (
            f"${STATE_DIR_ENV} is {os.environ[STATE_DIR_ENV]!r}"
            if os.environ.get(STATE_DIR_ENV)
            else f"${STATE_DIR_ENV} is not set, so it is under the working directory "
            f"{os.getcwd()!r}"
        )
        raise CliError(
            f"no commit state database at the default location {str(path)!r} ({where}); run "
            "this where the job ran, set the variable as the job did, or pass the store the "
            "job used as STORE (a SQLite file or a postgresql:// URL)"
        )
    return SqliteCommitStateStore(path)


def store_location(store: OperatorStore) -> str:
    """Where the store is, for output: the SQLite path, or PostgreSQL settings without password."""
    if isinstance(store, SqliteCommitStateStore):
        return str(store.path)
    if isinstance(store, PostgresCommitStateStore):
        return store.target
    return repr(store)


def driver_state(holder: HolderInfo) -> str:
    """Whether the holder's driver process runs: ``running``, ``not running`` or ``unknown``.

    Only a process on this host can be looked at; one elsewhere is ``unknown``.
    """
    if holder.pid is None or holder.host is None or holder.pid <= 0:
        return "unknown"
    if holder.host != socket.gethostname():
        return "unknown"
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return "not running"
    except PermissionError:
        return "running"  # it exists, under another user
    return "running"
