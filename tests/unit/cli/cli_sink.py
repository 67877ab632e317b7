"""A sink whose committables name staged files, and whose abort hook removes them.

``sinkv2 state`` loads it by ``--sink cli_sink:make_sink``, or by the class path
recorded with a stream's writer states (``cli_sink.StagingSink``, made without
arguments). ``abort`` appends what it removed to ``aborted.log`` beside the files.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import attrs

from sinkv2 import (
    AttrsMsgpackSerializer,
    Committer,
    CommitterInitContext,
    Sink,
    SupportsAbort,
    SupportsCommitter,
    WriterInitContext,
)


@attrs.frozen
class Staged:
    path: str
    rows: int


class NoCommits(Committer[Staged]):
    def commit(self, requests: Collection[Committer.CommitRequest[Staged]]) -> None:
        raise AssertionError("sinkv2 state never commits")

    def close(self) -> None:
        pass


class StagingSink(Sink[object], SupportsCommitter[Staged], SupportsAbort[Staged]):
    def __init__(self, fail_abort: bool = False) -> None:
        self.fail_abort = fail_abort

    def create_writer(self, context: WriterInitContext) -> None:
        raise AssertionError("sinkv2 state never writes")

    def create_committer(self, context: CommitterInitContext) -> NoCommits:
        return NoCommits()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Staged]:
        return AttrsMsgpackSerializer(Staged, version=1)

    def abort(self, committables: Collection[Staged]) -> None:
        if self.fail_abort:
            raise OSError("the staging area is read-only")
        for committable in committables:
            path = Path(committable.path)
            with (path.parent / "aborted.log").open("a", encoding="utf-8") as log:
                log.write(f"{path.name}\n")
            if path.exists():
                os.remove(path)


class PlainSink(Sink[object], SupportsCommitter[Staged]):
    """The same committables, no abort hook."""

    def create_writer(self, context: WriterInitContext) -> None:
        raise AssertionError("sinkv2 state never writes")

    def create_committer(self, context: CommitterInitContext) -> NoCommits:
        return NoCommits()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[Staged]:
        return AttrsMsgpackSerializer(Staged, version=1)


class NeedsSettings(StagingSink):
    """A sink class that cannot be made without arguments."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory


def make_sink() -> StagingSink:
    return StagingSink()


def make_failing_sink() -> StagingSink:
    return StagingSink(fail_abort=True)


def make_plain_sink() -> PlainSink:
    return PlainSink()
