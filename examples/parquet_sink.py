"""A minimal exactly-once Parquet sink: the demo's and the benchmarks' sink.

Writers stage Parquet files under ``<base>/_staging/<attempt token>/`` (Spark and
most readers skip ``_``-prefixed paths), one file per ``prepare_commit``. The
committable names the staged file and its final name; the committer renames it
into place, atomically and idempotently. Losing attempts' files are removed by
``clean_up_attempts``; aborted epochs' by ``abort``.

``arrow=True`` gives writers the Arrow extension (``write_arrow_batch``), so whole
record batches go to Parquet with no per-row Python; ``arrow=False`` takes the
per-element path (``write(element)`` with one dict per row).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.parquet as pq

from sinkv2 import (
    AttrsMsgpackSerializer,
    Committer,
    CommittingSinkWriter,
    Sink,
    SinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommitter,
    WriterInitContext,
)

_ROWS_PER_BATCH = 8192


@attrs.frozen
class ParquetFile:
    """A staged Parquet file and the name it gets when committed."""

    staged: str
    final: str
    rows: int


class RowParquetWriter(CommittingSinkWriter[dict[str, Any], ParquetFile]):
    """Buffers elements (dicts) and writes them to one staged Parquet file."""

    def __init__(self, base: Path, context: WriterInitContext) -> None:
        self._base = base
        self._token = context.get_attempt_token()
        self._subtask = context.get_subtask_id()
        self._sequence = 0  # one file per prepare_commit: names never repeat
        self._rows: list[dict[str, Any]] = []
        self._file: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._count = 0
        self._metrics = context.metric_group()

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        if self._file is None:
            name = f"{self._token}-{self._sequence:04d}.parquet"
            self._staged = self._base / "_staging" / self._token / name
            self._final = self._base / f"part-{self._subtask:05d}-{name}"
            self._staged.parent.mkdir(parents=True, exist_ok=True)
            self._schema = batch.schema
            self._file = pq.ParquetWriter(self._staged, batch.schema)
        self._file.write_batch(batch)
        self._count += batch.num_rows
        self._metrics.get_num_records_send_counter().inc(batch.num_rows)
        self._metrics.get_num_bytes_send_counter().inc(batch.nbytes)

    def write(self, element: dict[str, Any], context: SinkWriter.Context) -> None:
        """Buffer one element; a full buffer becomes a record batch."""
        self._rows.append(element)
        if len(self._rows) >= _ROWS_PER_BATCH:
            self._drain()

    def _drain(self) -> None:
        if self._rows:
            self._write_batch(pa.RecordBatch.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def flush(self, end_of_input: bool) -> None:
        """Write buffered elements into the staged file."""
        self._drain()

    def prepare_commit(self) -> list[ParquetFile]:
        """Close the staged file and hand it over, if anything was written."""
        if self._file is None:
            return []
        self._file.close()
        self._file = None
        self._sequence += 1
        pending = ParquetFile(str(self._staged), str(self._final), self._count)
        self._count = 0
        return [pending]

    def close(self) -> None:
        """Close the staged file if a failure left it open."""
        if self._file is not None:
            self._file.close()
            self._file = None


class ArrowParquetWriter(RowParquetWriter):
    """The same writer with the Arrow extension: whole batches, no per-row Python."""

    def write_arrow_batch(self, batch: pa.RecordBatch, context: SinkWriter.Context) -> None:
        """Append ``batch`` to the staged file."""
        self._write_batch(batch)


class RenameCommitter(Committer[ParquetFile]):
    """Makes staged files visible by an atomic rename; idempotent."""

    def commit(self, requests: Collection[Committer.CommitRequest[ParquetFile]]) -> None:
        """Rename each staged file to its final name, or recognise it as done."""
        for request in requests:
            file = request.get_committable()
            if os.path.exists(file.staged):
                os.replace(file.staged, file.final)
                with contextlib.suppress(OSError):  # the attempt's folder, once empty
                    os.rmdir(os.path.dirname(file.staged))
            elif os.path.exists(file.final):
                request.signal_already_committed()
            else:
                request.signal_failed_with_unknown_reason(
                    FileNotFoundError(f"neither {file.staged} nor {file.final} exists")
                )

    def close(self) -> None:
        """Nothing to release."""


class ParquetSink(
    Sink[dict[str, Any]],
    SupportsCommitter[ParquetFile],
    SupportsAttemptCleanup,
    SupportsAbort[ParquetFile],
):
    """Exactly-once Parquet files under ``base_path``."""

    def __init__(self, base_path: str | os.PathLike[str], *, arrow: bool = True) -> None:
        self.base = Path(base_path)
        self.arrow = arrow

    def create_writer(self, context: WriterInitContext) -> RowParquetWriter:
        """A writer staging one file for this attempt."""
        writer = ArrowParquetWriter if self.arrow else RowParquetWriter
        return writer(self.base, context)

    def create_committer(self, context: object) -> RenameCommitter:
        """The renaming committer."""
        return RenameCommitter()

    def get_committable_serializer(self) -> AttrsMsgpackSerializer[ParquetFile]:
        """Committables travel as msgpack."""
        return AttrsMsgpackSerializer(ParquetFile)

    def clean_up_attempts(self, job_id: str, kept_attempt_tokens: Collection[str]) -> None:
        """Remove what attempts of ``job_id`` staged, except the kept attempts'.

        Called with the winners after the writer stage (the losers' files go), and
        with none once the job's epoch is committed or the job died (committed files
        were renamed out of ``_staging``, so nothing visible is touched).
        """
        for attempt in (self.base / "_staging").glob(f"{job_id}-*"):
            if attempt.name not in kept_attempt_tokens:
                shutil.rmtree(attempt, ignore_errors=True)

    def abort(self, committables: Collection[ParquetFile]) -> None:
        """Remove staged files of an aborted epoch; committed files stay."""
        for file in committables:
            Path(file.staged).unlink(missing_ok=True)
