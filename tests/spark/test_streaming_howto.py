"""The streaming how-to (docs/streaming.md): its program runs, and every order lands once.

The page includes its code from docs/examples/streaming_iceberg.py, so running that
file's functions runs what the page shows, and its output must be the one the page
prints. The second test adds what the page promises after a crash: nothing to do
but restart the query (the driver "dies" through the stage listener, as the
runtime's own crash tests stop it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sinkv2.runtime import CommitStatus, EpochStatus, SqliteCommitStateStore

pytestmark = pytest.mark.spark

pytest.importorskip("pyiceberg")

ROOT = Path(__file__).resolve().parents[2]
HOWTO = ROOT / "docs" / "examples" / "streaming_iceberg.py"
PAGE = ROOT / "docs" / "streaming.md"


@pytest.fixture(scope="module")
def howto():
    """docs/examples/streaming_iceberg.py, loaded as a reader runs it: not from a package.

    Nothing of it travels to Spark's workers: the sink is IcebergSink, and the
    stream is built from Spark's own functions.
    """
    spec = importlib.util.spec_from_file_location("howto_streaming_iceberg", HOWTO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def expected_orders(howto, count: int) -> list[dict[str, object]]:
    """The table rows of orders 0 .. count - 1, as `produce` publishes them."""
    rows = []
    for n in range(count):
        rows.append(
            {
                "order_id": n,
                "customer": f"c{n % 7}",
                "amount": 5 + n % 40 * 0.25,
                "kafka_partition": n % howto.PARTITIONS,
                "kafka_offset": n // howto.PARTITIONS,
            }
        )
    return rows


def table_rows(howto, warehouse: Path) -> list[dict[str, object]]:
    rows = howto.orders_sink(warehouse).load_table().scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda row: row["order_id"])


def snapshot_checkpoints(howto, warehouse: Path) -> list[str]:
    table = howto.orders_sink(warehouse).load_table()
    return [snapshot.summary["sinkv2.checkpoint-id"] for snapshot in table.snapshots()]


def unreferenced_data_files(howto, warehouse: Path) -> set[str]:
    """Parquet files under the warehouse that no snapshot of the table references."""
    table = howto.orders_sink(warehouse).load_table()
    referenced = {Path(f["file_path"]).name for f in table.inspect.files().to_pylist()}
    on_disk = {path.name for path in warehouse.rglob("sinkv2-*.parquet")}
    return on_disk - referenced


def printed_on_the_page() -> str:
    """The output the page shows for `demo`: its text block that starts "first run:"."""
    blocks = PAGE.read_text(encoding="utf-8").split("```text\n")[1:]
    (shown,) = [block for block in blocks if block.startswith("first run:")]
    return shown.split("```", 1)[0]


def statuses(query) -> list[tuple[int, CommitStatus, int]]:
    return [(r.checkpoint_id, r.status, r.records_written) for r in query.recent_results]


def test_the_howto_streams_every_order_into_iceberg_exactly_once(spark, howto, tmp_path, capsys):
    howto.demo(spark, tmp_path)

    # It prints what the page says it prints, line for line.
    assert capsys.readouterr().out == printed_on_the_page()
    # Every order once, with its values: nothing lost, nothing twice.
    warehouse = tmp_path / "warehouse"
    assert table_rows(howto, warehouse) == expected_orders(howto, 50)
    assert snapshot_checkpoints(howto, warehouse) == ["1", "2", "3", "4", "5"]
    assert unreferenced_data_files(howto, warehouse) == set()
    # The commit state store lives next to Spark's checkpoint, bound to this sink id.
    checkpoint = tmp_path / "checkpoint"
    assert (checkpoint / "sinkv2" / "commit_state.sqlite").is_file()
    assert (checkpoint / "sinkv2" / "sink.json").read_text() == (
        '{"sink_id": "orders-topic-to-iceberg"}'
    )


class DriverDied(Exception):
    """Stands in for a driver that dies at one stage of one checkpoint."""


def die_at(event: str, checkpoint: int):
    def listener(stage: str, epoch: int) -> None:
        if (stage, epoch) == (event, checkpoint):
            raise DriverDied(f"{stage} of checkpoint {epoch}")

    return listener


def forget_spark_commit(checkpoint: Path) -> int:
    """What Spark finds when its driver died after the sink's commit, before its own."""
    commits = checkpoint / "commits"
    last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_after_a_crash_restarting_the_query_is_all_it_takes(spark, howto, tmp_path, capsys):
    topic, warehouse = tmp_path / "topic", tmp_path / "warehouse"
    checkpoint = tmp_path / "checkpoint"
    for first in (0, 10):
        howto.produce(topic, first, 10)
    query = howto.catch_up(spark, topic, warehouse, checkpoint)
    assert statuses(query) == [(1, CommitStatus.COMMITTED, 10), (2, CommitStatus.COMMITTED, 10)]

    # The driver dies in checkpoint 3, once its committables are recorded Pending
    # and before they are committed: the table does not have them yet.
    howto.produce(topic, 20, 10)
    query = howto.start_ingest(
        spark,
        topic,
        warehouse,
        checkpoint,
        trigger={"availableNow": True},
        on_stage=die_at("pending-recorded", 3),
    )
    with pytest.raises(DriverDied):
        query.awaitTermination()
    assert isinstance(query.exception(), DriverDied)
    assert len(table_rows(howto, warehouse)) == 20
    store = SqliteCommitStateStore(checkpoint / "sinkv2" / "commit_state.sqlite")
    with store.acquire(howto.SINK_ID, job_id="inspect") as lease:
        assert [r.epoch for r in lease.epochs(EpochStatus.PENDING)] == [3]

    # What to do: restart the query. Starting commits checkpoint 3 from the store;
    # Spark replays its micro-batch, which writes nothing and reports the recommit.
    howto.produce(topic, 30, 10)
    query = howto.catch_up(spark, topic, warehouse, checkpoint)
    assert statuses(query) == [
        (3, CommitStatus.RECOMMITTED, 0),  # the restart committed it: the result says so
        (4, CommitStatus.COMMITTED, 10),
    ]
    assert table_rows(howto, warehouse) == expected_orders(howto, 40)

    # The driver dies after the commit of checkpoint 4, before Spark logged the
    # micro-batch as done: Spark replays it, and it is not written again.
    assert forget_spark_commit(checkpoint) == 3
    query = howto.catch_up(spark, topic, warehouse, checkpoint)
    assert statuses(query) == [(4, CommitStatus.ALREADY_COMMITTED, 0)]

    assert table_rows(howto, warehouse) == expected_orders(howto, 40)
    assert snapshot_checkpoints(howto, warehouse) == ["1", "2", "3", "4"]
    # The dead run's staged files were removed by the restart; only committed ones stay.
    assert unreferenced_data_files(howto, warehouse) == set()
    capsys.readouterr()
