"""`sinkv2.source`: the FLIP-27 names, `inspect_source`, and the checks engines run."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from flip27_fixtures import ListEnumerator, ListSource

import sinkv2.source
import sinkv2.source.reader
from sinkv2.errors import SinkV2Error
from sinkv2.source import (
    Boundedness,
    ReaderInfo,
    SourceContractError,
    SourceDefinitionError,
    SourceReader,
    SourceReaderError,
    SplitsAssignment,
    check_enumerator,
    check_reader,
    inspect_source,
)

FLINK_NAMES = {
    "Boundedness",
    "InputStatus",
    "ReaderInfo",
    "ReaderOutput",
    "Source",
    "SourceEvent",
    "SourceOutput",
    "SourceReader",
    "SourceReaderContext",
    "SourceSplit",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitsAssignment",
}
EXTENSIONS = {
    "NativeRead",
    "NativeReadUnavailable",
    "SourceCapabilities",
    "SourceContractError",
    "SourceDefinitionError",
    "SourceReaderError",
    "SplitCut",
    "SupportsEndPositions",
    "SupportsFinishedSplits",
    "SupportsNativeRead",
    "SupportsUncountedSplits",
    "check_enumerator",
    "check_reader",
    "inspect_source",
    "source_id_of",
}
READER_FRAMEWORK = {
    "DEFAULT_ELEMENT_QUEUE_CAPACITY",
    "ElementQueue",
    "RecordEmitter",
    "RecordsBySplits",
    "RecordsWithSplitIds",
    "SingleThreadFetcherManager",
    "SingleThreadMultiplexSourceReaderBase",
    "SourceReaderBase",
    "SplitReader",
    "SplitsAddition",
    "SplitsChange",
    "SplitsRemoval",
}


def test_the_public_names_are_flinks_plus_the_documented_extensions():
    assert set(sinkv2.source.__all__) == FLINK_NAMES | EXTENSIONS
    assert set(sinkv2.source.reader.__all__) == READER_FRAMEWORK
    for module in (sinkv2.source, sinkv2.source.reader):
        assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_importing_the_source_packages_loads_neither_pyspark_nor_pyarrow():
    code = (
        "import sys, sinkv2.source, sinkv2.source.reader, sinkv2.source.lib; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_source_errors_derive_from_the_root_and_mix_in_the_builtin_they_mean():
    assert issubclass(SourceDefinitionError, SinkV2Error)
    assert issubclass(SourceDefinitionError, TypeError)
    assert issubclass(SourceContractError, RuntimeError)
    assert issubclass(SourceReaderError, SinkV2Error)
    error = SourceContractError("x", method="assign_splits", split_id="s1")
    assert (error.method, error.split_id) == ("assign_splits", "s1")


def test_inspect_source_reports_boundedness_and_schema():
    capabilities = inspect_source(ListSource())
    assert capabilities.bounded
    assert capabilities.boundedness is Boundedness.BOUNDED
    assert capabilities.produced_type.names == ["value"]
    assert capabilities.source_type == "ListSource"


def test_a_half_implemented_source_is_refused_naming_each_method():
    class NoEnumerator:
        def get_boundedness(self) -> Boundedness:
            return Boundedness.BOUNDED

    with pytest.raises(SourceDefinitionError) as info:
        inspect_source(NoEnumerator())
    message = str(info.value)
    for method in ("create_enumerator", "restore_enumerator", "create_reader", "get_produced_type"):
        assert f"{method}() is missing; define {method}(" in message
    assert "get_boundedness" not in message


class JavaSpelling:
    """A source whose author kept one Java name."""

    get_boundedness = ListSource.get_boundedness
    create_enumerator = ListSource.create_enumerator
    restore_enumerator = ListSource.restore_enumerator
    create_reader = ListSource.create_reader
    get_split_serializer = ListSource.get_split_serializer
    get_enumerator_checkpoint_serializer = ListSource.get_enumerator_checkpoint_serializer
    getProducedType = ListSource.get_produced_type  # the mistake under test


def test_a_java_spelling_is_named_with_its_python_name():
    with pytest.raises(
        SourceDefinitionError,
        match=r"getProducedType\(\) is defined but sinkv2 uses snake_case: rename it to "
        "get_produced_type",
    ):
        inspect_source(JavaSpelling())


def test_a_class_instead_of_an_instance_says_so():
    with pytest.raises(
        SourceDefinitionError, match=r"got the class ListSource; pass ListSource\(...\)"
    ):
        inspect_source(ListSource)


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("get_split_serializer", object, "not a SimpleVersionedSerializer"),
        ("get_enumerator_checkpoint_serializer", lambda: 1 / 0, "raised ZeroDivisionError"),
        ("get_boundedness", lambda: "BOUNDED", "must return Boundedness.BOUNDED"),
        ("get_produced_type", lambda: {"value": "int"}, "must return a pyarrow.Schema"),
    ],
)
def test_bad_return_values_are_named(attribute: str, value: Any, message: str):
    source = ListSource()
    setattr(source, attribute, value)
    with pytest.raises(SourceDefinitionError, match=message):
        inspect_source(source)


def test_engines_check_what_the_source_creates():
    class NoSnapshot:
        start = poll_next = is_available = add_splits = notify_no_more_splits = close = lambda *a: (
            None
        )

    with pytest.raises(
        SourceDefinitionError,
        match=r"snapshot_state\(\) is missing; define snapshot_state\(self, checkpoint_id: int\)",
    ):
        check_reader(NoSnapshot())
    with pytest.raises(SourceDefinitionError, match="add_splits_back"):
        check_enumerator(object())
    check_enumerator(ListEnumerator(None, []))  # type: ignore[arg-type]


def test_an_inherited_empty_declaration_is_not_an_implementation():
    class Bare(SourceReader[Any, Any]):
        def start(self) -> None: ...

    with pytest.raises(
        SourceDefinitionError, match=r"poll_next\(\) is only the interface's empty declaration"
    ):
        check_reader(Bare())


def test_splits_assignment_freezes_its_lists():
    assignment = SplitsAssignment({0: ["a"], 1: ("b", "c")})
    assert assignment.get_assignment() == {0: ("a",), 1: ("b", "c")}
    assert ReaderInfo(3).location is None


def test_the_produced_type_is_kept_as_given():
    assert inspect_source(ListSource()).produced_type == pa.schema([("value", pa.int64())])
