"""The commit state store contract, run against every store: SQLite and PostgreSQL.

Transitions, durability, exclusion, fencing, lease lifecycle, bad input, and a
model-based property test. Everything runs against real stores (a SQLite file under
tmp_path, a fresh PostgreSQL database per test); crash and concurrency cases use
real subprocesses. What only one store has lives in test_sqlite_store.py and
test_postgres_store.py.
"""

import copy
import itertools
import os
import pickle
import re
import threading
import time
from functools import partial
from typing import Generic, Protocol

import cloudpickle
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

from sinkv2 import END_OF_INPUT, INITIAL_CHECKPOINT_ID
from sinkv2.errors import (
    CommitStateError,
    ConcurrentCommitError,
    IllegalLifecycleError,
    SinkConfigurationError,
    StaleFencingTokenError,
)
from sinkv2.runtime import SCHEMA_VERSION, EpochRecord, EpochStatus, SinkLease
from sinkv2.runtime._store import TRANSITIONS as _TRANSITIONS
from tests.unit.runtime.store_backends import make_backend

P, A, C = EpochStatus.PENDING, EpochStatus.ABORTED, EpochStatus.COMMITTED


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    return make_backend(request, tmp_path)


@pytest.fixture
def store(backend):
    return backend.store


@pytest.fixture
def lease(store):
    with store.acquire("orders", job_id="job-1") as held:
        yield held


def pending(lease, epoch, payload=b"committables", *, explicit=False, version=1):
    return lease.record_pending(
        epoch, explicit=explicit, serializer_version=version, payload=payload
    )


def put(lease, epoch, status):
    """Bring ``epoch`` to ``status`` through legal transitions."""
    if status is None:
        return
    pending(lease, epoch, b"before")
    if status is C:
        lease.mark_committed(epoch)
    elif status is A:
        lease.mark_aborted(epoch)


def do(lease, epoch, target):
    if target is P:
        return pending(lease, epoch, b"after", explicit=True, version=7)
    if target is C:
        return lease.mark_committed(epoch)
    return lease.mark_aborted(epoch)


# -- lifecycle and transitions ------------------------------------------------------


def test_full_lifecycle_survives_a_new_lease(store):
    with store.acquire("orders", job_id="job-1") as lease:
        assert lease.sink_id == "orders"
        assert lease.get(1) is None
        epoch = lease.next_epoch()
        assert epoch == INITIAL_CHECKPOINT_ID == 1

        before = time.time()
        recorded = pending(lease, epoch, b"files a, b", version=3)
        assert recorded == EpochRecord(
            sink_id="orders",
            epoch=1,
            status=P,
            explicit=False,
            serializer_version=3,
            payload=b"files a, b",
            fencing_token=lease.fencing_token,
            job_id="job-1",
            updated_at=recorded.updated_at,
        )
        assert before <= recorded.updated_at <= time.time()
        assert lease.get(1) == recorded

        committed = lease.mark_committed(1)
        assert committed.status is C
        assert committed.payload == b"files a, b"
        assert committed.serializer_version == 3
        assert lease.get(1) == committed
        assert lease.next_epoch() == 2

    with store.acquire("orders", job_id="job-2") as again:
        assert again.get(1) == committed
        assert again.epochs() == [committed]
        assert again.next_epoch() == 2


LEGAL = [
    (None, P),
    (A, P),
    (P, P),
    (P, C),
    (P, A),
]


@pytest.mark.parametrize(("start", "target"), LEGAL)
def test_legal_transitions_write_the_new_status(lease, start, target):
    put(lease, 5, start)
    record = do(lease, 5, target)
    assert record.status is target
    assert lease.get(5) == record
    if target is P:
        # re-recording replaces the committables and their framing
        assert (record.payload, record.explicit, record.serializer_version) == (b"after", True, 7)
    else:
        # marking keeps what record_pending wrote
        assert (record.payload, record.explicit, record.serializer_version) == (b"before", False, 1)


@pytest.mark.parametrize("status", [C, A])
def test_marking_twice_is_a_no_op_that_returns_the_record(lease, backend, status):
    put(lease, 2, status)
    first = lease.get(2)
    time.sleep(0.01)
    again = do(lease, 2, status)
    assert again == first
    assert lease.get(2) == first
    assert backend.rows()[0][0][8] == first.updated_at


ILLEGAL = [
    (C, P, "epoch 4 of sink 'orders' is already committed; it cannot be recorded as pending"),
    (C, A, "epoch 4 of sink 'orders' is already committed; it cannot be aborted"),
    (A, C, "epoch 4 of sink 'orders' was aborted; its committables must never be committed"),
    (None, C, "epoch 4 of sink 'orders' has no record, so it cannot be marked committed"),
    (None, A, "epoch 4 of sink 'orders' has no record, so there is nothing to abort"),
]


@pytest.mark.parametrize(("start", "target", "message"), ILLEGAL)
def test_illegal_transitions_raise_and_change_nothing(lease, backend, start, target, message):
    put(lease, 4, start)
    before = backend.rows()
    with pytest.raises(IllegalLifecycleError, match=message):
        do(lease, 4, target)
    assert backend.rows() == before


def test_the_transition_table_covers_every_pair_once():
    froms = [None, *EpochStatus]
    assert set(_TRANSITIONS) == set(itertools.product(froms, EpochStatus))
    illegal = {pair for pair, rule in _TRANSITIONS.items() if isinstance(rule, str)}
    assert illegal == {(start, target) for start, target, _ in ILLEGAL}
    assert {pair for pair in _TRANSITIONS if pair not in illegal} == {
        *LEGAL,
        (C, C),
        (A, A),
    }
    messages = [rule for rule in _TRANSITIONS.values() if isinstance(rule, str)]
    assert len(set(messages)) == len(messages)


def test_next_epoch_is_one_past_the_largest_epoch_ever_recorded(store):
    with (
        store.acquire("orders", job_id="j") as orders,
        store.acquire("clicks", job_id="j") as clicks,
    ):
        assert orders.next_epoch() == clicks.next_epoch() == 1
        pending(orders, 7)
        pending(orders, 3)
        assert orders.next_epoch() == 8
        orders.mark_aborted(7)
        assert orders.next_epoch() == 8
        assert clicks.next_epoch() == 1
        pending(clicks, 2**63 - 1)
        assert clicks.next_epoch() == 2**63


def test_epochs_filters_by_status_in_ascending_epoch_order(store):
    with store.acquire("orders", job_id="j") as lease, store.acquire("other", job_id="j") as other:
        for epoch, status in [(9, P), (2, C), (5, A), (1, P), (7, C)]:
            put(lease, epoch, status)
        pending(other, 3)

        assert [r.epoch for r in lease.epochs()] == [1, 2, 5, 7, 9]
        assert [r.epoch for r in lease.epochs(P)] == [1, 9]
        assert [r.epoch for r in lease.epochs(C)] == [2, 7]
        assert [r.epoch for r in lease.epochs(A, P)] == [1, 5, 9]
        assert [r.epoch for r in lease.epochs(P, A, C)] == [1, 2, 5, 7, 9]
        assert all(r.sink_id == "orders" for r in lease.epochs())
        assert [r.epoch for r in other.epochs()] == [3]


# -- durability across processes --------------------------------------------------

CRASH_AFTER_PENDING = """
    import os
    lease = store.acquire("orders", job_id="crashed-job")
    lease.record_pending(1, explicit=True, serializer_version=3, payload=b"staged files")
    print(lease.fencing_token, flush=True)
    os._exit(1)
"""


def test_a_pending_row_outlives_a_killed_driver_and_a_rerun_commits_it(backend, store):
    with backend.python(CRASH_AFTER_PENDING) as child:
        out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    crashed_token = int(out)

    with store.acquire("orders", job_id="rerun") as lease:
        assert lease.fencing_token == crashed_token + 1
        [record] = lease.epochs(P)
        assert (record.epoch, record.payload, record.serializer_version, record.explicit) == (
            1,
            b"staged files",
            3,
            True,
        )
        assert (record.job_id, record.fencing_token) == ("crashed-job", crashed_token)
        committed = lease.mark_committed(1)
        assert (committed.job_id, committed.fencing_token) == ("rerun", lease.fencing_token)
    with store.acquire("orders", job_id="check") as lease:
        assert lease.get(1).status is C


# -- exclusion --------------------------------------------------------------------


def test_a_second_acquire_in_the_same_process_is_refused(backend, store):
    with store.acquire("orders", job_id="first-job") as first:
        with pytest.raises(ConcurrentCommitError) as caught:
            store.acquire("orders", job_id="second-job")
        message = str(caught.value)
        assert "sink 'orders' is already held, by job 'first-job'" in message
        assert f"pid {os.getpid()}" in message
        assert "The holder is this process" in message
        # a second store object on the same file is no way around it
        with pytest.raises(ConcurrentCommitError, match="first-job"):
            backend.new_store().acquire("orders", job_id="third-job")
        # the refused acquires left the holder's lease intact
        assert pending(first, 1).fencing_token == first.fencing_token


def test_different_sink_ids_are_held_at_the_same_time(store):
    with (
        store.acquire("orders", job_id="j") as orders,
        store.acquire("clicks", job_id="j") as clicks,
    ):
        pending(orders, 1, b"o")
        pending(clicks, 1, b"c")
        assert orders.get(1).payload == b"o"
        assert clicks.get(1).payload == b"c"


def test_after_release_the_sink_is_acquired_again_with_a_larger_token(backend, store):
    tokens = []
    for run in range(3):
        lease = store.acquire("orders", job_id=f"run-{run}")
        tokens.append(lease.fencing_token)
        lease.release()
    assert tokens == [1, 2, 3]
    assert backend.rows()[1] == [("orders", 3, "run-2")]


HOLD_UNTIL_TOLD = """
    import os
    lease = store.acquire("orders", job_id="holder-job")
    print(os.getpid(), flush=True)
    sys.stdin.readline()
    lease.release()
"""


@pytest.mark.parametrize("ending", ["release", "kill"])
def test_a_sink_held_by_another_process_is_refused_until_it_lets_go(backend, store, ending):
    with backend.python(HOLD_UNTIL_TOLD) as child:
        pid = int(child.stdout.readline())
        with pytest.raises(ConcurrentCommitError) as caught:
            store.acquire("orders", job_id="second-job")
        message = str(caught.value)
        assert "job 'holder-job'" in message
        assert f"pid {pid}" in message
        assert "Wait for that job to finish" in message
        assert "this process" not in message
        # other sink ids are free meanwhile
        store.acquire("clicks", job_id="second-job").release()
        if ending == "release":
            child.stdin.write("go\n")
            child.stdin.flush()
        else:
            child.kill()
        child.communicate(timeout=60)

    with store.acquire("orders", job_id="second-job") as lease:
        assert lease.fencing_token == 2


def test_leases_of_one_sink_id_in_parallel_threads_exclude_each_other(store):
    outcomes = []
    start, tried = threading.Barrier(8), threading.Barrier(8)

    def contend():
        start.wait()
        try:
            lease = store.acquire("orders", job_id=threading.current_thread().name)
        except ConcurrentCommitError:
            outcomes.append("refused")
            tried.wait()
            return
        outcomes.append("held")
        tried.wait()  # hold the sink id until every thread has tried
        lease.release()

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 7


def test_a_lease_can_be_used_from_another_thread_of_its_process(lease):
    errors = []

    def work():
        try:
            pending(lease, 1)
            lease.mark_committed(1)
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors == []
    assert lease.get(1).status is C


# -- fencing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        lambda lease: pending(lease, 1, b"new"),
        lambda lease: pending(lease, 2),
        lambda lease: lease.mark_committed(1),
        lambda lease: lease.mark_aborted(1),
    ],
    ids=["re-record", "record", "commit", "abort"],
)
def test_a_fenced_off_lease_cannot_write(backend, store, write):
    lease = store.acquire("orders", job_id="old-driver")
    try:
        pending(lease, 1, b"old")
        backend.bump_fence("orders")
        before = backend.rows()
        with pytest.raises(StaleFencingTokenError) as caught:
            write(lease)
        message = str(caught.value)
        assert "job 'old-driver' has fencing token 1" in message
        assert "the sink's current token is 2, held by job 'usurper'" in message
        assert "Nothing was written" in message
        assert backend.rows() == before
        # reading is still allowed, and shows the untouched row
        assert lease.get(1).payload == b"old"
    finally:
        lease.release()


def test_a_lease_whose_fence_row_vanished_cannot_write(backend, store):
    with store.acquire("orders", job_id="j") as lease:
        backend.delete_fences()
        with pytest.raises(StaleFencingTokenError, match="fence row is gone"):
            pending(lease, 1)


# -- lease lifecycle --------------------------------------------------------------


def test_a_released_lease_refuses_every_call_and_release_is_idempotent(store):
    lease = store.acquire("orders", job_id="j")
    lease.release()
    lease.release()
    for call in [
        lambda: pending(lease, 1),
        lambda: lease.mark_committed(1),
        lambda: lease.mark_aborted(1),
        lambda: lease.get(1),
        lease.epochs,
        lease.next_epoch,
    ]:
        with pytest.raises(IllegalLifecycleError, match="was released; acquire the sink id"):
            call()


def test_leaving_the_with_block_releases_even_on_error(store):
    with pytest.raises(KeyError), store.acquire("orders", job_id="j") as lease:
        raise KeyError("boom")
    with pytest.raises(IllegalLifecycleError):
        lease.get(1)
    store.acquire("orders", job_id="j").release()


def test_a_forgotten_lease_is_released_when_collected_with_a_warning(store):
    with pytest.warns(
        ResourceWarning, match="lease on sink 'orders' of job 'j' was never released"
    ):
        store.acquire("orders", job_id="j")  # dropped at once: CPython collects it here
    store.acquire("orders", job_id="j").release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_lease_cannot_be_used_in_a_forked_child(store, lease):
    pending(lease, 1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        outcome = b"ok"
        for call in (lambda: lease.get(1), lambda: lease.mark_committed(1), lease.release):
            try:
                call()
                outcome = b"call allowed"
            except IllegalLifecycleError as error:
                if "belongs to process" not in str(error):
                    outcome = b"wrong message"
            except BaseException:  # noqa: BLE001
                outcome = b"wrong error"
        os.write(write, outcome)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        assert pipe.read() == b"ok"
    os.waitpid(pid, 0)
    # the child neither committed nor released: the parent still holds the sink
    assert lease.get(1).status is P
    with pytest.raises(ConcurrentCommitError):
        store.acquire("orders", job_id="x")


def test_a_lease_does_not_pickle_or_copy_but_the_store_does(store, lease):
    for dump in (pickle.dumps, cloudpickle.dumps, copy.copy):
        with pytest.raises(TypeError, match="cannot be pickled or copied: it holds an"):
            dump(lease)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        revived = pickle.loads(dumps(store))
        assert revived == store
        assert hash(revived) == hash(store)


def test_the_lease_has_every_member_of_the_protocol(store, lease):
    members = {
        name
        for protocol in SinkLease.__mro__
        if protocol not in (object, Protocol, Generic)
        for name in vars(protocol)
        if not name.startswith("_")
    }
    assert members == {
        "sink_id",
        "fencing_token",
        "get",
        "epochs",
        "next_epoch",
        "record_pending",
        "mark_committed",
        "mark_aborted",
        "job_id",
        "record_job",
        "unfinished_jobs",
        "finish_job",
        "replace_writer_states",
        "prune",
        "origin",
        "bind_origin",
        "release",
    }
    for name in (*members, "__enter__", "__exit__"):
        assert hasattr(lease, name), name
    assert callable(store.acquire)
    assert "sink_id='orders'" in repr(lease)


def test_a_record_hides_its_payload_in_repr():
    record = EpochRecord("s", 1, P, False, 0, b"x" * 10_000, 1, "j", 0.0)
    assert "<10000 bytes>" in repr(record)
    assert "xxx" not in repr(record)


# -- bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sink_id": ""}, r"'sink_id' must be a non-empty str of valid unicode \(got '' of type"),
        ({"sink_id": 7}, r"'sink_id' must be .*\(got 7 of type int\)"),
        ({"sink_id": None}, r"'sink_id' must be .*\(got None of type NoneType\)"),
        ({"sink_id": "\udc80"}, r"'sink_id' must be a non-empty str of valid unicode"),
        ({"job_id": ""}, r"'job_id' must be a non-empty str of valid unicode \(got ''"),
        ({"job_id": b"j"}, r"'job_id' must be .*of type bytes"),
    ],
)
def test_acquire_rejects_bad_names(store, kwargs, message):
    arguments = {"sink_id": "orders", "job_id": "j"} | kwargs
    with pytest.raises(SinkConfigurationError, match=message):
        store.acquire(arguments.pop("sink_id"), **arguments)
    store.acquire("orders", job_id="j").release()  # nothing was left locked


BAD_EPOCHS = [0, -1, True, 1.0, "1", None, 2**63]


@pytest.mark.parametrize("epoch", BAD_EPOCHS)
def test_every_call_rejects_a_bad_epoch(lease, epoch):
    for call in (
        lambda: lease.get(epoch),
        lambda: pending(lease, epoch),
        lambda: lease.mark_committed(epoch),
        lambda: lease.mark_aborted(epoch),
    ):
        with pytest.raises(SinkConfigurationError, match=r"'epoch' must be a positive int .*got"):
            call()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"payload": "text"}, r"'payload' must be bytes \(got 'text' of type str\)"),
        ({"payload": bytearray(b"x")}, r"'payload' must be bytes .*of type bytearray"),
        ({"payload": None}, r"'payload' must be bytes"),
        ({"serializer_version": -1}, r"'serializer_version' must be a non-negative int \(got -1"),
        ({"serializer_version": True}, r"'serializer_version' .*of type bool"),
        ({"serializer_version": 1.0}, r"'serializer_version' .*of type float"),
        ({"explicit": 1}, r"'explicit' must be a bool \(got 1 of type int\)"),
    ],
)
def test_record_pending_rejects_bad_arguments(lease, backend, kwargs, message):
    arguments = {"explicit": False, "serializer_version": 1, "payload": b"p"} | kwargs
    with pytest.raises(SinkConfigurationError, match=message):
        lease.record_pending(1, **arguments)
    assert backend.rows()[0] == []


def test_epochs_rejects_statuses_that_are_not_epoch_statuses(lease):
    with pytest.raises(SinkConfigurationError, match=r"takes EpochStatus members \(got 'pending'"):
        lease.epochs("pending")


def test_a_store_of_a_newer_layout_is_refused(backend, store):
    store.acquire("orders", job_id="j").release()
    backend.set_layout(SCHEMA_VERSION + 1)
    with pytest.raises(CommitStateError) as caught:
        store.acquire("orders", job_id="j")
    message = str(caught.value)
    assert f"has layout version {SCHEMA_VERSION + 1}" in message
    assert f"reads layout {SCHEMA_VERSION} only" in message
    assert "written by a newer sinkv2: upgrade sinkv2" in message
    assert backend.where in message
    backend.set_layout(SCHEMA_VERSION)
    store.acquire("orders", job_id="j").release()  # the refusal left nothing locked


def test_a_row_no_release_writes_is_refused_by_the_lease_and_the_operator_queries(backend, store):
    with store.acquire("orders", job_id="j") as lease:
        pending(lease, 1)
        pending(lease, 2)
        backend.corrupt_status("orders", 2, "half-done")
        assert lease.get(1).status is P  # the other rows still read
        unreadable = (
            f"{re.escape(backend.where)}'? holds an unreadable row for epoch 2 of sink 'orders': "
            r"'half-done' is not a valid EpochStatus; the (file|table) was changed by something "
            "other than this sinkv2 release"
        )
        for read in (lambda: lease.get(2), lease.epochs, lambda: lease.mark_committed(2)):
            with pytest.raises(CommitStateError, match=unreadable):
                read()
    with pytest.raises(CommitStateError, match=unreadable):
        store.epochs("orders")


def test_a_pending_record_keeps_the_checkpoint_id_it_was_given(lease):
    lease.record_pending(5, explicit=True, serializer_version=1, payload=b"x", checkpoint_id=7)
    assert lease.get(5).checkpoint_id == 7
    assert lease.mark_committed(5).checkpoint_id == 7
    lease.record_pending(6, explicit=False, serializer_version=1, payload=b"x")
    assert lease.get(6).checkpoint_id == END_OF_INPUT


@pytest.mark.parametrize("bad", [0, -1, 2**63, "7", 1.5, True])
def test_a_bad_checkpoint_id_is_refused(lease, bad):
    with pytest.raises(SinkConfigurationError, match="'checkpoint_id' must be a positive int"):
        lease.record_pending(
            5, explicit=True, serializer_version=1, payload=b"x", checkpoint_id=bad
        )
    assert lease.get(5) is None


def test_jobs_are_recorded_until_finished_and_only_other_jobs_are_unfinished(store):
    with store.acquire("orders", job_id="first") as lease:
        lease.record_job()
        lease.record_job()  # idempotent
        assert lease.unfinished_jobs() == []  # its own job is not a dead one
    with store.acquire("orders", job_id="second") as lease:
        lease.record_job()
        assert lease.unfinished_jobs() == ["first"]
    with store.acquire("orders", job_id="third") as lease:
        assert lease.unfinished_jobs() == ["first", "second"]
        lease.finish_job("first")
        lease.finish_job("first")  # idempotent
        lease.finish_job("never-seen")
        assert lease.unfinished_jobs() == ["second"]
    with store.acquire("invoices", job_id="other") as lease:
        assert lease.unfinished_jobs() == []  # jobs belong to one sink id


def test_a_lease_that_lost_the_sink_id_cannot_record_or_finish_jobs(backend, store):
    with store.acquire("orders", job_id="old") as lease:
        backend.bump_fence("orders")
        with pytest.raises(StaleFencingTokenError, match="record job 'old'"):
            lease.record_job()
        with pytest.raises(StaleFencingTokenError, match="finish job 'x'"):
            lease.finish_job("x")
    with store.acquire("orders", job_id="new") as lease:
        assert lease.unfinished_jobs() == []


# -- the store against a model ----------------------------------------------------

SINKS = ("orders", "ünïcode / sink")
EPOCHS = st.integers(1, 3)
ALL_KEYS = list(itertools.product(SINKS, range(1, 4)))
MODEL_LEGAL = {
    None: {"pending"},
    "pending": {"pending", "committed", "aborted"},
    "aborted": {"pending"},
    "committed": set(),
}
MODEL_NO_OP = {("committed", "committed"), ("aborted", "aborted")}


class StoreAgainstModel(RuleBasedStateMachine):
    """Random operations over several sink ids, checked against a dict after each."""

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self.store = backend.fresh_store()
        self.leases = {}
        self.tokens = {}
        self.model = {}  # (sink, epoch) -> (status, explicit, version, payload, token)

    @initialize()
    def acquire_all(self):
        for sink in SINKS:
            self.leases[sink] = self.store.acquire(sink, job_id=f"job-{sink}")
            self.tokens[sink] = self.leases[sink].fencing_token

    def _status(self, key):
        return self.model[key][0] if key in self.model else None

    @rule(
        data=st.data(),
        goal=st.sampled_from(["pending", "committed", "aborted"]),
        written=st.tuples(st.booleans(), st.integers(0, 3), st.binary(max_size=12)),
    )
    def transition(self, data, goal, written):
        """Move a key towards ``goal``, from a status some key is in right now."""
        present = sorted({self._status(key) for key in ALL_KEYS}, key=str)
        start = data.draw(st.sampled_from(present), label="start")
        candidates = [key for key in ALL_KEYS if self._status(key) == start]
        sink, epoch = data.draw(st.sampled_from(candidates), label="key")
        lease = self.leases[sink]
        before = self.model.get((sink, epoch))
        event(f"{start} -> {goal}")
        record_before = lease.get(epoch)

        if goal == "pending":
            explicit, version, payload = fresh = written
            write = partial(
                lease.record_pending,
                epoch,
                explicit=explicit,
                serializer_version=version,
                payload=payload,
            )
        else:
            fresh = None
            write = partial(
                lease.mark_committed if goal == "committed" else lease.mark_aborted, epoch
            )

        if (start, goal) in MODEL_NO_OP:
            assert write() == record_before
            assert lease.get(epoch) == record_before
        elif goal in MODEL_LEGAL[start]:
            record = write()
            self.model[(sink, epoch)] = (goal, *(fresh or before[1:4]), self.tokens[sink])
            assert record == lease.get(epoch)
        else:
            with pytest.raises(IllegalLifecycleError, match=f"epoch {epoch} of sink {sink!r}"):
                write()
            assert lease.get(epoch) == record_before

    def _reacquire(self, sink):
        self.leases[sink].release()
        with pytest.raises(IllegalLifecycleError):
            self.leases[sink].next_epoch()
        self.leases[sink] = self.store.acquire(sink, job_id=f"job-{sink}")
        assert self.leases[sink].fencing_token > self.tokens[sink]
        self.tokens[sink] = self.leases[sink].fencing_token

    @rule(
        kind=st.sampled_from(["restart", "take over", "intrude"]),
        sink=st.sampled_from(SINKS),
        epoch=EPOCHS,
    )
    def disturb(self, kind, sink, epoch):
        """A driver restarts, is fenced off by a newer one, or meets a second one."""
        event(kind)
        if kind == "restart":
            self._reacquire(sink)
        elif kind == "take over":
            self.backend.bump_fence(sink, self.store)
            with pytest.raises(StaleFencingTokenError):
                self.leases[sink].record_pending(
                    epoch, explicit=False, serializer_version=0, payload=b"stale"
                )
            with pytest.raises(StaleFencingTokenError):
                self.leases[sink].mark_committed(epoch)
            self._reacquire(sink)
        else:
            with pytest.raises(ConcurrentCommitError, match=f"job 'job-{sink}'"):
                self.store.acquire(sink, job_id="intruder")

    @invariant()
    def store_equals_model(self):
        if not self.leases:
            return
        for sink, lease in self.leases.items():
            expected = sorted((e, v) for (s, e), v in self.model.items() if s == sink)
            records = lease.epochs()
            actual = [
                (
                    r.epoch,
                    (r.status.value, r.explicit, r.serializer_version, r.payload, r.fencing_token),
                )
                for r in records
            ]
            assert actual == expected
            assert all(r.sink_id == sink and r.job_id == f"job-{sink}" for r in records)
            assert lease.next_epoch() == max((e for e, _ in expected), default=0) + 1
            for status in EpochStatus:
                assert [r.epoch for r in lease.epochs(status)] == [
                    e for e, v in expected if v[0] == status.value
                ]

    def teardown(self):
        for lease in self.leases.values():
            lease.release()


def test_the_store_always_equals_a_model_of_what_was_recorded(backend):
    run_state_machine_as_test(
        lambda: StoreAgainstModel(backend),
        settings=settings(stateful_step_count=25),
    )


def test_writer_states_are_recorded_with_the_committables_and_kept_when_committed(lease):
    lease.record_pending(
        1, explicit=True, serializer_version=1, payload=b"c", writer_states=b"states"
    )
    assert lease.get(1).writer_states == b"states"
    assert lease.mark_committed(1).writer_states == b"states"
    assert lease.get(1).writer_states == b"states"
    assert "writer_states=<6 bytes>" in repr(lease.get(1))  # summarised, as the payload


def test_bad_writer_states_are_refused_before_anything_is_written(lease):
    with pytest.raises(SinkConfigurationError, match="'writer_states' must be bytes"):
        lease.record_pending(
            1, explicit=True, serializer_version=1, payload=b"c", writer_states="s"
        )
    assert lease.get(1) is None


def test_only_a_committed_epochs_writer_states_can_be_replaced(lease):
    with pytest.raises(IllegalLifecycleError, match="epoch 1 of sink 'orders' is absent"):
        lease.replace_writer_states(1, b"x")
    lease.record_pending(1, explicit=True, serializer_version=1, payload=b"c", writer_states=b"a")
    with pytest.raises(IllegalLifecycleError, match="is pending; only a committed"):
        lease.replace_writer_states(1, b"x")
    assert lease.get(1).writer_states == b"a"
    lease.mark_committed(1)
    replaced = lease.replace_writer_states(1, b"drained")
    assert replaced.writer_states == b"drained"
    assert lease.get(1) == replaced
    assert (replaced.payload, replaced.status) == (b"c", EpochStatus.COMMITTED)


def test_prune_forgets_settled_epochs_below_the_bound_and_keeps_pending_ones(lease):
    for epoch in range(1, 6):
        lease.record_pending(epoch, explicit=True, serializer_version=1, payload=b"c")
    lease.mark_committed(1)
    lease.mark_aborted(2)
    lease.mark_committed(4)
    assert lease.prune(4) == 2
    assert [r.epoch for r in lease.epochs()] == [3, 4, 5]
    assert lease.prune(4) == 0
    with pytest.raises(SinkConfigurationError, match="'below' must be a positive int"):
        lease.prune(0)


def test_a_sink_id_is_bound_to_the_first_origin_for_good(store):
    with store.acquire("orders", job_id="a") as lease:
        assert lease.origin() is None
        lease.bind_origin("query-1")
        lease.bind_origin("query-1")  # idempotent
        assert lease.origin() == "query-1"
    with store.acquire("orders", job_id="b") as lease:
        with pytest.raises(IllegalLifecycleError, match="is bound to the stream 'query-1'"):
            lease.bind_origin("query-2")
        assert lease.origin() == "query-1"
        with pytest.raises(SinkConfigurationError, match="'origin' must be a non-empty str"):
            lease.bind_origin("")
    with store.acquire("other", job_id="c") as lease:
        lease.bind_origin("query-2")
        assert lease.origin() == "query-2"
