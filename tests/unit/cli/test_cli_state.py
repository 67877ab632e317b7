"""``sinkv2 state``: list, show, abort and release, on SQLite and PostgreSQL.

Most tests call ``main(argv)`` in this process and read what it printed; the
end-to-end tests at the bottom run the installed ``sinkv2`` script and
``python -m sinkv2``. A running driver is another process holding the lease.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HOST, open_store, populate

from sinkv2._cli import main
from sinkv2.runtime import EpochStatus, ReadLimit, SourceEpochCoordinator, SqliteCommitStateStore
from sinkv2.source.lib import NumberSequenceSource

SINK = "cli_sink:make_sink"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def status(location, sink_id, epoch):
    return next(r.status for r in open_store(location).epochs(sink_id) if r.epoch == epoch)


# -- list and show ----------------------------------------------------------------


def test_list_shows_every_sink_id_with_its_epochs_by_status(capsys, location):
    code, out, err = run(capsys, "state", "list", location)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2].split()[:5] == ["SINK", "ID", "PENDING", "ABORTED", "COMMITTED"]
    assert lines[3].split()[:5] == ["clicks", "1", "0", "0", "-"]
    assert lines[4].split()[:5] == ["orders", "1", "1", "1", "1"]
    assert lines[4].rstrip().endswith("-")  # nobody holds it

    data = run_json(capsys, "state", "list", location)
    orders = next(s for s in data["sinks"] if s["sink_id"] == "orders")
    assert orders["epochs"] == {"pending": 1, "aborted": 1, "committed": 1}
    assert orders["last_committed_epoch"] == 1
    assert orders["unfinished_jobs"] == ["batch-1"]
    assert orders["holder"] is None
    clicks = next(s for s in data["sinks"] if s["sink_id"] == "clicks")
    assert (clicks["origin"], clicks["last_committed_epoch"]) == ("query-1", None)
    assert "password" not in data["store"]


def test_show_lists_epochs_with_status_checkpoint_and_committable_counts(capsys, location):
    code, out, _ = run(capsys, "state", "show", location, "orders")
    assert code == 0
    assert "unfinished jobs  batch-1" in out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [row[:6] for row in rows] == [
        ["1", "committed", "end", "of", "input", "no"],
        ["2", "pending", "end", "of", "input", "no"],
        ["3", "aborted", "end", "of", "input", "no"],
    ]

    data = run_json(capsys, "state", "show", location, "orders")
    epochs = {e["epoch"]: e for e in data["epochs"]}
    assert [e["status"] for e in data["epochs"]] == ["committed", "pending", "aborted"]
    assert [epochs[n]["committables"] for n in (1, 2, 3)] == [1, 2, 0]
    assert epochs[2]["job_id"] == "batch-1"
    assert epochs[2]["writer_states"] is None
    assert epochs[2]["updated_at"].endswith("+00:00")

    clicks = run_json(capsys, "state", "show", location, "clicks")
    (epoch,) = clicks["epochs"]
    assert (epoch["checkpoint_id"], epoch["explicit"], epoch["writer_states"]) == (1, True, 1)
    assert epoch["state_name"] == "cli_sink.StagingSink"


def test_show_gives_the_last_door_jobs_outcome(capsys, location):
    from sinkv2.runtime import CommitStatus, JobError, JobOutcome, SinkResult

    data = run_json(capsys, "state", "show", location, "orders")
    assert data["last_door_job"] is None  # no data-source door job recorded one
    store = open_store(location)
    result = SinkResult(
        sink_id="orders",
        epoch=4,
        checkpoint_id=4,
        status=CommitStatus.RECOMMITTED,
        job_id="door-1",
        committed=2,
        recommitted_epochs=(3,),
    )
    store.record_outcome("orders", JobOutcome(job_id="door-1", result=result))
    code, out, _ = run(capsys, "state", "show", location, "orders")
    assert code == 0
    assert "last door job    job door-1: epoch 4 recommitted, 0 records written, 2 " in out
    data = run_json(capsys, "state", "show", location, "orders")
    assert data["last_door_job"]["result"]["status"] == "recommitted"
    assert data["last_door_job"]["result"]["recommitted_epochs"] == [3]

    error = JobError(
        failed_in="writer", type_name="ValueError", message="bad row", where="write() of x"
    )
    store.record_outcome("orders", JobOutcome(job_id="door-2", batch_id=7, error=error))
    code, out, _ = run(capsys, "state", "show", location, "orders")
    assert "job door-2, micro-batch 7 FAILED in its writer: ValueError: bad row" in out
    data = run_json(capsys, "state", "show", location, "orders")
    assert data["last_door_job"]["error"]["type"] == "ValueError"


def test_show_decodes_an_epochs_committables_with_the_named_sink(capsys, location, tmp_path):
    code, out, _ = run(capsys, "state", "show", location, "orders", "--epoch", 2, "--sink", SINK)
    assert code == 0
    assert "[0] " in out
    assert "a.part" in out
    assert "rows=3" in out
    data = run_json(capsys, "state", "show", location, "orders", "--epoch", 2, "--sink", SINK)
    epoch = data["epoch"]
    assert epoch["decoded_with"] == SINK
    assert [c["value"] for c in epoch["committable_list"]] == [
        {"path": str(tmp_path / "staging" / "a.part"), "rows": 3},
        {"path": str(tmp_path / "staging" / "b.part"), "rows": 4},
    ]


def test_show_without_a_sink_gives_sizes_and_a_hint(capsys, location):
    code, out, _ = run(capsys, "state", "show", location, "orders", "--epoch", 2)
    assert code == 0
    assert "bytes" in out
    assert "pass --sink module:factory" in out
    data = run_json(capsys, "state", "show", location, "orders", "--epoch", 2)
    entries = data["epoch"]["committable_list"]
    assert [set(e) for e in entries] == [{"index", "size"}] * 2
    assert all(e["size"] > 0 for e in entries)
    assert data["epoch"]["decoded_with"] is None


def test_show_decodes_a_streams_committables_with_the_recorded_sink_class(capsys, location):
    data = run_json(capsys, "state", "show", location, "clicks", "--epoch", 1)
    assert data["epoch"]["decoded_with"] == "cli_sink.StagingSink"
    assert data["epoch"]["committable_list"][0]["value"]["rows"] == 5


def test_show_explains_a_sink_that_does_not_read_the_committables(capsys, sqlite_location):
    store = open_store(sqlite_location)
    with store.acquire("orders", job_id="j") as lease:
        lease.record_pending(4, explicit=False, serializer_version=7, payload=b"\0\0\0\7\0\0\0\0")
    code, out, _ = run(
        capsys, "state", "show", sqlite_location, "orders", "--epoch", 4, "--sink", SINK
    )
    assert code == 0
    assert "do not read with cli_sink:make_sink" in out
    assert "cannot read version 7" in out


# -- abort -------------------------------------------------------------------------


def test_abort_calls_the_sinks_abort_hook_then_marks_the_epoch(capsys, location, tmp_path):
    staging = tmp_path / "staging"
    code, out, err = run(capsys, "state", "abort", location, "orders", 2, "--sink", SINK)
    assert (code, err) == (0, ""), err
    assert "is aborted" in out
    assert "abort hook was called with its 2 committable(s)" in out
    # A pending epoch may be partly committed: the text says so, and what a re-run does.
    assert "Some of its data may already be visible at the destination" in out
    assert "an abort hook never removes committed output" in out
    assert "Re-running the job writes all of the epoch's data again" in out
    assert "there twice" in out
    assert "committed only if it is written again" not in out
    assert not (staging / "a.part").exists()
    assert not (staging / "b.part").exists()
    assert (staging / "aborted.log").read_text().split() == ["a.part", "b.part"]
    assert status(location, "orders", 2) is EpochStatus.ABORTED
    # Idempotent: aborted already, nothing called again.
    data = run_json(capsys, "state", "abort", location, "orders", 2, "--sink", SINK)
    assert data["action"] == "none"
    assert (staging / "aborted.log").read_text().split() == ["a.part", "b.part"]


def test_abort_of_an_epoch_with_a_checkpoint_id_needs_force(capsys, location, tmp_path):
    code, _, err = run(capsys, "state", "abort", location, "clicks", 1)
    assert code == 1
    assert "has a checkpoint id (1)" in err
    assert "pass --force" in err
    assert status(location, "clicks", 1) is EpochStatus.PENDING
    data = run_json(capsys, "state", "abort", location, "clicks", 1, "--force")
    assert data["abort_hook"] == "cli_sink.StagingSink"  # the class its states name
    assert not (tmp_path / "staging" / "c.part").exists()
    assert status(location, "clicks", 1) is EpochStatus.ABORTED


def test_abort_without_a_known_sink_is_refused_unless_told_to_skip_the_hook(
    capsys, location, tmp_path
):
    code, _, err = run(capsys, "state", "abort", location, "orders", 2)
    assert code == 1
    assert "does not record which sink wrote the epoch" in err
    assert "--without-abort-hook" in err
    assert status(location, "orders", 2) is EpochStatus.PENDING
    code, out, _ = run(capsys, "state", "abort", location, "orders", 2, "--without-abort-hook")
    assert code == 0
    assert "no abort hook was called" in out
    assert (tmp_path / "staging" / "a.part").exists()
    assert status(location, "orders", 2) is EpochStatus.ABORTED


def test_abort_with_a_sink_without_an_abort_hook_only_marks(capsys, sqlite_location):
    code, out, _ = run(
        capsys, "state", "abort", sqlite_location, "orders", 2, "--sink", "cli_sink:make_plain_sink"
    )
    assert code == 0
    assert "has no abort hook (SupportsAbort), so nothing was removed" in out
    assert status(sqlite_location, "orders", 2) is EpochStatus.ABORTED


def test_a_failing_abort_hook_leaves_the_epoch_pending(capsys, sqlite_location):
    code, out, err = run(
        capsys,
        "state",
        "abort",
        sqlite_location,
        "orders",
        2,
        "--sink",
        "cli_sink:make_failing_sink",
    )
    assert (code, out) == (1, "")
    assert "abort hook raised OSError: the staging area is read-only" in err
    assert "stays pending" in err
    assert status(sqlite_location, "orders", 2) is EpochStatus.PENDING


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["orders", 1], "epoch 1 of sink 'orders' is committed; it cannot be aborted"),
        (["orders", 9], "sink id 'orders' has no epoch 9"),
        (["nobody", 1], "has no record of sink id 'nobody'; it knows 'clicks', 'orders'"),
        (["orders", 2, "--sink", "nocolon"], "--sink must be 'module:factory'"),
        (["orders", 2, "--sink", "no_such_module:f"], "cannot import 'no_such_module'"),
        (["orders", 2, "--sink", "cli_sink:nothing"], "has no attribute 'nothing'"),
        (["orders", 2, "--sink", "cli_sink:NeedsSettings"], "could not be made without arguments"),
        (["orders", 2, "--sink", "cli_sink:NoCommits"], "is not a usable sink"),
    ],
)
def test_abort_refuses_with_one_clear_line(capsys, sqlite_location, argv, message):
    code, out, err = run(capsys, "state", "abort", sqlite_location, *argv)
    assert (code, out) == (1, "")
    assert err.startswith("sinkv2: error: ")
    assert message in err
    assert err.count("\n") == 1
    assert status(sqlite_location, "orders", 2) is EpochStatus.PENDING


# -- a running driver ------------------------------------------------------------


def test_repairs_are_refused_while_a_driver_holds_the_sink_id(capsys, location, driver, tmp_path):
    running = driver(location, "orders")
    data = run_json(capsys, "state", "list", location)
    orders = next(s for s in data["sinks"] if s["sink_id"] == "orders")
    assert (orders["holder"]["job_id"], orders["holder"]["pid"]) == ("running-job", running.pid)
    assert (orders["holder"]["host"], orders["holder"]["driver"]) == (HOST, "running")
    code, out, _ = run(capsys, "state", "show", location, "orders")
    assert "job 'running-job'" in out
    assert "[driver running]" in out

    code, out, err = run(capsys, "state", "abort", location, "orders", 2, "--sink", SINK)
    assert (code, out) == (1, "")
    assert "refusing to abort epoch 2 of sink 'orders'" in err
    assert "running-job" in err
    assert (tmp_path / "staging" / "a.part").exists()
    code, out, err = run(capsys, "state", "release", location, "orders")
    assert (code, out) == (1, "")
    assert "refusing to release sink 'orders'" in err
    assert "running-job" in err

    running.stop()
    assert status(location, "orders", 2) is EpochStatus.PENDING
    assert run(capsys, "state", "abort", location, "orders", 2, "--sink", SINK)[0] == 0


def test_release_fences_off_earlier_leases_when_nothing_holds_the_sink(capsys, location):
    store = open_store(location)
    before = max(r.fencing_token for r in store.epochs("orders"))
    data = run_json(capsys, "state", "release", location, "orders")
    assert data["terminated"] is None
    assert data["fencing_token"] > before
    assert data["unfinished_jobs"] == ["batch-1"]  # left to the next run's clean-up
    code, out, _ = run(capsys, "state", "release", location, "orders")
    assert code == 0
    assert "no driver holds it" in out
    assert "the next run" in out
    with store.acquire("orders", job_id="next") as lease:  # nothing left held
        assert lease.fencing_token > data["fencing_token"]


# -- the default store ---------------------------------------------------------------


def test_list_and_show_without_a_store_read_the_store_apply_uses_by_default(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.delenv("SINKV2_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    store = SqliteCommitStateStore()  # what apply() opens without a state store
    assert store.path == tmp_path / ".sinkv2" / "commit_state.sqlite"
    populate(store, tmp_path / "staging")
    code, out, err = run(capsys, "state", "list")
    assert (code, err) == (0, ""), err
    assert out.splitlines()[0] == str(store.path)
    data = run_json(capsys, "state", "show", "orders")
    assert data["store"] == str(store.path)
    assert [e["epoch"] for e in data["epochs"]] == [1, 2, 3]
    # $SINKV2_STATE_DIR moves it, for the command as for apply().
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("SINKV2_STATE_DIR", str(elsewhere))
    moved = SqliteCommitStateStore()
    assert moved.path == elsewhere / "commit_state.sqlite"
    moved.acquire("moved-sink", job_id="j").release()
    data = run_json(capsys, "state", "list")
    assert [s["sink_id"] for s in data["sinks"]] == ["moved-sink"]


def test_no_default_store_says_where_it_looked_and_what_to_pass(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("SINKV2_STATE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "state", "list")
    assert (code, out) == (1, "")
    expected = tmp_path / ".sinkv2" / "commit_state.sqlite"
    assert f"no commit state database at the default location {str(expected)!r}" in err
    assert "$SINKV2_STATE_DIR is not set" in err
    assert "pass the store the job used as STORE" in err
    assert not expected.parent.exists()
    code, _, err = run(capsys, "state", "show", "orders", "--schema", "s")
    assert code == 1
    assert "no STORE was given" in err


# -- bad input ---------------------------------------------------------------------


def test_a_missing_store_file_is_an_error_and_is_not_created(capsys, tmp_path):
    missing = tmp_path / "nowhere" / "commit_state.sqlite"
    code, out, err = run(capsys, "state", "list", missing)
    assert (code, out) == (1, "")
    assert f"no commit state database at {str(missing)!r}" in err
    assert not missing.parent.exists()


def test_a_directory_holding_the_default_file_stands_for_it(capsys, sqlite_location):
    data = run_json(capsys, "state", "list", Path(sqlite_location).parent)
    assert [s["sink_id"] for s in data["sinks"]] == ["clicks", "orders"]


def test_a_file_that_is_not_a_store_is_an_error(capsys, tmp_path):
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_bytes(b"not a database" * 300)
    code, _, err = run(capsys, "state", "list", bogus)
    assert code == 1
    assert "cannot be opened" in err
    assert "Traceback" not in err


def test_an_empty_store_lists_nothing(capsys, tmp_path):
    store = open_store(str(tmp_path / "empty.sqlite"))
    store.acquire("x", job_id="j").release()
    path = str(store.path)
    data = run_json(capsys, "state", "list", path)
    assert [s["sink_id"] for s in data["sinks"]] == ["x"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["state", "show", "{loc}", "nobody"], "has no record of sink id 'nobody'"),
        (["state", "show", "{loc}", "orders", "--epoch", "9"], "has no epoch 9"),
        (["state", "list", "{loc}", "--schema", "s"], "--schema names a PostgreSQL schema"),
    ],
)
def test_bad_arguments_exit_1_with_one_line(capsys, sqlite_location, argv, message):
    code, out, err = run(capsys, *(a.replace("{loc}", sqlite_location) for a in argv))
    assert (code, out) == (1, "")
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["state"],
        ["state", "show"],
        ["state", "show", "x.sqlite", "orders", "--epoch", "0"],
        ["state", "show", "x.sqlite", "orders", "--epoch", "two"],
        ["state", "abort", "x.sqlite", "orders"],
        ["state", "frobnicate", "x.sqlite"],
    ],
)
def test_usage_errors_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert "usage: sinkv2" in err


def test_an_epoch_must_be_positive(capsys):
    _, _, err = run(capsys, "state", "show", "x.sqlite", "orders", "--epoch", "0")
    assert "must be a positive whole number" in err


# -- end to end -------------------------------------------------------------------


def test_the_installed_script_and_python_m_run_the_same_cli(sqlite_location, cli_env):
    script = Path(sys.executable).with_name("sinkv2")
    listed = subprocess.run(
        [script, "state", "list", sqlite_location, "--json"],
        capture_output=True,
        text=True,
        env=cli_env,
        check=True,
    )
    assert [s["sink_id"] for s in json.loads(listed.stdout)["sinks"]] == ["clicks", "orders"]
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "sinkv2",
            "state",
            "show",
            sqlite_location,
            "orders",
            "--epoch",
            "2",
            "--sink",
            SINK,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        check=True,
    )
    assert json.loads(shown.stdout)["epoch"]["committable_list"][1]["value"]["rows"] == 4


def test_a_refusal_end_to_end_is_one_line_and_exit_status_1(location, driver, cli_env):
    running = driver(location, "orders")
    script = Path(sys.executable).with_name("sinkv2")
    refused = subprocess.run(
        [script, "state", "abort", location, "orders", "2", "--sink", SINK],
        capture_output=True,
        text=True,
        env=cli_env,
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert "Traceback" not in refused.stderr
    assert "running-job" in refused.stderr
    running.stop()
    done = subprocess.run(
        [script, "state", "abort", location, "orders", "2", "--sink", SINK, "--json"],
        capture_output=True,
        text=True,
        env=cli_env,
        check=True,
    )
    assert json.loads(done.stdout)["action"] == "aborted"


def test_importing_sinkv2_loads_no_cli():
    code = "import sys, sinkv2, sinkv2.runtime; print([m for m in sys.modules if '_cli' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_list_shows_source_ids_with_their_latest_and_acknowledged_epochs(capsys, location):
    store = open_store(location)
    with store.acquire_source("orders-cdc", job_id="reader-1") as lease:
        for epoch in range(3):
            lease.record_epoch(epoch, enumerator_checkpoint=b"e", assignment=b"a")
        lease.mark_acknowledged(1)
    code, out, err = run(capsys, "state", "list", location)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SOURCE ID"))
    assert lines[header + 1].split()[:4] == ["orders-cdc", "3", "2", "1"]
    data = run_json(capsys, "state", "list", location)
    (source,) = data["sources"]
    assert source["source_id"] == "orders-cdc"
    assert (source["epochs"], source["latest_epoch"], source["last_acknowledged_epoch"]) == (
        3,
        2,
        1,
    )
    assert [s["sink_id"] for s in data["sinks"]] == ["clicks", "orders"]  # sinks unchanged


def _read_numbers(store, source_id, epochs):
    """A streaming read of 1..60 in ``epochs`` epochs, one split each, left unacknowledged."""
    coord = SourceEpochCoordinator(
        NumberSequenceSource(1, 60), store, source_id, parallelism=epochs
    )
    start = coord.initial_epoch()
    for _ in range(epochs):
        start = coord.next_epoch(start, ReadLimit(max_splits=1))
    return coord


def test_show_source_lists_a_streaming_reads_epochs(capsys, location):
    coord = _read_numbers(open_store(location), "numbers", 3)
    coord.close()
    code, out, err = run(capsys, "state", "show-source", location, "numbers")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("EPOCH"))
    assert [line.split()[:4] for line in lines[header + 1 :]] == [
        ["2", "yes", "1", "1"],
        ["3", "no", "1", "0"],
    ]
    data = run_json(capsys, "state", "show-source", location, "numbers")
    assert [(e["epoch"], e["acknowledged"], e["split_reads"]) for e in data["epochs"]] == [
        (2, True, 1),
        (3, False, 1),
    ]
    code, out, err = run(capsys, "state", "show-source", location, "nope")
    assert code == 1
    assert "no record of source id 'nope'" in err
    assert "'numbers'" in err


def test_forget_source_is_refused_while_a_query_reads_it_then_forgets_every_epoch(capsys, location):
    store = open_store(location)
    coord = _read_numbers(store, "numbers", 2)
    code, _out, err = run(capsys, "state", "forget-source", location, "numbers")
    assert code == 1
    assert "refusing to forget source 'numbers'" in err
    coord.close()
    data = run_json(capsys, "state", "forget-source", location, "numbers")
    assert data["forgotten"] == 2
    fresh = SourceEpochCoordinator(NumberSequenceSource(1, 60), store, "numbers", parallelism=2)
    assert fresh.initial_epoch() == 0  # read from the start again
    fresh.close()
