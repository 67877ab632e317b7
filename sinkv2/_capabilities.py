"""Find out which Sink V2 mixins a sink implements, and refuse half-implemented ones.

The runtime calls `inspect_sink` before any job starts, so a sink that claims a
mixin but lacks one of its methods (or spells it the Java way) fails at once with a
message that names the method to define, not halfway through a job.
"""

from __future__ import annotations

import inspect
from typing import Final, final

import attrs

from sinkv2._committer import Committer
from sinkv2._delivery import DeliveryGuarantee
from sinkv2._extensions import (
    ArrowSinkWriter,
    SupportsAbort,
    SupportsAttemptCleanup,
    SupportsCommittedCheckpoints,
)
from sinkv2._native import SupportsNativeFileWrite
from sinkv2._serializer_check import serializer_problem
from sinkv2._sink import (
    Sink,
    SupportsCommitter,
    SupportsPostCommitTopology,
    SupportsPreCommitTopology,
    SupportsPreWriteTopology,
    SupportsWriterState,
    WithCompatibleState,
)
from sinkv2._text import describe
from sinkv2._writer import CommittingSinkWriter, SinkWriter, StatefulSinkWriter
from sinkv2.errors import SinkDefinitionError

__all__ = ["SinkCapabilities", "inspect_sink"]

_MISSING: Final = object()


@attrs.frozen
class _Interface:
    name: str
    protocol: type
    methods: tuple[str, ...]
    signatures: tuple[str, ...]


def _interface(protocol: type, *methods: str) -> _Interface:
    signatures = tuple(
        f"{name}{inspect.signature(getattr(protocol, name))}".replace("'", "") for name in methods
    )
    return _Interface(protocol.__name__, protocol, methods, signatures)


_SINK = _interface(Sink, "create_writer")
_COMMITTER_METHODS = ("create_committer", "get_committable_serializer")
_MIXINS: Final = (
    _interface(SupportsCommitter, *_COMMITTER_METHODS),
    _interface(SupportsWriterState, "restore_writer", "get_writer_state_serializer"),
    _interface(WithCompatibleState, "get_compatible_writer_state_names"),
    _interface(SupportsPreWriteTopology, "add_pre_write_topology"),
    _interface(
        SupportsPreCommitTopology,
        "add_pre_commit_topology",
        "get_write_result_serializer",
        *_COMMITTER_METHODS,
    ),
    _interface(SupportsPostCommitTopology, "add_post_commit_topology", *_COMMITTER_METHODS),
    _interface(SupportsAttemptCleanup, "clean_up_attempts"),
    _interface(SupportsAbort, "abort"),
    _interface(
        SupportsCommittedCheckpoints, "is_checkpoint_committed", "mark_checkpoint_committed"
    ),
    _interface(SupportsNativeFileWrite, "plan_native_file_write", "native_file_committables"),
)
_WRITER = _interface(SinkWriter, "write", "flush", "close")
_COMMITTING_WRITER = _interface(CommittingSinkWriter, "prepare_commit")
_STATEFUL_WRITER = _interface(StatefulSinkWriter, "snapshot_state")
_COMMITTER = _interface(Committer, "commit", "close")
_ARROW_WRITER = _interface(ArrowSinkWriter, "write_arrow_batch")

# The empty declarations on the interfaces themselves: inheriting one of these is
# not implementing it.
_DECLARATIONS: Final = frozenset(
    id(interface.protocol.__dict__[method])
    for interface in (
        _SINK,
        *_MIXINS,
        _WRITER,
        _COMMITTING_WRITER,
        _STATEFUL_WRITER,
        _COMMITTER,
        _ARROW_WRITER,
    )
    for method in interface.methods
    if method in interface.protocol.__dict__
)


def _java_name(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _find(obj: object, name: str) -> tuple[bool, str | None]:
    """Whether ``obj`` implements method ``name``, and if not, why not."""
    static = inspect.getattr_static(obj, name, _MISSING)
    if static is not _MISSING and id(static) not in _DECLARATIONS:
        if not callable(getattr(obj, name)):
            return False, f"{name} is {describe(getattr(obj, name))}, not a method"
        return True, None
    why = (
        f"{name}() is missing"
        if static is _MISSING
        else f"{name}() is only inherited from the interface's empty declaration"
    )
    java = _java_name(name)
    if java != name and inspect.getattr_static(obj, java, _MISSING) is not _MISSING:
        why = (
            f"{name}() is missing, but {java}() is defined: sinkv2 uses snake_case "
            f"names; rename {java} to {name}"
        )
    return False, why


def _mentions(obj: object, interface: _Interface) -> bool:
    if interface.protocol in type(obj).__mro__:
        return True
    own = interface.methods[: len(interface.methods) - _inherited_count(interface)]
    return any(
        inspect.getattr_static(obj, candidate, _MISSING) is not _MISSING
        for method in own
        for candidate in (method, _java_name(method))
    )


def _inherited_count(interface: _Interface) -> int:
    if interface.protocol in (SupportsPreCommitTopology, SupportsPostCommitTopology):
        return len(_COMMITTER_METHODS)
    return 0


def _problems(obj: object, interface: _Interface) -> list[str]:
    problems = []
    for method, signature in zip(interface.methods, interface.signatures, strict=True):
        ok, why = _find(obj, method)
        if not ok:
            problems.append(f"{why}; define {signature}")
    return problems


def _raise_if(obj: object, role: str, problems: dict[str, list[str]]) -> None:
    problems = {name: found for name, found in problems.items() if found}
    if not problems:
        return
    lines = [f"{type(obj).__qualname__} is a {role} that does not implement what it claims:"]
    for interface, found in problems.items():
        lines.extend(f"  - {interface}: {problem}" for problem in found)
    raise SinkDefinitionError("\n".join(lines))


@final
@attrs.frozen
class SinkCapabilities:
    """Which Sink V2 mixins a sink implements; made by `inspect_sink`.

    Attributes:
        sink_type: The sink's class name.
        committer: `SupportsCommitter` (directly or through a topology mixin).
        writer_state: `SupportsWriterState`.
        compatible_state: `WithCompatibleState`.
        pre_write_topology: `SupportsPreWriteTopology`.
        pre_commit_topology: `SupportsPreCommitTopology`.
        post_commit_topology: `SupportsPostCommitTopology`.
        attempt_cleanup: `SupportsAttemptCleanup` (sinkv2 extension).
        abort: `SupportsAbort` (sinkv2 extension).
        committed_checkpoints: `SupportsCommittedCheckpoints` (sinkv2 extension).
        native_file_write: `SupportsNativeFileWrite` (sinkv2 extension).
    """

    sink_type: str
    committer: bool = False
    writer_state: bool = False
    compatible_state: bool = False
    pre_write_topology: bool = False
    pre_commit_topology: bool = False
    post_commit_topology: bool = False
    attempt_cleanup: bool = False
    abort: bool = False
    committed_checkpoints: bool = False
    native_file_write: bool = False

    @property
    def delivery_guarantee(self) -> DeliveryGuarantee:
        """The strongest guarantee the sink's shape allows (Flink's rules): an upper bound.

        With a committer, exactly-once is possible (if the committer is idempotent
        and writers stage output invisibly); without one, at-least-once at best.
        The mixins cannot show whether the committer is idempotent or the writers
        stage invisibly: `guarantee_text` says so, and `sinkv2.testing` checks it.
        """
        return DeliveryGuarantee.EXACTLY_ONCE if self.committer else DeliveryGuarantee.AT_LEAST_ONCE

    @property
    def guarantee_text(self) -> str:
        """What the mixins allow, for people: never more than the shape shows.

        ``"exactly-once capable - verify with sinkv2.testing"`` with a committer, else
        ``"at-least-once at best (no committer) - verify with sinkv2.testing"``.
        """
        if self.committer:
            return "exactly-once capable - verify with sinkv2.testing"
        return "at-least-once at best (no committer) - verify with sinkv2.testing"

    @property
    def mixins(self) -> tuple[str, ...]:
        """The names of the mixins implemented, in pipeline order."""
        flags = (
            (self.pre_write_topology, "SupportsPreWriteTopology"),
            (self.writer_state, "SupportsWriterState"),
            (self.compatible_state, "WithCompatibleState"),
            (self.pre_commit_topology, "SupportsPreCommitTopology"),
            (self.committer, "SupportsCommitter"),
            (self.post_commit_topology, "SupportsPostCommitTopology"),
            (self.attempt_cleanup, "SupportsAttemptCleanup"),
            (self.abort, "SupportsAbort"),
            (self.committed_checkpoints, "SupportsCommittedCheckpoints"),
            (self.native_file_write, "SupportsNativeFileWrite"),
        )
        return tuple(name for flag, name in flags if flag)

    def check_writer(self, writer: object) -> None:
        """Raise `SinkDefinitionError` unless ``writer`` fits the sink's mixins.

        A committing sink needs a `CommittingSinkWriter`, a stateful one a
        `StatefulSinkWriter`. The runtime calls this on each writer it creates.
        """
        problems = {"SinkWriter": _problems(writer, _WRITER)}
        if self.committer:
            problems["CommittingSinkWriter (the sink implements SupportsCommitter)"] = _problems(
                writer, _COMMITTING_WRITER
            )
        if self.writer_state:
            problems["StatefulSinkWriter (the sink implements SupportsWriterState)"] = _problems(
                writer, _STATEFUL_WRITER
            )
        _raise_if(writer, f"writer of {self.sink_type}", problems)

    @staticmethod
    def is_arrow_writer(writer: object) -> bool:
        """Whether ``writer`` takes Arrow batches (`ArrowSinkWriter`, sinkv2 extension)."""
        return _find(writer, "write_arrow_batch")[0]

    def check_committer(self, committer: object) -> None:
        """Raise `SinkDefinitionError` unless ``committer`` has ``commit`` and ``close``."""
        _raise_if(
            committer,
            f"committer of {self.sink_type}",
            {"Committer": _problems(committer, _COMMITTER)},
        )

    def __str__(self) -> str:
        return " + ".join((f"{self.sink_type}: Sink", *self.mixins))


_SERIALIZER_GETTERS: Final = (
    ("committer", "get_committable_serializer", "AttrsMsgpackSerializer(MyCommittable)"),
    ("writer_state", "get_writer_state_serializer", "AttrsMsgpackSerializer(MyWriterState)"),
    ("pre_commit_topology", "get_write_result_serializer", "AttrsMsgpackSerializer(MyWriteResult)"),
)


def inspect_sink(sink: object) -> SinkCapabilities:
    """Report which Sink V2 mixins ``sink`` implements, after checking it implements them fully.

    A mixin counts as claimed when the sink's class subclasses it or defines any of
    its own methods (in snake_case or Flink's camelCase). A claimed mixin must have
    every method defined; serializer getters must return serializers. Nothing of
    the sink is changed; the serializer getters are called once.

    Returns:
        The sink's capabilities.

    Raises:
        SinkDefinitionError: Something claimed is not implemented. The message lists
            every problem with the method to define, and says when a Java name such as
            ``createCommitter`` was found instead of ``create_committer``.
    """
    if isinstance(sink, type):
        raise SinkDefinitionError(
            f"expected a sink instance, got the class {sink.__qualname__}; "
            f"pass {sink.__qualname__}(...) instead"
        )
    problems: dict[str, list[str]] = {"Sink": _problems(sink, _SINK)}
    claimed: dict[type, bool] = {}
    for mixin in _MIXINS:
        claimed[mixin.protocol] = _mentions(sink, mixin)
        if claimed[mixin.protocol]:
            problems[mixin.name] = _problems(sink, mixin)
    if claimed[WithCompatibleState] and not claimed[SupportsWriterState]:
        problems["WithCompatibleState"].append(
            "it only makes sense with SupportsWriterState; implement restore_writer() and "
            "get_writer_state_serializer() too"
        )
    committing = (
        claimed[SupportsCommitter]
        or claimed[SupportsPreCommitTopology]
        or claimed[SupportsPostCommitTopology]
    )
    if claimed[SupportsCommittedCheckpoints] and not committing:
        problems["SupportsCommittedCheckpoints"].append(
            "it marks checkpoints its committer committed, so it needs SupportsCommitter; "
            "implement create_committer() and get_committable_serializer() too"
        )
    if claimed[SupportsNativeFileWrite] and not committing:
        problems["SupportsNativeFileWrite"].append(
            "it turns natively written files into committables, so it needs SupportsCommitter; "
            "implement create_committer() and get_committable_serializer() too"
        )
    if claimed[SupportsNativeFileWrite] and not claimed[SupportsAttemptCleanup]:
        problems["SupportsNativeFileWrite"].append(
            "each native write stages a directory named by its attempt token, which only "
            "SupportsAttemptCleanup removes (also after a failed write or a dead driver); "
            "implement clean_up_attempts() too"
        )
    _raise_if(sink, "sink", problems)

    capabilities = SinkCapabilities(
        sink_type=type(sink).__qualname__,
        committer=committing,
        writer_state=claimed[SupportsWriterState],
        compatible_state=claimed[WithCompatibleState],
        pre_write_topology=claimed[SupportsPreWriteTopology],
        pre_commit_topology=claimed[SupportsPreCommitTopology],
        post_commit_topology=claimed[SupportsPostCommitTopology],
        attempt_cleanup=claimed[SupportsAttemptCleanup],
        abort=claimed[SupportsAbort],
        committed_checkpoints=claimed[SupportsCommittedCheckpoints],
        native_file_write=claimed[SupportsNativeFileWrite],
    )
    serializer_problems = [
        problem
        for flag, getter, example in _SERIALIZER_GETTERS
        if getattr(capabilities, flag)
        and (problem := serializer_problem(sink, getter, example)) is not None
    ]
    _raise_if(sink, "sink", {"serializers": serializer_problems})
    return capabilities
