"""PostgresSink red-teamed: values a column would change, and crashes of a real process.

A crash is a subprocess that ``os._exit``s at a chosen point; then the next run of
the same sink id does what the runtime does (commit or abort the pending epoch,
clean up the dead job) and the database must hold no prepared transaction, no
staging table, and the rows exactly once or not at all.
"""

import decimal
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from reference_sinks.postgres import PostgresSink
from sinkv2.errors import FatalDestinationError
from sinkv2.runtime import BasicCommitterInitContext, BasicSinkWriterContext, BasicWriterInitContext
from tests.reference_sinks.postgres.helpers import prepared, read_rows

ROOT = Path(__file__).resolve().parents[3]
D = decimal.Decimal


def _writer(sink, schema, job="job-1"):
    return sink.create_writer(
        BasicWriterInitContext(
            subtask_id=0,
            number_of_parallel_subtasks=1,
            attempt_number=0,
            job_id=job,
            input_schema=schema,
        )
    )


def _execute(url, statement):
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)


def _write_batch(sink, batch):
    writer = _writer(sink, batch.schema)
    try:
        writer.write_arrow_batch(batch, BasicSinkWriterContext())
        writer.flush(True)
        committables = writer.prepare_commit()
    finally:
        writer.close()
    committer = sink.create_committer(BasicCommitterInitContext())
    try:
        from sinkv2.runtime import commit_with_retries

        commit_with_retries(committer, committables, sleep=lambda _: None)
    finally:
        committer.close()


# --- decimals PostgreSQL would round -----------------------------------------------------


@pytest.mark.parametrize(
    "ddl", ["id bigint, amount numeric(10, 2)", "id bigint PRIMARY KEY, amount numeric(10, 2)"]
)
def test_a_decimal_the_column_would_round_is_refused_naming_row_column_and_value(postgres_url, ddl):
    _execute(postgres_url, f"CREATE TABLE money ({ddl})")
    amounts = [D("1.5"), None, D("-2.25"), D("1.005")]
    batch = pa.RecordBatch.from_pydict(
        {"id": [0, 1, 2, 3], "amount": pa.array(amounts, pa.decimal128(38, 18))}
    )
    sink = PostgresSink(postgres_url, "money")
    with pytest.raises(FatalDestinationError) as raised:
        _write_batch(sink, batch)
    message = str(raised.value)
    assert "row 3 " in message
    assert "'amount'" in message
    assert "1.005000000000000000" in message
    assert "1.01" in message
    assert read_rows(postgres_url, "money", "id, amount") == []
    assert prepared(postgres_url) == []


def test_decimals_that_fit_exactly_pass_whatever_their_type(postgres_url):
    _execute(
        postgres_url, "CREATE TABLE money (id bigint, amount numeric(10, 2), many numeric(10, 2)[])"
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "id": [0, 1, 2],
            "amount": pa.array([D("1.5"), None, D("-99999999.99")], pa.decimal128(38, 18)),
            "many": pa.array([[D("0.1"), None], None, []], pa.list_(pa.decimal128(20, 6))),
        }
    )
    _write_batch(PostgresSink(postgres_url, "money"), batch)
    assert read_rows(postgres_url, "money", "id, amount, many") == [
        {"id": 0, "amount": D("1.50"), "many": [D("0.10"), None]},
        {"id": 1, "amount": None, "many": None},
        {"id": 2, "amount": D("-99999999.99"), "many": []},
    ]


def test_a_decimal_in_an_array_the_column_would_round_is_refused(postgres_url):
    _execute(postgres_url, "CREATE TABLE money (id bigint, many numeric(10, 2)[])")
    batch = pa.RecordBatch.from_pydict(
        {
            "id": [0, 1],
            "many": pa.array([[D("0.1")], [None, D("0.125")]], pa.list_(pa.decimal128(20, 6))),
        }
    )
    with pytest.raises(FatalDestinationError, match=r"row 1 .*'many'.*0\.125000 to 0\.13"):
        _write_batch(PostgresSink(postgres_url, "money"), batch)
    assert read_rows(postgres_url, "money", "id") == []


# --- a process that dies -----------------------------------------------------------------

CRASH = textwrap.dedent(
    """
    import os, sys
    import pyarrow as pa
    from reference_sinks.postgres import PostgresSink, PostgresCommitter
    from sinkv2.runtime import BasicCommitterInitContext, BasicSinkWriterContext
    from sinkv2.runtime import BasicWriterInitContext, commit_with_retries

    url, point, out = sys.argv[1:]
    sink = PostgresSink(url, "events", sink_id="crashing")
    batch = pa.RecordBatch.from_pydict({"id": list(range(100)), "name": ["x"] * 100})
    writer = sink.create_writer(BasicWriterInitContext(
        subtask_id=0, number_of_parallel_subtasks=1, attempt_number=0, job_id="dead-job",
        input_schema=batch.schema))
    writer.write_arrow_batch(batch, BasicSinkWriterContext())
    if point == "mid-copy":
        os._exit(3)
    writer.flush(True)
    committables = writer.prepare_commit()
    serializer = sink.get_committable_serializer()
    with open(out, "wb") as file:
        file.write(serializer.serialize(committables[0]))
    if point == "prepared":
        os._exit(3)
    PostgresCommitter._move = lambda *args: os._exit(3)  # after COMMIT PREPARED
    commit_with_retries(
        sink.create_committer(BasicCommitterInitContext()), committables, sleep=lambda _: None
    )
    """
)


def _staging_tables(url):
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'sinkv2_stage_%'"
        ).fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize(
    ("keyed", "point", "recommit"),
    [
        (True, "mid-copy", False),
        (True, "committed-not-moved", False),
    ],
)
def test_a_writer_or_committer_that_dies_leaves_nothing_once_the_next_run_started(
    postgres_url, tmp_path, keyed, point, recommit
):
    key = " PRIMARY KEY" if keyed else ""
    _execute(postgres_url, f"CREATE TABLE events (id bigint{key}, name text)")
    out = tmp_path / "committable"
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH, postgres_url, point, str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crashed.returncode == 3, crashed.stderr
    assert read_rows(postgres_url, "events", "id") == []  # nothing half-written visible
    sink = PostgresSink(postgres_url, "events", sink_id="crashing")
    committables = []
    if out.exists():
        serializer = sink.get_committable_serializer()
        committables = [serializer.deserialize(serializer.get_version(), out.read_bytes())]
    # The next run: the pending epoch is committed (checkpoint id) or aborted, then the
    # dead job is cleaned up.
    if recommit:
        committer = sink.create_committer(BasicCommitterInitContext())
        try:
            from sinkv2.runtime import commit_with_retries

            commit_with_retries(committer, committables, sleep=lambda _: None)
        finally:
            committer.close()
    elif committables:
        sink.abort(committables)
    sink.clean_up_attempts("dead-job", ())
    assert prepared(postgres_url) == []
    assert _staging_tables(postgres_url) == []
    rows = read_rows(postgres_url, "events", "id")
    assert rows == ([{"id": i} for i in range(100)] if recommit else [])


# --- upsert keys -------------------------------------------------------------------------


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_null_upsert_key_is_refused_not_collapsed_or_inserted_again(postgres_url, exactly_once):
    """A unique index on nullable columns lets a null key in; ON CONFLICT never matches it."""
    _execute(
        postgres_url, "CREATE TABLE keyed (id bigint, name text); CREATE UNIQUE INDEX ON keyed (id)"
    )
    batch = pa.RecordBatch.from_pydict(
        {"id": pa.array([1, None, 2, None], pa.int64()), "name": ["a", "b", "c", "d"]}
    )
    make = PostgresSink if exactly_once else PostgresSink.at_least_once
    sink = make(postgres_url, "keyed", upsert_key="id")
    with pytest.raises(FatalDestinationError, match=r"row 1 .*upsert key column 'id' is null"):
        _write_batch(sink, batch)
    assert read_rows(postgres_url, "keyed", "id, name") == []
    assert _staging_tables(postgres_url) == []


# --- timestamps far out ------------------------------------------------------------------

_US_PER_YEAR = 31_556_952_000_000  # 365.2425 days
_YEAR_1 = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z


def test_timestamps_centuries_before_year_1_are_written_and_beyond_4713_bc_refused(postgres_url):
    """PostgreSQL takes instants back to 4713 BC: Arrow's reach further (the encoder
    spelled them only within 400 years of year 1, and failed with an OverflowError)."""
    _execute(postgres_url, "CREATE TABLE old (id bigint, at timestamptz, ats timestamptz[])")
    micros = _YEAR_1 - 1000 * _US_PER_YEAR  # 1000 years before year 1: 1000 BC (no year 0)
    at = pa.array([micros], pa.int64()).cast(pa.timestamp("us", "UTC"))
    batch = pa.RecordBatch.from_pydict(
        {"id": [0], "at": at, "ats": pa.ListArray.from_arrays([0, 1], at)}
    )
    _write_batch(PostgresSink(postgres_url, "old"), batch)
    with psycopg.connect(postgres_url) as connection:
        connection.execute("SET TIME ZONE 'UTC'")
        found = connection.execute("SELECT at::text, ats[1] = at FROM old").fetchone()
    assert found == ("1000-01-01 12:00:00+00 BC", True)
    too_old = pa.array([_YEAR_1 - 5000 * _US_PER_YEAR], pa.int64()).cast(pa.timestamp("us", "UTC"))
    with pytest.raises(FatalDestinationError, match=r"row 0 .*column 'at'.*out of range"):
        _write_batch(
            PostgresSink(postgres_url, "old"),
            pa.RecordBatch.from_pydict({"id": [1], "at": too_old}),
        )


def test_a_whole_decimal_goes_into_an_integer_column_and_a_fraction_is_refused(postgres_url):
    """PostgreSQL's integer input refused 1.00: a decimal column fitted no integer column."""
    _execute(postgres_url, "CREATE TABLE counts (id bigint, n integer)")
    sink = PostgresSink(postgres_url, "counts")
    whole = pa.array([D("1.00"), D("-3.00"), None], pa.decimal128(10, 2))
    _write_batch(sink, pa.RecordBatch.from_pydict({"id": [0, 1, 2], "n": whole}))
    assert read_rows(postgres_url, "counts", "id, n") == [
        {"id": 0, "n": 1},
        {"id": 1, "n": -3},
        {"id": 2, "n": None},
    ]
    part = pa.array([D("4.00"), D("2.50")], pa.decimal128(10, 2))
    with pytest.raises(FatalDestinationError, match=r"row 1 .*column 'n'.*\"2\.50\""):
        _write_batch(sink, pa.RecordBatch.from_pydict({"id": [3, 4], "n": part}))
