"""The ``sinkv2`` command line (``sinkv2 state ...``, also ``python -m sinkv2``).

Not imported by ``import sinkv2``. Exit status: 0 done, 1 refused or failed (one
line on stderr, no traceback), 2 bad usage.

- ``_parser``: the commands and their arguments;
- ``_stores``: the store a location names, and the operator queries used;
- ``_inspect``: ``list`` and ``show``, read-only;
- ``_repair``: ``abort`` and ``release``, under the sink id's lease;
- ``_sources``: ``show-source`` and ``forget-source``, a source id's epochs;
- ``_sinks``: the sink behind a sink id, for its serializer and abort hook;
- ``_render``: plain text and JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sinkv2._cli._errors import CliError
from sinkv2._cli._inspect import list_sinks, show_sink
from sinkv2._cli._parser import build_parser
from sinkv2._cli._render import Report, to_json
from sinkv2._cli._repair import abort_epoch, release_sink
from sinkv2._cli._sources import forget_source, show_source
from sinkv2._cli._stores import open_store
from sinkv2.errors import SinkV2Error

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sinkv2`` with ``argv`` (default: the process's arguments); the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage error, or --help
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        report = _run(args)
    except (CliError, SinkV2Error, OSError) as error:
        print(f"sinkv2: error: {_one_line(error)}", file=sys.stderr)
        return 1
    try:
        print(to_json(report.data) if args.json else report.text, flush=True)
    except BrokenPipeError:  # e.g. `sinkv2 state show ... | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that Python's exit flush does not fail
        return 1
    return 0


def _run(args: argparse.Namespace) -> Report:
    store = open_store(args.store, schema=args.schema)
    if args.action == "list":
        return list_sinks(store)
    if args.action == "show":
        return show_sink(store, args.sink_id, epoch=args.epoch, sink_spec=args.sink)
    if args.action == "show-source":
        return show_source(store, args.source_id)
    if args.action == "forget-source":
        return forget_source(store, args.source_id)
    if args.action == "abort":
        return abort_epoch(
            store,
            args.sink_id,
            args.epoch,
            sink_spec=args.sink,
            without_hook=args.without_abort_hook,
            force=args.force,
        )
    return release_sink(store, args.sink_id, force=args.force)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
