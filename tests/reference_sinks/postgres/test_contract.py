"""PostgresSink through the contract-test kit (in process, no Spark): exactly once.

Every kit example gets a fresh table; the database is the test's own and the
fixture fails the test if a prepared transaction outlives it.
"""

import gc
import itertools

import psycopg
import pytest
from hypothesis import strategies as st

from reference_sinks.postgres import PostgresSink
from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkUnderTest, check_sink
from tests.reference_sinks.postgres.helpers import EVENTS_DDL, KEYED_DDL, read_rows

# The kit crashes writers as a dead process would: it drops them without close(), and
# psycopg warns when such a writer's connection is garbage-collected still open.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*was deleted while still open:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function BaseConnection.__del__"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

EXAMPLES = 25  # $SINKV2_KIT_EXAMPLES overrides it
_ids = itertools.count()
_tables = itertools.count()


def rows():
    return st.builds(
        lambda name, score: {"id": next(_ids), "name": name, "score": score},
        # PostgreSQL text holds no NUL; Spark strings are UTF-8, so no lone surrogates.
        st.text(
            alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
            max_size=8,
        ),
        st.floats(allow_nan=False, allow_infinity=False) | st.none(),
    )


def factory(url, ddl, **options):
    def make():
        name = f"events_{next(_tables)}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(ddl.format(name=name))

        sink = PostgresSink(url, name, **options)

        def drop():
            # An example may end with a checkpoint prepared and never committed (a
            # crash the kit does not restart from): the destination goes, and with it
            # what is prepared for it.
            # A writer the kit dropped mid-COPY (a crashed process) holds the table's
            # lock until its connection goes: the kit collects such writers, and the
            # drop waits a while, then ends what a crashed process would have ended.
            with psycopg.connect(url, autocommit=True) as connection:
                for gid in sink.prepared_transactions():
                    connection.execute(f"ROLLBACK PREPARED '{gid}'")
                connection.execute("SET lock_timeout = '30s'")
                try:
                    connection.execute(f"DROP TABLE IF EXISTS {name}")
                except psycopg.errors.LockNotAvailable:
                    connection.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                    connection.execute(f"DROP TABLE IF EXISTS {name}")

        return SinkUnderTest(
            sink,
            read_back=lambda: read_rows(url, name),
            close=drop,
        )

    return make


@pytest.mark.parametrize(
    ("ddl", "options"),
    [(EVENTS_DDL, {}), (KEYED_DDL, {"upsert_key": "id"})],
    ids=["insert", "upsert"],
)
def test_postgres_sink_keeps_the_exactly_once_contract(postgres_url, ddl, options):
    check_sink(
        factory(postgres_url, ddl, **options),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=rows(),
        max_examples=EXAMPLES,
    )
    gc.collect()  # the abandoned writers' connections close here, under this test's filters
