"""Test your sink: the tutorial's JSON Lines sink through the contract-test kit.

This is the complete example of the how-to "Test your sink". It checks the sink of
docs/examples/first_sink.py, in process and without Spark, two ways:

- as a script, with `check_sink`::

      python docs/examples/test_your_sink.py

- as a pytest test class, with `SinkContractTests`::

      pytest docs/examples/test_your_sink.py --sinkv2-examples 50
"""

# --8<-- [start:imports]
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkContractTests, SinkUnderTest, check_sink

# The sink under test: the tutorial's sink, next to this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_sink import JsonLinesSink  # found through the line above

# --8<-- [end:imports]


# --8<-- [start:read_back]
def read_back(directory: Path) -> list[dict[str, Any]]:
    """What a reader of the directory sees: the committed part files, never staged ones."""
    return [
        json.loads(line)
        for path in sorted(directory.glob("part-*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


# --8<-- [end:read_back]


# --8<-- [start:factory]
def make_sink() -> SinkUnderTest:
    """A JsonLinesSink on a fresh, empty directory; ``close`` removes the directory."""
    directory = Path(tempfile.mkdtemp(prefix="test-your-sink-"))
    return SinkUnderTest(
        sink=JsonLinesSink(directory),
        read_back=lambda: read_back(directory),
        close=lambda: shutil.rmtree(directory, ignore_errors=True),
    )


# --8<-- [end:factory]


# --8<-- [start:elements]
ELEMENTS = st.fixed_dictionaries(
    {
        "order": st.integers(min_value=0, max_value=10**9),
        "item": st.sampled_from(["apple", "pear", "plum"]),
    }
)
"""The records the kit writes: the shape `read_back` returns them in."""
# --8<-- [end:elements]


# --8<-- [start:check_sink]
def main() -> int:
    """Run the whole contract; an AssertionError describes the first violation found."""
    check_sink(
        make_sink,
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=200,  # $SINKV2_KIT_EXAMPLES overrides it
    )
    print("JsonLinesSink keeps the exactly-once contract")
    return 0


# --8<-- [end:check_sink]


# --8<-- [start:pytest]
class TestJsonLinesSink(SinkContractTests):
    """The same checks as pytest tests (one per stage)."""

    guarantee = DeliveryGuarantee.EXACTLY_ONCE
    max_examples = 200  # --sinkv2-examples or $SINKV2_KIT_EXAMPLES override it

    def make_sink(self) -> SinkUnderTest:
        """The sink on a fresh directory."""
        return make_sink()

    def elements(self) -> st.SearchStrategy[object]:
        """The records to write."""
        return ELEMENTS


# --8<-- [end:pytest]


if __name__ == "__main__":
    sys.exit(main())
