"""Compaction of a checkpoint's small files, before they are committed (Flink's way).

Why before the commit: merging files that are already visible cannot be made
invisible to readers - renaming the merged file in and deleting its sources are
two steps, and a reader listing the directory between them sees every row twice
(or, in the other order, not at all). Flink's ``FileSink`` compaction therefore
runs *between the writers and the committer*: the compactor merges pending
(still hidden) files and only the merged file is committed. FileSink does the
same in its pre-commit topology: small staged files of one partition are merged
into a new staged file, and the committable for the merged file lists the staged
sources, which the committer deletes once the merged file is in place. Sources
were never visible, so no row is ever seen twice.

Replays are safe: the merged file's name is a hash of its sources, written to a
temporary name and renamed, so a retried compaction task rewrites the same file
(removing the temporaries a killed attempt left); a re-commit of the same
committable finds the merged file in place. Everything compaction writes lives
under ``_staging/<attempt token>/`` of one of the job's attempts, so what a task
killed mid-merge leaves is removed by ``clean_up_attempts`` of the job.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reference_sinks.files._committables import PendingFile, pending_file_serializer
from reference_sinks.files._committer import exists, remove_quietly
from reference_sinks.files._config import CompactionPolicy
from sinkv2 import SimpleVersionedSerialization

__all__ = ["compact", "plan_bins"]


def plan_bins(files: Sequence[PendingFile], policy: CompactionPolicy) -> list[list[int]]:
    """Which files to merge: groups of indices into ``files``, each one output file.

    Files of one partition smaller than ``target_bytes`` are small; if a partition
    has at least ``min_files`` small files, they are packed in order into bins of
    at most ``target_bytes`` (a bin holds at least one file). Every other file, and
    every bin of one, is its own group: committed as written.
    """
    by_partition: dict[str, list[int]] = {}
    for index, file in enumerate(files):
        by_partition.setdefault(file.partition, []).append(index)
    groups: list[list[int]] = []
    for indices in by_partition.values():
        small = [i for i in indices if files[i].bytes < policy.target_bytes]
        if len(small) < policy.min_files:
            groups.extend([i] for i in indices)
            continue
        groups.extend([i] for i in indices if files[i].bytes >= policy.target_bytes)
        current: list[int] = []
        size = 0
        for i in small:
            if current and size + files[i].bytes > policy.target_bytes:
                groups.append(current)
                current, size = [], 0
            current.append(i)
            size += files[i].bytes
        if current:
            groups.append(current)
    return groups


def _remove_stale_temporaries(fs: pafs.FileSystem, staging_dir: str, merged_name: str) -> None:
    """Delete ``.<merged_name>.<uuid>.tmp`` files an earlier, killed attempt left.

    Only temporaries of this merged file are touched; they are never committed. A
    concurrent attempt (a speculative copy) whose temporary vanishes fails its
    ``move`` and, unless the merged file is in place by then, is retried by Spark.
    """
    prefix = f".{merged_name}."
    selector = pafs.FileSelector(staging_dir, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.base_name.startswith(prefix) and info.base_name.endswith(".tmp"):
            remove_quietly(fs, info.path)


def _merge(fs: pafs.FileSystem, file_format: str, sources: Sequence[PendingFile]) -> PendingFile:
    """Merge ``sources`` (staged, one partition) into one new staged file; idempotent.

    The merged file is written to ``.<name>.<uuid>.tmp`` in the first source's
    staging directory and renamed to ``<name>``. Both live under
    ``_staging/<attempt token>/`` of an attempt of this job, so
    ``clean_up_attempts(job_id, ...)`` removes them with the directory; a retried
    merge also removes the temporaries its killed predecessors left first.

    Raises:
        FileNotFoundError: A source is gone (its rows are lost), or the temporary
            vanished and no other attempt put the merged file in place.
    """
    digest = hashlib.sha256("\n".join(sorted(s.staged for s in sources)).encode()).hexdigest()[:20]
    first = sources[0]
    staging_dir = first.staged.rsplit("/", 1)[0]
    token = staging_dir.rsplit("/", 1)[1]
    merged_name = f"part-{token}-compact-{digest}.{file_format}"
    staged = f"{staging_dir}/{merged_name}"
    final = f"{first.final.rsplit('/', 1)[0]}/{merged_name}"
    rows = sum(s.rows for s in sources)
    if not exists(fs, staged):
        _remove_stale_temporaries(fs, staging_dir, merged_name)
        temporary = f"{staging_dir}/.{merged_name}.{uuid.uuid4().hex}.tmp"
        if file_format == "parquet":
            table = pa.concat_tables(
                [pq.read_table(s.staged, filesystem=fs) for s in sources],
                promote_options="permissive",
            )
            pq.write_table(table, temporary, filesystem=fs)
        else:
            with fs.open_output_stream(temporary) as out:
                for s in sources:
                    with fs.open_input_stream(s.staged) as source:
                        out.write(source.read())
        try:
            fs.move(temporary, staged)
        except FileNotFoundError:
            if not exists(fs, staged):  # another attempt removed it and did not finish
                raise
    size = int(fs.get_file_info(staged).size)
    return PendingFile(
        staged=staged,
        final=final,
        partition=first.partition,
        rows=rows,
        bytes=size,
        sources=tuple(s.staged for s in sources),
    )


def compact(
    table: pa.Table,
    *,
    fs: pafs.FileSystem,
    file_format: str,
    policy: CompactionPolicy,
) -> pa.Table:
    """One checkpoint's committable rows with small files merged (a pre-commit step).

    ``table`` holds the rows of one checkpoint in the committable stream's schema.
    Every output row's lineage is the union of the lineages of the files it holds,
    so the runtime can check that nothing was lost or duplicated.
    """
    serializer = pending_file_serializer()
    columns = table.to_pydict()
    files = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, payload)
        for payload in columns["payload"]
    ]
    out: dict[str, list[object]] = {name: [] for name in table.schema.names}
    for group in plan_bins(files, policy):
        if len(group) == 1:
            for name, values in out.items():
                values.append(columns[name][group[0]])
            continue
        merged = _merge(fs, file_format, [files[i] for i in group])
        out["checkpoint_id"].append(columns["checkpoint_id"][group[0]])
        out["subtask_id"].append(0)
        out["number_of_subtasks"].append(1)
        out["serializer_version"].append(serializer.get_version())
        out["payload"].append(
            SimpleVersionedSerialization.write_version_and_serialize(serializer, merged)
        )
        out["lineage"].append([item for i in group for item in columns["lineage"][i]])
    return pa.Table.from_pydict(out, schema=table.schema)
