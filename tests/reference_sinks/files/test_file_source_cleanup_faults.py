"""FileSource's clean-up never loses a file: archive name collisions, an archive above the
source or on another filesystem or mount, a repeated report (no Spark).

Each test failed before its fix.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from reference_sinks.files import FileSource
from sinkv2.errors import SinkConfigurationError
from sinkv2.testing import LocalSourceEngine
from tests.reference_sinks.files.file_source_data import (
    read_all,
    rows,
    touch_old,
    write_parquet,
)


def test_archiving_never_replaces_a_file_already_in_the_archive(tmp_path: Path):
    base, archive = tmp_path / "in", tmp_path / "done"
    write_parquet(archive / "k=1" / "a.snappy.parquet", rows(100, 2))  # archived before
    path = write_parquet(base / "k=1" / "a.snappy.parquet", rows(0, 3))
    touch_old(path, 60)  # stable at the first listing
    source = FileSource(base).monitor_continuously(1, clean_source="archive", archive_dir=archive)
    engine = LocalSourceEngine(source, 1)
    try:
        engine.run(until=lambda e: len(e.committed) >= 3 and not path.exists(), checkpoint_every=3)
        after = engine.checkpoint()
        assert sorted(p.name for p in (archive / "k=1").iterdir()) == [
            "a-1.snappy.parquet",
            "a.snappy.parquet",
        ]
        assert read_all(FileSource(archive / "k=1" / "a.snappy.parquet")) == rows(100, 2)
        assert read_all(FileSource(archive / "k=1" / "a-1.snappy.parquet")) == rows(0, 3)
    finally:
        engine.close()
    # A restart whose checkpoint still waits for the file repeats the report: nothing moves.
    restored = LocalSourceEngine(source, 1, checkpoint=after)
    try:
        split_ids = [str(path)]
        restored.enumerator.notify_splits_finished(1, split_ids)
        restored.enumerator.notify_splits_finished(2, split_ids)
        assert len(list((archive / "k=1").iterdir())) == 2
    finally:
        restored.close()


def test_an_archive_dir_above_the_source_path_is_refused(tmp_path: Path):
    """Archiving ``/d/in`` to ``/d``: ``/d/in/in/x`` would go to ``/d/in/x``, read again."""
    write_parquet(tmp_path / "in" / "in" / "x.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="holds path"):
        FileSource(tmp_path / "in").monitor_continuously(
            1, clean_source="archive", archive_dir=tmp_path
        )


def test_an_archive_dir_on_another_filesystem_is_refused(tmp_path: Path):
    """The clean-up moves files within the source's filesystem; another one is named."""
    write_parquet(tmp_path / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="is on the 'mock' filesystem"):
        FileSource(tmp_path).monitor_continuously(
            1, clean_source="archive", archive_dir="mock:///done"
        )


@pytest.mark.parametrize("archive_dir", ["", "  ", 5])
def test_a_bad_archive_dir_is_named(tmp_path: Path, archive_dir: Any):
    write_parquet(tmp_path / "in" / "a.parquet", rows(0, 1))
    with pytest.raises(SinkConfigurationError, match="archive_dir must be a non-empty str"):
        FileSource(tmp_path / "in").monitor_continuously(
            1, clean_source="archive", archive_dir=archive_dir
        )


def test_an_archive_on_another_mount_is_copied_then_the_file_deleted(tmp_path: Path):
    """A rename cannot cross devices (EXDEV): the clean-up copies, renames the copy, deletes."""
    shm = Path("/dev/shm")
    # Never skipped: on a machine without a tmpfs /dev/shm this fails and says why.
    needs = "/dev/shm on another device than the temporary directory (a tmpfs, as on CI)"
    assert shm.is_dir(), needs
    assert shm.stat().st_dev != tmp_path.stat().st_dev, needs
    path = write_parquet(tmp_path / "in" / "k=1" / "a.parquet", rows(0, 3))
    touch_old(path, 60)
    with tempfile.TemporaryDirectory(dir=shm) as archive:
        # the hidden copy of an earlier run killed mid-copy: removed by this run's copy
        (Path(archive) / "k=1").mkdir()
        (Path(archive) / "k=1" / f".a.parquet.{'a' * 32}.tmp").write_bytes(b"PAR1 half")
        source = FileSource(tmp_path / "in").monitor_continuously(
            1, clean_source="archive", archive_dir=archive
        )
        engine = LocalSourceEngine(source, 1)
        try:
            engine.run(
                until=lambda e: len(e.committed) >= 3 and not path.exists(), checkpoint_every=3
            )
        finally:
            engine.close()
        assert [p.name for p in Path(archive).rglob("*")] == ["k=1", "a.parquet"]
        assert read_all(FileSource(Path(archive) / "k=1" / "a.parquet")) == rows(0, 3)


def test_a_single_file_source_archives_the_file_under_its_name(tmp_path: Path):
    path = write_parquet(tmp_path / "in" / "a.parquet", rows(0, 3))
    touch_old(path, 60)
    archive = tmp_path / "done"
    source = FileSource(path).monitor_continuously(1, clean_source="archive", archive_dir=archive)
    engine = LocalSourceEngine(source, 1)
    try:
        engine.run(until=lambda e: len(e.committed) >= 3 and not path.exists(), checkpoint_every=3)
    finally:
        engine.close()
    assert [p.name for p in archive.iterdir()] == ["a.parquet"]
