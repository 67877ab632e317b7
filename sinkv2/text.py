"""Wording for error messages, shared by sinkv2, its engines and sinks written on it.

- `short_repr`: a repr cut to a bounded length;
- `describe`: that repr plus the type name (``0 of type int``), for "got ..." parts;
- `missing_extra`: the ImportError naming the extra that installs a missing
  optional dependency (``pip install 'sinkv2[http]'``);
- `find_unpicklable`: the attribute path (``sink.client._lock``) of the part of an
  object that keeps it from pickling, for "does not pickle" errors;
- `publish`: the last call of a public module, so its classes and functions show
  that module, not the private one defining them, in reprs, tracebacks and pickles.
"""

from sinkv2._pickling import find_unpicklable
from sinkv2._public import publish
from sinkv2._text import describe, missing_extra, short_repr

__all__ = ["describe", "find_unpicklable", "missing_extra", "publish", "short_repr"]

publish(__name__)
