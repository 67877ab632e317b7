"""PostgresSource against a real PostgreSQL (no Spark): the source kit, chunk coverage, errors.

The chunk planner's invariant is checked by hypothesis on keys with NULLs,
duplicates and skew: the chunks' rows, read by ``read_chunk``, are the table's rows,
each once. The source kit runs a table split on its primary key and a query split
on a text key with duplicates and NULLs (ties ordered by the other column).
"""

import datetime as dt
import itertools
import logging
import sys
from collections import Counter

import adbc_driver_manager
import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks.postgres import PostgresReadError, PostgresSource, PostgresSourceSplit
from reference_sinks.postgres._chunk_read import connect_reader, read_chunk
from reference_sinks.postgres._chunks import (
    SESSION_OPTIONS,
    KeyRange,
    Relation,
    plan_chunks,
)
from sinkv2.errors import SinkConfigurationError
from sinkv2.source import Boundedness, inspect_source
from sinkv2.testing import LocalSourceEngine, check_source

# The kit drops readers as a dead process would, without close(): psycopg warns when
# such a reader's connection is garbage-collected still open.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*was deleted while still open:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function BaseConnection.__del__"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

KIT_EXAMPLES = 12  # $SINKV2_KIT_EXAMPLES overrides it
_tables = itertools.count()


def execute(url: str, *statements: str, params=None) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement, params)


def read_all(source, parallelism: int = 3) -> list[dict]:
    engine = LocalSourceEngine(source, parallelism)
    engine.run()
    engine.finish()
    return [record.record for record in engine.committed]


@pytest.fixture
def orders(postgres_url):
    execute(
        postgres_url,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, total numeric(10, 2) "
        "NOT NULL, at timestamptz)",
        "INSERT INTO orders SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE chr(97 + g % 5) END, "
        "g * 1.25, timestamptz '2024-01-01 00:00+00' + g * interval '1 hour' "
        "FROM generate_series(1, 60) g",
    )
    return postgres_url


def order_rows(start: int = 1, stop: int = 60) -> list[dict]:
    import decimal

    epoch = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "id": g,
            "customer": None if g % 7 == 0 else chr(97 + g % 5),
            "total": decimal.Decimal(g) * decimal.Decimal("1.25"),
            "at": epoch + dt.timedelta(hours=g),
        }
        for g in range(start, stop + 1)
    ]


def test_a_table_split_on_its_primary_key_passes_the_source_kit(orders):
    source = PostgresSource(orders, "orders", chunks=5, batch_rows=7)
    assert source.split_key == "id"  # the primary key, by default
    assert source.order_by == ("id",)  # unique and NOT NULL: nothing else orders ties
    assert source.get_boundedness() is Boundedness.BOUNDED
    assert source.get_produced_type() == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("customer", pa.string()),
            pa.field("total", pa.decimal128(10, 2), nullable=False),
            pa.field("at", pa.timestamp("us", "UTC")),
        ]
    )
    assert len(source.plan()) == 5
    check_source(
        lambda: PostgresSource(orders, "orders", chunks=5, batch_rows=7),
        expected=order_rows(),
        max_examples=KIT_EXAMPLES,
    )


def test_a_query_split_on_a_text_key_with_duplicates_and_nulls_passes_the_source_kit(orders):
    query = "SELECT customer, id FROM orders WHERE id <= 40"
    source = PostgresSource(orders, query=query, split_key="customer", chunks=3, batch_rows=4)
    assert source.order_by == ("customer", "id")  # ties on the key ordered by every column
    assert [field.nullable for field in source.get_produced_type()] == [True, True]
    splits = source.plan()
    assert splits[0].nulls
    assert not any(split.nulls for split in splits[1:])
    expected = sorted(
        ({"customer": r["customer"], "id": r["id"]} for r in order_rows(1, 40)),
        key=lambda r: (r["customer"] is not None, r["customer"] or "", r["id"]),
    )
    check_source(
        lambda: PostgresSource(orders, query=query, split_key="customer", chunks=3, batch_rows=4),
        expected=expected,
        max_examples=KIT_EXAMPLES,
    )


def test_a_restored_split_resumes_after_its_position(orders):
    source = PostgresSource(orders, "orders", columns=["id"], chunks=1, batch_rows=10)
    (split,) = source.plan()
    serializer = source.get_split_serializer()
    restored = serializer.deserialize(serializer.get_version(), serializer.serialize(split.at(45)))
    assert restored == split.at(45)
    connection = source._reader_connection()
    try:
        ids = [row["id"] for b in source._read(connection, restored) for row in b.to_pylist()]
    finally:
        connection.close()
    assert ids == list(range(46, 61))


def test_a_table_without_a_primary_key_is_one_split_and_says_so(postgres_url, caplog):
    execute(
        postgres_url,
        "CREATE TABLE loose (v integer, w text)",
        "INSERT INTO loose SELECT g % 3, 'x' FROM generate_series(1, 9) g",
    )
    source = PostgresSource(postgres_url, "loose", chunks=4)
    assert source.split_key is None
    assert source.order_by == ("v", "w")
    with caplog.at_level(logging.WARNING, logger="reference_sinks.postgres._chunks"):
        assert [s.key_range() for s in source.plan()] == [KeyRange.everything()]
    assert "read in one split: no split key was given (4 chunks asked for)" in caplog.text
    got = read_all(source)
    assert Counter((r["v"], r["w"]) for r in got) == Counter(
        {(0, "x"): 3, (1, "x"): 3, (2, "x"): 3}
    )


def test_a_view_and_a_query_ending_in_a_comment_are_sampled_and_read_whole(orders):
    execute(orders, "CREATE VIEW later AS SELECT * FROM orders WHERE id > 10")
    for options in (
        {"table": "later"},  # no TABLESAMPLE on a view: a random filter samples it
        {"query": "SELECT * FROM orders WHERE id > 10 -- the later ones"},
    ):
        source = PostgresSource(orders, **options, split_key="id", chunks=3, sample_rows=20)
        assert 1 <= len(source.plan()) <= 3
        assert sorted(row["id"] for row in read_all(source)) == list(range(11, 61))


def test_bad_configuration_is_refused_with_clear_messages(orders):
    execute(orders, "CREATE TABLE shapes (id int, p point, j json)")
    cases = [
        (dict(table="nope"), r"table 'nope' does not exist in database"),
        (dict(table="Orders"), r"table 'Orders' does not exist .* case matters"),
        (dict(table="orders", split_key="ID"), r"split key 'ID' is not a column .*has 'id'"),
        (dict(table="orders", columns=["id", "x"]), r"\['x'\] are not columns of table 'orders'"),
        (dict(table="orders", chunks=0), r"chunks must be a positive int \(got 0"),
        (dict(table="orders", query="SELECT 1"), r"exactly one of table=.* or query="),
        (dict(query="SELECT nope FROM orders"), r"could not read query .*nope"),
        (dict(query="SELECT id, id FROM orders"), r"more than one column named \['id'\]"),
        (dict(table="shapes"), r"column 'p' has PostgreSQL type point, which has no Arrow mapping"),
        (
            dict(table="shapes", columns=["id", "j"], split_key="j"),
            r"split key 'j' of table 'shapes' has type json, which has no ordering",
        ),
    ]
    for options, pattern in cases:
        with pytest.raises(SinkConfigurationError, match=pattern):
            PostgresSource(orders, **options)
    with pytest.raises(SinkConfigurationError, match="could not connect to PostgreSQL"):
        PostgresSource("postgresql://nobody@127.0.0.1:1/none", "orders")


def test_a_reader_without_the_adbc_driver_names_the_install_line(orders, monkeypatch):
    monkeypatch.setitem(sys.modules, "adbc_driver_postgresql", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install 'sinkv2\[postgres\]'"):
        PostgresSource(orders, "orders")._reader_connection()


def test_a_value_arrow_cannot_hold_fails_the_read_naming_split_and_relation(postgres_url):
    execute(
        postgres_url,
        "CREATE TABLE days (id int PRIMARY KEY, d date)",
        "INSERT INTO days VALUES (1, '2024-01-01'), (2, 'infinity')",
    )
    source = PostgresSource(postgres_url, "days", chunks=1)
    with pytest.raises(Exception, match=r"could not read split chunk-00000 .*table 'days'") as info:
        read_all(source, 1)
    chain = [info.value, info.value.__cause__]
    assert any(isinstance(error, PostgresReadError) for error in chain)


def test_a_not_null_key_is_read_through_its_index_and_a_nullable_one_takes_its_nulls(orders):
    from reference_sinks.postgres._chunk_read import _query

    def statement(source: PostgresSource, split: PostgresSourceSplit) -> str:
        return _query(
            source.relation,
            source.columns,
            source.split_key,
            split.key_range(),
            source.get_produced_type(),
            source.order_by,
            0,
            source.not_null,
        )

    by_id = PostgresSource(orders, "orders", chunks=2)  # the primary key: NOT NULL
    first = by_id.plan()[0]
    assert first.key_range().nulls  # planned as any first range ...
    text = statement(by_id, first)
    assert "NULL" not in text  # ... read without NULL handling: the index serves it
    with psycopg.connect(orders) as connection:  # a sort only if the order needs one
        connection.execute("SET enable_sort = off")
        plan = " ".join(row[0] for row in connection.execute("EXPLAIN " + text).fetchall())
    assert "Sort" not in plan, plan
    by_customer = PostgresSource(orders, "orders", split_key="customer", chunks=2)
    text = statement(by_customer, by_customer.plan()[0])
    assert '"customer" IS NULL OR' in text
    assert 'ORDER BY "customer" NULLS FIRST, "id"' in text


def test_splits_and_source_survive_pickling(orders):
    import cloudpickle

    source = PostgresSource(orders, "orders", chunks=2)
    assert inspect_source(source).boundedness is Boundedness.BOUNDED
    clone = cloudpickle.loads(cloudpickle.dumps(source))
    assert clone.get_produced_type() == source.get_produced_type()
    assert PostgresSourceSplit.of(3, KeyRange("1", "2", nulls=False)).id == "chunk-00003"


# --- chunk coverage --------------------------------------------------------------------------

KEY_TYPES = {
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "integer": st.integers(-50, 50),  # dense, many duplicates
    "text": st.text(alphabet="abcXY _-é", max_size=4),
    "date": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    "numeric": st.decimals(-(10**6), 10**6, places=3, allow_nan=False),
    "timestamptz": st.datetimes(
        dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1), timezones=st.just(dt.UTC)
    ),
    "double precision": st.floats(allow_nan=True, allow_infinity=True),
}


@st.composite
def keyed_tables(draw):
    kind = draw(st.sampled_from(sorted(KEY_TYPES)))
    values = KEY_TYPES[kind]
    common = draw(values)  # one value many rows share: skew (or not)
    keys = draw(
        st.lists(
            st.one_of(values, st.none(), st.just(common))
            if draw(st.booleans())
            else st.one_of(values, st.none()),
            max_size=80,
        )
    )
    return kind, keys, draw(st.integers(1, 7)), draw(st.booleans())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=keyed_tables())
def test_chunks_cover_every_row_exactly_once(postgres_url, table):
    kind, keys, chunks, as_query = table
    name = f"keys_{next(_tables)}"
    with psycopg.connect(postgres_url, autocommit=True, options=SESSION_OPTIONS) as connection:
        connection.execute(f"CREATE TABLE {name} (row_id int, k {kind})")
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {name} VALUES (%s, %s)", list(enumerate(keys)))
        connection.execute(f"ANALYZE {name}")
        relation = (
            Relation.of_query(f"SELECT row_id, k FROM {name}")
            if as_query
            else Relation.of_table(name)
        )
        # sample_rows below the row count makes the planner sample (TABLESAMPLE, random()).
        ranges = plan_chunks(connection, relation, "k", chunks, sample_rows=30)
        assert 1 <= len(ranges) <= chunks
        assert ranges[0].lower is None
        assert ranges[-1].upper is None
        assert [r.nulls for r in ranges] == [True] + [False] * (len(ranges) - 1)
        for before, after in itertools.pairwise(ranges):
            assert before.upper == after.lower is not None
        bounds = [r.upper for r in ranges[:-1]]
        for low, high in itertools.pairwise(bounds):  # ascending as the key's type orders
            (ascending,) = connection.execute(
                f"SELECT %s::{kind} < %s::{kind}", (low, high)
            ).fetchone()
            assert ascending, (low, high)
        schema = pa.schema([("row_id", pa.int32())])
        seen: Counter[int] = Counter()
        with connect_reader(postgres_url, "test") as reader:
            for chunk in ranges:
                for batch in read_chunk(reader, relation, ["row_id"], "k", chunk, schema):
                    seen.update(batch.column(0).to_pylist())
        connection.execute(f"DROP TABLE {name}")
    assert seen == Counter(range(len(keys))), (kind, [str(r) for r in ranges])


def test_string_options_make_the_source_and_bad_ones_are_named(orders):
    from reference_sinks.postgres import postgres_source_from_options

    source = postgres_source_from_options(
        url=orders, dbtable="orders", chunks="3", columns="id, total", split_key="total"
    )
    assert (source.split_key, source.chunks, source.columns) == ("total", 3, ("id", "total"))
    from sinkv2_spark._doors.source_options import door_source

    by_door = door_source(
        {"source": "postgres", "url": orders, "dbtable": "orders", "batch_rows": "7"}
    )
    assert by_door.batch_rows == 7  # the door's own option reaches the source's batches
    cases = [
        (dict(table="orders"), r"needs the 'url' option"),
        (dict(url=orders), r"exactly one of the options 'table' and 'query'"),
        (dict(url=orders, table="orders", dbtable="orders"), r"'table' or its Spark spelling"),
        (dict(url=orders, table="orders", chunks="many"), r"'chunks' option must be a positive"),
        (dict(url=orders, table="orders", columns="id,,total"), r"'columns' option must be"),
    ]
    for options, pattern in cases:
        with pytest.raises(SinkConfigurationError, match=pattern):
            postgres_source_from_options(**options)


def test_a_read_closed_early_cancels_its_statement_and_leaves_the_connection_usable(
    postgres_url,
):
    # About 30 MB of COPY output: many driver batches, so the close comes mid-COPY.
    relation = Relation.of_query(
        "SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 150000) AS g"
    )
    schema = pa.schema([("g", pa.int32()), ("pad", pa.string())])
    with connect_reader(postgres_url, "test") as connection:
        batches = read_chunk(
            connection, relation, ["g", "pad"], "g", KeyRange.everything(), schema, batch_rows=1000
        )
        first = next(batches)
        assert first.column(0).to_pylist() == list(range(1, 1001))
        batches.close()  # cancelled on the server, not drained
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchall() == [(1,)]
            # Each read is its own read-only repeatable-read transaction.
            cursor.execute(
                "SELECT current_setting('transaction_read_only'), "
                "current_setting('transaction_isolation'), current_setting('TimeZone')"
            )
            assert cursor.fetchall() == [("on", "repeatable read", "UTC")]


def test_a_domain_made_after_the_process_first_connected_reads_as_its_base_type(postgres_url):
    # The driver's database object (its type catalog) is kept per connection string for
    # the process: a domain made after it was made must still read as the type table
    # says (the server sends a domain's base type; arrays are cast to their built-in
    # type). The URL's own options are kept, the reader's settings win over them.
    url = psycopg.conninfo.make_conninfo(
        postgres_url, options="-c search_path=later_schema,public -c TimeZone=Asia/Tokyo"
    )
    with connect_reader(url, "test") as connection, connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('search_path'), current_setting('TimeZone')")
        assert cursor.fetchall() == [("later_schema,public", "UTC")]
    execute(
        postgres_url,
        "CREATE SCHEMA later_schema",
        "CREATE DOMAIN later_schema.positive AS integer CHECK (VALUE > 0)",
        "CREATE TABLE later_schema.later (id integer PRIMARY KEY, p later_schema.positive, "
        "ps smallint[], at timestamptz[])",
        "INSERT INTO later_schema.later VALUES (1, 5, '{{1, NULL}, {3, 4}}', "
        "'{\"2020-01-02 03:04:05.000006+00\"}'), (2, NULL, NULL, '{}')",
    )
    try:
        source = PostgresSource(url, "later_schema.later", chunks=2)
        assert source.get_produced_type() == pa.schema(
            [
                pa.field("id", pa.int32(), nullable=False),
                ("p", pa.int32()),
                ("ps", pa.list_(pa.int16())),
                ("at", pa.list_(pa.timestamp("us", "UTC"))),
            ]
        )
        rows = sorted(read_all(source), key=lambda row: row["id"])
        utc = dt.UTC
        assert rows == [
            {
                "id": 1,
                "p": 5,
                "ps": [1, None, 3, 4],
                "at": [dt.datetime(2020, 1, 2, 3, 4, 5, 6, utc)],
            },
            {"id": 2, "p": None, "ps": None, "at": []},
        ]
    finally:
        execute(postgres_url, "DROP SCHEMA later_schema CASCADE")


def test_an_error_the_server_sends_after_many_rows_fails_the_read(postgres_url):
    # An error after 100,000 rows (in the middle of the COPY) must still fail the read.
    relation = Relation.of_query(
        "SELECT g, 1 / (g - 100000) AS q FROM generate_series(1, 150000) AS g"
    )
    schema = pa.schema([("g", pa.int32()), ("q", pa.int32())])
    with connect_reader(postgres_url, "test") as connection:
        with pytest.raises((adbc_driver_manager.Error, pa.ArrowIOError), match="division by zero"):
            for _ in read_chunk(
                connection, relation, ["g", "q"], "g", KeyRange.everything(), schema
            ):
                pass
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchall() == [(1,)]


def test_quoted_names_a_partitioned_table_generated_columns_enums_and_domains(postgres_url):
    """Names that need quotes (case, spaces, a reserved word), partitions, a skewed sample."""
    execute(
        postgres_url,
        'CREATE SCHEMA "My Schema"',
        "CREATE TYPE \"Mood\" AS ENUM ('sad', 'ok')",
        'CREATE DOMAIN "Pos" AS int CHECK (VALUE > 0)',
        'CREATE TABLE "My Schema"."Order Lines" ("Key Id" int NOT NULL, "select" text, '
        '"Mood" "Mood", n "Pos", twice int GENERATED ALWAYS AS (n * 2) STORED, '
        'moods "Mood"[], PRIMARY KEY ("Key Id")) PARTITION BY RANGE ("Key Id")',
        'CREATE TABLE "My Schema"."Low" PARTITION OF "My Schema"."Order Lines" '
        "FOR VALUES FROM (0) TO (500)",
        'CREATE TABLE "My Schema"."High" PARTITION OF "My Schema"."Order Lines" '
        "FOR VALUES FROM (500) TO (MAXVALUE)",
        'INSERT INTO "My Schema"."Order Lines" ("Key Id", "select", "Mood", n, moods) '
        "SELECT g, 'row ' || g, (ARRAY['sad', 'ok'])[1 + g % 2]::\"Mood\", g, "
        "ARRAY['ok', NULL]::\"Mood\"[] FROM generate_series(1, 300) g "
        "UNION ALL SELECT 10000 + g, NULL, NULL, g, NULL FROM generate_series(1, 3) g",
    )
    source = PostgresSource(postgres_url, "My Schema.Order Lines", chunks=4, sample_rows=50)
    assert source.split_key == "Key Id"
    assert source.get_produced_type().field("twice").type == pa.int32()
    assert len(source.plan()) > 1
    rows = sorted(read_all(source), key=lambda row: row["Key Id"])
    assert [row["Key Id"] for row in rows] == [*range(1, 301), 10001, 10002, 10003]
    assert rows[0] == {
        "Key Id": 1,
        "select": "row 1",
        "Mood": "ok",
        "n": 1,
        "twice": 2,
        "moods": ["ok", None],
    }
    assert rows[-1]["twice"] == 6
    assert rows[-1]["Mood"] is None
