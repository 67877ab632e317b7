"""``python -m sinkv2``: the ``sinkv2`` command line."""

from sinkv2._cli import main

raise SystemExit(main())
