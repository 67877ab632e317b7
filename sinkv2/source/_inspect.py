"""Refuse half-implemented sources, enumerators and readers before any record moves.

`inspect_source` checks a source; engines call `check_enumerator` and
`check_reader` on what the source creates. Each names every missing method with
its signature, and says when a Java name such as ``pollNext`` was found instead.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from sinkv2._serializer_check import serializer_problem
from sinkv2._text import describe
from sinkv2.source._boundedness import Boundedness
from sinkv2.source._enumerator import SplitEnumerator
from sinkv2.source._errors import SourceDefinitionError
from sinkv2.source._reader import SourceReader
from sinkv2.source._source import Source

if TYPE_CHECKING:
    import pyarrow

__all__ = ["SourceCapabilities", "check_enumerator", "check_reader", "inspect_source"]

_ABSENT: Final = object()

_REQUIRED: Final[dict[type, tuple[str, ...]]] = {
    Source: (
        "get_boundedness",
        "create_enumerator",
        "restore_enumerator",
        "create_reader",
        "get_split_serializer",
        "get_enumerator_checkpoint_serializer",
        "get_produced_type",
    ),
    SplitEnumerator: (
        "start",
        "handle_split_request",
        "add_splits_back",
        "add_reader",
        "snapshot_state",
        "close",
    ),
    SourceReader: (
        "start",
        "poll_next",
        "is_available",
        "add_splits",
        "notify_no_more_splits",
        "snapshot_state",
        "close",
    ),
}
# Inheriting one of the interfaces' own empty declarations is not implementing it.
_EMPTY: Final = frozenset(
    id(protocol.__dict__[name]) for protocol, names in _REQUIRED.items() for name in names
)


def _camel(name: str) -> str:
    first, *others = name.split("_")
    return first + "".join(word.title() for word in others)


def _missing(obj: object, protocol: type) -> list[str]:
    """One line per required method of ``protocol`` that ``obj`` lacks."""
    lines = []
    for name in _REQUIRED[protocol]:
        found = inspect.getattr_static(obj, name, _ABSENT)
        if found is not _ABSENT and id(found) not in _EMPTY:
            if callable(getattr(obj, name)):
                continue
            lines.append(f"{name} is {describe(getattr(obj, name))}, not a method")
            continue
        declared = f"{name}{inspect.signature(getattr(protocol, name))}".replace("'", "")
        java = _camel(name)
        if java != name and inspect.getattr_static(obj, java, _ABSENT) is not _ABSENT:
            lines.append(f"{java}() is defined but sinkv2 uses snake_case: rename it to {name}")
        elif found is _ABSENT:
            lines.append(f"{name}() is missing; define {declared}")
        else:
            lines.append(f"{name}() is only the interface's empty declaration; define {declared}")
    return lines


def _refuse(obj: object, role: str, problems: list[str]) -> None:
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise SourceDefinitionError(
            f"{type(obj).__qualname__} is not a complete FLIP-27 {role}:\n{listed}"
        )


def check_enumerator(enumerator: object) -> None:
    """Raise `SourceDefinitionError` unless ``enumerator`` has every `SplitEnumerator` method."""
    _refuse(enumerator, "SplitEnumerator", _missing(enumerator, SplitEnumerator))


def check_reader(reader: object) -> None:
    """Raise `SourceDefinitionError` unless ``reader`` has every `SourceReader` method."""
    _refuse(reader, "SourceReader", _missing(reader, SourceReader))


@final
@attrs.frozen
class SourceCapabilities:
    """What `inspect_source` found out about a source.

    Attributes:
        source_type: The source's class name.
        boundedness: What `Source.get_boundedness` returned.
        produced_type: What `Source.get_produced_type` returned.
    """

    source_type: str
    boundedness: Boundedness
    produced_type: Any = attrs.field(repr=lambda schema: str(getattr(schema, "names", schema)))

    @property
    def bounded(self) -> bool:
        """Whether the source's data ends."""
        return self.boundedness is Boundedness.BOUNDED


def inspect_source(source: object) -> SourceCapabilities:
    """Check that ``source`` implements FLIP-27's `Source`, and say what it is.

    Calls the serializer getters, `get_boundedness` and `get_produced_type` once;
    changes nothing.

    Raises:
        SourceDefinitionError: A method is missing or spelled the Java way, a
            serializer getter returns no serializer, `get_boundedness` returns no
            `Boundedness`, or `get_produced_type` returns no ``pyarrow.Schema``. The
            message lists every problem.
    """
    if isinstance(source, type):
        raise SourceDefinitionError(
            f"expected a source instance, got the class {source.__qualname__}; "
            f"pass {source.__qualname__}(...) instead"
        )
    problems = _missing(source, Source)
    _refuse(source, "Source", problems)
    for getter in ("get_split_serializer", "get_enumerator_checkpoint_serializer"):
        problem = serializer_problem(source, getter, "AttrsMsgpackSerializer(MySplit)")
        if problem is not None:
            problems.append(problem)
    boundedness = source.get_boundedness()  # type: ignore[attr-defined]  # checked above
    if not isinstance(boundedness, Boundedness):
        problems.append(
            f"get_boundedness() must return Boundedness.BOUNDED or "
            f"Boundedness.CONTINUOUS_UNBOUNDED (got {describe(boundedness)})"
        )
    schema = source.get_produced_type()  # type: ignore[attr-defined]  # checked above
    if not _is_schema(schema):
        problems.append(
            f"get_produced_type() must return a pyarrow.Schema (got {describe(schema)}); "
            "e.g. pyarrow.schema([('id', pyarrow.int64())])"
        )
    _refuse(source, "Source", problems)
    return SourceCapabilities(type(source).__qualname__, boundedness, schema)


def _is_schema(value: object) -> bool:
    """Whether ``value`` is a pyarrow schema, without importing pyarrow if it is not loaded."""
    module = type(value).__module__
    if not module.startswith("pyarrow"):
        return False
    import pyarrow  # noqa: PLC0415  # only once a pyarrow object is seen

    schema: type[pyarrow.Schema] = pyarrow.Schema
    return isinstance(value, schema)
