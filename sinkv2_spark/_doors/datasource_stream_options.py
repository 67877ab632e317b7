"""The ``sinkv2`` data source's streaming options: ``df.writeStream.format("sinkv2")``.

Spark hands a streaming write the options of ``writeStream`` (names lower-cased),
its own ``checkpointLocation`` among them. The data source reads these itself;
every other option goes to the sink's factory, as for batch writes:

| option | meaning |
|---|---|
| ``sink`` | a reference sink's short name or ``"module:callable"`` (as for batch) |
| ``sink_id`` | required: the stable name of the stream's commit history |
| ``checkpointLocation`` | required, Spark's own: the query's checkpoint directory |
| ``state_store`` | SQLite file or ``postgresql://`` URL; default: next to the checkpoint |
| ``guarantee`` | ``exactly-once``, ``at-least-once``, ``none``: refused if the sink lacks it |
| ``on_stage`` | ``"module:callable"`` of (sink id, event, epoch), at each coordinator step |

``checkpoint_id`` is refused: a stream's checkpoint ids are its micro-batch ids
plus one. Checked in Spark's planner worker before any data moves, and again in its
commit worker (which rebuilds the sink from the same options).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, cast, final

import attrs

from sinkv2 import DeliveryGuarantee, SinkCapabilities, inspect_sink
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStateStore, SqliteCommitStateStore
from sinkv2.text import describe
from sinkv2_spark._rules.arguments import check_guarantee
from sinkv2_spark._rules.checkpoint_location import (  # apply()'s streaming rules, one copy
    STATE_DIR,
    claim_location,
    local_path,
    query_id,
)
from sinkv2_spark._rules.options import make_sink, open_store, required_sink_id, sink_spec

__all__ = [
    "STREAM_DOOR_OPTIONS",
    "StageHook",
    "StreamOptions",
    "parse_stream_options",
    "stream_store",
]

CHECKPOINT_LOCATION: Final = "checkpointlocation"
"""Spark's ``checkpointLocation`` option, as the data source gets it (lower-cased)."""

STREAM_DOOR_OPTIONS: Final = (
    "sink",
    "sink_id",
    CHECKPOINT_LOCATION,
    "state_store",
    "guarantee",
    "on_stage",
)
"""The options a streaming write reads itself; the rest go to the sink's factory."""

StageHook = Callable[[str, str, int], None]
"""The ``on_stage`` callable: (sink id, event, epoch), see ``sinkv2.runtime.STAGE_EVENTS``."""

_GUARANTEES: Final = ", ".join(repr(g.value) for g in DeliveryGuarantee)


@final
@attrs.frozen(kw_only=True)
class StreamOptions:
    """A streaming write's options, checked, and the sink they build.

    Attributes:
        sink: The sink the factory built.
        capabilities: What ``inspect_sink`` found.
        sink_id: The sink id.
        checkpoint_location: Spark's checkpoint location, as given.
        local: The checkpoint location as a local path, or ``None`` if it is remote.
        state_store: Where epochs are recorded.
        on_stage: The stage hook, if any.
    """

    sink: Any
    capabilities: SinkCapabilities
    sink_id: str
    checkpoint_location: str
    local: Path | None
    state_store: CommitStateStore
    on_stage: StageHook | None = None

    def origin(self, *, claim: bool) -> str:
        """The stream that numbers the sink id's checkpoints, as ``apply()`` names it.

        A local checkpoint location is Spark's query there (the id in its
        ``metadata``, which Spark writes when the query starts); a remote one is
        named by its location. With ``claim``, the location is also bound to the
        sink id (``apply()``'s marker), or refused if another sink id's stream uses it.

        Raises:
            SinkConfigurationError: The location belongs to another sink id, or has
                no Spark metadata (Spark resolved it to another directory).
        """
        if self.local is None:
            return f"checkpoint {self.checkpoint_location}"
        if not (self.local / "metadata").exists():
            raise SinkConfigurationError(
                f"the checkpointLocation {self.checkpoint_location!r} has no Spark metadata at "
                f"{str(self.local / 'metadata')!r}, so Spark's query keeps its checkpoint "
                "elsewhere (Spark resolved the location differently from this worker; it does "
                "not expand '~', for one). Give an absolute path or a file:// URI"
            )
        if claim:
            claim_location(self.local, self.sink_id)
        return f"spark query {query_id(self.local)}"

    def stage_listener(self) -> Callable[[str, int], None] | None:
        """``on_stage`` as the coordinator calls a listener: (event, epoch)."""
        hook, sink_id = self.on_stage, self.sink_id
        if hook is None:
            return None
        return lambda event, epoch: hook(sink_id, event, epoch)


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Check a streaming write's options and build the sink.

    Raises:
        SinkConfigurationError: An option is missing, refused (``checkpoint_id``) or
            has a bad value; the sink cannot be imported, its factory does not take
            the other options, or it cannot give the ``guarantee`` asked for.
        SinkDefinitionError: The factory returned something that is not a sink.
    """
    spec = sink_spec(options)
    sink_id = required_sink_id(options)
    if "checkpoint_id" in options:
        raise SinkConfigurationError(
            "the 'checkpoint_id' option is for batch writes (df.write); a stream's checkpoint "
            "ids are its micro-batch ids plus one. Drop .option('checkpoint_id', ...)"
        )
    location = options.get(CHECKPOINT_LOCATION)
    if location is None or not location.strip():
        raise SinkConfigurationError(
            "df.writeStream.format('sinkv2') needs .option('checkpointLocation', ...) on the "
            f"writer (got {'none' if location is None else describe(location)}): the data source "
            "reads it to tell Spark's micro-batches apart and to keep its commit state next to "
            "it; it cannot see spark.sql.streaming.checkpointLocation. Name a durable "
            "directory, e.g. .option('checkpointLocation', '/data/checkpoints/orders')"
        )
    local = local_path(location)
    guarantee = _guarantee(options.get("guarantee"))
    on_stage = _hook(options.get("on_stage"))
    factory_options = {k: v for k, v in options.items() if k not in STREAM_DOOR_OPTIONS}
    sink = make_sink(spec, factory_options, sink_id=sink_id, door_options=STREAM_DOOR_OPTIONS)
    capabilities = inspect_sink(sink)
    check_guarantee(guarantee, capabilities)
    return StreamOptions(
        sink=sink,
        capabilities=capabilities,
        sink_id=sink_id,
        checkpoint_location=location,
        local=local,
        state_store=stream_store(options.get("state_store"), location),
        on_stage=on_stage,
    )


def stream_store(option: str | None, location: str) -> CommitStateStore:
    """The store of a stream: its ``state_store`` option, else next to ``checkpointLocation``.

    Raises:
        SinkConfigurationError: A bad option, or no option and a checkpoint location
            that is not a local path.
    """
    if option is not None:
        return open_store(option)
    local = local_path(location)
    if local is None:
        raise SinkConfigurationError(
            f"the checkpointLocation {location!r} is not a local path, so the commit state "
            "store cannot live next to it; set .option('state_store', ...) to a SQLite file on "
            "the driver host or a postgresql:// URL"
        )
    return SqliteCommitStateStore(local / STATE_DIR / "commit_state.sqlite")


def _guarantee(value: str | None) -> DeliveryGuarantee | None:
    if value is None:
        return None
    try:
        return DeliveryGuarantee(value.strip().lower().replace("_", "-"))
    except ValueError:
        raise SinkConfigurationError(
            f"the 'guarantee' option must be one of {_GUARANTEES} (got {describe(value)}); "
            "it refuses a sink that cannot give it, e.g. .option('guarantee', 'exactly-once')"
        ) from None


def _hook(spec: str | None) -> StageHook | None:
    """The ``on_stage`` option's callable.

    Raises:
        SinkConfigurationError: It is not ``"module:callable"``, or does not import.
    """
    if spec is None:
        return None
    module_name, colon, attribute = spec.strip().partition(":")
    if not colon or not module_name or not attribute:
        raise SinkConfigurationError(
            f"the 'on_stage' option must be 'module:callable' (got {describe(spec)}); e.g. "
            "'my_package.progress:on_stage', a function of (sink id, event, epoch)"
        )
    try:
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise SinkConfigurationError(
            f"the 'on_stage' option {spec!r} does not load in Spark's Python workers "
            f"({type(error).__name__}: {error}); install its module into the workers' Python, "
            "or put its directory on their PYTHONPATH"
        ) from error
    if not callable(found):
        raise SinkConfigurationError(
            f"the 'on_stage' option {spec!r} names {describe(found)}, not a callable; name a "
            "function of (sink id, event, epoch)"
        )
    return cast("StageHook", found)
