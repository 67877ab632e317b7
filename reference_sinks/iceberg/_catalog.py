"""Catalogs that survive cloudpickle: a catalog's class, name and properties.

Spark ships the sink to executors with cloudpickle; a live catalog holds database
connections and cannot travel. The sink keeps a `CatalogSpec` instead and every
writer and committer builds its own catalog from it.

Building one is not free: pyiceberg's SQL catalog makes an engine and checks its
tables each time (about 3 ms on SQLite, a dozen times per run). A process keeps
pyiceberg's own SQLite file catalogs it built and hands them out again while the
catalog file is the same file; other catalogs (REST, a SQL server, Glue, subclasses) are
built fresh each time, so a restarted server or an expired token never sticks.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from sinkv2.errors import SinkConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

__all__ = ["CatalogSpec", "local_catalog"]

_SQLITE_FILE: Final = "sqlite:///"
_BUILT: dict[tuple[Any, ...], tuple[tuple[int, int], Catalog]] = {}
"""SQLite file catalogs this process built: key -> (the file's device and inode, catalog)."""
_BUILT_LOCK: Final = threading.Lock()


def _sqlite_file(properties: dict[str, str]) -> tuple[int, int] | None:
    """The device and inode of a SQLite catalog's file, or ``None`` if it is not one."""
    uri = properties.get("uri", "")
    if not uri.startswith(_SQLITE_FILE) or ":memory:" in uri or "?" in uri:
        return None
    try:
        found = os.stat(uri.removeprefix(_SQLITE_FILE))
    except OSError:
        return None  # not created yet: the catalog creates it, the next load keeps it
    return found.st_dev, found.st_ino


@attrs.frozen
class CatalogSpec:
    """How to build a catalog again: ``catalog_class(name, **properties)``."""

    catalog_class: type[Catalog]
    name: str
    properties: dict[str, str]

    @classmethod
    def of(cls, catalog: object) -> CatalogSpec:
        """The spec of a live pyiceberg catalog.

        Raises:
            SinkConfigurationError: ``catalog`` is not a pyiceberg ``Catalog``, or is an
                in-memory catalog that a second process could not open.
        """
        from pyiceberg.catalog import Catalog  # noqa: PLC0415  # pyiceberg is an optional extra

        if not isinstance(catalog, Catalog):
            raise SinkConfigurationError(
                f"IcebergSink needs a pyiceberg Catalog (got {catalog!r} of type "
                f"{type(catalog).__name__}); pass e.g. pyiceberg.catalog.load_catalog(...) or "
                "reference_sinks.iceberg.local_catalog(warehouse_dir)"
            )
        properties = {str(k): str(v) for k, v in catalog.properties.items()}
        uri = properties.get("uri", "")
        if uri.startswith("sqlite") and ":memory:" in uri:
            raise SinkConfigurationError(
                f"catalog {catalog.name!r} is an in-memory SQLite catalog ({uri}); Spark "
                "executors cannot open it. Use a file: local_catalog(warehouse_dir)"
            )
        return cls(type(catalog), catalog.name, properties)

    def load(self) -> Catalog:
        """A catalog with the same configuration (a SQLite file catalog built before, if any)."""
        from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415  # optional extra

        identity = _sqlite_file(self.properties)
        if identity is None or self.catalog_class is not SqlCatalog:
            return self.catalog_class(self.name, **self.properties)
        key = (os.getpid(), self.catalog_class, self.name, tuple(sorted(self.properties.items())))
        with _BUILT_LOCK:
            built = _BUILT.get(key)
            if built is not None and built[0] == identity:
                return built[1]
            catalog = self.catalog_class(self.name, **self.properties)
            _BUILT[key] = (identity, catalog)
            return catalog

    def load_table(self, identifier: str) -> Table:
        """The table ``identifier`` at its current version, from a new catalog."""
        return self.load().load_table(identifier)


def local_catalog(warehouse: str | os.PathLike[str], *, name: str = "sinkv2") -> SqlCatalog:
    """Pyiceberg's SQL catalog on SQLite, with a local file warehouse (the embedded default).

    The catalog database is ``<warehouse>/catalog.sqlite``; tables live under
    ``<warehouse>/<namespace>.db/<table>``. Every process that opens the same
    ``warehouse`` sees the same catalog.

    Args:
        warehouse: A local directory; created if missing.
        name: The catalog's name.
    """
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415  # pyiceberg is an optional extra

    root = Path(warehouse).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        name,
        uri=f"sqlite:///{root / 'catalog.sqlite'}",
        warehouse=root.as_uri(),
    )
