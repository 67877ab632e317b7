"""crash_point: the kit crashes inside the sink's own multi-step calls where it is told to."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import pytest
from kit_jsonl_sink import ELEMENTS, JsonLinesSink, JsonLinesWriter, make

from sinkv2 import AttrsMsgpackSerializer, Committer, CommitterInitContext, DeliveryGuarantee
from sinkv2.testing import check_sink, crash_point
from sinkv2.testing._crash_points import CrashPoints, KitCrash


@attrs.frozen
class StagedParts:
    staged: tuple[str, ...]
    final: tuple[str, ...]


class PartsWriter(JsonLinesWriter):
    """Stages each line in a file of its own, so one committable renames several files."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.parts: list[tuple[str, str]] = []

    def write_buffer(self) -> None:
        for line in self.buffer:
            name = f"{self.token}-{self.sequence}_{len(self.parts)}.jsonl"
            staged, final = self.sink.staging / name, self.sink.directory / f"part-{name}"
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_text(line + "\n", encoding="utf-8")
            self.parts.append((str(staged), str(final)))
            crash_point("between two staged files")
        self.buffer = []

    def prepare_commit(self) -> list[StagedParts]:  # type: ignore[override]
        if not self.parts:
            return []
        staged, final = zip(*self.parts, strict=True)
        self.parts = []
        self.sequence += 1
        return [StagedParts(staged, final)]


class PartsCommitter(Committer[StagedParts]):
    """Renames the files one by one; recognises what a dead commit renamed before."""

    def commit(self, requests: Collection[Committer.CommitRequest[StagedParts]]) -> None:
        for request in requests:
            parts = request.get_committable()
            renamed = 0
            for staged, final in zip(parts.staged, parts.final, strict=True):
                if os.path.exists(staged):
                    os.replace(staged, final)
                    renamed += 1
                elif not os.path.exists(final):
                    request.signal_failed_with_unknown_reason(FileNotFoundError(staged))
                    break
                crash_point("after renaming one file")
            else:
                if not renamed:
                    request.signal_already_committed()

    def close(self) -> None:
        pass


class PartsSink(JsonLinesSink):
    writer_class = PartsWriter  # type: ignore[assignment]

    def create_committer(self, context: CommitterInitContext) -> Committer[StagedParts]:  # type: ignore[override]
        return PartsCommitter()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[StagedParts]:  # type: ignore[override]
        return AttrsMsgpackSerializer(StagedParts)

    def abort(self, committables: Collection[StagedParts]) -> None:  # type: ignore[override]
        for parts in committables:
            for staged in parts.staged:
                Path(staged).unlink(missing_ok=True)


def check(sink_class: type[JsonLinesSink], max_examples: int = 150) -> None:
    check_sink(
        lambda: make(sink_class, threshold=0),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=max_examples,
        max_parallelism=2,
    )


def test_a_committer_that_resumes_a_half_done_commit_passes() -> None:
    check(PartsSink)


class FirstFileCommitter(PartsCommitter):
    """Takes "the first file is gone" for "all of it was committed": a half-done commit."""

    def commit(self, requests: Collection[Committer.CommitRequest[StagedParts]]) -> None:
        for request in requests:
            parts = request.get_committable()
            if not os.path.exists(parts.staged[0]):
                request.signal_already_committed()  # the bug
                continue
            for staged, final in zip(parts.staged, parts.final, strict=True):
                os.replace(staged, final)
                crash_point("after renaming one file")


class FirstFileSink(PartsSink):
    def create_committer(self, context: CommitterInitContext) -> Committer[StagedParts]:  # type: ignore[override]
        return FirstFileCommitter()


def test_a_committer_that_misreads_a_half_done_commit_is_caught() -> None:
    with pytest.raises(AssertionError) as caught:
        check(FirstFileSink, max_examples=300)
    message = str(caught.value)
    assert "committed elements are missing from the destination" in message, message
    assert re.search(
        r"the process dies at crash point 'after renaming one file' in "
        r"FirstFileCommitter\.commit; job kitjob\d+ fails there",
        message,
    ), message
    assert re.search(r"recover: commit (checkpoint \d+|END_OF_INPUT) \(pending\) again", message)


class SwallowingCommitter(PartsCommitter):
    def commit(self, requests: Collection[Committer.CommitRequest[StagedParts]]) -> None:
        with contextlib.suppress(BaseException):  # the bug: a dying process does not go on
            super().commit(requests)


class SwallowingSink(PartsSink):
    def create_committer(self, context: CommitterInitContext) -> Committer[StagedParts]:  # type: ignore[override]
        return SwallowingCommitter()


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_catches_the_crash_is_told_so() -> None:
    with pytest.raises(AssertionError) as caught:
        check(SwallowingSink)
    message = str(caught.value)
    assert "the kit made the process die at crash point 'after renaming one file' in " in message
    assert "but the sink caught the crash (KitCrash, a BaseException)" in message
    assert "catch Exception, not BaseException" in message


def test_crash_point_does_nothing_outside_the_kit() -> None:
    crash_point("anywhere")
    crash_point(42)  # type: ignore[arg-type]  # checked only where it can matter: in the kit


def test_crash_points_crash_once_where_armed() -> None:
    points = CrashPoints()
    with points.active():
        crash_point("a")
        points.arm(1)
        crash_point("b")
        with pytest.raises(KitCrash, match="crash point 'c'") as crashed:
            crash_point("c")
        crash_point("d")
        with pytest.raises(TypeError, match=r"takes the name of the place as a str \(got 1 of"):
            crash_point(1)  # type: ignore[arg-type]
    crash_point("e")
    assert points.seen == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert not points.armed
    assert points.fired is crashed.value
    assert not isinstance(crashed.value, Exception)


def test_crash_point_loads_nothing_heavy() -> None:
    code = (
        "import sys; from sinkv2.testing import crash_point; crash_point('x'); "
        "print(sorted(m.split('.')[0] for m in sys.modules "
        "if m.startswith(('hypothesis', 'pyspark', 'pyarrow', 'cloudpickle'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
