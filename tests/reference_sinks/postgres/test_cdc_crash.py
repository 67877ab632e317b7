"""PostgresCdcSource's snapshot copy across a PostgreSQL crash (no Spark).

The copy is an UNLOGGED table: crash recovery empties it. A chunk read afterwards
must fail clearly, never return no rows as if the snapshot were read.
"""

from __future__ import annotations

import psycopg
import pytest

from reference_sinks.postgres._cdc_snapshot import read_chunk, snapshot_into_copy
from sinkv2.errors import CommitStateError


def test_a_snapshot_copy_emptied_by_a_server_crash_is_an_error_not_a_silent_loss(
    postgres_server, postgres_url
):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        connection.execute("INSERT INTO t SELECT n, 'v' || n FROM generate_series(1, 10) n")
    try:
        _, rows = snapshot_into_copy(postgres_url, "crash_slot", "public", "t")
        assert rows == 10
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            assert [n for n, _ in read_chunk(connection, "crash_slot", ["id", "v"], 3, 7)] == [
                4,
                5,
                6,
                7,
            ]
            connection.execute("CHECKPOINT")  # the rest is durable: only the copy is lost
        postgres_server.restart(mode="immediate")  # a crash: recovery resets UNLOGGED tables
        with (
            psycopg.connect(postgres_url, autocommit=True) as connection,
            pytest.raises(CommitStateError, match=r"holds 0 of its rows 4\.\.7.*UNLOGGED"),
        ):
            read_chunk(connection, "crash_slot", ["id", "v"], 3, 7)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = 'crash_slot'"
            )
