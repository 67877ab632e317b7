"""The sink behind a sink id: loaded for its serializer and its abort hook.

The store keeps committables as opaque bytes framed with their serializer's
version; only the sink's committable serializer reads them. The operator names the
sink with ``--sink module:factory``; failing that, a streaming sink id's writer
states name the sink class that wrote them (its state name), and a class that can
be made without arguments is used.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Collection
from typing import Any, final

import attrs

from sinkv2._capabilities import SinkCapabilities, inspect_sink
from sinkv2._cli._errors import CliError
from sinkv2._serialization import SimpleVersionedSerialization, SimpleVersionedSerializer
from sinkv2._text import short_repr
from sinkv2.errors import SerializationError, SinkV2Error
from sinkv2.runtime import EpochRecord, WriterStates

__all__ = [
    "LoadedSink",
    "committable_sizes",
    "decode_committables",
    "describe_committable",
    "load_sink",
    "recorded_class",
    "sink_from_class_path",
]


@attrs.frozen
class LoadedSink:
    """A sink and where it came from (``--sink`` or the recorded state name)."""

    sink: Any
    source: str
    capabilities: SinkCapabilities


def load_sink(spec: str) -> LoadedSink:
    """The sink ``module:attribute`` names: a sink, or a class or function making one.

    The working directory is importable, as with ``python -m``.

    Raises:
        CliError: The spec is malformed, the module or attribute is missing, the
            factory fails, or what it made is not a complete sink.
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise CliError(
            f"--sink must be 'module:factory' (got {spec!r}); e.g. 'jobs.orders:make_sink', "
            "where make_sink() returns the sink the job runs, configured the same way"
        )
    _cwd_importable()
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # any import failure is the operator's to fix
        raise CliError(
            f"--sink {spec!r}: cannot import {module_name!r}: {type(error).__name__}: {error}; "
            "run sinkv2 where the module is importable (the working directory is on the path)"
        ) from error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(f"--sink {spec!r}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    return _checked(_made(target, f"--sink {spec!r}"), spec)


def recorded_class(records: Collection[EpochRecord]) -> str | None:
    """The sink class the newest recorded writer states name (streaming), or ``None``."""
    for record in sorted(records, key=lambda r: r.epoch, reverse=True):
        try:
            states = WriterStates.decode(record.writer_states, what="")
        except SerializationError:
            continue
        if states is not None:
            return states.state_name
    return None


def sink_from_class_path(path: str) -> LoadedSink:
    """An instance of the class at dotted ``path``, made without arguments.

    The working directory is importable, as for `load_sink`.

    Raises:
        CliError: No module prefix of ``path`` imports to a class there, or the
            class cannot be made without arguments.
    """
    _cwd_importable()
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001  # try a shorter module path
            continue
        for part in parts[cut:]:
            target = getattr(target, part, None)
        if inspect.isclass(target):
            return _checked(_made(target, f"the recorded sink class {path!r}"), path)
        break
    raise CliError(f"the recorded sink class {path!r} cannot be imported here")


def _cwd_importable() -> None:
    """Let the working directory's modules import, as ``python -m`` does."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _made(target: Any, what: str) -> Any:
    if not (inspect.isclass(target) or inspect.isfunction(target) or inspect.ismethod(target)):
        return target
    try:
        return target()
    except Exception as error:  # reported with the hint to pass a factory
        raise CliError(
            f"{what} could not be made without arguments ({type(error).__name__}: {error}); "
            "pass --sink module:factory, where factory() returns the sink configured as the "
            "job configures it"
        ) from error


def _checked(sink: Any, source: str) -> LoadedSink:
    try:
        capabilities = inspect_sink(sink)
    except SinkV2Error as error:
        raise CliError(f"{source} is not a usable sink: {error}") from error
    return LoadedSink(sink=sink, source=source, capabilities=capabilities)


@final
class _RawPayloads:
    """Reads Flink's list framing of one version, leaving each element as bytes."""

    def __init__(self, version: int) -> None:
        self._version = version

    def get_version(self) -> int:
        return self._version

    def get_supported_versions(self) -> tuple[int]:
        return (self._version,)

    def serialize(self, obj: bytes) -> bytes:
        return obj

    def deserialize(self, version: int, serialized: bytes) -> bytes:
        return serialized

    def __repr__(self) -> str:
        return "the committable list framing"


def committable_sizes(record: EpochRecord) -> list[int]:
    """The size in bytes of each committable recorded with ``record``, without the sink.

    Raises:
        CorruptDataError: The payload is not Flink's list framing.
    """
    if not record.payload:
        return []  # a sink without a committer records nothing
    raw = _RawPayloads(record.serializer_version)
    payloads = SimpleVersionedSerialization.read_version_and_deserialize_list(raw, record.payload)
    return [len(payload) for payload in payloads]


def decode_committables(loaded: LoadedSink, record: EpochRecord) -> list[Any]:
    """The committables of ``record``, read with the sink's committable serializer.

    Raises:
        SerializationError: They do not read with it (corrupt, or a version it
            does not read).
    """
    if not record.payload or not loaded.capabilities.committer:
        return []
    serializer: SimpleVersionedSerializer[Any] = loaded.sink.get_committable_serializer()
    return SimpleVersionedSerialization.read_version_and_deserialize_list(
        serializer, record.payload
    )


def describe_committable(committable: object) -> str:
    """A bounded repr of a committable, for the text output."""
    return short_repr(committable, 160)
