"""The native writer stage: Spark's own file writer writes an epoch's data files.

For a sink with `sinkv2.SupportsNativeFileWrite` whose plan allows it, the writer
stage of an epoch is one Spark write instead of ``mapInArrow`` over Python
writers::

    input.write.format(f).partitionBy(...).options(...)
         .save("<location>/<job id>-native-<checkpoint id>")      Spark's commit protocol
    sink.native_file_committables(NativeFilesWritten(...))     on the driver: the file list

Spark's file commit protocol (``FileOutputCommitter``, algorithm 1, forced here)
isolates task attempts: each attempt writes under ``_temporary/``, only the attempt
the ``OutputCommitCoordinator`` lets commit is moved into place, failed and killed
attempts are removed, and the job commit deletes ``_temporary``. What a driver that
died mid-write leaves - the epoch directory with ``_temporary`` in it - is named by
an attempt token of its job, so the next run of the sink id removes it with the
sink's ``clean_up_attempts`` like any dead job's staging.

Rows never enter Python; the driver gets two numbers from Spark - rows and tasks -
and the committables the sink makes from the files. For Parquet the numbers are
read from what Spark wrote to a local directory (each data file's footer has its
row count, its name ``part-<task>-...`` its task); for other formats and places an
``Observation`` on the input counts them, which costs about 5 % of the write (a
footer read per local file costs a millisecond or less).
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sinkv2 import (
    NativeFilesWritten,
    NativeFileWrite,
    NativeWriteUnavailable,
    SimpleVersionedSerialization,
    SinkCapabilities,
)
from sinkv2.errors import SinkConfigurationError, SinkDefinitionError
from sinkv2.metrics import NUM_RECORDS_SEND
from sinkv2.runtime import (
    Restore,
    StreamWriterStage,
    SubtaskStates,
    WriterStage,
    WriterStageOutput,
    WriterStates,
    native_attempt_token,
)
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA
from sinkv2.text import describe
from sinkv2_spark._engine.schema import arrow_schema
from sinkv2_spark._engine.writer_stage import SparkWriterStage, describe_jobs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "NativeWriterStage",
    "batch_writer_stage",
    "parquet_counts",
    "plan_native_write",
    "stream_writer_stage",
]

logger = logging.getLogger("sinkv2.spark")

_TASK_FILE: Final = re.compile(r"part-(\d+)-")
"""Spark names each data file after the task that wrote it: ``part-00003-<uuid>...``."""


def parquet_counts(directory: str) -> tuple[int, int]:
    """The rows in the Parquet files Spark wrote under ``directory``, and its tasks with rows.

    Bookkeeping (a path component starting with ``_`` or ``.``, as Spark's readers
    skip it) is not data. A missing directory holds nothing.
    """
    filesystem, root = pafs.FileSystem.from_uri(directory)
    root = root.rstrip("/")
    records, last_task = 0, -1
    for info in filesystem.get_file_info(
        pafs.FileSelector(root, recursive=True, allow_not_found=True)
    ):
        relative = info.path[len(root) :].strip("/")
        if info.type != pafs.FileType.File or any(
            part.startswith(("_", ".")) for part in relative.split("/")
        ):
            continue
        with filesystem.open_input_file(info.path) as file:
            records += pq.read_metadata(file).num_rows
        task = _TASK_FILE.match(info.base_name)
        if task is not None:
            last_task = max(last_task, int(task.group(1)))
    return records, last_task + 1


_WRITE_OPTIONS: Final = {
    # Spark's commit protocol as described above: task attempts are moved into place
    # at job commit (algorithm 2 moves them at task commit, which can leave a lost
    # executor's committed task twice), and no _SUCCESS marker among the data files.
    "mapreduce.fileoutputcommitter.algorithm.version": "1",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}


def plan_native_write(
    source: DataFrame, sink: Any, capabilities: SinkCapabilities
) -> NativeFileWrite | NativeWriteUnavailable | None:
    """The sink's native write plan for ``source``; ``None`` if it has no native writes.

    Raises:
        SinkDefinitionError: ``plan_native_file_write`` returned something else than a
            `NativeFileWrite` or a `NativeWriteUnavailable`.
        SinkConfigurationError: The plan's ``input`` is not a DataFrame of
            ``source``'s session, or it partitions by a column it does not have.
    """
    if not capabilities.native_file_write:
        return None
    from pyspark.sql import DataFrame  # noqa: PLC0415  # pyspark loads only when used

    plan = sink.plan_native_file_write(source)
    sink_type = capabilities.sink_type
    if isinstance(plan, NativeWriteUnavailable):
        logger.info("%s: the sink's own writers run: %s", sink_type, plan.reason)
        return plan
    if not isinstance(plan, NativeFileWrite):
        raise SinkDefinitionError(
            f"{sink_type}.plan_native_file_write() must return a NativeFileWrite or a "
            f"NativeWriteUnavailable (got {describe(plan)})"
        )
    written = source if plan.input is None else plan.input
    if not isinstance(written, DataFrame):
        raise SinkConfigurationError(
            f"{sink_type}.plan_native_file_write() returned a NativeFileWrite whose input "
            f"is {describe(written)}, not a pyspark.sql.DataFrame; derive it from the "
            "DataFrame it was handed, or leave it None"
        )
    missing = [column for column in plan.partition_by if column not in written.columns]
    if missing:
        raise SinkConfigurationError(
            f"{sink_type}.plan_native_file_write() partitions by {missing}, which the "
            f"DataFrame to write does not have (its columns: {written.columns})"
        )
    return plan


def batch_writer_stage(
    source: DataFrame, sink: Any, capabilities: SinkCapabilities, sink_id: str
) -> tuple[WriterStage, pa.Schema | None]:
    """The writer stage of a batch run over ``source``, and the input's Arrow schema.

    A `NativeWriterStage` if the sink plans a native write, else the sink's writers
    (`SparkWriterStage`), whose output then says why the native write could not
    run if the sink gave a reason. The Arrow schema is what committers (and
    writers) see as ``get_input_schema()``; a native write needs none, so a column
    Arrow cannot carry does not stop it (the schema is then ``None``).

    Raises:
        SinkConfigurationError: The plan is unusable, or (the sink's writers) the
            input's schema cannot reach Python writers.
        SinkDefinitionError: The sink's plan is not a plan.
    """
    plan = plan_native_write(source, sink, capabilities)
    if isinstance(plan, NativeFileWrite):
        try:
            schema: pa.Schema | None = arrow_schema(source)
        except SinkConfigurationError:
            schema = None  # Spark's writer checks the columns itself
        return NativeWriterStage(source, sink, capabilities, sink_id, plan), schema
    schema = arrow_schema(source)
    stage = SparkWriterStage(source, sink, capabilities, sink_id, schema)
    if isinstance(plan, NativeWriteUnavailable):
        return _ReportingUnavailable(stage, plan.reason), schema
    return stage, schema


def stream_writer_stage(
    source: DataFrame, sink: Any, capabilities: SinkCapabilities, sink_id: str
) -> StreamWriterStage:
    """The writer stage of one micro-batch over ``source`` (a `StreamWriterStage`).

    As `batch_writer_stage`, per micro-batch: Spark's writer if the sink plans a
    native write, else the sink's writers. A checkpoint whose writers would restore
    non-empty states (the previous micro-batch ran the sink's writers, and they kept
    something) runs the sink's writers too: only they can take those states over.

    Raises:
        SinkConfigurationError: As `batch_writer_stage`.
        SinkDefinitionError: As `batch_writer_stage`.
    """
    plan = plan_native_write(source, sink, capabilities)
    writers: SparkWriterStage | None = None

    def sink_writers() -> SparkWriterStage:
        nonlocal writers
        if writers is None:
            writers = SparkWriterStage(source, sink, capabilities, sink_id, arrow_schema(source))
        return writers

    if not isinstance(plan, NativeFileWrite):
        reason = plan.reason if isinstance(plan, NativeWriteUnavailable) else None

        def write(job_id: str, checkpoint_id: int, restore: Restore | None) -> WriterStageOutput:
            output = sink_writers().checkpoint(job_id, checkpoint_id, restore)
            return attrs.evolve(output, native_write_unavailable=reason)

        sink_writers()  # a schema the writers cannot take fails before the micro-batch runs
        return write
    native = NativeWriterStage(source, sink, capabilities, sink_id, plan)

    def native_write(job_id: str, checkpoint_id: int, restore: Restore | None) -> WriterStageOutput:
        states = restore.states if restore is not None else None
        if states is not None and states.referenced_attempts():
            output = sink_writers().checkpoint(job_id, checkpoint_id, restore)
            return attrs.evolve(
                output,
                native_write_unavailable=(
                    "the previous checkpoint's writer states are restored by the sink's own "
                    "writers; the next checkpoint is written by Spark"
                ),
            )
        output = native(job_id, checkpoint_id)
        if not capabilities.writer_state:
            return output
        token = native_attempt_token(job_id, checkpoint_id)
        empty = WriterStates(  # a native write keeps nothing for the next checkpoint
            state_name="",
            number_of_subtasks=1,
            subtasks=(SubtaskStates(subtask_id=0, attempt_token=token, states=()),),
        )
        return attrs.evolve(output, states=empty)

    return native_write


@final
@attrs.frozen
class _ReportingUnavailable:
    """The sink's writers as the writer stage; the output says why they, not Spark, wrote."""

    stage: WriterStage
    reason: str

    def __call__(self, job_id: str, checkpoint_id: int) -> WriterStageOutput:
        return attrs.evolve(self.stage(job_id, checkpoint_id), native_write_unavailable=self.reason)


@final
class NativeWriterStage:
    """The writer stage of one epoch as a Spark file write: a `sinkv2.runtime.WriterStage`.

    Args:
        source: The input after the sink's pre-write topology.
        sink: The sink (`SupportsNativeFileWrite`).
        capabilities: What ``inspect_sink`` found.
        sink_id: Names the Spark jobs.
        plan: What `plan_native_write` returned for ``source``.
    """

    def __init__(
        self,
        source: DataFrame,
        sink: Any,
        capabilities: SinkCapabilities,
        sink_id: str,
        plan: NativeFileWrite,
    ) -> None:
        self._source = source if plan.input is None else plan.input
        self._sink = sink
        self._capabilities = capabilities
        self._sink_id = sink_id
        self._plan = plan

    def __call__(self, job_id: str, checkpoint_id: int) -> WriterStageOutput:
        """Write the epoch's files with Spark, and have the sink make its committables.

        Raises:
            Exception: Spark's own, if the write failed (e.g. a task failed more
                often than ``spark.task.maxFailures``); the epoch directory is left
                for the coordinator's clean-up.
            SinkWriterError: The sink cannot commit the files as written.
        """
        from pyspark.sql import Observation  # noqa: PLC0415  # pyspark loads only when used
        from pyspark.sql import functions as sf  # noqa: PLC0415

        plan = self._plan
        token = native_attempt_token(job_id, checkpoint_id)
        directory = plan.epoch_directory(token)
        describe_jobs(self._source.sparkSession, f"sinkv2 {self._sink_id}: native write")
        observation = None
        source = self._source
        if plan.format != "parquet" or not plan.location.startswith("file:"):
            observation = Observation(f"sinkv2_{token.replace('-', '_')}")
            source = source.observe(
                observation,
                sf.count(sf.lit(1)).alias("records"),
                sf.max(sf.spark_partition_id()).alias("last_task"),
            )
        # "error", not "errorifexists": Spark Connect's client knows only the short name.
        writer = source.write.format(plan.format).mode("error")
        writer = writer.options(**{**plan.options, **_WRITE_OPTIONS})
        if plan.partition_by:
            writer = writer.partitionBy(*plan.partition_by)
        logger.info(
            "sink %r job %s: native %s write of checkpoint %d into %s",
            self._sink_id,
            job_id,
            plan.format,
            checkpoint_id,
            directory,
        )
        started = time.perf_counter()
        writer.save(directory)
        wrote = time.perf_counter() - started
        if observation is None:
            records, subtasks = parquet_counts(directory)
        else:
            metrics = observation.get
            records = int(metrics.get("records") or 0)
            last_task = metrics.get("last_task")
            subtasks = 0 if last_task is None else int(last_task) + 1
        started = time.perf_counter()
        committables = list(
            self._sink.native_file_committables(
                NativeFilesWritten(
                    job_id=job_id,
                    checkpoint_id=checkpoint_id,
                    attempt_token=token,
                    directory=directory,
                    write=plan,
                    records=records,
                )
            )
        )
        listed = time.perf_counter() - started
        logger.info(
            "sink %r job %s: native write of %d rows in %.3f s; %d committable(s) from its "
            "files in %.3f s",
            self._sink_id,
            job_id,
            records,
            wrote,
            len(committables),
            listed,
        )
        return WriterStageOutput(
            table=self._table(committables, checkpoint_id),
            attempt_tokens=frozenset({token}),
            records=records,
            subtasks=subtasks,
            metrics={NUM_RECORDS_SEND: float(records)},
            stage_seconds={"committables from files": listed},
            final_committables=True,
            native_write=True,
        )

    def _table(self, committables: list[Any], checkpoint_id: int) -> pa.Table:
        """The committables in `COMMITTABLE_SCHEMA`, framed with the committable serializer."""
        serializer = self._sink.get_committable_serializer()
        version = serializer.get_version()
        count = len(committables)
        return pa.Table.from_pydict(
            {
                "checkpoint_id": [checkpoint_id] * count,
                "subtask_id": [0] * count,
                "number_of_subtasks": [1] * count,
                "serializer_version": [version] * count,
                "payload": [
                    SimpleVersionedSerialization.write_version_and_serialize(serializer, c)
                    for c in committables
                ],
                "lineage": [[f"native:{i}"] for i in range(count)],
            },
            schema=COMMITTABLE_SCHEMA,
        )
