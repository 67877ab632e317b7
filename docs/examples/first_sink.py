"""Implement your first sink: JSON Lines files in a directory, exactly once.

This is the complete example of the tutorial "Implement your first sink". It has
no Spark in it: the `main` function plays the runtime by hand, the way a Spark job
would drive the sink with two partitions. Run it with::

    python docs/examples/first_sink.py [OUTPUT_DIRECTORY]

Without an argument it writes to a fresh temporary directory. The tutorial's last
step, `write_on_spark`, runs the same sink on a Spark DataFrame (it needs
``pip install 'sinkv2[spark]'``)::

    python docs/examples/first_sink.py --spark [OUTPUT_DIRECTORY]
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

from sinkv2 import (
    AttrsMsgpackSerializer,
    CommitRequest,
    Committer,
    CommitterInitContext,
    CommittingSinkWriter,
    SimpleVersionedSerialization,
    SimpleVersionedSerializer,
    Sink,
    SinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    WriterInitContext,
    inspect_sink,
)
from sinkv2.runtime import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
)
from sinkv2.runtime import commit_with_retries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sinkv2.runtime import SinkResult

Record = dict[str, Any]
"""What the sink writes: one JSON object per element."""
# --8<-- [end:imports]


# --8<-- [start:committable]
@attrs.frozen
class StagedFile:
    """The committable: a hidden staged file, and the name it gets once committed.

    Names are relative to the sink's directory, so the committable says everything
    the committer needs, in whatever process the committer runs.
    """

    staged_name: str
    final_name: str
    record_count: int


# --8<-- [end:committable]


# --8<-- [start:writer]
class JsonLinesWriter(CommittingSinkWriter[Record, StagedFile]):
    """Stages one subtask's records in a hidden file; hands the file over on prepare_commit."""

    def __init__(self, directory: Path, context: WriterInitContext) -> None:
        self._directory = directory
        # Unique to this attempt of this subtask: two attempts never share a file.
        self._token = context.get_attempt_token()
        self._records_sent = context.metric_group().get_num_records_send_counter()
        self._sequence = 0  # one staged file per prepare_commit() call
        self._file: IO[str] | None = None
        self._record_count = 0

    def _staged_name(self) -> str:
        return f".part-{self._token}-{self._sequence}.jsonl.inprogress"

    def write(self, element: Record, context: SinkWriter.Context) -> None:
        """Append ``element`` as one JSON line to the staged file."""
        if self._file is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            # "x": fail rather than append to a file another attempt left behind.
            self._file = open(self._directory / self._staged_name(), "x", encoding="utf-8")  # noqa: SIM115  # closed in prepare_commit() or close()
        self._file.write(json.dumps(element, sort_keys=True) + "\n")
        self._record_count += 1
        self._records_sent.inc()

    def flush(self, end_of_input: bool) -> None:
        """Make the staged records durable before they are handed over."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def prepare_commit(self) -> Collection[StagedFile]:
        """Close the staged file and describe it as a committable (none if nothing was written)."""
        if self._file is None:
            return []
        self._file.close()
        self._file = None
        staged = StagedFile(
            staged_name=self._staged_name(),
            final_name=f"part-{self._token}-{self._sequence}.jsonl",
            record_count=self._record_count,
        )
        self._sequence += 1
        self._record_count = 0
        return [staged]

    def close(self) -> None:
        """Remove a staged file that no committable names (the attempt failed midway)."""
        if self._file is not None:
            self._file.close()
            self._file = None
            (self._directory / self._staged_name()).unlink(missing_ok=True)


# --8<-- [end:writer]


# --8<-- [start:committer]
class JsonLinesCommitter(Committer[StagedFile]):
    """Makes staged files visible by renaming them; committing twice is harmless."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def commit(self, requests: Collection[CommitRequest[StagedFile]]) -> None:
        """Rename each staged file to its final name, atomically."""
        for request in requests:
            staged = request.get_committable()
            source = self._directory / staged.staged_name
            target = self._directory / staged.final_name
            try:
                # Atomic on POSIX and Windows: readers see the whole file or none of it.
                os.replace(source, target)
            except FileNotFoundError as missing:
                if target.exists():
                    # A replay after a failure: this file was committed before.
                    request.signal_already_committed()
                else:
                    # Nothing left to commit: drop it, log a warning, keep the job going.
                    request.signal_failed_with_known_reason(missing)

    def close(self) -> None:
        """Nothing to release: the committer holds no open resources."""


# --8<-- [end:committer]


# --8<-- [start:sink]
class JsonLinesSink(
    Sink[Record],
    SupportsCommitter[StagedFile],
    SupportsAttemptCleanup,
    SupportsAbort[StagedFile],
):
    """Writes JSON Lines files into ``directory``, exactly once.

    The sink is plain data (a path), so it can be shipped to executors; writers and
    committers open files, the sink never does.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def create_writer(self, context: WriterInitContext) -> JsonLinesWriter:
        """A writer for the subtask described by ``context``."""
        return JsonLinesWriter(self.directory, context)

    def create_committer(self, context: CommitterInitContext) -> JsonLinesCommitter:
        """The committer that renames staged files."""
        return JsonLinesCommitter(self.directory)

    def get_committable_serializer(self) -> SimpleVersionedSerializer[StagedFile]:
        """Committables travel and are stored as msgpack, version 1."""
        return AttrsMsgpackSerializer(StagedFile, version=1)

    # --8<-- [end:sink]
    # --8<-- [start:hooks]
    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Delete what the attempts of ``job_id`` staged, except the kept (winning) ones'.

        The runtime calls it on the driver after the writers (with the winners'
        tokens), once the epoch is committed (with none) and, for a job that died,
        from the next run. Staged names hold the attempt token, and tokens start with
        the job id, so other jobs' files and committed files are never touched.
        """
        kept = set(kept_attempt_tokens)
        for path in self.directory.glob(f".part-{job_id}-*.jsonl.inprogress"):
            # ".part-<token>-<sequence>.jsonl.inprogress": the token is what is between.
            token = path.name.removeprefix(".part-").rsplit("-", 1)[0]
            if token not in kept:
                path.unlink(missing_ok=True)

    def abort(self, committables: Collection[StagedFile]) -> None:
        """Delete the staged files of an epoch that will never be committed.

        A file committed already (its driver died during the commit) is no longer at
        its staged name, so committed output is left alone. Idempotent.
        """
        for staged in committables:
            (self.directory / staged.staged_name).unlink(missing_ok=True)


# --8<-- [end:hooks]


# --8<-- [start:main]
def main(argv: list[str]) -> int:
    """Drive the sink by hand, as a runtime would: two subtasks, then one commit."""
    directory = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="first-sink-"))
    sink = JsonLinesSink(directory)
    job_id = "job-1"  # one run: every attempt token starts with it

    # 1. Check the sink before any data moves.
    capabilities = inspect_sink(sink)
    print(f"{capabilities} -> {capabilities.guarantee_text}")

    # 2. Write: one writer per subtask, as Spark runs one task per partition.
    partitions: list[list[Record]] = [
        [{"order": 1, "item": "apple"}, {"order": 2, "item": "pear"}],
        [{"order": 3, "item": "plum"}],
    ]
    serializer = sink.get_committable_serializer()
    shipped: list[bytes] = []
    winners: list[str] = []
    for subtask_id, elements in enumerate(partitions):
        init = BasicWriterInitContext(
            job_id=job_id, subtask_id=subtask_id, number_of_parallel_subtasks=len(partitions)
        )
        winners.append(init.get_attempt_token())
        writer = sink.create_writer(init)
        capabilities.check_writer(writer)  # a committing sink needs a CommittingSinkWriter
        try:
            context = BasicSinkWriterContext()
            for element in elements:
                writer.write(element, context)
            writer.flush(True)  # end of input
            for committable in writer.prepare_commit():
                # Committables leave the task as framed, versioned bytes.
                shipped.append(
                    SimpleVersionedSerialization.write_version_and_serialize(
                        serializer, committable
                    )
                )
        finally:
            writer.close()

    # A second attempt of subtask 0 (a speculative copy) stages the same records and
    # loses: its committables are never shipped, and the clean-up hook removes its file.
    loser = sink.create_writer(
        BasicWriterInitContext(job_id=job_id, attempt_number=1, number_of_parallel_subtasks=2)
    )
    for element in partitions[0]:
        loser.write(element, BasicSinkWriterContext())
    loser.flush(True)
    loser.prepare_commit()
    loser.close()
    sink.clean_up_attempts(job_id, winners)

    # 3. Commit: once, for all subtasks, under the end-of-input checkpoint id.
    committables = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, data)
        for data in shipped
    ]
    committer = sink.create_committer(BasicCommitterInitContext())
    capabilities.check_committer(committer)
    try:
        outcome = commit_with_retries(committer, committables, what="first sink, END_OF_INPUT")
        print(f"commit: {outcome}")
        # 4. Recovery commits the same committables again; nothing is written twice.
        replay = commit_with_retries(committer, committables, what="first sink, replay")
        print(f"replay: {replay}")
    finally:
        committer.close()
    sink.clean_up_attempts(job_id, [])  # the epoch is committed: nothing staged stays

    print(f"output in {directory}:")
    for path in sorted(directory.iterdir()):
        lines = path.read_text(encoding="utf-8").splitlines()
        print(f"  {path.name}: {len(lines)} record(s)")
    return 0


# --8<-- [end:main]


# --8<-- [start:spark]
def write_on_spark(spark: SparkSession, directory: Path, state: Path) -> list[SinkResult]:
    """Write the same three records through Spark, then run the same checkpoint again."""
    from sinkv2.runtime import SqliteCommitStateStore  # noqa: PLC0415  # pyspark only here
    from sinkv2_spark import SinkTopologyTranslator  # noqa: PLC0415  # pyspark only here

    # Two partitions: two writer subtasks, as in main(). Each element a writer gets
    # is a dict of column name -> value, the Record the sink writes.
    df = spark.createDataFrame(
        [(1, "apple"), (2, "pear"), (3, "plum")], "order long, item string"
    ).repartition(2, "order")

    # The commit state store remembers which checkpoints of which sink id are
    # committed; one per application (the default is ./.sinkv2/commit_state.sqlite).
    translator = SinkTopologyTranslator(state_store=SqliteCommitStateStore(state))
    sink = JsonLinesSink(directory)
    results = []
    for _run in range(2):  # the second run is a retry of the same checkpoint
        results.append(
            translator.apply(df, sink, sink_id=f"first-sink:{directory}", checkpoint_id=1)
        )
    return results


def main_on_spark(argv: list[str]) -> int:
    """``--spark``: start a local Spark session and write with `write_on_spark`."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  # only with --spark

    # Spark's Python workers must run this Python: the one with sinkv2 installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    scratch = Path(tempfile.mkdtemp(prefix="first-sink-"))
    directory = Path(argv[1]) if len(argv) > 1 else scratch / "out"
    spark = SparkSession.builder.master("local[2]").appName("first-sink").getOrCreate()
    try:
        first, again = write_on_spark(spark, directory, scratch / "commit_state.sqlite")
    finally:
        spark.stop()
    print(first.summary())
    print(f"again: {again.status.value}, {again.records_written} records written")
    print(f"output in {directory}:")
    for path in sorted(directory.iterdir()):
        lines = path.read_text(encoding="utf-8").splitlines()
        print(f"  {path.name}: {len(lines)} record(s)")
    return 0


# --8<-- [end:spark]


if __name__ == "__main__":
    if "--spark" in sys.argv:
        sys.exit(main_on_spark([arg for arg in sys.argv if arg != "--spark"]))
    sys.exit(main(sys.argv))
