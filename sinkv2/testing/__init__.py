"""The contract-test kit: check that a sink keeps the Sink V2 contract and its guarantee.

Engine-free and usable without pytest::

    from sinkv2 import DeliveryGuarantee
    from sinkv2.testing import SinkUnderTest, check_sink

    check_sink(
        lambda: SinkUnderTest(MySink(fresh_dir()), read_back=..., close=...),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=st.fixed_dictionaries({"id": st.integers()}),
    )

`check_sink` runs three stages: serializers, the lifecycle state machine, and
`check_streaming` - streams of checkpoints through the real streaming runtime
(`sinkv2.runtime.CheckpointRunner`), with restarts, rescales and crashes. Each is
callable on its own. `SinkContractTests` gives the same checks as a pytest test
class; the pytest plugin (registered as ``sinkv2``) adds ``--sinkv2-examples``. The
Spark-level scenario runner is ``sinkv2_spark.testing.check_sink_on_spark``; it, and
any engine's kit, compares what a destination shows with `Multiset` and honours the
examples setting through `resolve_examples`.

Sources have their own checks: `check_source` runs Flink's ``SourceTestSuiteBase``
cases and random schedules of checkpoints, reader failures and rescaling restores
on `LocalSourceEngine` (one enumerator, N readers, in this process), and
`check_source_reader` runs Flink's ``SourceReaderTestBase`` against a reader alone.

The kit crashes a job between the calls it makes into a sink, never inside one:
mark the places inside your own multi-step calls (a commit that renames files one
by one) with `crash_point`, and the kit may crash there too. Outside the kit
`crash_point` does nothing, so it can stay in production code.

Needs hypothesis and cloudpickle: ``pip install 'sinkv2[test]'`` (`crash_point`
needs neither). Names load on first use, so importing this package (or its pytest
plugin) loads neither, and changes nothing outside it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from sinkv2._public import publish_object as _publish_object
from sinkv2._text import missing_extra

if TYPE_CHECKING:
    from sinkv2.testing._check import check_sink, check_streaming
    from sinkv2.testing._crash_points import crash_point
    from sinkv2.testing._multiset import Multiset
    from sinkv2.testing._settings import resolve_examples
    from sinkv2.testing._source_check import check_source
    from sinkv2.testing._source_engine import (
        EmittedRecord,
        EngineStep,
        LocalSourceEngine,
        SourceCheckpoint,
    )
    from sinkv2.testing._source_reader_check import check_source_reader
    from sinkv2.testing._suite import SinkContractTests
    from sinkv2.testing._sut import SinkUnderTest

__all__ = [
    "EmittedRecord",
    "EngineStep",
    "LocalSourceEngine",
    "Multiset",
    "SinkContractTests",
    "SinkUnderTest",
    "SourceCheckpoint",
    "check_sink",
    "check_source",
    "check_source_reader",
    "check_streaming",
    "crash_point",
    "resolve_examples",
]

_HOMES: Final = {
    "EmittedRecord": "sinkv2.testing._source_engine",
    "EngineStep": "sinkv2.testing._source_engine",
    "LocalSourceEngine": "sinkv2.testing._source_engine",
    "SourceCheckpoint": "sinkv2.testing._source_engine",
    "check_source": "sinkv2.testing._source_check",
    "check_source_reader": "sinkv2.testing._source_reader_check",
    "Multiset": "sinkv2.testing._multiset",
    "SinkContractTests": "sinkv2.testing._suite",
    "SinkUnderTest": "sinkv2.testing._sut",
    "check_sink": "sinkv2.testing._check",
    "check_streaming": "sinkv2.testing._check",
    "crash_point": "sinkv2.testing._crash_points",
    "resolve_examples": "sinkv2.testing._settings",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sinkv2.testing' has no attribute {name!r}")
    try:
        module = importlib.import_module(home)
    except ImportError as error:
        raise missing_extra(f"sinkv2.testing.{name}", error.name or str(error), "test") from error
    value = getattr(module, name)
    _publish_object(value, __name__)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
