"""Catalogs that survive cloudpickle: a catalog's class, name and properties.

Spark ships the sink to executors with cloudpickle; a live catalog holds database
connections and cannot travel. The sink keeps a `CatalogSpec` instead and every
writer and committer builds its own catalog from it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from sinkv2 import SinkConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

__all__ = ["CatalogSpec", "local_catalog"]


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
        """A new catalog with the same configuration."""
        return self.catalog_class(self.name, **self.properties)

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
