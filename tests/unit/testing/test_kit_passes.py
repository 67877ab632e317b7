"""A correct exactly-once sink passes the kit; the kit's public surface and entry points."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import Phase
from hypothesis import strategies as st
from kit_jsonl_sink import ELEMENTS, JsonLinesSink, make

import sinkv2.testing
from sinkv2 import DeliveryGuarantee
from sinkv2.testing import SinkContractTests, SinkUnderTest, check_sink


def test_a_correct_exactly_once_sink_passes_200_examples() -> None:
    check_sink(make, guarantee=DeliveryGuarantee.EXACTLY_ONCE, elements=ELEMENTS, max_examples=200)


def test_a_correct_sink_also_passes_as_at_least_once_and_none() -> None:
    for guarantee in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.NONE):
        check_sink(make, guarantee=guarantee, elements=ELEMENTS, max_examples=20)


def test_a_sink_that_writes_through_at_every_checkpoint_passes() -> None:
    check_sink(
        lambda: make(JsonLinesSink, threshold=0),
        guarantee=DeliveryGuarantee.EXACTLY_ONCE,
        elements=ELEMENTS,
        max_examples=50,
        max_parallelism=2,
    )


class TestJsonLinesSinkContract(SinkContractTests):
    """The pytest-friendly base class, as a sink author uses it."""

    guarantee = DeliveryGuarantee.EXACTLY_ONCE
    max_examples = 30

    def make_sink(self) -> SinkUnderTest:
        return make()

    def elements(self) -> st.SearchStrategy[object]:
        return ELEMENTS


def test_the_base_class_says_what_is_missing() -> None:
    class Incomplete(SinkContractTests):
        pass

    with pytest.raises(TypeError, match=r"Incomplete.guarantee must be a DeliveryGuarantee"):
        Incomplete().test_lifecycle_keeps_the_delivery_guarantee()


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match=r"guarantee must be a sinkv2\.DeliveryGuarantee"):
        check_sink(make, guarantee="exactly-once", elements=ELEMENTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="elements must be a hypothesis strategy"):
        check_sink(make, guarantee=DeliveryGuarantee.NONE, elements=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_parallelism must be a positive int"):
        check_sink(make, guarantee=DeliveryGuarantee.NONE, elements=ELEMENTS, max_parallelism=0)
    with pytest.raises(TypeError, match=r"must return a sinkv2\.testing\.SinkUnderTest"):
        check_sink(
            lambda: JsonLinesSink("/nonexistent"),  # type: ignore[arg-type, return-value]
            guarantee=DeliveryGuarantee.NONE,
            elements=ELEMENTS,
        )


def test_the_environment_sets_the_number_of_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    from sinkv2.testing._settings import resolve_examples, set_examples_override

    monkeypatch.setenv("SINKV2_KIT_EXAMPLES", "7")
    assert resolve_examples(200) == 7
    monkeypatch.setenv("SINKV2_KIT_EXAMPLES", "many")
    with pytest.raises(ValueError, match=r"\$SINKV2_KIT_EXAMPLES must be a positive int"):
        resolve_examples(200)
    monkeypatch.delenv("SINKV2_KIT_EXAMPLES")
    assert resolve_examples(200) == 200
    set_examples_override(3)
    try:
        monkeypatch.setenv("SINKV2_KIT_EXAMPLES", "7")
        assert resolve_examples(200) == 3  # the pytest option wins
    finally:
        set_examples_override(None)


def test_the_kit_takes_its_phases_from_the_hypothesis_profile() -> None:
    from sinkv2.testing._check import _settings

    assert Phase.shrink in _settings(5).phases  # the default profile shrinks failures
    assert Phase.explain not in _settings(5).phases  # the kit never explains them


@pytest.mark.usefixtures("unshrunk")
def test_a_profile_without_shrinking_reports_failures_as_found() -> None:
    from sinkv2.testing._check import _settings

    assert set(_settings(5).phases) == {Phase.explicit, Phase.reuse, Phase.generate, Phase.target}


def test_public_surface() -> None:
    assert sinkv2.testing.__all__ == sorted(sinkv2.testing.__all__)
    assert set(sinkv2.testing.__all__) == {
        "EmittedRecord",
        "EngineStep",
        "LocalSourceEngine",
        "Multiset",
        "SinkContractTests",
        "SinkUnderTest",
        "SourceCheckpoint",
        "check_sink",
        "check_source",
        "check_source_reader",
        "check_streaming",
        "crash_point",
        "resolve_examples",
    }
    for name in sinkv2.testing.__all__:
        assert getattr(sinkv2.testing, name).__module__ == "sinkv2.testing"
    assert "testing" not in sinkv2.__all__


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_import_sinkv2_loads_neither_the_kit_nor_hypothesis() -> None:
    loaded = run_python(
        "import sys, sinkv2; "
        "print(sorted(m for m in sys.modules if m.startswith(('sinkv2.testing', 'hypothesis', "
        "'pyarrow', 'pyspark', 'sinkv2.runtime.committables'))))"
    )
    assert loaded == "[]"


def test_the_kit_and_its_plugin_load_nothing_heavy_until_used() -> None:
    loaded = run_python(
        "import sys, sinkv2.testing, _sinkv2_pytestplugin; "
        "print(sorted(m.split('.')[0] for m in sys.modules "
        "if m.startswith(('hypothesis', 'pyspark', 'pyarrow', 'cloudpickle'))))"
    )
    assert loaded == "[]"
    loaded = run_python(
        "import sys; from sinkv2.testing import check_sink; "
        "print('pyspark' in sys.modules, 'pyarrow' in sys.modules, 'hypothesis' in sys.modules)"
    )
    assert loaded == "False False True"
