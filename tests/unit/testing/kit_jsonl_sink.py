"""A small, correct exactly-once JSON-lines sink with writer state, for the kit's own tests.

Real files in a directory (like examples/parquet_sink.py, but JSON lines):

- writers buffer elements; at a checkpoint they write the buffer into a hidden
  staged file only once it holds ``threshold`` elements, and otherwise keep it in
  their state (as the async sink does); at end of input they write everything;
- ``prepare_commit`` hands over the staged file as a committable; the committer
  renames it into place, and recognises a committable it renamed before;
- ``clean_up_attempts`` removes what losing attempts staged, ``abort`` what an
  unfinished checkpoint staged.

The broken variants the tests feed to the kit subclass it and break one thing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import IO, Any

import attrs
from hypothesis import strategies as st

from sinkv2 import (
    AttrsMsgpackSerializer,
    Committer,
    CommitterInitContext,
    CommittingSinkWriter,
    Sink,
    SinkWriter,
    StatefulSinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    SupportsWriterState,
    WriterInitContext,
)
from sinkv2.testing import SinkUnderTest
from sinkv2.testing._engine import scratch_dir

Record = dict[str, Any]

ELEMENTS = st.fixed_dictionaries(
    {"id": st.integers(-(2**53), 2**53), "tag": st.text("abc", max_size=3)}
)


@attrs.frozen
class StagedFile:
    staged: str
    final: str
    count: int


@attrs.frozen
class BufferState:
    lines: tuple[str, ...]


class JsonLinesWriter(
    CommittingSinkWriter[Record, StagedFile], StatefulSinkWriter[Record, BufferState]
):
    def __init__(
        self, sink: JsonLinesSink, context: WriterInitContext, lines: tuple[str, ...] = ()
    ) -> None:
        self.sink = sink
        self.token = context.get_attempt_token()
        self.buffer: list[str] = list(lines)
        self.sequence = 0
        self.file: IO[str] | None = None
        self.path: Path | None = None
        self.count = 0

    def write(self, element: Record, context: SinkWriter.Context) -> None:
        self.buffer.append(json.dumps(element, sort_keys=True))

    def write_buffer(self) -> None:
        if not self.buffer:
            return
        if self.file is None:
            self.path = self.sink.staging / f"{self.token}-{self.sequence}.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("w", encoding="utf-8")
        self.file.writelines(line + "\n" for line in self.buffer)
        self.count += len(self.buffer)
        self.buffer = []

    def flush(self, end_of_input: bool) -> None:
        if end_of_input or len(self.buffer) >= self.sink.threshold:
            self.write_buffer()

    def prepare_commit(self) -> list[StagedFile]:
        if self.file is None or self.path is None:
            return []
        self.file.close()
        final = self.sink.directory / f"part-{self.token}-{self.sequence}.jsonl"
        committable = StagedFile(str(self.path), str(final), self.count)
        self.file, self.path, self.count = None, None, 0
        self.sequence += 1
        return [committable]

    def snapshot_state(self, checkpoint_id: int) -> list[BufferState]:
        return [BufferState(tuple(self.buffer))] if self.buffer else []

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class RenameCommitter(Committer[StagedFile]):
    def commit(self, requests: Collection[Committer.CommitRequest[StagedFile]]) -> None:
        for request in requests:
            file = request.get_committable()
            if os.path.exists(file.staged):
                os.replace(file.staged, file.final)
            elif os.path.exists(file.final):
                request.signal_already_committed()
            else:
                request.signal_failed_with_unknown_reason(
                    FileNotFoundError(f"neither {file.staged} nor {file.final} exists")
                )

    def close(self) -> None:
        pass


class JsonLinesSink(
    Sink[Record],
    SupportsCommitter[StagedFile],
    SupportsWriterState[Record, BufferState],
    SupportsAttemptCleanup,
    SupportsAbort[StagedFile],
):
    writer_class: type[JsonLinesWriter] = JsonLinesWriter

    def __init__(self, directory: str | os.PathLike[str], threshold: int = 3) -> None:
        self.directory = Path(directory)
        self.staging = self.directory / "_staging"
        self.threshold = threshold

    def create_writer(self, context: WriterInitContext) -> JsonLinesWriter:
        return self.writer_class(self, context)

    def restore_writer(
        self, context: WriterInitContext, recovered_state: Collection[BufferState]
    ) -> JsonLinesWriter:
        lines = tuple(line for state in recovered_state for line in state.lines)
        return self.writer_class(self, context, lines)

    def get_writer_state_serializer(self) -> AttrsMsgpackSerializer[BufferState]:
        return AttrsMsgpackSerializer(BufferState)

    def create_committer(self, context: CommitterInitContext) -> Committer[StagedFile]:
        return RenameCommitter()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[StagedFile]:
        return AttrsMsgpackSerializer(StagedFile)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        for staged in self.staging.glob(f"{job_id}-*.jsonl"):
            token = staged.stem.rsplit("-", 1)[0]
            if token not in kept_attempt_tokens:
                staged.unlink(missing_ok=True)

    def abort(self, committables: Collection[StagedFile]) -> None:
        for file in committables:
            Path(file.staged).unlink(missing_ok=True)


def read_back(directory: Path) -> list[Record]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("part-*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def make(sink_class: type[JsonLinesSink] = JsonLinesSink, **options: Any) -> SinkUnderTest:
    # Real files, in memory where there is a tmpfs: the kit makes one per example.
    directory = Path(tempfile.mkdtemp(prefix="kit-jsonl-", dir=scratch_dir()))
    return SinkUnderTest(
        sink=sink_class(directory, **options),
        read_back=lambda: read_back(directory),
        close=lambda: shutil.rmtree(directory, ignore_errors=True),
    )
