"""docs/explanation/sources.md: the read door's factory is code that works as shown."""

from __future__ import annotations

import re
from pathlib import Path

from sinkv2.source import Boundedness, inspect_source

PAGE = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "sources.md"


def test_the_door_factory_on_the_page_takes_spark_s_strings():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    (factory,) = [block for block in blocks if "def numbers(" in block]
    namespace: dict[str, object] = {}
    exec(compile(factory, str(PAGE), "exec"), namespace)  # the page's own code

    source = namespace["numbers"](start="1", end="1000000")  # type: ignore[operator]

    assert inspect_source(source).boundedness is Boundedness.BOUNDED
    assert (source.start, source.end) == (1, 1_000_000)
