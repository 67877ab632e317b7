"""PostgresSource red team (wt101): a source id's checkpoint and the relation it reads.

On a real PostgreSQL (the ``postgres_url`` fixture), no Spark: epochs planned by the
engine-neutral coordinator as Spark's stream reader plans them.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from reference_sinks.postgres import PostgresSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)


def _read_on(source: PostgresSource, store: Any, start: int | None = None) -> list[Any]:
    coordinator = SourceEpochCoordinator(source, store, "orders", parallelism=1)
    rows: list[Any] = []
    try:
        epoch = coordinator.initial_epoch() if start is None else start
        while (after := coordinator.next_epoch(epoch, ReadLimit())) != epoch:
            epoch = after
            rows += [
                row["id"]
                for piece in coordinator.slices(epoch)
                for batch in read_epoch_slice(source, source.get_produced_type(), piece)
                for row in batch.to_pylist()
            ]
    finally:
        coordinator.close()
    return rows


def test_a_source_id_restored_with_another_relation_or_split_key_is_refused(postgres_url, tmp_path):
    """Its key ranges and positions belong to the first relation: another read nothing."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        for name in ("first", "second"):
            db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, k int)")
            db.execute(f"INSERT INTO {name} SELECT n, -n FROM generate_series(1, 10) AS n")
    store = SqliteCommitStateStore(tmp_path / "s.sqlite")
    assert sorted(_read_on(PostgresSource(postgres_url, "first", chunks=2), store)) == list(
        range(1, 11)
    )
    for again, says in (
        (PostgresSource(postgres_url, "second"), "public.first.*, not .*public.second"),
        (PostgresSource(postgres_url, query="SELECT * FROM first"), "not query"),
        (PostgresSource(postgres_url, "first", split_key="k"), "split on 'id'.*split on 'k'"),
    ):
        with pytest.raises(SinkConfigurationError, match=says) as caught:
            _read_on(again, store, start=1)
        assert "new source_id" in str(caught.value)
    # the same table, spelled with its schema: the checkpoint's, nothing more to read
    assert _read_on(PostgresSource(postgres_url, "public.first", chunks=2), store, start=1) == []
