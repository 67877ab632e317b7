"""The kit catches real bugs: each deliberately broken sink fails with a readable message."""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import strategies as st
from kit_jsonl_sink import (
    ELEMENTS,
    BufferState,
    JsonLinesSink,
    JsonLinesWriter,
    RenameCommitter,
    StagedFile,
    make,
)

from sinkv2 import (
    AttrsMsgpackSerializer,
    Committer,
    CommitterInitContext,
    CommittingSinkWriter,
    DeliveryGuarantee,
    SimpleVersionedSerialization,
    Sink,
    SupportsCommitter,
    WriterInitContext,
)
from sinkv2.testing import check_sink

EXACTLY_ONCE = DeliveryGuarantee.EXACTLY_ONCE


def check(sink_class: type[JsonLinesSink], **kwargs: Any) -> None:
    check_sink(
        lambda: make(sink_class),
        guarantee=kwargs.pop("guarantee", EXACTLY_ONCE),
        elements=ELEMENTS,
        max_examples=kwargs.pop("max_examples", 100),
        **kwargs,
    )


# --- a committer that is not idempotent ----------------------------------------------------------


class CopyingCommitter(Committer[StagedFile]):
    """Appends the staged file to the final one on every commit: a replay duplicates."""

    def commit(self, requests: Collection[Committer.CommitRequest[StagedFile]]) -> None:
        for request in requests:
            file = request.get_committable()
            with open(file.staged, encoding="utf-8") as staged:
                content = staged.read()
            with open(file.final, "a", encoding="utf-8") as final:
                final.write(content)

    def close(self) -> None:
        pass


class NonIdempotentSink(JsonLinesSink):
    def create_committer(self, context: CommitterInitContext) -> Committer[StagedFile]:
        return CopyingCommitter()

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        pass  # keep staged files, so the copying committer can copy again

    def abort(self, committables: Collection[StagedFile]) -> None:
        pass


@pytest.mark.usefixtures("unshrunk")
def test_a_committer_that_commits_twice_is_caught_as_duplicates() -> None:
    with pytest.raises(AssertionError) as caught:
        check(NonIdempotentSink)
    message = str(caught.value)
    # Found either by the explicit re-commit or by a recovery that commits again.
    assert (
        "the destination shows duplicated elements" in message
        or "changed what the destination shows" in message
    ), message
    assert "lifecycle so far (NonIdempotentSink: Sink + SupportsWriterState" in message


# --- a writer that drops buffered records on snapshot -------------------------------------------


class ForgetfulWriter(JsonLinesWriter):
    def snapshot_state(self, checkpoint_id: int) -> list[BufferState]:
        self.buffer = []  # the bug: buffered records are neither written nor in the state
        return []


class ForgetfulSink(JsonLinesSink):
    writer_class = ForgetfulWriter


@pytest.mark.usefixtures("unshrunk")
def test_a_writer_that_drops_buffered_records_on_snapshot_is_caught_as_loss() -> None:
    with pytest.raises(AssertionError) as caught:
        check(ForgetfulSink)
    message = str(caught.value)
    assert "EXACTLY_ONCE violated" in message
    assert "committed elements are missing from the destination" in message
    assert re.search(r"\(\d+x committed, 0x visible\)", message)  # how many
    assert "snapshot_state" in message


@pytest.mark.usefixtures("unshrunk")
def test_the_same_loss_is_caught_under_at_least_once() -> None:
    with pytest.raises(AssertionError, match=r"AT_LEAST_ONCE violated .* are missing"):
        check(ForgetfulSink, guarantee=DeliveryGuarantee.AT_LEAST_ONCE)


# --- a serializer that cannot read its previous version ------------------------------------------

STATE_V1 = BufferState(('{"id": 1, "tag": "a"}',))
STATE_V1_PAYLOAD = AttrsMsgpackSerializer(BufferState).serialize(STATE_V1)


@pytest.mark.usefixtures("unshrunk")
@pytest.mark.parametrize("version", [2])
def test_a_serializer_that_cannot_read_its_previous_version_is_caught(version: int) -> None:
    class NewFormatSink(JsonLinesSink):
        def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[BufferState]:
            return AttrsMsgpackSerializer(BufferState, version=version)  # no upgrades: bug

    with pytest.raises(AssertionError) as caught:
        check(NewFormatSink, golden_samples={"writer_state": {1: (STATE_V1_PAYLOAD, STATE_V1)}})
    message = str(caught.value)
    assert "the writer state serializer" in message
    assert "(version 2) cannot read its version 1 golden sample any more" in message
    assert "UnsupportedVersionError" in message
    assert "keep a reader for each" in message


def test_a_serializer_with_an_upgrade_reads_its_previous_version() -> None:
    class UpgradedSink(JsonLinesSink):
        def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[BufferState]:
            return AttrsMsgpackSerializer(BufferState, version=2, upgrades={1: lambda d: d})

    check(
        UpgradedSink,
        golden_samples={"writer_state": {1: (STATE_V1_PAYLOAD, STATE_V1)}},
        max_examples=20,
    )


@pytest.mark.usefixtures("unshrunk")
def test_a_golden_sample_that_reads_as_something_else_is_caught() -> None:
    wrong = BufferState(("something else",))
    with pytest.raises(AssertionError, match="reads its version 1 golden sample as BufferState"):
        check(JsonLinesSink, golden_samples={"writer_state": {1: (STATE_V1_PAYLOAD, wrong)}})


def test_golden_samples_must_name_a_serializer_the_sink_has() -> None:
    with pytest.raises(ValueError, match="no get_write_result_serializer"):
        check(JsonLinesSink, golden_samples={"write_result": {1: (b"", None)}})
    with pytest.raises(ValueError, match="unknown serializer name 'state'"):
        check(JsonLinesSink, golden_samples={"state": {1: (b"", None)}})


# --- a sink that cannot be cloudpickled ---------------------------------------------------------


class LockedSink(JsonLinesSink):
    def __init__(self, directory: str | os.PathLike[str], threshold: int = 3) -> None:
        super().__init__(directory, threshold)
        self.lock = threading.Lock()  # the bug: a lock cannot travel to executors


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_cannot_be_cloudpickled_is_caught() -> None:
    with pytest.raises(AssertionError) as caught:
        check(LockedSink)
    message = str(caught.value)
    assert "the sink (LockedSink) does not survive a cloudpickle round trip" in message
    assert "cannot pickle '_thread.lock' object" in message
    assert "it.lock (of type lock) is what does not pickle" in message  # the attribute, named
    assert "open connections, clients, locks and files in writers and committers" in message


# --- more bugs the lifecycle finds ---------------------------------------------------------------


class EagerWriter(JsonLinesWriter):
    """Writes straight to the final file: output is visible before its checkpoint commits."""

    def write(self, element: dict[str, Any], context: Any) -> None:
        final = self.sink.directory / f"part-{self.token}-eager.jsonl"
        final.parent.mkdir(parents=True, exist_ok=True)
        with final.open("a", encoding="utf-8") as out:
            out.write(element_line(element) + "\n")


def element_line(element: dict[str, Any]) -> str:
    import json

    return json.dumps(element, sort_keys=True)


class EagerSink(JsonLinesSink):
    writer_class = EagerWriter


@pytest.mark.usefixtures("unshrunk")
def test_output_visible_before_its_commit_is_caught() -> None:
    with pytest.raises(AssertionError, match="elements that no completed checkpoint covers"):
        check(EagerSink)


class SharedStagingWriter(JsonLinesWriter):
    """Names staged files by subtask instead of attempt token: attempts overwrite each other."""

    def __init__(self, sink: JsonLinesSink, context: Any, lines: tuple[str, ...] = ()) -> None:
        super().__init__(sink, context, lines)
        self.token = f"subtask{context.get_subtask_id()}"


class SharedStagingSink(JsonLinesSink):
    writer_class = SharedStagingWriter


@pytest.mark.usefixtures("unshrunk")
def test_staging_named_without_the_attempt_token_is_caught() -> None:
    # Attempts overwrite each other's staged file: seen as loss, duplicates, or a commit
    # repeated that changes what is visible - whichever example hypothesis finds first.
    with pytest.raises(AssertionError, match=r"violated|removed visible elements"):
        check(SharedStagingSink)


@pytest.mark.usefixtures("unshrunk")
def test_the_committer_failing_a_replayed_committable_is_caught() -> None:
    class StrictCommitter(RenameCommitter):
        def commit(self, requests: Collection[Committer.CommitRequest[StagedFile]]) -> None:
            for request in requests:
                file = request.get_committable()
                if os.path.exists(file.staged):
                    os.replace(file.staged, file.final)
                else:  # the bug: a replay is not recognised as committed
                    request.signal_failed_with_unknown_reason(FileNotFoundError(file.staged))

    class StrictSink(JsonLinesSink):
        def create_committer(self, context: CommitterInitContext) -> Committer[StagedFile]:
            return StrictCommitter()

    with pytest.raises(AssertionError) as caught:
        check(StrictSink)
    message = str(caught.value)
    assert "recognise committables it committed before (signal_already_committed)" in message


# --- a committer that commits what was written after its checkpoint -----------------------------


@attrs.frozen
class LogRange:
    """The committable: bytes [start, end) of a writer's append-only log, for ``final``."""

    log: str
    start: int
    end: int
    final: str


class LogWriter(CommittingSinkWriter[dict[str, Any], LogRange]):
    """Appends every element to its attempt's log; a committable is the range since the last."""

    def __init__(self, sink: LogSink, context: WriterInitContext) -> None:
        self.sink = sink
        self.token = context.get_attempt_token()
        self.log = sink.staging / f"{self.token}.log"
        self.start = self.size = self.sequence = 0

    def write(self, element: dict[str, Any], context: Any) -> None:
        line = (element_line(element) + "\n").encode()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            log.write(line)
        self.size += len(line)

    def flush(self, end_of_input: bool) -> None:
        pass

    def prepare_commit(self) -> list[LogRange]:
        if self.size == self.start:
            return []
        final = self.sink.directory / f"part-{self.token}-{self.sequence}.jsonl"
        committable = LogRange(str(self.log), self.start, self.size, str(final))
        self.start, self.sequence = self.size, self.sequence + 1
        return [committable]

    def close(self) -> None:
        pass


class RangeCommitter(Committer[LogRange]):
    """Copies the committable's range of the log into its final file (once)."""

    def commit(self, requests: Collection[Committer.CommitRequest[LogRange]]) -> None:
        for request in requests:
            committable = request.get_committable()
            if os.path.exists(committable.final):
                request.signal_already_committed()
                continue
            with open(committable.log, "rb") as log:
                log.seek(committable.start)
                data = self.read(log, committable)
            with open(committable.final + ".tmp", "wb") as out:
                out.write(data)
            os.replace(committable.final + ".tmp", committable.final)

    def read(self, log: Any, committable: LogRange) -> bytes:
        return bytes(log.read(committable.end - committable.start))

    def close(self) -> None:
        pass


class ToTheEndCommitter(RangeCommitter):
    def read(self, log: Any, committable: LogRange) -> bytes:
        return bytes(log.read())  # the bug: up to what the writer has written by now


class LogSink(Sink[dict[str, Any]], SupportsCommitter[LogRange]):
    committer_class: type[RangeCommitter] = RangeCommitter

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.staging = self.directory / "_staging"

    def create_writer(self, context: WriterInitContext) -> LogWriter:
        return LogWriter(self, context)

    def create_committer(self, context: CommitterInitContext) -> RangeCommitter:
        return self.committer_class()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[LogRange]:
        return AttrsMsgpackSerializer(LogRange)


class ToTheEndSink(LogSink):
    committer_class = ToTheEndCommitter


def test_a_committer_that_commits_what_its_committable_names_passes() -> None:
    check(LogSink, max_examples=10)  # type: ignore[arg-type]


@pytest.mark.usefixtures("unshrunk")
def test_a_committer_that_commits_what_was_written_after_the_checkpoint_is_caught() -> None:
    # Only a commit that comes after more writes shows it: Flink notifies a checkpoint's
    # completion late, while the writers go on. The kit's lifecycle had no such step.
    with pytest.raises(AssertionError) as caught:
        check(ToTheEndSink)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "EXACTLY_ONCE violated" in message
    assert "notifies a checkpoint's completion late" in message
    assert "not what the writer has written by the time it commits" in message


class TakesARetryAsDone(RenameCommitter):
    """Asks to retry a committable once, and when it comes again, takes it as committed."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def commit(self, requests: Collection[Committer.CommitRequest[StagedFile]]) -> None:
        for request in requests:
            staged = request.get_committable().staged
            if staged in self.asked:
                request.signal_already_committed()  # the bug: it never committed it
            else:
                self.asked.add(staged)
                request.retry_later()  # e.g. the destination is busy


class LosesRetriedSink(JsonLinesSink):
    def create_committer(self, context: CommitterInitContext) -> Committer[StagedFile]:
        return TakesARetryAsDone()


@pytest.mark.usefixtures("unshrunk")
def test_a_committer_that_loses_a_committable_on_retry_is_told_where_to_look() -> None:
    with pytest.raises(AssertionError) as caught:
        check(LosesRetriedSink)
    message = str(caught.value)
    assert "committed elements are missing from the destination" in message
    assert "must still be committed when it comes again" in message


def test_framing_helper_matches_what_the_kit_expects_of_golden_payloads() -> None:
    serializer = AttrsMsgpackSerializer(BufferState)
    framed = SimpleVersionedSerialization.write_version_and_serialize(serializer, STATE_V1)
    assert framed[8:] == STATE_V1_PAYLOAD  # golden samples are payloads, without the frame


# --- a sink that changes values ------------------------------------------------------------------


def check_values(sink_class: type[JsonLinesSink], elements: Any, **kwargs: Any) -> None:
    check_sink(
        lambda: make(sink_class),
        guarantee=kwargs.pop("guarantee", EXACTLY_ONCE),
        elements=elements,
        max_examples=kwargs.pop("max_examples", 100),
        **kwargs,
    )


AMOUNTS = st.fixed_dictionaries(
    {
        "id": st.integers(0, 1000),
        "amount": st.decimals(
            min_value=-1000, max_value=1000, places=2, allow_nan=False, allow_infinity=False
        ),
    }
)
MEASURES = st.fixed_dictionaries({"id": st.integers(0, 1000), "x": st.floats()})


class DecimalAsFloatWriter(JsonLinesWriter):
    def write(self, element: dict[str, Any], context: Any) -> None:
        self.buffer.append(json.dumps(element, sort_keys=True, default=float))  # the bug


class DecimalAsFloatSink(JsonLinesSink):
    writer_class = DecimalAsFloatWriter


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_writes_a_decimal_as_a_float_gets_a_diff() -> None:
    with pytest.raises(AssertionError) as caught:
        check_values(DecimalAsFloatSink, AMOUNTS)
    message = str(caught.value)
    assert "EXACTLY_ONCE violated" in message
    assert re.search(r"shows \d+ element\(s\) the kit never wrote, and \d+ written", message)
    assert re.search(r"written \(missing\) +\|  read back \(unexpected\)", message), message
    assert re.search(  # either key order: a stored example may print them otherwise
        r"\{[^}|]*'amount': Decimal\('[-0-9.E+]+'\)[^}|]*\} +\|  \{[^}|]*'amount': [-0-9.eE+]+[,}]",
        message,
    ), message
    assert "field 'amount': Decimal(" in message
    assert "compare how it writes and reads back field 'amount' (Decimal came back as float)" in (
        message
    )
    for misleading in ("no completed checkpoint covers", "duplicated", "are missing from"):
        assert misleading not in message


class NanAsNoneWriter(JsonLinesWriter):
    def write(self, element: dict[str, Any], context: Any) -> None:
        stored = {
            k: None if isinstance(v, float) and math.isnan(v) else v for k, v in element.items()
        }
        self.buffer.append(json.dumps(stored, sort_keys=True))  # the bug: NaN stored as NULL


class NanAsNoneSink(JsonLinesSink):
    writer_class = NanAsNoneWriter


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_stores_nan_as_null_gets_a_diff() -> None:
    with pytest.raises(AssertionError) as caught:
        check_values(NanAsNoneSink, MEASURES)
    message = str(caught.value)
    assert "field 'x': nan (NaN) -> None (None)" in message
    assert "field 'x' (NaN came back as None)" in message


def test_a_sink_that_round_trips_nan_passes() -> None:
    check_values(JsonLinesSink, MEASURES, max_examples=50)  # json writes NaN and reads it back


class TruncatingWriter(JsonLinesWriter):
    def write(self, element: dict[str, Any], context: Any) -> None:
        cut = {**element, "tag": element["tag"][:2]}  # the bug: a VARCHAR(2)
        self.buffer.append(json.dumps(cut, sort_keys=True))


class TruncatingSink(JsonLinesSink):
    writer_class = TruncatingWriter


@pytest.mark.usefixtures("unshrunk")
def test_a_sink_that_truncates_strings_gets_a_diff_under_at_least_once_too() -> None:
    with pytest.raises(AssertionError) as caught:
        check_values(TruncatingSink, ELEMENTS, guarantee=DeliveryGuarantee.AT_LEAST_ONCE)
    message = str(caught.value)
    assert "AT_LEAST_ONCE violated" in message
    assert re.search(r"field 'tag': '\w{3}' \(str\) -> '\w{2}' \(str\)", message), message
    assert "field 'tag' (str values change)" in message
