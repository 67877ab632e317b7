"""The committer faults the kit injects, around a real renaming committer and real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit_jsonl_sink import RenameCommitter, StagedFile

from sinkv2.errors import CommitFailedError
from sinkv2.runtime import CommitRetryPolicy, commit_with_retries
from sinkv2.testing._faults import CommitFault, FaultInjectingCommitter, InjectedCommitFailure

NO_WAIT = CommitRetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, jitter=0.0)


def staged_files(tmp_path: Path, count: int) -> list[StagedFile]:
    files = []
    for i in range(count):
        staged = tmp_path / f"staged-{i}"
        staged.write_text(f"{i}\n", encoding="utf-8")
        files.append(StagedFile(str(staged), str(tmp_path / f"final-{i}"), 1))
    return files


def finals(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("final-*"))


def test_retry_later_once_reaches_the_real_committer_in_the_next_round(tmp_path: Path) -> None:
    files = staged_files(tmp_path, 3)
    committer = FaultInjectingCommitter(RenameCommitter(), CommitFault.RETRY_LATER_ONCE)
    outcome = commit_with_retries(committer, files, policy=NO_WAIT, sleep=lambda s: None)
    assert (outcome.retries, outcome.commit_calls, len(outcome.committed)) == (1, 2, 3)
    assert finals(tmp_path) == ["final-0", "final-1", "final-2"]


@pytest.mark.parametrize(
    ("fault", "committed"),
    [
        (CommitFault.RAISE_BEFORE, []),
        (CommitFault.RAISE_HALFWAY, ["final-0", "final-1"]),
        (CommitFault.RAISE_AFTER, ["final-0", "final-1", "final-2", "final-3"]),
    ],
)
def test_raising_faults_fail_the_commit_after_committing_what_they_say(
    tmp_path: Path, fault: CommitFault, committed: list[str]
) -> None:
    files = staged_files(tmp_path, 4)
    with pytest.raises(CommitFailedError) as caught:
        commit_with_retries(
            FaultInjectingCommitter(RenameCommitter(), fault), files, policy=NO_WAIT
        )
    assert isinstance(caught.value.__cause__, InjectedCommitFailure)
    assert fault.raises
    assert finals(tmp_path) == committed
    # Recovery with the real committer finishes the job; what was renamed is already committed.
    outcome = commit_with_retries(RenameCommitter(), files, policy=NO_WAIT)
    assert len(outcome.already_committed) == len(committed)
    assert len(outcome.successful) == 4


def test_fault_reprs_read_like_code() -> None:
    assert repr(CommitFault.RAISE_AFTER) == "CommitFault.RAISE_AFTER"
    assert not CommitFault.RETRY_LATER_ONCE.raises
