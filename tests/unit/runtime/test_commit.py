"""Flink's commit semantics, driven by commit_with_retries without any engine.

Ports the committer cases of Flink's CommitterOperatorTestBase and
CheckpointCommittableManagerImplTest: retry then succeed, retries exhausted,
known-reason drop, unknown reason fails, already committed, update and retry.
"""

import logging
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinkv2.errors import (
    CommitFailedError,
    CommitRetriesExhaustedError,
    IllegalLifecycleError,
    SinkConfigurationError,
)
from sinkv2.metrics import (
    ALREADY_COMMITTED_COMMITTABLES,
    FAILED_COMMITTABLES,
    PENDING_COMMITTABLES,
    RETRIED_COMMITTABLES,
    SUCCESSFUL_COMMITTABLES,
    TOTAL_COMMITTABLES,
)
from sinkv2.runtime import (
    CommitOutcome,
    CommitRetryPolicy,
    InMemorySinkCommitterMetricGroup,
    commit_with_retries,
)


class ScriptedCommitter:
    """Commits into a real dict, reacting to each committable as scripted.

    ``script[c]`` is a list of actions, one consumed per attempt at committable c:
    "ok", "retry", "known", "unknown", "already", ("update", new), "raise".
    """

    def __init__(self, script=None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.store: dict[str, int] = {}
        self.calls: list[list[tuple[str, int]]] = []
        self.closed = False

    def commit(self, requests):
        self.calls.append([(r.get_committable(), r.get_number_of_retries()) for r in requests])
        for request in requests:
            committable = request.get_committable()
            actions = self.script.get(committable) or ["ok"]
            action = actions.pop(0) if len(actions) > 1 else actions[0]
            if action == "ok":
                self.store[committable] = self.store.get(committable, 0) + 1
            elif action == "retry":
                request.retry_later()
            elif action == "known":
                request.signal_failed_with_known_reason(FileNotFoundError(committable))
            elif action == "unknown":
                request.signal_failed_with_unknown_reason(RuntimeError(f"boom {committable}"))
            elif action == "already":
                request.signal_already_committed()
            elif action == "raise":
                raise ConnectionError("destination unreachable")
            else:
                _, new = action
                request.update_and_retry_later(new)

    def close(self):
        self.closed = True


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def run(committer, committables, **kwargs):
    kwargs.setdefault("sleep", Sleeps())
    return commit_with_retries(committer, committables, **kwargs)


def test_unsignalled_requests_are_committed_in_one_call():
    committer = ScriptedCommitter()
    outcome = run(committer, ["a", "b", "c"])
    assert outcome.committed == ("a", "b", "c")
    assert outcome.retries == 0
    assert outcome.commit_calls == 1
    assert committer.store == {"a": 1, "b": 1, "c": 1}


def test_no_committables_means_no_commit_call():
    committer = ScriptedCommitter()
    assert run(committer, []) == CommitOutcome()
    assert committer.calls == []


def test_retry_once_then_succeed():
    committer = ScriptedCommitter({"a": ["retry", "ok"]})
    sleeps = Sleeps()
    outcome = run(committer, ["a", "b"], sleep=sleeps)
    assert outcome.committed == ("a", "b")
    assert outcome.retries == 1
    assert committer.calls == [[("a", 0), ("b", 0)], [("a", 1)]]
    assert len(sleeps) == 1


def test_retries_exhausted_fails_naming_the_committable():
    committer = ScriptedCommitter({"stuck-file": ["retry"]})
    policy = CommitRetryPolicy(max_retries=3, initial_backoff_s=0.0, max_backoff_s=0.0)
    with pytest.raises(CommitRetriesExhaustedError) as caught:
        run(committer, ["stuck-file", "fine"], policy=policy, what="sink 'orders' checkpoint 7")
    error = caught.value
    assert error.committables == ("stuck-file",)
    assert error.retries == 3
    assert "sink 'orders' checkpoint 7" in str(error)
    assert "'stuck-file'" in str(error)
    assert "after 3 retries" in str(error)
    assert len(committer.calls) == 4  # Flink: up to max_retries + 1 calls
    assert committer.store == {"fine": 1}


def test_zero_retries_allows_exactly_one_call():
    committer = ScriptedCommitter({"a": ["retry"]})
    with pytest.raises(CommitRetriesExhaustedError):
        run(committer, ["a"], policy=CommitRetryPolicy(max_retries=0))
    assert len(committer.calls) == 1


def test_known_reason_is_dropped_with_a_warning_and_the_job_goes_on(caplog):
    committer = ScriptedCommitter({"gone": ["known"]})
    with caplog.at_level(logging.WARNING, logger="sinkv2.commit"):
        outcome = run(committer, ["gone", "kept"], what="sink 's' checkpoint 1")
    assert outcome.committed == ("kept",)
    [(committable, error)] = outcome.failed_with_known_reason
    assert committable == "gone"
    assert isinstance(error, FileNotFoundError)
    [record] = caplog.records
    assert "dropping committable 'gone'" in record.getMessage()
    assert "sink 's' checkpoint 1" in record.getMessage()


def test_unknown_reason_fails_naming_the_committable_and_chaining_the_cause():
    committer = ScriptedCommitter({"bad": ["unknown"]})
    with pytest.raises(CommitFailedError) as caught:
        run(committer, ["good", "bad"], what="sink 'orders' checkpoint 3")
    error = caught.value
    assert error.committables == ("bad",)
    assert "sink 'orders' checkpoint 3: failed to commit 'bad'" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    assert str(error.__cause__) == "boom bad"


def test_several_unknown_failures_are_all_named():
    committer = ScriptedCommitter({"x": ["unknown"], "y": ["unknown"]})
    with pytest.raises(CommitFailedError, match=r"and 1 more: 'y'") as caught:
        run(committer, ["x", "y"])
    assert caught.value.committables == ("x", "y")


def test_already_committed_is_counted_as_such():
    committer = ScriptedCommitter({"old": ["already"]})
    outcome = run(committer, ["old", "new"])
    assert outcome.already_committed == ("old",)
    assert outcome.committed == ("new",)
    assert outcome.successful == ("new", "old")


def test_update_and_retry_later_commits_the_updated_committable():
    committer = ScriptedCommitter({"files[0:10]": [("update", "files[5:10]")]})
    outcome = run(committer, ["files[0:10]"])
    assert outcome.committed == ("files[5:10]",)
    assert committer.calls == [[("files[0:10]", 0)], [("files[5:10]", 1)]]
    assert committer.store == {"files[5:10]": 1}


def test_committer_raising_fails_with_every_pending_committable_named():
    committer = ScriptedCommitter({"a": ["raise"]})
    with pytest.raises(CommitFailedError) as caught:
        run(committer, ["a", "b"], what="sink 'q' checkpoint 2")
    assert caught.value.committables == ("a", "b")
    assert "ScriptedCommitter.commit() raised ConnectionError" in str(caught.value)
    assert isinstance(caught.value.__cause__, ConnectionError)


def test_retry_count_carries_over_from_an_earlier_run():
    committer = ScriptedCommitter({"a": ["retry", "ok"]})
    run(committer, ["a"], number_of_retries=4)
    assert committer.calls == [[("a", 4)], [("a", 5)]]


def test_metrics_follow_flinks_counters():
    metrics = InMemorySinkCommitterMetricGroup()
    committer = ScriptedCommitter({"r": ["retry", "ok"], "k": ["known"], "a": ["already"]})
    run(committer, ["r", "k", "a", "ok"], metrics=metrics)
    snapshot = metrics.snapshot()
    assert snapshot[TOTAL_COMMITTABLES] == 4
    assert snapshot[SUCCESSFUL_COMMITTABLES] == 2
    assert snapshot[ALREADY_COMMITTED_COMMITTABLES] == 1
    assert snapshot[FAILED_COMMITTABLES] == 1
    assert snapshot[RETRIED_COMMITTABLES] == 1
    assert snapshot[PENDING_COMMITTABLES] == 0


# --- illegal use of a request -------------------------------------------------------


def test_signalling_twice_in_one_call_is_an_illegal_lifecycle_error():
    class Twice(ScriptedCommitter):
        def commit(self, requests):
            for request in requests:
                request.retry_later()
                request.signal_already_committed()

    with pytest.raises(CommitFailedError) as caught:
        run(Twice(), ["a"])
    assert isinstance(caught.value.__cause__, IllegalLifecycleError)
    assert "already signalled (retry)" in str(caught.value.__cause__)


def test_signalling_after_commit_returned_is_an_illegal_lifecycle_error():
    kept = []

    class Keeper(ScriptedCommitter):
        def commit(self, requests):
            kept.extend(requests)

    run(Keeper(), ["a"])
    with pytest.raises(IllegalLifecycleError, match=r"outside Committer\.commit"):
        kept[0].retry_later()


# --- backoff ---------------------------------------------------------------------------


def test_backoff_grows_exponentially_up_to_the_cap():
    policy = CommitRetryPolicy(
        max_retries=8, initial_backoff_s=0.1, max_backoff_s=1.0, multiplier=2.0, jitter=0.0
    )
    committer = ScriptedCommitter({"a": ["retry"] * 8 + ["ok"]})
    sleeps = Sleeps()
    run(committer, ["a"], policy=policy, sleep=sleeps)
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])


@given(
    retry=st.integers(min_value=0, max_value=50),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(),
)
def test_jittered_backoff_stays_within_its_bounds(retry, jitter, seed):
    policy = CommitRetryPolicy(initial_backoff_s=0.05, max_backoff_s=5.0, jitter=jitter)
    base = min(5.0, 0.05 * 2.0**retry)
    wait = policy.backoff_seconds(retry, random.Random(seed))
    assert max(0.0, base * (1 - jitter)) - 1e-9 <= wait <= min(5.0, base * (1 + jitter)) + 1e-9


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": -1}, "'max_retries' must be a non-negative int"),
        ({"max_retries": 2.5}, "'max_retries' must be a non-negative int"),
        ({"initial_backoff_s": -0.1}, "'initial_backoff_s' must be a finite number >= 0.0"),
        ({"multiplier": 0.5}, "'multiplier' must be a finite number >= 1.0"),
        ({"jitter": 1.5}, "'jitter' must be a fraction in"),
        ({"max_backoff_s": float("inf")}, "'max_backoff_s' must be a finite number"),
        ({"initial_backoff_s": 2.0, "max_backoff_s": 1.0}, "must be >= 'initial_backoff_s'"),
    ],
)
def test_bad_policy_values_are_configuration_errors(kwargs, message):
    with pytest.raises(SinkConfigurationError, match=message):
        CommitRetryPolicy(**kwargs)


# --- properties ------------------------------------------------------------------------

ACTIONS = st.sampled_from(["ok", "retry", "known", "already"])
FINAL_ACTIONS = st.sampled_from(["ok", "known", "already"])
# Each committable's script ends in a final action, so its retries end too.
SCRIPTS = st.builds(lambda head, last: [*head, last], st.lists(ACTIONS, max_size=4), FINAL_ACTIONS)


@given(script=st.dictionaries(st.text(min_size=1, max_size=4), SCRIPTS, max_size=12))
def test_every_committable_ends_in_exactly_one_outcome(script):
    committer = ScriptedCommitter(script)
    policy = CommitRetryPolicy(max_retries=10, initial_backoff_s=0.0, max_backoff_s=0.0)
    outcome = run(committer, list(script), policy=policy)
    dropped = [c for c, _ in outcome.failed_with_known_reason]
    assert sorted(outcome.committed + outcome.already_committed + tuple(dropped)) == sorted(script)
    assert set(committer.store) == set(outcome.committed)
    assert all(count == 1 for count in committer.store.values())


@given(script=st.dictionaries(st.text(min_size=1, max_size=4), SCRIPTS, max_size=12))
def test_committing_again_is_idempotent_for_an_idempotent_committer(script):
    class Idempotent(ScriptedCommitter):
        def commit(self, requests):
            for request in requests:
                if request.get_committable() in self.store:
                    request.signal_already_committed()
                else:
                    self.store[request.get_committable()] = 1

    committer = Idempotent()
    first = run(committer, list(script))
    second = run(committer, list(script))
    assert set(first.committed) == set(script)
    assert second.committed == ()
    assert set(second.already_committed) == set(script)
    assert committer.store == dict.fromkeys(script, 1)
