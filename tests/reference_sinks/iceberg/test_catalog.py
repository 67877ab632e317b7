"""CatalogSpec: catalogs rebuilt from their configuration, SQLite file catalogs kept per process."""

from __future__ import annotations

import shutil

import pyarrow as pa

from reference_sinks.iceberg import CatalogSpec, local_catalog


def test_a_sqlite_file_catalog_is_built_once_per_process(tmp_path):
    spec = CatalogSpec.of(local_catalog(tmp_path / "lake"))
    assert spec.load() is spec.load()
    other = CatalogSpec.of(local_catalog(tmp_path / "other"))
    assert other.load() is not spec.load()


def test_a_catalog_file_replaced_since_is_opened_again(tmp_path):
    """A cached engine on a removed file would write where no one reads: never reused."""
    spec = CatalogSpec.of(local_catalog(tmp_path / "lake"))
    first = spec.load()
    first.create_namespace("ns")
    first.create_table("ns.gone", schema=pa.schema([("id", pa.int64())]))
    shutil.rmtree(tmp_path / "lake")
    local_catalog(tmp_path / "lake").create_namespace("fresh")
    again = spec.load()
    assert again is not first
    assert [name for (name,) in again.list_namespaces()] == ["fresh"]


def test_catalogs_of_other_kinds_are_built_each_time(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    class Audited(SqlCatalog):
        """A subclass may keep state per instance: never shared."""

    root = tmp_path / "lake"
    root.mkdir()
    catalog = Audited("a", uri=f"sqlite:///{root / 'catalog.sqlite'}", warehouse=root.as_uri())
    spec = CatalogSpec.of(catalog)
    assert spec.load() is not spec.load()
