"""The README opens as a user needs it: what it is, the two commands, install, an example.

The example itself runs in ``tests/spark/test_readme.py``; here, without Spark, the
order of the opening, the commands' scripts, and that every name the README's Python
imports exists where the README imports it from.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(README)]


def test_the_opening_is_the_two_commands_then_install_then_an_example():
    (lang1, commands), (lang2, install), (lang3, example) = blocks()[:3]
    assert (lang1, lang2, lang3) == ("bash", "bash", "python")
    assert install.startswith("pip install 'sinkv2[spark]'")
    assert "SinkTopologyTranslator().apply(" in example
    assert "from reference_sinks." in example
    assert [line.split("#")[0].strip() for line in commands.strip().splitlines()] == [
        "bash scripts/demo",
        "bash scripts/test",
    ]
    # What it is comes first: a sentence or two, no more than a screen above the code.
    assert README.index("```") < 600


def test_the_two_commands_name_bash_scripts_that_exist():
    for script in ("demo", "test"):
        path = ROOT / "scripts" / script
        assert path.is_file(), path
        assert path.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash"), path


def test_every_name_the_readme_imports_is_there():
    missing = []
    for lang, code in blocks():
        if lang != "python":
            continue
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                missing += [
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if not hasattr(module, alias.name)
                ]
    assert not missing, missing
