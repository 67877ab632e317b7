"""What travels between the Iceberg sink's stages: data files, write results, committables.

pyiceberg's ``DataFile`` is neither attrs nor stable across pyiceberg versions, so
writers describe each Parquet file they wrote with `IcebergDataFile`, a plain attrs
class serialized by `AttrsMsgpackSerializer` (version 1). Partition values travel in
Iceberg's own single-value binary form (the form manifests store bounds in), so every
partition type round-trips exactly and no Python type needs a custom msgpack hook.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from sinkv2 import AttrsMsgpackSerializer

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.typedef import Record
    from pyiceberg.types import PrimitiveType

__all__ = [
    "DATA_FILE_FORMAT",
    "IcebergCommittable",
    "IcebergDataFile",
    "IcebergWriteResult",
    "committable_serializer",
    "write_result_serializer",
]

DATA_FILE_FORMAT: Final = "PARQUET"


@attrs.frozen(kw_only=True)
class IcebergDataFile:
    """One Parquet data file a writer staged, with the metadata Iceberg's manifest needs.

    Attributes:
        path: Full location of the file (a URI under the table's data location).
        spec_id: The partition spec the file was written for.
        partition: Partition values in spec order, each in Iceberg's single-value
            binary form (``pyiceberg.conversions.to_bytes``), ``None`` for null.
        record_count: Rows in the file.
        file_size_in_bytes: Size of the file.
        column_sizes, value_counts, null_value_counts, nan_value_counts: Column
            statistics by field id.
        lower_bounds, upper_bounds: Column bounds by field id, binary form.
        split_offsets: Row-group start offsets.
        file_format: Always ``"PARQUET"`` in version 1.
    """

    path: str
    spec_id: int
    partition: tuple[bytes | None, ...]
    record_count: int
    file_size_in_bytes: int
    column_sizes: dict[int, int] = attrs.field(factory=dict)
    value_counts: dict[int, int] = attrs.field(factory=dict)
    null_value_counts: dict[int, int] = attrs.field(factory=dict)
    nan_value_counts: dict[int, int] = attrs.field(factory=dict)
    lower_bounds: dict[int, bytes] = attrs.field(factory=dict)
    upper_bounds: dict[int, bytes] = attrs.field(factory=dict)
    split_offsets: tuple[int, ...] = ()
    file_format: str = DATA_FILE_FORMAT

    @classmethod
    def from_statistics(
        cls,
        *,
        path: str,
        spec_id: int,
        partition: tuple[bytes | None, ...],
        file_size_in_bytes: int,
        statistics: dict[str, Any],
    ) -> IcebergDataFile:
        """Build from pyiceberg's ``DataFileStatistics.to_serialized_dict()``."""
        return cls(
            path=path,
            spec_id=spec_id,
            partition=partition,
            file_size_in_bytes=file_size_in_bytes,
            record_count=int(statistics["record_count"]),
            column_sizes=dict(statistics.get("column_sizes") or {}),
            value_counts=dict(statistics.get("value_counts") or {}),
            null_value_counts=dict(statistics.get("null_value_counts") or {}),
            nan_value_counts=dict(statistics.get("nan_value_counts") or {}),
            lower_bounds=dict(statistics.get("lower_bounds") or {}),
            upper_bounds=dict(statistics.get("upper_bounds") or {}),
            split_offsets=tuple(statistics.get("split_offsets") or ()),
        )

    def partition_record(self, metadata: TableMetadata) -> Record:
        """The partition values decoded with the table's spec ``spec_id``."""
        from pyiceberg.conversions import from_bytes  # noqa: PLC0415  # pyiceberg is an optional extra
        from pyiceberg.typedef import Record  # noqa: PLC0415  # pyiceberg is an optional extra

        spec = metadata.specs()[self.spec_id]
        struct = spec.partition_type(metadata.schema())
        if len(struct.fields) != len(self.partition):
            raise ValueError(
                f"data file {self.path} has {len(self.partition)} partition values but spec "
                f"{self.spec_id} has {len(struct.fields)} fields"
            )
        return Record(
            *(
                None if raw is None else from_bytes(cast("PrimitiveType", field.field_type), raw)
                for field, raw in zip(struct.fields, self.partition, strict=True)
            )
        )

    def to_data_file(self, metadata: TableMetadata) -> DataFile:
        """The pyiceberg ``DataFile`` a fast append adds to a manifest."""
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat  # noqa: PLC0415  # optional extra

        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.path,
            file_format=FileFormat(self.file_format),
            partition=self.partition_record(metadata),
            file_size_in_bytes=self.file_size_in_bytes,
            sort_order_id=None,
            spec_id=self.spec_id,
            equality_ids=None,
            key_metadata=None,
            record_count=self.record_count,
            column_sizes=dict(self.column_sizes),
            value_counts=dict(self.value_counts),
            null_value_counts=dict(self.null_value_counts),
            nan_value_counts=dict(self.nan_value_counts),
            lower_bounds=dict(self.lower_bounds),
            upper_bounds=dict(self.upper_bounds),
            split_offsets=list(self.split_offsets),
        )


@attrs.frozen(kw_only=True)
class IcebergWriteResult:
    """What one writer emits: the files it staged (Flink's ``WriteResult``).

    Attributes:
        job_id: The run the writer belonged to.
        files: The staged data files.
        checkpoint_id: The checkpoint, filled in by the pre-commit topology from the
            committable stream; ``None`` for a batch run without a checkpoint id.
    """

    job_id: str
    files: tuple[IcebergDataFile, ...]
    checkpoint_id: int | None = None


@attrs.frozen(kw_only=True)
class IcebergCommittable:
    """All files of one checkpoint, appended in one snapshot (Flink's ``IcebergCommittable``).

    Attributes:
        sink_id: The sink's commit history in the table (snapshot property
            ``sinkv2.sink-id``).
        job_id: The run(s) that wrote the files, comma separated.
        checkpoint_id: The checkpoint, or ``None`` for a batch run without one.
        files: The data files to append.
    """

    sink_id: str
    job_id: str
    checkpoint_id: int | None
    files: tuple[IcebergDataFile, ...]

    @property
    def commit_id(self) -> str:
        """A stable id of this exact set of files (snapshot property ``sinkv2.commit-id``).

        File names are unique (they carry the writer's attempt token), so two
        committables with the same id describe the same data.
        """
        digest = hashlib.sha256()
        for path in sorted(file.path for file in self.files):
            digest.update(path.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:32]

    @property
    def record_count(self) -> int:
        """Rows over all files."""
        return sum(file.record_count for file in self.files)


def write_result_serializer() -> AttrsMsgpackSerializer[IcebergWriteResult]:
    """Version 1 of the write-result serializer."""
    return AttrsMsgpackSerializer(IcebergWriteResult, version=1)


def committable_serializer() -> AttrsMsgpackSerializer[IcebergCommittable]:
    """Version 1 of the committable serializer."""
    return AttrsMsgpackSerializer(IcebergCommittable, version=1)


@attrs.frozen
class AggregateWriteResults:
    """The pre-commit aggregation: all write results of one checkpoint -> one committable.

    A picklable callable for ``aggregate_committables``.
    """

    sink_id: str

    def __call__(self, results: Sequence[IcebergWriteResult]) -> IcebergCommittable:
        """One committable holding every file of ``results``."""
        checkpoints = {result.checkpoint_id for result in results}
        if len(checkpoints) > 1:
            raise ValueError(
                f"write results of one aggregation carry checkpoint ids "
                f"{sorted(map(str, checkpoints))}; the pre-commit topology must group by checkpoint"
            )
        return IcebergCommittable(
            sink_id=self.sink_id,
            job_id=",".join(sorted({result.job_id for result in results})),
            checkpoint_id=next(iter(checkpoints), None),
            files=tuple(file for result in results for file in result.files),
        )
