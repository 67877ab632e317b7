"""docs/howto/spark-data-source.md quotes the refusal a misspelled option gets as it is."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from sinkv2.errors import SinkConfigurationError
from sinkv2_spark._doors import datasource_shared
from sinkv2_spark._rules.options import make_sink

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "spark-data-source.md"


def test_the_misspelled_option_s_refusal_is_the_code_s_message_from_the_door_s_frame():
    [block] = [
        b
        for b in re.findall(r"```text\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
        if "did you mean" in b
    ]
    lines = [line.strip() for line in block.strip().splitlines()]
    frame, shown_raise, error = lines[1], lines[2], lines[3]
    with pytest.raises(SinkConfigurationError) as caught:
        make_sink("files", {"path": "/data/orders", "fromat": "parquet"}, sink_id="orders")

    assert error == f"sinkv2.errors.SinkConfigurationError: {caught.value}"
    # The one frame Spark shows is the door's re-raise, in the module the page names.
    source_file = inspect.getsourcefile(datasource_shared)
    assert source_file is not None
    assert source_file.endswith(frame.split('"')[1].removeprefix("..."))
    assert shown_raise in inspect.getsource(datasource_shared.refusing_briefly)
