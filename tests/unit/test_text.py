"""`sinkv2.text`: bounded reprs and install hints, one wording for every package."""

import pytest

import sinkv2.text
from sinkv2.text import describe, missing_extra, short_repr


def test_public_surface():
    assert sinkv2.text.__all__ == [
        "describe",
        "find_unpicklable",
        "missing_extra",
        "publish",
        "short_repr",
    ]


def test_short_repr_keeps_short_values_and_cuts_long_ones_to_the_limit():
    assert short_repr("abc") == "'abc'"
    cut = short_repr("x" * 1000, 20)
    assert len(cut) == 20
    assert cut == "'" + "x" * 16 + "..."
    assert len(short_repr(list(range(1000)))) == 200


def test_short_repr_refuses_a_limit_too_short_to_show_anything():
    with pytest.raises(ValueError, match=r"limit must be at least 4 \(got 3\)"):
        short_repr("abc", 3)


def test_describe_adds_the_type_name():
    assert describe(0) == "0 of type int"
    assert describe("x" * 1000).endswith("... of type str")


def test_missing_extra_names_what_needs_it_and_the_install_line():
    error = missing_extra("HttpSink", "aiohttp", "http")
    assert isinstance(error, ImportError)
    assert str(error) == "HttpSink needs aiohttp; install it with: pip install 'sinkv2[http]'"
