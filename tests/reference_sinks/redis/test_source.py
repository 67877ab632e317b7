"""RedisStreamSource on a real redis-server: the source kit, replay identity, trimming, bad input.

Engine-neutral (no Spark): the kit runs the local FLIP-27 engine; the micro-batch
checks plan epochs with `SourceEpochCoordinator` as Spark's stream reader asks for
them and read each epoch's slices with `read_epoch_slice`. A "restart" is a new
coordinator (and a new source) on the same store.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_sinks.redis import (
    NotAStreamError,
    RedisStreamSource,
    RedisStreamSplit,
    StreamEntryError,
    redis_stream_source_from_options,
)
from reference_sinks.redis._source_options import parse_fields
from sinkv2.errors import CommitStateError, SinkConfigurationError
from sinkv2.runtime import (
    ReadLimit,
    SourceEpochCoordinator,
    SqliteCommitStateStore,
    read_epoch_slice,
)
from sinkv2.source import SourceReaderError
from sinkv2.testing import LocalSourceEngine, check_source
from tests.reference_sinks.redis.stream_data import FIELDS, append, rows_of

KIT_EXAMPLES = 10  # $SINKV2_KIT_EXAMPLES overrides it


def source(server: Any, **kwargs: Any) -> RedisStreamSource:
    kwargs.setdefault("batch_entries", 7)
    return RedisStreamSource(server.url, FIELDS, **kwargs)


class Run:
    """One query run: a coordinator over a fresh source, and the rows of each epoch it planned."""

    def __init__(self, server: Any, store: Any, parallelism: int = 2, **kwargs: Any) -> None:
        self.source = source(server, discovery_interval_ms=1, **kwargs)
        self.coordinator = SourceEpochCoordinator(
            self.source, store, "streams", parallelism=parallelism
        )
        self.rows: dict[int, list[dict[str, Any]]] = {}

    def rows_of(self, epoch: int) -> list[dict[str, Any]]:
        schema = self.source.get_produced_type()
        return [
            row
            for piece in self.coordinator.slices(epoch)
            for batch in read_epoch_slice(self.source, schema, piece)
            for row in batch.to_pylist()
        ]

    def step(self, start: int, limit: ReadLimit | None = None) -> int:
        end = self.coordinator.next_epoch(start, limit or ReadLimit())
        if end != start:
            self.rows[end] = self.rows_of(end)
        return end

    def close(self) -> None:
        self.coordinator.close()


def by_key(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["stream"], []).append(row)
    return grouped


# --- the source kit ------------------------------------------------------------------------


def test_a_bounded_source_passes_the_source_kit(redis_server, redis_client):
    append(redis_client, "a", 23)
    append(redis_client, "b", 9)
    append(redis_client, "c", 1)
    expected = [*rows_of(redis_client, "a"), *rows_of(redis_client, "b")]
    expected += rows_of(redis_client, "c")
    check_source(
        lambda: source(redis_server, keys=["a", "b", "missing", "c"], bounded=True),
        expected=expected,
        max_examples=KIT_EXAMPLES,
    )


def test_an_unbounded_source_by_pattern_passes_the_source_kit(redis_server, redis_client):
    for key, count in (("kit:a", 50), ("kit:b", 30), ("kit:c", 40)):
        append(redis_client, key, count)
    redis_client.set("kit:not-a-stream", "x")  # a pattern only matches streams
    check_source(
        lambda: source(redis_server, pattern="kit:*"),
        split_records=lambda key: rows_of(redis_client, key),
        records_to_read=120,
        max_examples=KIT_EXAMPLES,
    )


# --- replay identity and cut coverage ------------------------------------------------------

KEYS = ("s0", "s1", "s2")
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(KEYS), st.integers(1, 12)),
        st.tuples(st.just("epoch"), st.sampled_from([None, 1, 5, 20])),
        st.just(("restart",)),
    ),
    min_size=1,
    max_size=15,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=ACTIONS, parallelism=st.integers(1, 3))
def test_cut_slices_replay_identically_and_cover_each_stream_once(
    redis_server, actions, parallelism
):
    """Random appends between epochs (some capped, some restarts): the epochs' rows of each key,
    in order, are exactly XRANGE - +; an epoch read again (after appends, or by a restarted run)
    holds the same rows."""
    with redis_server.client() as client:
        client.flushall()
        store = SqliteCommitStateStore(Path(tempfile.mkdtemp()) / "state.sqlite")
        append(client, "s0", 3)  # a key missing at the start is waited for (s1, s2)
        run = Run(redis_server, store, parallelism, keys=list(KEYS))
        planned: dict[int, list[dict[str, Any]]] = {}
        epoch = run.coordinator.initial_epoch()
        for action in [*actions, ("epoch", None)]:
            if action[0] == "append":
                append(client, action[1], action[2])
            elif action[0] == "restart":
                run.close()
                run = Run(redis_server, store, parallelism, keys=list(KEYS))
            else:
                if epoch in planned:  # not pruned before the next epoch is asked for
                    assert run.rows_of(epoch) == planned[epoch]
                step = run.step(epoch, ReadLimit(max_records=action[1]))
                if step != epoch:
                    planned[step] = run.rows[step]
                    assert action[1] is None or len(planned[step]) <= action[1]
                epoch = step
        for _ in range(50):  # drain: every epoch reads something, so this ends
            if (step := run.step(epoch)) == epoch:
                break
            planned[step] = run.rows[step]
            epoch = step
        else:
            raise AssertionError("50 epochs after the last append still read something")
        run.close()
        got = by_key([row for e in sorted(planned) for row in planned[e]])
        everything = {key: rows_of(client, key) for key in KEYS}
        assert got == {key: rows for key, rows in everything.items() if rows}


# --- trimming --------------------------------------------------------------------------------


def test_trimming_deletes_only_what_a_committed_epoch_read(redis_server, redis_client, tmp_path):
    store = SqliteCommitStateStore(tmp_path / "state.sqlite")
    append(redis_client, "a", 10)
    append(redis_client, "b", 4)
    run = Run(redis_server, store, keys=["a", "b"], trim=True)
    first = run.step(run.coordinator.initial_epoch())
    assert len(run.rows[first]) == 14
    assert (redis_client.xlen("a"), redis_client.xlen("b")) == (10, 4)  # read, not committed
    late = append(redis_client, "a", 5)
    second = run.step(first)  # asking after `first` proves it committed
    assert redis_client.xlen("b") == 0
    assert [entry.decode() for entry, _ in redis_client.xrange("a")] == late
    run.close()
    again = Run(redis_server, store, keys=["a", "b"], trim=True)
    assert again.rows_of(second) == run.rows[second]  # a replay after the trim is identical
    assert redis_client.xlen("a") == 5  # still not committed
    assert again.step(second) == second  # commits `second`; nothing new
    assert redis_client.xlen("a") == 0
    again.close()


def test_without_trim_nothing_is_deleted(redis_server, redis_client, tmp_path):
    append(redis_client, "a", 6)
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"])
    epoch = run.step(run.coordinator.initial_epoch())
    run.step(epoch)
    run.close()
    assert redis_client.xlen("a") == 6


def test_a_local_engine_that_never_cuts_trims_nothing(redis_server, redis_client):
    append(redis_client, "a", 6)
    engine = LocalSourceEngine(source(redis_server, keys=["a"], trim=True), 1)
    engine.run(until=lambda e: len(e.committed) >= 6, checkpoint_every=2)
    engine.checkpoint()
    engine.close()
    assert redis_client.xlen("a") == 6


# --- bounded, missing keys -------------------------------------------------------------------


def test_bounded_reads_up_to_the_last_id_at_start_and_a_missing_key_is_empty(
    redis_server, redis_client, tmp_path
):
    append(redis_client, "a", 5)
    want = rows_of(redis_client, "a")
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a", "gone"])
    run.source.bounded = True  # the same source, bounded
    epoch = run.coordinator.initial_epoch()
    append(redis_client, "a", 3)  # after the start: not read
    append(redis_client, "gone", 2)
    while (end := run.step(epoch)) != epoch:
        epoch = end
    run.close()
    assert [row for rows in run.rows.values() for row in rows] == want


def test_an_unbounded_source_waits_for_a_missing_key(redis_server, redis_client, tmp_path):
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["later"])
    epoch = run.coordinator.initial_epoch()
    assert run.step(epoch) == epoch  # nothing to read yet
    append(redis_client, "later", 3)
    epoch = run.step(epoch)
    run.close()
    assert run.rows[epoch] == rows_of(redis_client, "later")


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("bounded", [False, True])
def test_a_key_that_is_not_a_stream_is_named(redis_server, redis_client, bounded):
    append(redis_client, "a", 1)
    redis_client.hset("h", "f", "v")
    with pytest.raises(NotAStreamError, match=r"the key 'h' holds another type than a stream"):
        LocalSourceEngine(source(redis_server, keys=["a", "h"], bounded=bounded), 1).run()


def test_a_key_that_becomes_another_type_fails_the_next_cut_naming_it(redis_server, redis_client):
    ids = append(redis_client, "a", 2)
    stream_source = source(redis_server, keys=["a"])
    split = RedisStreamSplit("a", after=ids[0])
    assert stream_source.end_positions([split]) == [ids[1]]
    redis_client.delete("a")
    redis_client.set("a", "now a string")
    with pytest.raises(NotAStreamError, match="the key 'a' holds another type"):
        stream_source.end_positions([split])


def test_a_value_that_does_not_parse_names_key_id_and_field(redis_server, redis_client):
    good = append(redis_client, "a", 2)
    bad = redis_client.xadd("a", {"n": "3", "amount": "lots"}).decode()
    engine = LocalSourceEngine(source(redis_server, keys=["a"], bounded=True), 1)
    with pytest.raises(SourceReaderError) as caught:
        engine.run()
    engine.close()
    error = caught.value.__cause__
    assert isinstance(error, StreamEntryError)
    assert f"entry {bad} of stream 'a': field 'amount' = b'lots' does not parse" in str(error)
    assert (error.key, error.entry_id, error.field) == ("a", bad, "amount")
    assert good  # the entries before it were fine


def test_a_missing_not_null_field_names_key_id_and_field(redis_server, redis_client):
    bad = redis_client.xadd("a", {"amount": "1"}).decode()
    engine = LocalSourceEngine(source(redis_server, keys=["a"], bounded=True), 1)
    with pytest.raises(SourceReaderError, match=f"entry {bad} of stream 'a' has no field 'n'"):
        engine.run()
    engine.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": []}, "needs stream keys to read"),
        ({"keys": ["a", "a"]}, r"lists \['a'\] more than once"),
        ({"keys": ["a"], "key_column": "user"}, r"\['user'\] is used twice"),
        ({"keys": ["a"], "batch_entries": 0}, "batch_entries must be an int >= 1"),
        ({"keys": ["a"], "trim": "yes"}, "trim must be True or False"),
        ({"keys": ["a"], "fields": [pa.field("l", pa.list_(pa.int64()))]}, "cannot parse field"),
        ({"keys": ["a"], "url": "http://x"}, "must be a redis://"),
        ({"keys": ["a"], "url": "redis://h:63 79/0"}, "its port '63 79' is not a port number"),
        ({"keys": ["a"], "url": "redis://h:6379/zero"}, "its database 'zero' is not a number"),
    ],
)
def test_bad_configuration_is_refused_at_construction(kwargs, message):
    url = kwargs.pop("url", "redis://127.0.0.1:1/0")
    fields = kwargs.pop("fields", FIELDS)
    with pytest.raises(SinkConfigurationError, match=message):
        RedisStreamSource(url, fields, **kwargs)


def test_string_options_make_the_same_source():
    made = redis_stream_source_from_options(
        url="redis://127.0.0.1:6379/0",
        fields="user string, amount double, n bigint not null",
        keys="a, b",
        trim="true",
    )
    assert made.keys == ("a", "b")
    assert made.trim
    assert not made.bounded
    assert made.get_produced_type() == source_schema()
    assert parse_fields("p decimal(10, 2), t timestamp").field("p").type == pa.decimal128(10, 2)
    with pytest.raises(SinkConfigurationError, match="'fields' option declares 'x' as 'list'"):
        parse_fields("x list")
    with pytest.raises(SinkConfigurationError, match="needs the 'fields' option"):
        redis_stream_source_from_options(url="redis://127.0.0.1:6379/0", keys="a")


def source_schema() -> pa.Schema:
    return RedisStreamSource("redis://127.0.0.1:6379/0", FIELDS, keys=["a"]).get_produced_type()


# --- fault cases (issue 25's red team) -------------------------------------------------------


def test_entries_trimmed_past_the_position_by_someone_else_are_a_clear_error(
    redis_server, redis_client, tmp_path
):
    ids = append(redis_client, "a", 6)
    capped = append(redis_client, "b", 3)
    redis_client.xtrim("b", maxlen=1, approximate=False)  # before the query: not its to read
    (end,) = source(redis_server, keys=["b"]).end_positions([RedisStreamSplit("b")])
    assert end == capped[-1]
    run = Run(redis_server, SqliteCommitStateStore(tmp_path / "s.sqlite"), keys=["a"])
    first = run.step(run.coordinator.initial_epoch(), ReadLimit(max_records=2))
    assert [row["id"] for row in run.rows[first]] == ids[:2]
    redis_client.xtrim("a", minid=ids[2], approximate=False)  # only what was read: fine
    second = run.step(first, ReadLimit(max_records=1))
    assert [row["id"] for row in run.rows[second]] == ids[2:3]
    third = run.step(second)
    assert [row["id"] for row in run.rows[third]] == ids[3:]
    later = append(redis_client, "a", 3)
    redis_client.xtrim("a", maxlen=1, approximate=False)  # two entries were not read
    lost = rf"stream 'a' lost 2 entries this query had not read: it is read after id {ids[5]}"
    with pytest.raises(CommitStateError, match=lost):
        run.step(third)
    run.close()
    assert later


def test_odd_field_names_and_binary_values_read_as_declared(redis_server, redis_client):
    fields = pa.schema(
        [
            pa.field("a b", pa.string()),
            pa.field("é", pa.int64()),
            pa.field("", pa.string()),
            pa.field("raw", pa.binary()),
        ]
    )
    blob = bytes(range(256))
    first = redis_client.xadd("odd", {"a b": "x", "é": "7", "": "empty", "raw": blob}).decode()
    bad = redis_client.xadd("bad", {"a b": b"\xff\xfe"}).decode()
    engine = LocalSourceEngine(
        RedisStreamSource(redis_server.url, fields, keys=["odd"], bounded=True), 1
    )
    engine.run()
    engine.finish()
    engine.close()
    assert [record.record for record in engine.committed] == [
        {
            "stream": "odd",
            "id": first,
            "a b": "x",
            "é": 7,
            "": "empty",
            "raw": blob,
        }
    ]
    engine = LocalSourceEngine(
        RedisStreamSource(redis_server.url, fields, keys=["bad"], bounded=True), 1
    )
    not_text = f"entry {bad} of stream 'bad': field 'a b' = .* does not parse as string"
    with pytest.raises(SourceReaderError, match=rf"{not_text} .*declare the field as binary"):
        engine.run()
    engine.close()
