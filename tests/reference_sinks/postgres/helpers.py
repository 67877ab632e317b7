"""Tables and readers for the PostgreSQL sink's tests."""

from __future__ import annotations

import psycopg

EVENTS_DDL = "CREATE TABLE {name} (id bigint, name text, score double precision)"
KEYED_DDL = "CREATE TABLE {name} (id bigint PRIMARY KEY, name text, score double precision)"


def create_table(url: str, ddl: str, name: str = "events") -> str:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(ddl.format(name=name))
    return name


def read_rows(url: str, table: str = "events", columns: str = "id, name, score") -> list[dict]:
    with psycopg.connect(url, autocommit=True) as connection:
        cursor = connection.execute(f"SELECT {columns} FROM {table} ORDER BY 1")
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def prepared(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return sorted(row[0] for row in rows)
