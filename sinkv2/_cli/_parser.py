"""The ``sinkv2`` command line: its commands, arguments and help."""

from __future__ import annotations

import argparse

__all__ = ["build_parser"]

_STORE_HELP = (
    "the commit state store: a SQLite file (or the directory holding commit_state.sqlite), "
    "or a postgresql:// URL"
)
_SINK_HELP = (
    "the sink, as module:factory - a sink object, or a class or function returning the sink "
    "configured as the job configures it (the working directory is importable)"
)


def _epoch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive whole number (got {text!r}); epochs start at 1"
        ) from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(
            f"must be a positive whole number below 2**63 (got {text!r}); epochs start at 1"
        )
    return value


_DEFAULT_STORE_HELP = (
    _STORE_HELP + "; default: the store apply() uses without one, "
    "$SINKV2_STATE_DIR/commit_state.sqlite or ./.sinkv2/commit_state.sqlite"
)


def _common(parser: argparse.ArgumentParser, *, default_store: bool = False) -> None:
    if default_store:  # read-only commands: a repair names its store
        parser.add_argument("store", metavar="STORE", nargs="?", help=_DEFAULT_STORE_HELP)
    else:
        parser.add_argument("store", metavar="STORE", help=_STORE_HELP)
    parser.add_argument(
        "--schema", help="the PostgreSQL schema of the store's tables (default: sinkv2)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``sinkv2``'s arguments."""
    parser = argparse.ArgumentParser(
        prog="sinkv2",
        description="Inspect and repair what sinkv2 records about sinks and sources.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    state = commands.add_parser(
        "state",
        help="a commit state store: its sinks, their epochs, and repairs",
        description=(
            "Read a commit state store (list, show) or repair a sink id in it (abort, "
            "release). Repairs are refused while a driver holds the sink id."
        ),
    )
    actions = state.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser(
        "list",
        help="every sink id: epochs by status, last committed epoch, holder",
        description=(
            "Every sink id of the store, read without taking anything. Without STORE, the "
            "store apply() uses by default."
        ),
    )
    _common(listing, default_store=True)

    show = actions.add_parser(
        "show",
        help="one sink id's epochs, or one epoch's committables",
        description=(
            "One sink id's epochs with status, checkpoint id, time and committable counts; "
            "with --epoch, that epoch's committables, decoded by the sink's committable "
            "serializer when the sink is known. Without STORE, the store apply() uses by "
            "default."
        ),
    )
    _common(show, default_store=True)
    show.add_argument("sink_id", metavar="SINK_ID", help="the sink id")
    show.add_argument("--epoch", type=_epoch, help="show this epoch's committables")
    show.add_argument("--sink", metavar="MODULE:FACTORY", help=_SINK_HELP)

    abort = actions.add_parser(
        "abort",
        help="abort a pending epoch (the sink's abort hook, then marked aborted)",
        description=(
            "Abort a pending epoch: call the sink's abort hook (SupportsAbort) with its "
            "committables, then mark it aborted, so that it is never committed. Refused "
            "while a driver holds the sink id."
        ),
    )
    _common(abort)
    abort.add_argument("sink_id", metavar="SINK_ID", help="the sink id")
    abort.add_argument("epoch", metavar="EPOCH", type=_epoch, help="the pending epoch")
    abort.add_argument("--sink", metavar="MODULE:FACTORY", help=_SINK_HELP)
    abort.add_argument(
        "--without-abort-hook",
        action="store_true",
        help="only mark the epoch aborted; what it staged stays behind",
    )
    abort.add_argument(
        "--force",
        action="store_true",
        help="abort an epoch with a checkpoint id (its data must be replayed, or it is lost)",
    )

    release = actions.add_parser(
        "release",
        help="free a sink id from a dead driver and fence off its lease",
        description=(
            "Free a sink id whose driver died: end a PostgreSQL session that outlived its "
            "driver, then advance the sink id's fencing token so that no earlier lease can "
            "write. Refused while the driver runs."
        ),
    )
    _common(release)
    release.add_argument("sink_id", metavar="SINK_ID", help="the sink id")
    release.add_argument(
        "--force",
        action="store_true",
        help="end the session of a driver on another host that you know is gone",
    )
    show_source = actions.add_parser(
        "show-source",
        help="one source id's epochs: acknowledged, split reads, splits carried on",
        description=(
            "One source id's epochs, as a streaming read recorded them, read without taking "
            "anything. Without STORE, the store apply() uses by default."
        ),
    )
    _common(show_source, default_store=True)
    show_source.add_argument("source_id", metavar="SOURCE_ID", help="the source id")

    forget = actions.add_parser(
        "forget-source",
        help="delete a source id's epochs, so that a new query reads it from the start",
        description=(
            "Delete every epoch a streaming read recorded under SOURCE_ID. Refused while a "
            "query reads it. A query restarted from a checkpoint location that read those "
            "epochs then fails clearly: start it from a new checkpoint location."
        ),
    )
    _common(forget)
    forget.add_argument("source_id", metavar="SOURCE_ID", help="the source id")
    return parser
