"""Where the JVMs of a test that kills them put their temporary files.

A JVM's shutdown hooks delete what it put in ``java.io.tmpdir`` (lz4-java's
native library, say); SIGKILL skips them, and ``/tmp`` would collect a copy per
killed JVM. Tests that SIGKILL a JVM point its temporary directory into their own
``tmp_path``, which pytest removes.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["jvm_temp_env"]


def jvm_temp_env(directory: Path) -> dict[str, str]:
    """Environment for a child process whose JVMs keep their temporary files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    return {"JAVA_TOOL_OPTIONS": f"{options} -Djava.io.tmpdir={directory}".strip()}
