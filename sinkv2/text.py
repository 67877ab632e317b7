"""Wording for error messages, shared by sinkv2, its engines and sinks written on it.

- `short_repr`: a repr cut to a bounded length;
- `describe`: that repr plus the type name (``0 of type int``), for "got ..." parts;
- `missing_extra`: the ImportError naming the extra that installs a missing
  optional dependency (``pip install 'sinkv2[http]'``).
"""

from sinkv2._text import describe, missing_extra, short_repr

__all__ = ["describe", "missing_extra", "short_repr"]
