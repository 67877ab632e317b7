"""FileSink without Spark: options, paths, writers, committer, cleanup, state, compaction.

Everything runs on real files in a temporary directory.
"""

import json
from pathlib import Path

import cloudpickle
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from reference_sinks.files import (
    HIVE_DEFAULT_PARTITION,
    CompactionPolicy,
    FileSink,
    InProgressFile,
    PendingFile,
    RollingPolicy,
    escape_path_name,
)
from reference_sinks.files._compaction import compact, plan_bins
from reference_sinks.files._paths import partition_path
from sinkv2 import SimpleVersionedSerialization, inspect_sink
from sinkv2.errors import CommitFailedError, SinkConfigurationError
from sinkv2.runtime import (
    BasicCommitterInitContext,
    BasicSinkWriterContext,
    BasicWriterInitContext,
    commit_with_retries,
)
from sinkv2.runtime.committables import COMMITTABLE_SCHEMA

GOLDEN = Path(__file__).parent / "golden"
CONTEXT = BasicSinkWriterContext()


def batch(n, start=0, keys=("a", "b", None)):
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "key": [keys[i % len(keys)] for i in ids],
            "value": [i / 2 for i in ids],
        }
    )


def write(sink, batches, *, job="job", subtask=0, attempt=0, rows=False):
    writer = sink.create_writer(
        BasicWriterInitContext(
            job_id=job, subtask_id=subtask, number_of_parallel_subtasks=4, attempt_number=attempt
        )
    )
    for b in batches:
        if rows:
            for element in b.to_pylist():
                writer.write(element, CONTEXT)
        else:
            writer.write_arrow_batch(b, CONTEXT)
    writer.flush(True)
    pending = writer.prepare_commit()
    writer.close()
    return pending


def commit(sink, pending):
    return commit_with_retries(sink.create_committer(BasicCommitterInitContext()), pending)


def read(base, fmt="parquet"):
    if fmt == "jsonl":
        rows = []
        for path in sorted(Path(base).rglob("*.jsonl")):
            if "_staging" in path.parts:
                continue
            partition = {
                part.split("=")[0]: part.split("=")[1] for part in path.relative_to(base).parts[:-1]
            }
            rows += [{**json.loads(line), **partition} for line in path.read_text().splitlines()]
        return sorted(rows, key=lambda r: r["id"])
    table = ds.dataset(str(base), format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def visible_files(base):
    return sorted(
        p.relative_to(base).as_posix()
        for p in Path(base).rglob("*")
        if p.is_file() and "_staging" not in p.parts
    )


# --- options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_path": ""}, r"base_path must be a non-empty str .*got '' of type str"),
        ({"base_path": 3}, r"base_path must be .*got 3 of type int"),
        (
            {"format": "csv"},
            r"format must be one of \['parquet', 'jsonl'\] \(got 'csv' of type str\); pass",
        ),
        (
            {"partition_by": "key"},
            r"partition_by must be a list or tuple .*got 'key' of type str.*partition_by=\['col'\]",
        ),
        ({"partition_by": ["a", "a"]}, r"names a column twice"),
        ({"partition_by": ["a/b"]}, r"without '/'"),
        (
            {"rolling_policy": {"max_rows": 3}},
            r"rolling_policy must be a RollingPolicy .*of type dict",
        ),
        (
            {"rolling_policy": RollingPolicy(roll_on_checkpoint=False)},
            r"needs RollingPolicy\(roll_on_checkpoint=True\) \(got False\).*tune file sizes",
        ),
        ({"compaction": 5}, r"compaction must be a CompactionPolicy or None \(got 5 of type int\)"),
        ({"filesystem": "local"}, r"filesystem must be a pyarrow.fs.FileSystem or None"),
        ({"base_path": "nosuchscheme://x/y"}, r"is not a path or URI pyarrow.fs understands"),
    ],
)
def test_bad_options_are_configuration_errors_with_what_to_do(tmp_path, kwargs, message):
    arguments = {"base_path": str(tmp_path), **kwargs}
    with pytest.raises(SinkConfigurationError, match=message):
        FileSink(**arguments)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RollingPolicy(max_rows=0),
            r"RollingPolicy.max_rows must be a positive int or None \(got 0 of type int\); "
            r"set it to at least 1",
        ),
        (
            lambda: RollingPolicy(max_bytes=True),
            r"max_bytes must be a positive int or None \(got True of type bool\)",
        ),
        (
            lambda: RollingPolicy(roll_on_checkpoint=1),
            r"roll_on_checkpoint must be a bool \(got 1 of type int\)",
        ),
        (
            lambda: CompactionPolicy(min_files=1),
            r"CompactionPolicy.min_files must be an int >= 2 \(got 1 of type int\); "
            r"set it to at least 2",
        ),
        (lambda: CompactionPolicy(target_bytes=0), r"target_bytes must be an int >= 1"),
    ],
)
def test_bad_policies_are_configuration_errors(make, message):
    with pytest.raises(SinkConfigurationError, match=message):
        make()


def test_the_sink_implements_what_it_claims_and_survives_cloudpickle(tmp_path):
    sink = FileSink(tmp_path, "jsonl", partition_by=["key"], compaction=CompactionPolicy())
    capabilities = inspect_sink(sink)
    assert capabilities.committer
    assert capabilities.writer_state
    assert capabilities.pre_commit_topology
    assert capabilities.attempt_cleanup
    assert capabilities.abort
    clone = cloudpickle.loads(cloudpickle.dumps(sink))
    assert repr(clone) == repr(sink)
    assert type(clone) is type(sink)
    assert isinstance(sink, FileSink)
    plain = FileSink(tmp_path)
    assert not inspect_sink(plain).pre_commit_topology  # no pre-commit Spark job without it
    assert inspect_sink(plain).committer
    assert type(cloudpickle.loads(cloudpickle.dumps(plain))) is FileSink
    assert clone.resolve()[1] == str(tmp_path)


def test_relative_paths_and_file_uris_resolve_to_the_same_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert FileSink("out").resolve()[1] == str(tmp_path / "out")
    assert FileSink(f"file://{tmp_path}/out").resolve()[1] == str(tmp_path / "out")
    fs, path = FileSink(
        "sub/out", filesystem=pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    ).resolve()
    assert isinstance(fs, pafs.SubTreeFileSystem)
    assert path == "sub/out"


# --- partition paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "directory"),
    [
        ("plain", "plain"),
        ("a/b", "a%2Fb"),
        ("x=1", "x%3D1"),
        ("50%", "50%25"),
        ("a:b?c#d", "a%3Ab%3Fc%23d"),
        ("{[^]}*'\"\\", "%7B%5B%5E%5D}%2A%27%22%5C"),  # Spark leaves } alone
        ("tab\there", "tab%09here"),
        ("space ok é", "space ok é"),
        ("", HIVE_DEFAULT_PARTITION),
        (None, HIVE_DEFAULT_PARTITION),
        (7, "7"),
        (True, "true"),
    ],
)
def test_partition_values_are_escaped_as_spark_escapes_them(value, directory):
    assert partition_path(["k"], [value]) == f"k={directory}"


def test_partition_paths_nest_in_partition_by_order():
    assert partition_path(["a", "b=c"], ["x", None]) == f"a=x/b%3Dc={HIVE_DEFAULT_PARTITION}"
    assert escape_path_name("%") == "%25"


def test_float_partition_values_are_refused_with_what_to_do(tmp_path):
    sink = FileSink(tmp_path, partition_by=["value"])
    with pytest.raises(TypeError, match="partition by string, integer, boolean or date"):
        write(sink, [batch(3)])


def test_unknown_partition_column_names_the_columns(tmp_path):
    sink = FileSink(tmp_path, partition_by=["nope"])
    with pytest.raises(
        SinkConfigurationError,
        match=r"partition_by names \['nope'\] but the data has columns \['id', 'key', 'value'\]",
    ):
        write(sink, [batch(3)])


# --- writers ------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [False, True], ids=["arrow-path", "row-path"])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_partitioned_output_reads_back_exactly_and_staging_is_hidden(tmp_path, fmt, rows):
    sink = FileSink(tmp_path, fmt, partition_by=["key"])
    pending = write(sink, [batch(500), batch(500, 500)], rows=rows)
    assert {p.partition for p in pending} == {"key=a", "key=b", f"key={HIVE_DEFAULT_PARTITION}"}
    assert visible_files(tmp_path) == []  # nothing visible before commit
    commit(sink, pending)
    back = read(tmp_path, fmt)
    expected = sorted(batch(1000).to_pylist(), key=lambda r: r["id"])
    if fmt == "jsonl":  # partition values come back as directory strings
        expected = [
            {**r, "key": r["key"] if r["key"] is not None else HIVE_DEFAULT_PARTITION}
            for r in expected
        ]
    assert back == expected
    for path in visible_files(tmp_path):  # partition columns are not stored in files
        if fmt == "parquet":
            assert pq.read_schema(tmp_path / path).names == ["id", "value"]


def test_files_roll_by_rows(tmp_path):
    sink = FileSink(tmp_path, rolling_policy=RollingPolicy(max_rows=300))
    pending = write(sink, [batch(100, i * 100) for i in range(10)])
    assert [p.rows for p in pending] == [300, 300, 300, 100]
    assert [pq.read_metadata(p.staged).num_rows for p in pending] == [300, 300, 300, 100]
    assert all(p.bytes == Path(p.staged).stat().st_size for p in pending)
    assert len({p.final for p in pending}) == 4


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("partition_by", [(), ("key",)], ids=["unpartitioned", "partitioned"])
@pytest.mark.parametrize(
    "sizes", [[49], [50], [51], [1, 49, 1], [49, 2, 50], [99, 101], [150, 149, 151]]
)
@pytest.mark.parametrize("rows", [False, True], ids=["arrow", "rows"])
def test_no_file_has_more_than_max_rows_whatever_the_batch_sizes(
    tmp_path, fmt, partition_by, sizes, rows
):
    sink = FileSink(
        tmp_path, fmt, partition_by=partition_by, rolling_policy=RollingPolicy(max_rows=50)
    )
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    batches = [batch(n, start) for n, start in zip(sizes, starts, strict=True)]
    pending = write(sink, batches, rows=rows)
    by_partition = {}
    for file in pending:
        by_partition.setdefault(file.partition, []).append(file.rows)
    for counts in by_partition.values():
        assert max(counts) <= 50
        assert all(count == 50 for count in counts[:-1])  # full files until the last
    commit(sink, pending)
    assert [r["id"] for r in read(tmp_path, fmt)] == list(range(sum(sizes)))
    for path in Path(tmp_path).rglob(f"*.{fmt}"):
        if fmt == "jsonl":
            assert len(path.read_text().splitlines()) <= 50
        else:
            assert pq.read_metadata(path).num_rows <= 50


def test_files_roll_by_bytes(tmp_path):
    sink = FileSink(tmp_path, "jsonl", rolling_policy=RollingPolicy(max_rows=None, max_bytes=2000))
    pending = write(sink, [batch(50, i * 50) for i in range(10)])
    assert len(pending) > 3
    assert sum(p.rows for p in pending) == 500
    assert all(p.bytes < 2000 + 50 * 60 for p in pending)  # at most one batch past the limit


def test_roll_on_checkpoint_hands_over_everything_written_so_far(tmp_path):
    sink = FileSink(tmp_path)
    writer = sink.create_writer(BasicWriterInitContext(job_id="j"))
    writer.write_arrow_batch(batch(10), CONTEXT)
    writer.flush(False)
    first = writer.prepare_commit()
    assert writer.snapshot_state(1) == []
    writer.write_arrow_batch(batch(10, 10), CONTEXT)
    writer.flush(True)
    second = writer.prepare_commit()
    writer.close()
    assert [p.rows for p in first] == [10]
    assert [p.rows for p in second] == [10]
    assert first[0].final != second[0].final


def test_restore_discards_leftover_in_progress_files_and_starts_fresh(tmp_path):
    sink = FileSink(tmp_path, "jsonl")
    leftover = tmp_path / "_staging" / "old-00000-1" / "part-old-00000-1-00000.jsonl"
    leftover.parent.mkdir(parents=True)
    leftover.write_text('{"id": 99}\n')
    state = [InProgressFile(staged=str(leftover), partition="", rows=1, bytes=11)]
    writer = sink.restore_writer(BasicWriterInitContext(job_id="new"), state)
    assert not leftover.exists()
    writer.write_arrow_batch(batch(3), CONTEXT)
    writer.flush(True)
    pending = writer.prepare_commit()
    assert writer.snapshot_state(2) == []
    writer.close()
    commit(sink, pending)
    assert [r["id"] for r in read(tmp_path, "jsonl")] == [0, 1, 2]
    sink.restore_writer(BasicWriterInitContext(job_id="again"), state).close()  # idempotent


def test_row_path_with_a_changing_schema_rolls_to_a_new_file(tmp_path):
    sink = FileSink(tmp_path)
    writer = sink.create_writer(BasicWriterInitContext(job_id="j"))
    writer.write_arrow_batch(pa.RecordBatch.from_pydict({"id": [1], "v": ["x"]}), CONTEXT)
    writer.write_arrow_batch(pa.RecordBatch.from_pydict({"id": [2], "v": [[1, 2]]}), CONTEXT)
    writer.flush(True)
    pending = writer.prepare_commit()
    writer.close()
    assert [p.rows for p in pending] == [1, 1]


# --- committer ----------------------------------------------------------------------------


def test_commit_is_an_idempotent_rename(tmp_path):
    sink = FileSink(tmp_path, partition_by=["key"])
    pending = write(sink, [batch(30)])
    first = commit(sink, pending)
    assert len(first.committed) == 3
    files = visible_files(tmp_path)
    again = commit(sink, pending)
    assert len(again.already_committed) == 3
    assert not again.committed
    assert visible_files(tmp_path) == files
    assert len(read(tmp_path)) == 30


def test_a_crash_between_copy_and_delete_is_completed_by_the_next_commit(tmp_path):
    # On object stores a move is copy-then-delete; a crash can leave both copies.
    sink = FileSink(tmp_path)
    [file] = write(sink, [batch(30)])
    Path(file.final).write_bytes(Path(file.staged).read_bytes())
    outcome = commit(sink, [file])
    assert len(outcome.committed) == 1
    assert not Path(file.staged).exists()
    assert len(read(tmp_path)) == 30


def test_a_committable_whose_files_are_both_gone_fails_naming_both_paths(tmp_path):
    sink = FileSink(tmp_path)
    [file] = write(sink, [batch(3)])
    Path(file.staged).unlink()
    with pytest.raises(CommitFailedError) as caught:
        commit(sink, [file])
    text = f"{caught.value} {caught.value.__cause__}"
    assert file.staged in text
    assert file.final in text


def test_final_names_are_unique_per_attempt(tmp_path):
    sink = FileSink(tmp_path)
    a = write(sink, [batch(3)], attempt=0)
    b = write(sink, [batch(3)], attempt=1)
    assert {p.final for p in a}.isdisjoint({p.final for p in b})


# --- cleanup and abort --------------------------------------------------------------------


def test_clean_up_attempts_removes_only_this_jobs_losers(tmp_path):
    sink = FileSink(tmp_path)
    winner = write(sink, [batch(3)], job="job1", attempt=0)
    loser = write(sink, [batch(3)], job="job1", attempt=1)
    other_job = write(sink, [batch(3)], job="job2", attempt=0)
    committed = write(sink, [batch(3)], job="job1", subtask=2)
    commit(sink, committed)
    winner_token = Path(winner[0].staged).parent.name
    sink.clean_up_attempts("job1", [winner_token])
    assert Path(winner[0].staged).exists()
    assert not Path(loser[0].staged).parent.exists()
    assert Path(other_job[0].staged).exists()
    assert Path(committed[0].final).exists()
    sink.clean_up_attempts("job1", [winner_token])  # idempotent
    sink.clean_up_attempts("job1", [])
    assert not Path(winner[0].staged).exists()
    assert Path(committed[0].final).exists()


def test_abort_removes_staged_files_but_never_committed_ones(tmp_path):
    sink = FileSink(tmp_path)
    done = write(sink, [batch(3)], subtask=0)
    commit(sink, done)
    staged = write(sink, [batch(3)], subtask=1)
    sink.abort([*done, *staged])
    sink.abort([*done, *staged])  # idempotent
    assert all(Path(p.final).exists() for p in done)
    assert not any(Path(p.staged).exists() for p in staged)
    assert not any(Path(p.final).exists() for p in staged)


# --- serializers --------------------------------------------------------------------------

STATE_V1 = InProgressFile(
    staged="/data/out/_staging/job-00001-7/part-job-00001-7-00003.jsonl",
    partition="day=2024-01-02/key=a%2Fb",
    rows=12345,
    bytes=987654,
)
PENDING_V1 = PendingFile(
    staged="/data/out/_staging/job-00001-7/part-job-00001-7-00003.parquet",
    final="/data/out/day=2024-01-02/part-job-00001-7-00003.parquet",
    partition="day=2024-01-02",
    rows=42,
    bytes=4096,
    sources=("/a", "/b"),
)


@pytest.mark.parametrize(
    ("getter", "value", "golden"),
    [
        ("get_writer_state_serializer", STATE_V1, "in_progress_file_v1.bin"),
        ("get_committable_serializer", PENDING_V1, "pending_file_v1.bin"),
        ("get_write_result_serializer", PENDING_V1, "pending_file_v1.bin"),
    ],
)
def test_serializers_read_their_version_1_golden_bytes(tmp_path, getter, value, golden):
    sink = FileSink(tmp_path, compaction=CompactionPolicy())
    serializer = getattr(sink, getter)()
    data = (GOLDEN / golden).read_bytes()
    assert SimpleVersionedSerialization.read_version_and_deserialize(serializer, data) == value
    assert serializer.get_version() == 1
    assert SimpleVersionedSerialization.write_version_and_serialize(serializer, value) == data


def test_serializers_round_trip_what_writers_produce(tmp_path):
    sink = FileSink(tmp_path, "jsonl", partition_by=["key"])
    writer = sink.create_writer(BasicWriterInitContext(job_id="j"))
    writer.write_arrow_batch(batch(20), CONTEXT)
    writer.flush(True)
    pending = writer.prepare_commit()
    writer.close()
    states = [
        InProgressFile(staged=p.staged, partition=p.partition, rows=p.rows, bytes=p.bytes)
        for p in pending
    ]
    for serializer, values in [
        (sink.get_writer_state_serializer(), states),
        (sink.get_committable_serializer(), pending),
    ]:
        assert len(values) == 3
        for value in values:
            assert serializer.deserialize(1, serializer.serialize(value)) == value


# --- compaction ---------------------------------------------------------------------------


def pending_file(partition, size, name="f"):
    return PendingFile(
        staged=f"/s/{name}", final=f"/f/{name}", partition=partition, rows=1, bytes=size
    )


def test_compaction_plan_merges_only_small_files_of_one_partition():
    policy = CompactionPolicy(min_files=3, target_bytes=100)
    files = [
        pending_file("a", 10),
        pending_file("a", 200),
        pending_file("a", 30),
        pending_file("b", 10),
        pending_file("b", 10),  # too few in b
        pending_file("a", 50),
        pending_file("a", 40),
    ]
    groups = plan_bins(files, policy)
    assert sorted(map(sorted, groups)) == [[0, 2, 5], [1], [3], [4], [6]]
    assert sorted(i for g in groups for i in g) == list(range(7))


def stream_table(files):
    serializer = FileSink("/tmp").get_committable_serializer()
    return pa.Table.from_pylist(
        [
            {
                "checkpoint_id": 5,
                "subtask_id": i,
                "number_of_subtasks": len(files),
                "serializer_version": 1,
                "payload": SimpleVersionedSerialization.write_version_and_serialize(serializer, f),
                "lineage": [f"{i}:0"],
            }
            for i, f in enumerate(files)
        ],
        schema=COMMITTABLE_SCHEMA,
    )


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_compaction_commits_one_merged_file_per_partition_and_is_idempotent(tmp_path, fmt):
    sink = FileSink(
        tmp_path,
        fmt,
        partition_by=["key"],
        compaction=CompactionPolicy(min_files=2, target_bytes=10**6),
    )
    pending = [
        p for subtask in range(4) for p in write(sink, [batch(25, subtask * 25)], subtask=subtask)
    ]
    assert len(pending) == 12
    fs = pafs.LocalFileSystem()
    compacted = compact(stream_table(pending), fs=fs, file_format=fmt, policy=sink.compaction)
    again = compact(
        stream_table(pending), fs=fs, file_format=fmt, policy=sink.compaction
    )  # a retried task
    assert compacted.column("payload").to_pylist() == again.column("payload").to_pylist()
    lineage = sorted(item for items in compacted.column("lineage").to_pylist() for item in items)
    assert lineage == sorted(f"{i}:0" for i in range(12))
    serializer = sink.get_committable_serializer()
    merged = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, p)
        for p in compacted.column("payload").to_pylist()
    ]
    assert len(merged) == 3
    assert all(len(m.sources) == 4 for m in merged)
    assert sum(m.rows for m in merged) == 100
    commit(sink, merged)
    assert len(commit(sink, merged).already_committed) == 3  # replay
    assert len(visible_files(tmp_path)) == 3
    assert not any(Path(p.staged).exists() for p in pending)  # sources removed
    back = read(tmp_path, fmt)
    assert [r["id"] for r in back] == list(range(100))


def compacted_files(sink, tmp_path, *, job="job"):
    """Twelve staged files of ``job`` (4 subtasks x 3 keys), then compacted: (sources, merged)."""
    pending = [
        p
        for subtask in range(4)
        for p in write(sink, [batch(25, subtask * 25)], job=job, subtask=subtask)
    ]
    fs = pafs.LocalFileSystem()
    table = compact(stream_table(pending), fs=fs, file_format=sink.format, policy=sink.compaction)
    serializer = sink.get_committable_serializer()
    merged = [
        SimpleVersionedSerialization.read_version_and_deserialize(serializer, p)
        for p in table.column("payload").to_pylist()
    ]
    return pending, merged


def staging_entries(base):
    """Everything under ``<base>/_staging/``, files and directories, relative to it."""
    return sorted(p.relative_to(base / "_staging").as_posix() for p in base.rglob("_staging/**/*"))


COMPACTING = {
    "partition_by": ["key"],
    "compaction": CompactionPolicy(min_files=2, target_bytes=10**6),
}


def test_a_retried_merge_removes_the_temporaries_a_killed_attempt_left(tmp_path):
    sink = FileSink(tmp_path, **COMPACTING)
    pending, merged = compacted_files(sink, tmp_path)
    victim = Path(merged[0].staged)
    victim.unlink()  # the attempt died before its rename: only temporaries are left
    stale = [victim.parent / f".{victim.name}.{n:032x}.tmp" for n in range(2)]
    for path in stale:
        path.write_bytes(b"half a parquet file")
    other = victim.parent / f".part-someone-else-compact-0.parquet.{0:032x}.tmp"
    other.write_bytes(b"another merge, in flight")
    fs = pafs.LocalFileSystem()
    again = compact(stream_table(pending), fs=fs, file_format="parquet", policy=sink.compaction)
    assert len(again) == len(merged)
    assert victim.exists()
    assert not any(path.exists() for path in stale)
    assert other.exists()  # not a temporary of this merge
    assert [p.name for p in victim.parent.glob(f".{victim.name}.*")] == []


def test_after_commit_and_cleanup_the_job_leaves_nothing_in_staging(tmp_path):
    sink = FileSink(tmp_path, **COMPACTING)
    pending, merged = compacted_files(sink, tmp_path)
    killed = Path(merged[0].staged).parent / f".{Path(merged[0].staged).name}.{0:032x}.tmp"
    killed.write_bytes(b"a killed merge attempt's temporary")
    commit(sink, merged)
    assert not any(Path(p.staged).exists() for p in pending)  # sources removed on commit
    sink.clean_up_attempts("job", ())  # the runtime, once the epoch is committed
    assert staging_entries(tmp_path) == []  # no file, no empty token directory
    assert [r["id"] for r in read(tmp_path)] == list(range(100))


def test_abort_of_merged_committables_removes_merged_files_and_their_sources(tmp_path):
    sink = FileSink(tmp_path, **COMPACTING)
    pending, merged = compacted_files(sink, tmp_path)
    sink.abort(merged)
    sink.abort(merged)  # idempotent
    assert not any(Path(m.staged).exists() for m in merged)
    assert not any(Path(p.staged).exists() for p in pending)
    assert visible_files(tmp_path) == []
    sink.clean_up_attempts("job", ())
    assert staging_entries(tmp_path) == []


def test_the_public_surface_is_exactly_all():
    from reference_sinks import files

    public = {name for name in vars(files) if not name.startswith("_")}
    assert public == set(files.__all__)
    assert files.__all__ == sorted(files.__all__, key=lambda n: (not n.isupper(), n))


def test_batches_with_the_same_columns_in_another_order_share_a_file(tmp_path):
    sink = FileSink(tmp_path)
    writer = sink.create_writer(BasicWriterInitContext(job_id="j"))
    writer.write_arrow_batch(pa.RecordBatch.from_pydict({"id": [1], "v": [0.5]}), CONTEXT)
    writer.write_arrow_batch(pa.RecordBatch.from_pydict({"v": [1.5], "id": [2]}), CONTEXT)
    writer.flush(True)
    [file] = writer.prepare_commit()
    writer.close()
    assert pq.read_table(file.staged).to_pylist() == [{"id": 1, "v": 0.5}, {"id": 2, "v": 1.5}]


def test_json_lines_map_keys_of_any_type_are_text():
    """An array or struct key is its compact JSON; a float key NaN as Spark spells it."""
    from reference_sinks.files._json_lines import JsonLinesEncoder

    batch = pa.record_batch(
        {
            "a": pa.array([[([1, 2], 1)]], pa.map_(pa.list_(pa.int32()), pa.int32())),
            "s": pa.array(
                [[({"x": 1, "d": b"\x01"}, 1)]],
                pa.map_(pa.struct([("x", pa.int32()), ("d", pa.binary())]), pa.int32()),
            ),
            "f": pa.array([[(float("nan"), 1)]], pa.map_(pa.float64(), pa.int32())),
        }
    )
    line = JsonLinesEncoder(batch.schema).encode(batch)
    assert json.loads(line) == {"a": {"[1,2]": 1}, "s": {'{"x":1,"d":"AQ=="}': 1}, "f": {"NaN": 1}}


# --- checkpoint markers -------------------------------------------------------------------


def test_checkpoint_marks_are_per_sink_id_hidden_from_readers_and_idempotent(tmp_path):
    sink = FileSink(tmp_path / "out")
    assert inspect_sink(sink).committed_checkpoints
    assert not sink.is_checkpoint_committed("orders", 1)
    sink.mark_checkpoint_committed("orders", 1)
    sink.mark_checkpoint_committed("orders", 1)  # idempotent
    assert sink.is_checkpoint_committed("orders", 1)
    assert not sink.is_checkpoint_committed("orders", 2)
    assert not sink.is_checkpoint_committed("clicks", 1)
    # Another FileSink object on the same directory (another driver) sees the mark.
    assert FileSink(str(tmp_path / "out"), "jsonl").is_checkpoint_committed("orders", 1)
    [mark] = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert mark.relative_to(tmp_path / "out").parts[0] == "_sinkv2"  # readers skip it
    assert json.loads(mark.read_text()) == {"sink_id": "orders", "checkpoint_id": 1}
