"""What one SQL database does its own way, and the SQL written once for both.

Every statement the stores run is written once, as a template in SQLite's shape,
and rendered for a database by its `Dialect`:

- ``?`` placeholders become the driver's (``%s`` for psycopg);
- ``{schema}`` before a table name becomes the schema prefix (``""`` in SQLite,
  ``"sinkv2".`` in PostgreSQL);
- ``{for_update}`` and ``{for_share}`` become the row locks PostgreSQL needs inside
  a transaction (empty in SQLite, whose ``BEGIN IMMEDIATE`` locks the whole file);
- type words in table definitions (``{int64}``, ``{float64}``, ``{bytes}``,
  ``{bool}``, ``{empty_bytes}``) become the database's type names.

Upserts are ``INSERT ... ON CONFLICT (...) DO UPDATE SET x = excluded.x`` in both.
The dialect also says how a transaction is opened (``BEGIN IMMEDIATE`` or
psycopg's ``transaction()``), which driver errors become `CommitStateError`, and
whether a connection was lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import attrs

__all__ = ["Connection", "Cursor", "Dialect", "describe_error", "render"]


class Cursor(Protocol):
    """What the stores read from a statement's cursor (``sqlite3`` and psycopg alike)."""

    @property
    def rowcount(self) -> int:
        """How many rows the statement changed."""
        ...

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        ...

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        ...


class Connection(Protocol):
    """A DB-API connection in autocommit mode (``sqlite3`` or psycopg)."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> Cursor:
        """Run one statement."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


@attrs.frozen
class Dialect:
    """What one SQL database does its own way, for one store location.

    Made by ``sqlite.sqlite_dialect`` and ``postgres.postgres_dialect``.

    Attributes:
        where: How messages name the store, e.g. ``commit state database '/x.sqlite'``.
        shown_as: How a lease's repr names the store (after ``on``).
        container: What a foreign writer changed when a row is unreadable
            (``the file``, ``the table``).
        param: The driver's placeholder: ``?`` or ``%s``.
        words: What ``{schema}``, ``{for_update}``, ``{for_share}`` and the type
            words of a template become.
        errors: The driver's errors: the ones a store turns into `CommitStateError`.
        holder_columns: The columns of a fence row that describe its holder.
        describe_holder: Who holds a fence row, from its ``holder_columns``.
        transaction: One write transaction on a connection: committed on leaving,
            rolled back on an error.
        is_lost: Whether a connection is closed or broken (it never reconnects).
    """

    where: str
    shown_as: str
    container: str
    param: str
    words: Mapping[str, str]
    errors: tuple[type[Exception], ...]
    holder_columns: str
    describe_holder: Callable[[Sequence[Any]], str]
    transaction: Callable[[Connection], AbstractContextManager[object]]
    is_lost: Callable[[Connection], bool]


def render(dialect: Dialect, template: str, /, **names: str) -> str:
    """``template`` in ``dialect``'s SQL; ``names`` fill the other ``{...}`` fields.

    A template holds no ``?`` other than placeholders, and no braces other than
    fields; ``names`` hold no placeholders other than the dialect's own.
    """
    return template.replace("?", dialect.param).format_map({**dialect.words, **names})


def describe_error(error: BaseException) -> str:
    """A driver error for a message: its type and its text, one line."""
    return f"{type(error).__name__}: {str(error).strip()}"
