"""PostgresSink's writers, committer and hooks against a real PostgreSQL (no Spark)."""

import concurrent.futures
import datetime as dt
import decimal
import math
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from reference_sinks.postgres import PostgresSink, RolledBackTransactionError
from sinkv2.errors import CommitFailedError, FatalDestinationError, SinkConfigurationError
from sinkv2.runtime import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    CommitRequestImpl,
    commit_with_retries,
)
from tests.reference_sinks.postgres.helpers import (
    EVENTS_DDL,
    KEYED_DDL,
    create_table,
    prepared,
    read_rows,
)

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = BasicSinkWriterContext()


def writer_for(sink, *, job="job-1", subtask=0, attempt=0, schema=None):
    return sink.create_writer(
        BasicWriterInitContext(
            subtask_id=subtask,
            number_of_parallel_subtasks=4,
            attempt_number=attempt,
            job_id=job,
            input_schema=schema,
        )
    )


def load(sink, rows, **context):
    writer = writer_for(sink, **context)
    try:
        for row in rows:
            writer.write(row, CONTEXT)
        writer.flush(True)
        return writer.prepare_commit()
    finally:
        writer.close()


def commit(sink, committables, committer=None):
    """Commit as the runtime does; the outcome (raises CommitFailedError on a failure)."""
    own = committer is None
    committer = committer or sink.create_committer(BasicCommitterInitContext())
    try:
        return commit_with_retries(committer, committables, sleep=lambda _: None)
    finally:
        if own:
            committer.close()


ROWS = [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(50)]


def test_rows_are_invisible_until_committed_then_exactly_there(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    committables = load(sink, ROWS)
    [transaction] = committables
    assert transaction.rows == 50
    assert read_rows(postgres_url) == []
    assert prepared(postgres_url) == [transaction.gid]
    assert list(commit(sink, committables).committed) == committables
    assert read_rows(postgres_url) == ROWS
    assert prepared(postgres_url) == []


def test_a_replayed_commit_is_recognised_and_changes_nothing(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    committables = load(sink, ROWS)
    commit(sink, committables)
    assert list(commit(sink, committables).already_committed) == committables
    assert read_rows(postgres_url) == ROWS


def test_a_rolled_back_transaction_is_never_reported_committed(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    committables = load(sink, ROWS)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"ROLLBACK PREPARED '{committables[0].gid}'")
    with pytest.raises(CommitFailedError, match="was rolled back") as raised:
        commit(sink, committables)
    assert isinstance(raised.value.__cause__ or raised.value, Exception)
    assert RolledBackTransactionError.__name__ in str(raised.value)
    assert read_rows(postgres_url) == []


def test_an_empty_writer_prepares_nothing(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    assert load(PostgresSink(postgres_url, "events"), []) == []
    assert prepared(postgres_url) == []


def test_clean_up_rolls_back_losers_and_keeps_winners(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    loser = load(sink, ROWS[:10], attempt=0)
    winner = load(sink, ROWS[:10], attempt=1)
    other_job = load(sink, ROWS[10:20], job="job-2")
    winner_token = "job-1-0-1"
    sink.clean_up_attempts("job-1", [winner_token])
    assert prepared(postgres_url) == sorted([winner[0].gid, other_job[0].gid])
    assert loser[0].gid not in prepared(postgres_url)
    commit(sink, winner + other_job)
    assert read_rows(postgres_url) == ROWS[:20]
    sink.clean_up_attempts("job-1", [])  # idempotent, and committed rows stay
    assert read_rows(postgres_url) == ROWS[:20]


def test_a_writer_that_reaches_prepare_after_its_stage_was_cleaned_up_rolls_back(postgres_url):
    # A speculative copy Spark is killing can still reach PREPARE after the driver
    # cleaned up: its transaction must not outlive the job.
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    late = writer_for(sink, attempt=1)
    for row in ROWS:
        late.write(row, CONTEXT)
    late.flush(True)
    sink.clean_up_attempts("job-1", ["job-1-0-0"])  # the other attempt won
    with pytest.raises(FatalDestinationError, match="lost: the driver already cleaned up"):
        late.prepare_commit()
    late.close()
    assert prepared(postgres_url) == []
    # A writer of the same job started after that clean-up is not affected by it.
    assert len(load(sink, ROWS, attempt=2)) == 1
    sink.clean_up_attempts("job-1", [])


def test_abort_rolls_back_and_leaves_committed_alone(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    first = load(sink, ROWS[:10], subtask=0)
    second = load(sink, ROWS[10:20], subtask=1)
    commit(sink, first)
    sink.abort(first + second)
    sink.abort(first + second)
    assert prepared(postgres_url) == []
    assert read_rows(postgres_url) == ROWS[:10]


# --- upserts and staged commits ----------------------------------------------------------


def test_upsert_last_row_of_a_key_wins_within_and_across_checkpoints(postgres_url):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink(postgres_url, "events", upsert_key="id")
    rows = [{"id": 1, "name": "a", "score": 1.0}, {"id": 2, "name": "b", "score": 2.0}]
    rows.append({"id": 1, "name": "a2", "score": 3.0})
    commit(sink, load(sink, rows))
    commit(sink, load(sink, [{"id": 2, "name": "b2", "score": 4.0}], job="job-2"))
    assert read_rows(postgres_url) == [
        {"id": 1, "name": "a2", "score": 3.0},
        {"id": 2, "name": "b2", "score": 4.0},
    ]
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'sinkv2_stage_%'"
        ).fetchone()
    assert tables == (0,)  # staging tables are dropped once moved


@pytest.mark.parametrize(
    "build",
    [
        lambda url: PostgresSink(url, "events", upsert_key="id"),  # the staged move
        lambda url: PostgresSink.at_least_once(url, "events"),
        lambda url: PostgresSink.at_least_once(url, "events", upsert_key="id"),
    ],
    ids=["exactly-once-staged", "at-least-once", "at-least-once-upsert"],
)
def test_plain_commits_are_flushed_even_where_the_server_commits_asynchronously(
    postgres_url, build
):
    # COMMIT PREPARED is always flushed; a plain commit (the move of staged rows, every
    # at-least-once commit) is not with synchronous_commit off, and a server crash right
    # after it could take back rows already reported committed. A trigger sees the
    # setting the rows were written under, from inside the transaction.
    create_table(postgres_url, KEYED_DDL)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("off",)
        connection.execute("CREATE TABLE seen (setting text)")
        connection.execute(
            "CREATE FUNCTION note_setting() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO seen VALUES (current_setting('synchronous_commit')); RETURN NULL; "
            "END $$"
        )
        connection.execute(
            "CREATE TRIGGER note AFTER INSERT ON events "
            "FOR EACH STATEMENT EXECUTE FUNCTION note_setting()"
        )
    sink = build(postgres_url)
    committables = load(sink, ROWS[:3])
    if committables:
        commit(sink, committables)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        assert connection.execute("SELECT setting FROM seen").fetchall() == [("local",)]
    assert len(read_rows(postgres_url)) == 3


def test_attempts_of_one_subtask_never_wait_on_each_other_with_a_unique_key(postgres_url):
    # A retried attempt loads the same keys while the first attempt's transaction is
    # prepared: with a unique index each loads its own staging table, nobody blocks.
    create_table(postgres_url, KEYED_DDL)
    for job, options in (("job-1", {}), ("job-2", {"upsert_key": "id"})):
        sink = PostgresSink(postgres_url, "events", **options)
        first = load(sink, ROWS, job=job, attempt=0)
        second = load(sink, ROWS, job=job, attempt=1)
        sink.clean_up_attempts(job, [f"{job}-0-1"])
        assert prepared(postgres_url) == [second[0].gid]
        commit(sink, second)
        assert first[0].gid not in prepared(postgres_url)
        assert read_rows(postgres_url) == ROWS
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute("TRUNCATE events")


@pytest.mark.parametrize(
    "index",
    [
        "CREATE UNIQUE INDEX events_some ON events (id) WHERE id >= 0",  # partial
        "CREATE UNIQUE INDEX events_lower ON events (lower(name))",  # on an expression
    ],
)
def test_attempts_never_wait_on_each_other_with_a_partial_or_expression_unique_index(
    postgres_url, index
):
    # Such indexes are no ON CONFLICT target, but they make inserts of equal keys wait
    # just the same: the sink stages. The lock timeout fails the test instead of a hang.
    create_table(postgres_url, EVENTS_DDL)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(index)
    url = postgres_url + "?options=-c%20lock_timeout%3D10000"
    sink = PostgresSink(url, "events")
    load(sink, ROWS, attempt=0)
    second = load(sink, ROWS, attempt=1)
    sink.clean_up_attempts("job-1", ["job-1-0-1"])
    commit(sink, second)
    assert read_rows(postgres_url) == ROWS
    assert prepared(postgres_url) == []


def test_an_identity_column_the_rows_leave_out_is_filled_by_the_target(postgres_url):
    # The staging table has the written columns only: the target's identity numbers the
    # rows when they move, one sequence value each.
    create_table(
        postgres_url,
        "CREATE TABLE {name} (row_id bigint GENERATED ALWAYS AS IDENTITY, "
        "id bigint NOT NULL UNIQUE, name varchar(8), score double precision)",
    )
    sink = PostgresSink(postgres_url, "events")
    commit(sink, load(sink, ROWS))
    stored = read_rows(postgres_url, columns="row_id, id, name, score")
    assert [row["row_id"] for row in stored] == list(range(1, len(ROWS) + 1))
    assert [{k: v for k, v in row.items() if k != "row_id"} for row in stored] == ROWS
    too_long = [{"id": 99, "name": "123456789", "score": 0.0}]  # varchar(8) kept in staging
    with pytest.raises(FatalDestinationError, match=r"row 0 .*value too long"):
        load(sink, too_long, job="job-2")
    with pytest.raises(FatalDestinationError, match=r"column 'id'.*not-null|null value"):
        load(sink, [{"id": None, "name": "x", "score": 0.0}], job="job-3")


def test_at_least_once_upserts_replace_rows_a_retry_loads_again(postgres_url):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink.at_least_once(postgres_url, "events", upsert_key="id")
    assert load(sink, ROWS) == []  # committed at flush: nothing to commit later
    changed = [{**row, "name": row["name"] + "'"} for row in ROWS]
    load(sink, changed + changed[:3], attempt=1)  # a retry, with keys repeated
    assert read_rows(postgres_url) == changed
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        left = connection.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'sinkv2_stage_%'"
        ).fetchone()
    assert left == (0,)  # temporary staging tables dropped at each commit


def test_two_committers_of_one_staged_transaction_move_its_rows_once(postgres_url):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink(postgres_url, "events", upsert_key="id")
    committables = load(sink, ROWS)
    [transaction] = committables
    with psycopg.connect(postgres_url, autocommit=True) as holder:
        holder.execute(f"COMMIT PREPARED '{transaction.gid}'")
        holder.execute("BEGIN")
        holder.execute(f"LOCK TABLE {transaction.staging} IN ACCESS EXCLUSIVE MODE")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            outcomes = [pool.submit(commit, sink, committables) for _ in range(2)]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # both committers wait for the lock
                (waiting,) = holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                    (transaction.staging,),
                ).fetchone()
                if waiting == 2:
                    break
                time.sleep(0.05)
            assert waiting == 2
            holder.execute("ROLLBACK")
            results = [outcome.result(timeout=60) for outcome in outcomes]
    assert sorted(len(result.committed) for result in results) == [0, 1]
    assert sorted(len(result.already_committed) for result in results) == [0, 1]
    assert read_rows(postgres_url) == ROWS


def test_a_staged_commit_interrupted_between_its_two_steps_is_finished_by_the_replay(
    postgres_url,
):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink(postgres_url, "events", upsert_key="id")
    committables = load(sink, ROWS)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"COMMIT PREPARED '{committables[0].gid}'")  # then the driver died
    assert read_rows(postgres_url) == []
    assert list(commit(sink, committables).committed) == committables
    assert read_rows(postgres_url) == ROWS
    assert list(commit(sink, committables).already_committed) == committables


def test_a_duplicate_key_in_a_staged_insert_fails_the_commit_clearly(postgres_url):
    create_table(postgres_url, KEYED_DDL)
    sink = PostgresSink(postgres_url, "events")
    commit(sink, load(sink, ROWS[:1], job="job-0"))
    committables = load(sink, ROWS[:3])
    committer = sink.create_committer(BasicCommitterInitContext())
    with pytest.raises(Exception, match=r"duplicate key.*Use upsert_key") as raised:
        committer.commit([CommitRequestImpl(c) for c in committables])
    committer.close()
    assert "stay staged" in str(raised.value)
    assert read_rows(postgres_url) == ROWS[:1]
    sink.abort(committables)  # an operator gives the epoch up: the staging table goes
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        left = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'sinkv2_stage_%'"
        ).fetchone()
    assert left == (0,)


# --- values ----------------------------------------------------------------------------

TYPES_DDL = """
CREATE TABLE typed (
    id integer, small smallint, big bigint, f4 real, f8 double precision,
    dec numeric(38, 10), txt text, vc varchar(10), flag boolean, day date,
    at timestamptz, local timestamp, raw bytea, ints bigint[], texts text[],
    doc jsonb, js json, span interval
)
"""


def typed_batch():
    utc = dt.UTC
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array([0, 1, 2], pa.int32()),
            "small": pa.array([-32768, None, 32767], pa.int16()),
            "big": pa.array([-(2**63), 0, 2**63 - 1], pa.int64()),
            "f4": pa.array([1.1, float("nan"), -0.0], pa.float32()),
            "f8": pa.array([float("inf"), float("-inf"), 0.1]),
            "dec": pa.array(
                [
                    decimal.Decimal("1234567890123456789012345678.0123456789"),
                    None,
                    decimal.Decimal("-0.0000000001"),
                ],
                pa.decimal128(38, 10),
            ),
            "txt": ["", None, 'quote " comma , newline \n tab \t backslash \\ é 😀'],
            "vc": ["x" * 10, "", None],
            "flag": [True, False, None],
            "day": [dt.date(1, 1, 1), dt.date(9999, 12, 31), None],
            "at": pa.array(
                [
                    dt.datetime(2020, 1, 1, 12, 0, 0, 123456, tzinfo=utc),
                    None,
                    dt.datetime(1970, 1, 1, tzinfo=utc),
                ],
                pa.timestamp("us", tz="America/New_York"),
            ),
            "local": pa.array(
                [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), None],
                pa.timestamp("us"),
            ),
            "raw": [b"\x00\xff\\x", b"", None],
            "ints": pa.array([[1, None, 3], [], None], pa.list_(pa.int64())),
            "texts": pa.array(
                [['a"b', "c,d", None, "NULL", "\\"], [], None], pa.list_(pa.string())
            ),
            "doc": pa.array(
                [{"k": [1, 2], "m": [("x", 1.5)]}, None, {"k": None, "m": []}],
                pa.struct([("k", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.float64()))]),
            ),
            "js": pa.array(
                [[("a", decimal.Decimal("1.10"))], [], None],
                pa.map_(pa.string(), pa.decimal128(5, 2)),
            ),
            "span": pa.array(
                [dt.timedelta(days=1, microseconds=5), None, dt.timedelta(0)], pa.duration("us")
            ),
        }
    )


def test_every_supported_type_reads_back_exactly(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(TYPES_DDL)
    sink = PostgresSink(postgres_url, "typed")
    batch = typed_batch()
    writer = writer_for(sink, schema=batch.schema)
    writer.write_arrow_batch(batch, CONTEXT)
    commit(sink, writer.prepare_commit())
    writer.close()
    got = read_rows(postgres_url, "typed", "*")
    want = batch.to_pylist(maps_as_pydicts="strict")
    for row, expected in zip(got, want, strict=True):
        for name, value in expected.items():
            actual = row[name]
            if name == "f4":
                if value is not None and math.isnan(value):
                    assert math.isnan(actual)
                else:
                    assert actual == pytest.approx(value)
                    assert math.copysign(1, actual) == math.copysign(1, value)
            elif name == "raw":
                assert (None if actual is None else bytes(actual)) == value
            elif name == "at":
                assert actual == value
            elif name == "doc":
                assert actual == (None if value is None else {"k": value["k"], "m": value["m"]})
            elif name == "js":
                assert actual == (
                    None if value is None else {k: float(v) for k, v in value.items()}
                )
            else:
                assert actual == value, (name, actual, value)


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "GMT", "+00:00"])
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamps_zoned_in_utc_read_back_exactly(postgres_url, zone, unit):
    # Written as text by pyarrow's compute functions, not by its CSV writer (see _encode).
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE stamps (id integer, at timestamptz, local timestamp)")
    utc = dt.UTC
    values = [
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=utc),
        None,
        dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=utc),
        dt.datetime(1, 1, 1, tzinfo=utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=utc),
    ]
    if unit in ("s", "ms"):
        values = [v and v.replace(microsecond=v.microsecond // 1000 * 1000) for v in values]
    if unit == "s":
        values = [v and v.replace(microsecond=0) for v in values]
    if unit == "ns":  # nanoseconds reach only 1677..2262
        values = [v for v in values if v is None or 1677 < v.year < 2262]
    stamps = pa.array(values, pa.timestamp(unit, tz=zone))
    batch = pa.RecordBatch.from_pydict(
        {"id": pa.array(range(len(values)), pa.int32()), "at": stamps, "local": stamps}
    )
    sink = PostgresSink(postgres_url, "stamps")
    writer = writer_for(sink, schema=batch.schema)
    writer.write_arrow_batch(batch, CONTEXT)
    commit(sink, writer.prepare_commit())
    writer.close()
    got = read_rows(postgres_url, "stamps", "id, at, local")
    assert [row["at"] for row in got] == values
    assert [row["local"] for row in got] == [v and v.replace(tzinfo=None) for v in values]


def test_bad_rows_name_row_and_column_and_leave_nothing(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE strict (id integer NOT NULL, code varchar(3), n integer)")
    sink = PostgresSink(postgres_url, "strict")
    cases = [
        (
            [{"id": 1, "code": "abc", "n": "7"}, {"id": 2, "code": "abcd", "n": "8"}],
            r"row 1.*value too long",
        ),
        (
            [{"id": 1, "code": "a", "n": "7"}, {"id": None, "code": "b", "n": "8"}],
            r"row 1.*column 'id'.*not-null",
        ),
        ([{"id": 1, "code": "a", "n": "x"}], r"row 0.*column 'n'.*invalid input syntax"),
    ]
    schema = pa.schema([("id", pa.int64()), ("code", pa.string()), ("n", pa.string())])
    for rows, pattern in cases:
        writer = writer_for(sink, schema=schema)
        for row in rows:
            writer.write(row, CONTEXT)
        with pytest.raises(FatalDestinationError, match=pattern):
            writer.flush(True)
        writer.close()
    assert read_rows(postgres_url, "strict", "*") == []
    assert prepared(postgres_url) == []


@pytest.mark.parametrize(
    ("schema", "pattern"),
    [
        (
            pa.schema([("id", pa.int64()), ("nope", pa.string())]),
            r"column 'nope' is not in the table",
        ),
        (pa.schema([("ID", pa.int64())]), r"the table has 'id': names are case-sensitive"),
        (
            pa.schema([("id", pa.int64()), ("name", pa.binary())]),
            r"'name' of type binary cannot be written into text",
        ),
        (pa.schema([("id", pa.bool_())]), r"'id' of type bool cannot be written into bigint"),
    ],
)
def test_columns_that_do_not_fit_are_refused_before_any_row(postgres_url, schema, pattern):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    with pytest.raises(SinkConfigurationError, match=pattern) as raised:
        sink.check(schema)
    assert "table:     [id: bigint, name: text, score: double precision]" in str(raised.value)
    with pytest.raises(SinkConfigurationError, match=pattern):
        writer_for(sink, schema=schema)


def test_configuration_errors_are_clear(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE needy (id bigint NOT NULL, v text)")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(SinkConfigurationError, match=r"upsert key \['id'\] has no unique index"):
        PostgresSink(postgres_url, "events", upsert_key="id").check(schema)
    with pytest.raises(SinkConfigurationError, match="NOT NULL column 'id'"):
        PostgresSink(postgres_url, "needy").check(pa.schema([("v", pa.string())]))
    with pytest.raises(SinkConfigurationError, match="does not exist"):
        PostgresSink(postgres_url, "missing").check()
    with pytest.raises(SinkConfigurationError, match=r"'table' or 'schema\.table'"):
        PostgresSink(postgres_url, "a.b.c")
    with pytest.raises(SinkConfigurationError, match="upsert_key must be"):
        PostgresSink(postgres_url, "events", upsert_key=[])
    with pytest.raises(SinkConfigurationError, match="conninfo string or URL"):
        PostgresSink(42, "events")  # type: ignore[arg-type]


def test_a_server_without_prepared_transactions_is_refused_before_data_moves():
    from tests.servers.postgres_server import LocalPostgresServer

    with LocalPostgresServer.start(max_prepared_transactions=0) as server:
        create_table(server.url, EVENTS_DDL)
        with pytest.raises(SinkConfigurationError, match="max_prepared_transactions is 0"):
            PostgresSink(server.url, "events").check()
        # ...and the at-least-once sink works there, committing at every checkpoint.
        sink = PostgresSink.at_least_once(server.url, "events")
        writer = writer_for(sink)
        for row in ROWS:
            writer.write(row, CONTEXT)
        writer.flush(False)
        assert read_rows(server.url) == ROWS
        assert writer.prepare_commit() == []
        writer.close()


# --- the server and its backends -------------------------------------------------------


def test_prepared_transactions_survive_a_server_restart_and_are_committed(
    postgres_server, postgres_url
):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    committables = load(sink, ROWS)
    postgres_server.restart()
    assert prepared(postgres_url) == [committables[0].gid]
    commit(sink, committables)
    assert read_rows(postgres_url) == ROWS


def _terminate(url, pattern):
    with psycopg.connect(url, autocommit=True) as connection:
        return connection.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~ %s",
            (pattern,),
        ).fetchone()[0]


def test_a_backend_killed_mid_copy_loses_the_attempt_and_nothing_else(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    writer = writer_for(sink)
    for row in ROWS:
        writer.write(row, CONTEXT)
    writer.flush(False)  # COPY sent, the transaction open
    _terminate(postgres_url, "COPY")
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid() AND application_name = 'sinkv2'"
        )
    with pytest.raises(psycopg.OperationalError):
        writer.prepare_commit()
    writer.close()
    assert read_rows(postgres_url) == []
    assert prepared(postgres_url) == []
    commit(sink, load(sink, ROWS, attempt=1))  # the retry
    assert read_rows(postgres_url) == ROWS


def test_a_committer_whose_backend_is_killed_mid_commit_commits_each_transaction_once(
    postgres_url,
):
    create_table(postgres_url, EVENTS_DDL)
    sink = PostgresSink(postgres_url, "events")
    committables = load(sink, ROWS[:25], subtask=0) + load(sink, ROWS[25:], subtask=1)
    committer = sink.create_committer(BasicCommitterInitContext())
    commit(sink, committables[:1], committer)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND pid <> pg_backend_pid() AND application_name = 'sinkv2'"
        )
    outcome = commit(sink, committables, committer)  # reconnects
    committer.close()
    assert list(outcome.already_committed) == committables[:1]
    assert list(outcome.committed) == committables[1:]
    assert read_rows(postgres_url) == ROWS


def test_a_writer_process_killed_before_prepare_leaves_no_transaction(postgres_url):
    create_table(postgres_url, EVENTS_DDL)
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from reference_sinks.postgres import PostgresSink
        from sinkv2.runtime import BasicSinkWriterContext, BasicWriterInitContext
        sink = PostgresSink({postgres_url!r}, "events")
        writer = sink.create_writer(BasicWriterInitContext(job_id="dead"))
        for i in range(1000):
            writer.write({{"id": i, "name": "x", "score": 0.0}}, BasicSinkWriterContext())
        writer.flush(False)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert read_rows(postgres_url) == []
    assert prepared(postgres_url) == []
