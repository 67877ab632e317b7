"""Where the JVMs of a test that kills them put their temporary files, and how they compile.

A JVM's shutdown hooks delete what it put in ``java.io.tmpdir`` (lz4-java's
native library, say); SIGKILL skips them, and ``/tmp`` would collect a copy per
killed JVM. Tests that SIGKILL a JVM point its temporary directory into their own
``tmp_path``, which pytest removes.

A killed driver host lives a minute or two and runs little data: `QUICK_JVM_OPTIONS`
(``jvm_temp_env(..., quick=True)``) stop its JIT at C1 and give it the serial collector,
so that it does not spend the machine's two cores on C2 compilations and parallel GC
threads that a short life never pays back. Measured on this machine (2026-11-27):
the stream-door host's JVM used 27.4 CPU-s as it was and 15.9 CPU-s with them, the
two hosts run side by side at load 14-22 (their queries reached every stop in 118 s
and 116 s: the host's Python workers, not its JVM, take most of the time). What the
hosts are killed at, and what is checked after, is the same either way: the options
change how fast the JVM runs, not what it runs.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["QUICK_JVM_OPTIONS", "jvm_temp_env"]

QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""C1 only (no C2 compiler threads), one GC thread: for a JVM that lives a minute or two."""


def jvm_temp_env(directory: Path, *, quick: bool = False) -> dict[str, str]:
    """Environment for a child process whose JVMs keep their temporary files in ``directory``.

    ``quick``: also `QUICK_JVM_OPTIONS`, for a short-lived JVM (a driver host to kill).
    """
    directory.mkdir(parents=True, exist_ok=True)
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    if quick:
        options = f"{options} {QUICK_JVM_OPTIONS}"
    return {"JAVA_TOOL_OPTIONS": f"{options} -Djava.io.tmpdir={directory}".strip()}
