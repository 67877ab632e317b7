"""The source epoch store contract, run against every store: SQLite and PostgreSQL.

Write-once epochs and identical replays, fencing, exclusion (a source id apart from
a sink id of the same name), acknowledgement once, pruning, durability across a
store reopened, the migration of a store main wrote (layout 3), bad input, and a
model-based property test. Real stores only: a SQLite file under tmp_path, a fresh
PostgreSQL database per test; the concurrency cases use real subprocesses.
"""

import os
import pickle
from typing import Generic, Protocol

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from sinkv2.errors import (
    ConcurrentCommitError,
    IllegalLifecycleError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime._source_store import SourceEpochRecord, SourceLease
from tests.unit.runtime.store_backends import LAYOUT_VERSION, make_backend


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    return make_backend(request, tmp_path)


@pytest.fixture
def store(backend):
    return backend.store


@pytest.fixture
def lease(store):
    with store.acquire_source("kafka-orders", job_id="job-1") as held:
        yield held


def record(lease, epoch, checkpoint=b"enum", assignment=b"splits", ends=None):
    return lease.record_epoch(
        epoch, enumerator_checkpoint=checkpoint, assignment=assignment, end_positions=ends
    )


# -- records ----------------------------------------------------------------------


def test_an_epoch_is_recorded_from_zero_and_read_back(lease):
    assert lease.get(0) is None
    assert lease.latest() is None
    first = record(lease, 0, b"cp0", b"as0")
    assert first == SourceEpochRecord(
        source_id="kafka-orders",
        epoch=0,
        enumerator_checkpoint=b"cp0",
        assignment=b"as0",
        end_positions=None,
        acknowledged=False,
        fencing_token=lease.fencing_token,
        job_id="job-1",
        created_at=first.created_at,
    )
    second = record(lease, 1, b"cp1", b"as1", ends=b"ends1")
    assert second.end_positions == b"ends1"
    assert lease.get(0) == first
    assert lease.get(1) == second
    assert lease.latest() == second
    assert "<3 bytes>" in repr(first)
    assert "cp0" not in repr(first)


def test_recording_an_epoch_again_with_the_same_bytes_returns_the_stored_record(backend, store):
    with store.acquire_source("kafka-orders", job_id="first") as lease:
        original = record(lease, 0, b"cp", b"as", ends=b"e")
        assert record(lease, 0, b"cp", b"as", ends=b"e") == original
    # a replay by the next driver decides the same: still the first driver's record
    with backend.new_store().acquire_source("kafka-orders", job_id="second") as lease:
        replay = record(lease, 0, b"cp", b"as", ends=b"e")
        assert replay == original
        assert (replay.job_id, replay.fencing_token) == ("first", 1)


@pytest.mark.parametrize(
    ("changed", "differs"),
    [
        ({"checkpoint": b"other"}, "another enumerator_checkpoint;"),
        ({"assignment": b"other"}, "another assignment;"),
        ({"ends": b"other"}, "another end_positions;"),
        ({"checkpoint": b"x", "assignment": b"y"}, "enumerator_checkpoint and assignment"),
    ],
)
def test_recording_an_epoch_again_with_other_bytes_is_refused(lease, changed, differs):
    original = record(lease, 3, b"cp", b"as")
    with pytest.raises(IllegalLifecycleError) as caught:
        record(lease, 3, **{"checkpoint": b"cp", "assignment": b"as", **changed})
    message = str(caught.value)
    assert "epoch 3 of source 'kafka-orders' is already recorded" in message
    assert "by job 'job-1', fencing token 1" in message
    assert differs in message
    assert "a replay must decide exactly what the first attempt decided" in message
    assert lease.get(3) == original


def test_end_positions_none_and_empty_bytes_are_different_decisions(lease):
    record(lease, 1, ends=None)
    with pytest.raises(IllegalLifecycleError, match="another end_positions"):
        record(lease, 1, ends=b"")
    record(lease, 2, ends=b"")
    assert lease.get(2).end_positions == b""


def test_an_epoch_is_acknowledged_once(backend, store):
    with store.acquire_source("kafka-orders", job_id="j") as lease:
        record(lease, 0)
        record(lease, 1)
        assert lease.mark_acknowledged(0) is True
        assert lease.mark_acknowledged(0) is False
        assert lease.get(0).acknowledged is True
        assert lease.get(1).acknowledged is False
        # an acknowledged epoch replays as before: acknowledging changed no decision
        assert record(lease, 0).acknowledged is True
    with backend.new_store().acquire_source("kafka-orders", job_id="next") as lease:
        assert lease.mark_acknowledged(0) is False
        assert lease.mark_acknowledged(1) is True


def test_an_absent_epoch_cannot_be_acknowledged(lease):
    with pytest.raises(IllegalLifecycleError, match="epoch 4 of source 'kafka-orders' has no"):
        lease.mark_acknowledged(4)
    assert lease.get(4) is None


def test_prune_forgets_every_epoch_below_the_bound(store, lease):
    for epoch in range(5):
        record(lease, epoch)
    lease.mark_acknowledged(0)
    assert lease.prune(0) == 0
    assert lease.prune(3) == 3
    assert [r.epoch for r in store.source_epochs("kafka-orders")] == [3, 4]
    assert lease.get(2) is None
    assert lease.prune(3) == 0
    assert lease.latest().epoch == 4
    assert lease.prune(10) == 2
    assert lease.latest() is None


def test_records_survive_the_store_reopened_and_the_operator_sees_them(backend, store):
    with store.acquire_source("kafka-orders", job_id="j") as lease:
        written = [record(lease, epoch, bytes([epoch]), b"as") for epoch in range(3)]
        lease.mark_acknowledged(1)
    with store.acquire("kafka-orders", job_id="j"):
        pass  # a sink id of the same name is another store entry
    reopened = backend.new_store()
    assert reopened.source_ids() == ["kafka-orders"]
    assert reopened.sink_ids() == ["kafka-orders"]
    epochs = reopened.source_epochs("kafka-orders")
    assert [r.epoch for r in epochs] == [0, 1, 2]
    assert epochs[1].acknowledged is True
    assert [r.enumerator_checkpoint for r in epochs] == [r.enumerator_checkpoint for r in written]
    assert reopened.source_epochs("unknown") == []
    assert reopened.epochs("kafka-orders") == []
    with reopened.acquire_source("kafka-orders", job_id="k") as lease:
        assert lease.fencing_token == 2
        assert lease.latest() == epochs[2]


def test_the_operator_queries_on_a_store_without_tables_find_nothing(backend):
    fresh = backend.fresh_store()
    assert fresh.source_ids() == []
    assert fresh.source_epochs("kafka-orders") == []


# -- exclusion and fencing --------------------------------------------------------


def test_a_second_acquire_of_a_held_source_id_is_refused_naming_the_holder(backend, store):
    with store.acquire_source("kafka-orders", job_id="first-job") as first:
        with pytest.raises(ConcurrentCommitError) as caught:
            store.acquire_source("kafka-orders", job_id="second-job")
        message = str(caught.value)
        assert "source 'kafka-orders' is already held, by job 'first-job'" in message
        assert "never hold one source id at once" in message
        assert f"pid {os.getpid()}" in message
        assert "before acquiring the source id again" in message
        with pytest.raises(ConcurrentCommitError, match="first-job"):
            backend.new_store().acquire_source("kafka-orders", job_id="third-job")
        assert record(first, 0).fencing_token == first.fencing_token


def test_a_source_id_and_a_sink_id_of_the_same_name_never_exclude_each_other(store):
    with (
        store.acquire("orders", job_id="sink-job") as sink,
        store.acquire_source("orders", job_id="source-job") as source,
    ):
        assert (sink.fencing_token, source.fencing_token) == (1, 1)
        sink.record_pending(1, explicit=True, serializer_version=1, payload=b"p")
        record(source, 1)
        with pytest.raises(ConcurrentCommitError, match="source 'orders'"):
            store.acquire_source("orders", job_id="other")
        with pytest.raises(ConcurrentCommitError, match="sink 'orders'"):
            store.acquire("orders", job_id="other")
    with store.acquire_source("orders", job_id="again") as source:
        assert source.fencing_token == 2  # the sink's acquires did not advance it
        assert [r.epoch for r in store.epochs("orders")] == [1]
        assert [r.epoch for r in store.source_epochs("orders")] == [1]
    with store.acquire("orders", job_id="again") as sink:
        assert sink.fencing_token == 2


HOLD_UNTIL_TOLD = """
    import os
    lease = store.acquire_source("kafka-orders", job_id="holder-job")
    lease.record_epoch(0, enumerator_checkpoint=b"cp", assignment=b"as")
    print(os.getpid(), flush=True)
    sys.stdin.readline()
    lease.release()
"""


@pytest.mark.parametrize("ending", ["release", "kill"])
def test_a_source_held_by_another_process_is_taken_over_when_it_lets_go(backend, store, ending):
    with backend.python(HOLD_UNTIL_TOLD) as child:
        pid = int(child.stdout.readline())
        with pytest.raises(ConcurrentCommitError) as caught:
            store.acquire_source("kafka-orders", job_id="second-job")
        message = str(caught.value)
        assert "job 'holder-job'" in message
        assert f"pid {pid}" in message
        assert "this process" not in message
        store.acquire("kafka-orders", job_id="second-job").release()  # the sink id is free
        if ending == "release":
            child.stdin.write("go\n")
            child.stdin.flush()
        else:
            child.kill()
        child.communicate(timeout=60)
    with store.acquire_source("kafka-orders", job_id="second-job") as lease:
        assert lease.fencing_token == 2
        assert lease.get(0).job_id == "holder-job"
        assert record(lease, 0, b"cp", b"as").fencing_token == 1  # the replay is identical


@pytest.mark.parametrize(
    "write",
    [
        lambda lease: record(lease, 1),
        lambda lease: record(lease, 0),
        lambda lease: lease.mark_acknowledged(0),
        lambda lease: lease.prune(1),
    ],
    ids=["record", "replay", "acknowledge", "prune"],
)
def test_a_fenced_off_source_lease_cannot_write(backend, store, write):
    lease = store.acquire_source("kafka-orders", job_id="old-driver")
    try:
        record(lease, 0)
        backend.bump_fence("kafka-orders", kind="source")
        before = backend.new_store().source_epochs("kafka-orders")
        with pytest.raises(StaleFencingTokenError) as caught:
            write(lease)
        message = str(caught.value)
        assert "the lease on source 'kafka-orders' of job 'old-driver' has fencing token 1" in (
            message
        )
        assert "the source's current token is 2, held by job 'usurper'" in message
        assert "Nothing was written" in message
        assert backend.new_store().source_epochs("kafka-orders") == before
        assert lease.get(0) == before[0]  # reading is still allowed
    finally:
        lease.release()


def test_a_takeover_of_the_sink_id_does_not_fence_the_source_lease(backend, store, lease):
    with store.acquire("kafka-orders", job_id="j"):
        pass
    backend.bump_fence("kafka-orders", kind="sink")
    assert record(lease, 0).fencing_token == lease.fencing_token


# -- lease lifecycle and bad input ------------------------------------------------


def test_a_released_source_lease_refuses_every_call(store):
    lease = store.acquire_source("kafka-orders", job_id="j")
    lease.release()
    lease.release()
    for call in (
        lambda: lease.get(0),
        lease.latest,
        lambda: record(lease, 0),
        lambda: lease.mark_acknowledged(0),
        lambda: lease.prune(1),
    ):
        with pytest.raises(IllegalLifecycleError, match=r"source 'kafka-orders' .* was released"):
            call()
    assert "released" in repr(lease)


def test_the_source_lease_shows_itself_and_does_not_pickle(store, lease):
    members = {
        name
        for protocol in SourceLease.__mro__
        if protocol not in (object, Protocol, Generic)
        for name in vars(protocol)
        if not name.startswith("_")
    }
    assert members == {
        "source_id",
        "fencing_token",
        "job_id",
        "get",
        "latest",
        "record_epoch",
        "mark_acknowledged",
        "prune",
        "release",
    }
    for name in (*members, "__enter__", "__exit__"):
        assert hasattr(lease, name), name
    assert repr(lease).startswith("<SourceLease source_id='kafka-orders' fencing_token=1 ")
    assert (lease.source_id, lease.job_id) == ("kafka-orders", "job-1")
    with pytest.raises(TypeError, match="acquire the source id in the process"):
        pickle.dumps(lease)
    assert pickle.loads(pickle.dumps(store)) == store


@pytest.mark.parametrize("epoch", [-1, 2**63, True, 1.0, "1", None])
def test_every_call_rejects_a_bad_epoch(lease, epoch):
    for call in (lease.get, lambda e: record(lease, e), lease.mark_acknowledged, lease.prune):
        with pytest.raises(SinkConfigurationError, match="epochs start at 0"):
            call(epoch)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checkpoint": "text"}, "'enumerator_checkpoint' must be bytes"),
        ({"assignment": bytearray(b"x")}, "'assignment' must be bytes"),
        ({"ends": [1]}, "'end_positions' must be bytes or None"),
    ],
)
def test_record_epoch_rejects_bad_arguments(lease, kwargs, message):
    with pytest.raises(SinkConfigurationError, match=message):
        record(lease, 0, **kwargs)
    assert lease.latest() is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source_id": "", "job_id": "j"}, "'source_id' must be a non-empty str"),
        ({"source_id": 3, "job_id": "j"}, "'source_id' must be a non-empty str"),
        ({"source_id": "s", "job_id": ""}, "'job_id' must be a non-empty str"),
    ],
)
def test_acquire_source_rejects_bad_names(store, kwargs, message):
    with pytest.raises(SinkConfigurationError, match=message):
        store.acquire_source(kwargs["source_id"], job_id=kwargs["job_id"])
    with pytest.raises(SinkConfigurationError, match="'source_id' must be a non-empty str"):
        store.source_epochs("")


# -- migration --------------------------------------------------------------------


@pytest.mark.parametrize("first", ["acquire_source", "acquire", "source_ids"])
def test_a_layout_3_store_is_migrated_on_open_and_its_sink_records_are_intact(backend, first):
    store = backend.store
    with store.acquire("orders", job_id="old") as sink:
        sink.record_job()
        sink.bind_origin("query 1")
        sink.record_pending(1, explicit=True, serializer_version=2, payload=b"one")
        sink.mark_committed(1)
        sink.record_pending(2, explicit=False, serializer_version=2, payload=b"two")
    before = backend.rows()
    backend.downgrade_to_layout_3()
    assert backend.layout() == 3
    assert "source_epoch_state" not in backend.tables()

    reopened = backend.new_store()
    if first == "acquire_source":
        reopened.acquire_source("orders", job_id="new").release()
    elif first == "acquire":
        reopened.acquire("orders", job_id="new").release()
    else:
        assert reopened.source_ids() == []
    assert backend.layout() == LAYOUT_VERSION == 5
    assert {"source_epoch_state", "source_fence", "sink_result"} <= set(backend.tables())
    assert backend.rows()[0] == before[0]  # every sink epoch row, byte for byte
    assert reopened.jobs("orders") == ["old"]
    assert reopened.origin("orders") == "query 1"
    with reopened.acquire("orders", job_id="newer") as sink:
        assert [(r.epoch, r.payload) for r in sink.epochs()] == [(1, b"one"), (2, b"two")]
        assert sink.mark_committed(2).checkpoint_id == sink.get(2).checkpoint_id
    with reopened.acquire_source("orders", job_id="newer") as source:
        assert record(source, 0).epoch == 0
    assert reopened.source_ids() == ["orders"]


# -- property: the store against a model ------------------------------------------

SOURCES = ("s1", "s2")
EPOCHS = st.integers(0, 6)
DECISIONS = st.tuples(
    st.sampled_from([b"a", b"b"]), st.sampled_from([b"x"]), st.none() | st.just(b"e")
)


def _decision(record):
    return [record.enumerator_checkpoint, record.assignment, record.end_positions]


class SourceStoreAgainstModel(RuleBasedStateMachine):
    """Random record / replay / acknowledge / prune / restart over two source ids."""

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self.store = backend.fresh_store()
        self.leases = {}
        self.model = {}  # (source, epoch) -> [checkpoint, assignment, ends, acknowledged, token]

    @initialize()
    def acquire_all(self):
        for source in SOURCES:
            self.leases[source] = self.store.acquire_source(source, job_id=f"job-{source}")

    @rule(source=st.sampled_from(SOURCES), epoch=EPOCHS, decision=DECISIONS)
    def record_epoch(self, source, epoch, decision):
        lease = self.leases[source]
        stored = self.model.get((source, epoch))
        if stored is None:
            event("record")
            written = record(lease, epoch, *decision)
            self.model[(source, epoch)] = [*decision, False, lease.fencing_token]
            assert written.fencing_token == lease.fencing_token
        elif tuple(stored[:3]) == decision:
            event("identical replay")
            assert record(lease, epoch, *decision).fencing_token == stored[4]
        else:
            event("different replay")
            with pytest.raises(IllegalLifecycleError, match=f"epoch {epoch} of source {source!r}"):
                record(lease, epoch, *decision)

    @rule(source=st.sampled_from(SOURCES), epoch=EPOCHS)
    def acknowledge(self, source, epoch):
        stored = self.model.get((source, epoch))
        if stored is None:
            with pytest.raises(IllegalLifecycleError, match="has no record"):
                self.leases[source].mark_acknowledged(epoch)
            return
        assert self.leases[source].mark_acknowledged(epoch) is (not stored[3])
        stored[3] = True

    @rule(source=st.sampled_from(SOURCES), below=st.integers(0, 7))
    def prune(self, source, below):
        doomed = [key for key in self.model if key[0] == source and key[1] < below]
        assert self.leases[source].prune(below) == len(doomed)
        for key in doomed:
            del self.model[key]

    @rule(source=st.sampled_from(SOURCES), fenced=st.booleans())
    def restart(self, source, fenced):
        """A driver restarts, cleanly or after being fenced off."""
        old = self.leases[source]
        if fenced:
            self.backend.bump_fence(source, self.store, kind="source")
            with pytest.raises(StaleFencingTokenError):
                old.prune(7)
        old.release()
        self.leases[source] = self.store.acquire_source(source, job_id=f"job-{source}")
        assert self.leases[source].fencing_token > old.fencing_token

    @invariant()
    def store_equals_model(self):
        if not self.leases:
            return
        for source, lease in self.leases.items():
            expected = sorted((e, v) for (s, e), v in self.model.items() if s == source)
            actual = [
                (e.epoch, [*_decision(e), e.acknowledged, e.fencing_token])
                for e in self.store.source_epochs(source)
            ]
            assert actual == expected
            latest = lease.latest()
            assert (latest.epoch if latest else None) == (expected[-1][0] if expected else None)

    def teardown(self):
        for lease in self.leases.values():
            lease.release()


def test_the_source_store_always_equals_a_model_of_what_was_recorded(backend):
    run_state_machine_as_test(
        lambda: SourceStoreAgainstModel(backend),
        settings=settings(stateful_step_count=25, max_examples=40, deadline=None),
    )
