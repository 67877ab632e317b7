"""The ``sinkv2`` data source's options: which sink, its sink id, checkpoint id and store.

Spark hands a Python data source its ``.option(...)`` values as strings, with the
keys lower-cased. Four options are the data source's own; every other one is
passed to the sink's factory as a keyword argument (still a string):

| option | meaning |
|---|---|
| ``sink`` | a reference sink's short name (`SHORT_NAMES`) or ``"module:callable"`` |
| ``sink_id`` | required: the stable name of this sink's commit history |
| ``checkpoint_id`` | a positive integer; makes the run idempotent, as in ``apply()`` |
| ``state_store`` | a SQLite file, or a ``postgresql://`` URL; ``apply()``'s default if absent |

Everything here runs in Spark's driver-side Python planner worker, before any data
moves, and raises `SinkConfigurationError` with what was expected, what arrived
and what to do.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast, final

import attrs

from sinkv2 import END_OF_INPUT
from sinkv2.errors import SinkConfigurationError, SinkV2Error
from sinkv2.runtime import CommitStateStore, PostgresCommitStateStore, SqliteCommitStateStore
from sinkv2.text import describe
from sinkv2_spark._rules.arguments import (  # apply()'s own rules, one copy
    check_checkpoint_id,
    check_sink_id,
)

__all__ = [
    "DOOR_OPTIONS",
    "SHORT_NAMES",
    "DoorOptions",
    "check_state_store",
    "load_factory",
    "make_sink",
    "open_store",
    "parse_options",
    "required_sink_id",
    "sink_spec",
    "spelled_like",
]

SHORT_NAMES: Final[Mapping[str, str]] = {
    "files": "reference_sinks.datasource:files",
    "iceberg": "reference_sinks.datasource:iceberg",
    "postgres": "reference_sinks.datasource:postgres",
    "redis": "reference_sinks.datasource:redis",
}
"""Reference sinks by short name: ``.option("sink", "files")``, with their factories."""

DOOR_OPTIONS: Final = ("sink", "sink_id", "checkpoint_id", "state_store")
"""The options the data source reads itself; the rest go to the sink's factory."""

_POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


@final
@attrs.frozen
class DoorOptions:
    """The data source's options, checked.

    Attributes:
        sink: The sink the factory built.
        sink_id: The sink id.
        checkpoint_id: The user's checkpoint id, or ``None``.
        state_store: Where epochs are recorded.
    """

    sink: Any
    sink_id: str
    checkpoint_id: int | None
    state_store: CommitStateStore


def parse_options(options: Mapping[str, str]) -> DoorOptions:
    """Check the data source's options and build the sink.

    Raises:
        SinkConfigurationError: An option is missing or has a bad value; the sink
            cannot be imported, or its factory does not take the other options.
        SinkDefinitionError: The factory returned something that is not a sink.
    """
    spec = sink_spec(options)
    name = required_sink_id(options)
    checkpoint_id = _checkpoint_id(options.get("checkpoint_id"))
    store = open_store(options.get("state_store"))
    factory_options = {k: v for k, v in options.items() if k not in DOOR_OPTIONS}
    sink = make_sink(spec, factory_options, sink_id=name)
    return DoorOptions(sink=sink, sink_id=name, checkpoint_id=checkpoint_id, state_store=store)


def sink_spec(options: Mapping[str, str]) -> str:
    """The ``sink`` option, stripped: a short name or ``"module:callable"`` (not checked yet).

    Raises:
        SinkConfigurationError: It is missing or blank.
    """
    spec = options.get("sink")
    if spec is None or not spec.strip():
        raise SinkConfigurationError(
            "the sinkv2 data source needs the 'sink' option (got "
            f"{'none' if spec is None else describe(spec)}{spelled_like('sink', options)}): "
            "a reference sink's short name "
            f"({', '.join(sorted(SHORT_NAMES))}) or an importable factory 'module:callable', "
            "e.g. .option('sink', 'files') or .option('sink', 'my_sinks:make_sink')"
        )
    return spec.strip()


def required_sink_id(options: Mapping[str, str]) -> str:
    """The ``sink_id`` option, checked as ``apply()`` checks ``sink_id``.

    Raises:
        SinkConfigurationError: It is missing or blank.
    """
    sink_id = options.get("sink_id")
    if sink_id is None:
        raise SinkConfigurationError(
            "the sinkv2 data source needs the 'sink_id' option (got none"
            f"{spelled_like('sink_id', options)}): the stable name of this "
            "sink's commit history (which epochs are committed), e.g. "
            ".option('sink_id', 'orders-parquet'); use the same one for every run that "
            "writes to the same destination"
        )
    return check_sink_id(sink_id, None)


def spelled_like(option: str, options: Mapping[str, str]) -> str:
    """``"; 'sinkid' was given, a misspelling?"`` if an option looks like ``option``."""
    given = [name for name in options if name != option]
    close = difflib.get_close_matches(option, given, n=1, cutoff=0.75)
    return f"; {close[0]!r} was given, a misspelling?" if close else ""


def _checkpoint_id(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) < END_OF_INPUT:
        raise SinkConfigurationError(
            f"the 'checkpoint_id' option must be a positive integer below {END_OF_INPUT} (got "
            f"{value!r}); use a number that identifies this run's data, such as a "
            "batch number, or leave it out"
        )
    return check_checkpoint_id(int(text))


def open_store(location: str | None) -> CommitStateStore:
    """The commit state store the ``state_store`` option names (``apply()``'s default if none).

    Raises:
        SinkConfigurationError: The location is empty, or not a store.
    """
    if location is None:
        return SqliteCommitStateStore()
    if not location.strip():
        raise SinkConfigurationError(
            "the 'state_store' option must name a SQLite file or a postgresql:// URL (got "
            "an empty string); leave it out to use the default "
            "($SINKV2_STATE_DIR/commit_state.sqlite or ./.sinkv2/commit_state.sqlite)"
        )
    if location.startswith(_POSTGRES_SCHEMES):
        return PostgresCommitStateStore(location)
    return SqliteCommitStateStore(location)


def check_state_store(store: object) -> CommitStateStore | None:
    """``apply()``'s ``state_store=``: a store, or where one is, as the data source's option.

    A string or path names a SQLite file, or a ``postgresql://`` URL, as
    ``.option("state_store", ...)`` and ``last_result(state_store=...)`` do.

    Raises:
        SinkConfigurationError: ``store`` is none of these.
    """
    if store is None:
        return None
    if isinstance(store, str | os.PathLike) and isinstance(os.fspath(store), str):
        return open_store(os.fspath(store))
    if not callable(getattr(store, "acquire", None)):
        raise SinkConfigurationError(
            f"state_store must be a commit state store, a SQLite file or a postgresql:// URL "
            f"(got {describe(store)}); e.g. state_store='/data/orders/commit_state.sqlite' "
            "or SqliteCommitStateStore('/data/orders/commit_state.sqlite')"
        )
    return cast("CommitStateStore", store)


def load_factory(
    spec: str,
    *,
    option: str = "sink",
    short_names: Mapping[str, str] = SHORT_NAMES,
) -> Callable[..., Any]:
    """The factory ``spec`` names: a short name or ``"module:callable"``.

    ``option`` is the option that named it (``"sink"``, ``"source"``), for the
    messages; ``short_names`` the reference connectors it may name by short name.

    Raises:
        SinkConfigurationError: ``spec`` is neither, its module does not import,
            or the name is not a callable in it.
    """
    target = short_names.get(spec.lower(), spec)
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        names = ", ".join(sorted(short_names))
        known = f"a reference {option}'s short name ({names}) or " if short_names else ""
        raise SinkConfigurationError(
            f"the '{option}' option must be {known}'module:callable' (got {spec!r}); e.g. "
            f"'my_package.{option}s:make_orders_{option}'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SinkConfigurationError(
            f"the '{option}' option {spec!r} names module {module_name!r}, which does not "
            f"import in Spark's Python workers ({type(error).__name__}: {error}); install it "
            "into the workers' Python, or put its directory on their PYTHONPATH "
            "(spark.sparkContext.addPyFile, spark-submit --py-files)"
        ) from error
    found: object = module
    for part in attribute.split("."):
        found = getattr(found, part, _MISSING)
        if found is _MISSING:
            raise SinkConfigurationError(
                f"the '{option}' option {spec!r}: module {module_name!r} has no {attribute!r}; "
                f"name a function or class in it that returns the {option}"
            )
    if not callable(found):
        raise SinkConfigurationError(
            f"the '{option}' option {spec!r} names {describe(found)}, not a callable; name a "
            f"function or class that returns the {option}"
        )
    return found


_MISSING: Final = object()

_HINTS: Final = {
    "checkpointlocation": "Spark's option of df.writeStream; a batch write's re-run guard is "
    "'checkpoint_id'",
    "guarantee": "an option of df.writeStream.format('sinkv2'); a batch write gives what the "
    "sink's shape gives, see inspect_sink(sink).guarantee_text",
    "on_stage": "an option of df.writeStream.format('sinkv2'); a batch write's result is "
    "sinkv2_spark.last_result(sink_id)",
}
"""Options people pass to the wrong door, with what to use instead."""


def options_not_taken(
    spec: str,
    options: Mapping[str, str],
    signature: inspect.Signature,
    error: TypeError,
    door_options: Sequence[str],
    *,
    kind: str = "sink",
) -> str:
    """Why ``factory(**options)`` does not bind: the options it lacks or does not know.

    ``kind`` is what the factory makes (``sink`` or ``source``), for the message.
    """
    takes = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in {parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD}
    ]
    unknown = sorted(name for name in options if name not in takes)
    missing = [
        name
        for name, parameter in signature.parameters.items()
        if name in takes and name not in options and parameter.default is parameter.empty
    ]
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, [*takes, *door_options], n=1)
        cased = [taken for taken in takes if taken.lower() == name and taken != name]
        hint = (
            _HINTS.get(name)
            or (
                f"Spark lower-cases option names, so the factory's {cased[0]!r} can never "
                "be given: name the parameter in lower case"
                if cased
                else ""
            )
            or (f"did you mean {close[0]!r}?" if close else "")
        )
        named.append(f"{name!r}" + (f" ({hint})" if hint else ""))
    problems = []
    if named:
        problems.append(
            f"does not take the option{'s' if len(named) > 1 else ''} {', '.join(named)}"
        )
    if missing:
        problems.append(
            f"needs the option{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
        )
    what = " and ".join(problems) or f"does not take these options ({error})"
    return (
        f"{kind} {spec!r} {what}; its options are {takes}, and the data source's own "
        f"{list(door_options)}. Every other option goes to the {kind}'s factory as a keyword "
        "argument (Spark lower-cases option names)"
    )


def _takes_sink_id(signature: inspect.Signature) -> bool:
    parameter = signature.parameters.get("sink_id")
    return parameter is not None and parameter.kind in {
        parameter.KEYWORD_ONLY,
        parameter.POSITIONAL_OR_KEYWORD,
    }


def make_sink(
    spec: str,
    options: Mapping[str, str],
    *,
    sink_id: str,
    door_options: Sequence[str] = DOOR_OPTIONS,
) -> Any:
    """The sink: ``factory(**options)``, its parameters checked first.

    A factory with a ``sink_id`` parameter also gets the data source's ``sink_id``
    (a sink that names what it leaves in the destination by it, as `PostgresSink`
    does, then uses the same name as the commit state). ``door_options`` are the
    data source's own options, named in the error.

    Raises:
        SinkConfigurationError: The factory does not take these options, or failed.
    """
    factory = load_factory(spec)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        signature = None
    if signature is not None and _takes_sink_id(signature):
        options = {**options, "sink_id": sink_id}
    if signature is not None:
        try:
            signature.bind(**options)
        except TypeError as error:
            raise SinkConfigurationError(
                options_not_taken(spec, options, signature, error, door_options)
            ) from error
    try:
        return factory(**options)
    except SinkV2Error:
        raise
    except (TypeError, ValueError) as error:
        raise SinkConfigurationError(
            f"sink {spec!r} refused its options {sorted(options)}: {type(error).__name__}: {error}"
        ) from error
