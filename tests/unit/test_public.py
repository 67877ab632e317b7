"""One home per public name: each object has one public path, and shows it.

Walks every public module of the three packages (a module path with no ``_name``
part) and its ``__all__``.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from collections import defaultdict

import pytest

import sinkv2
from sinkv2 import DeliveryGuarantee, Watermark
from sinkv2.errors import SinkConfigurationError
from sinkv2.runtime import CommitStatus, EpochStatus
from sinkv2.text import publish

PACKAGES = ("sinkv2", "sinkv2_spark", "reference_sinks")


def public_modules() -> list[str]:
    names = []
    for top in PACKAGES:
        package = importlib.import_module(top)
        names.append(top)
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def exported() -> list[tuple[str, str, object]]:
    """(module, name, object) for every name of every public module's ``__all__``."""
    found = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", ())
        found += [(module_name, name, getattr(module, name)) for name in names]
    return found


def is_ours(value: object) -> bool:
    return (inspect.isclass(value) or inspect.isfunction(value)) and str(value.__module__).split(
        "."
    )[0] in PACKAGES


def test_every_public_module_is_walked():
    modules = public_modules()
    for expected in ("sinkv2", "sinkv2.asyncsink", "sinkv2.runtime", "sinkv2.testing"):
        assert expected in modules
    assert "reference_sinks.files" in modules
    assert not [m for m in modules if "._" in m]


def test_each_public_class_and_function_names_its_public_module():
    wrong = [
        f"{module}.{name} shows {value.__module__}"  # type: ignore[attr-defined]
        for module, name, value in exported()
        if is_ours(value) and value.__module__ != module  # type: ignore[attr-defined]
    ]
    assert not wrong, "\n".join(wrong)


def test_each_public_object_has_exactly_one_public_path():
    paths: defaultdict[object, list[str]] = defaultdict(list)
    for module, name, value in exported():
        # Ints and strings may be shared by value; a name is their identity.
        key = (name, value) if isinstance(value, (int, str)) else id(value)
        paths[key].append(f"{module}.{name}")
    twice = sorted(found for found in paths.values() if len(found) > 1)
    assert not twice, "\n".join(" and ".join(found) for found in twice)


def test_publishing_leaves_no_name_behind_in_a_public_module():
    leaked = []
    for module_name in public_modules():
        namespace = vars(importlib.import_module(module_name))
        exports = namespace.get("__all__", ())
        leaked += [
            f"{module_name}.{name}"
            for name in ("publish", "publish_object")
            if name in namespace and name not in exports
        ]
    assert not leaked


def test_the_repr_shows_the_public_path():
    assert repr(sinkv2.Sink) == "<class 'sinkv2.Sink'>"
    assert repr(SinkConfigurationError) == "<class 'sinkv2.errors.SinkConfigurationError'>"
    assert sinkv2.inspect_sink.__module__ == "sinkv2"


@pytest.mark.parametrize(
    "value",
    [
        sinkv2.Sink,
        sinkv2.SupportsCommitter,
        DeliveryGuarantee.EXACTLY_ONCE,
        CommitStatus.RECOMMITTED,
        EpochStatus.PENDING,
        Watermark(5),
        SinkConfigurationError("bad"),
        sinkv2.inspect_sink,
    ],
    ids=lambda value: getattr(value, "__qualname__", None) or repr(value),
)
def test_public_objects_pickle_through_their_public_path(value):
    data = pickle.dumps(value)
    assert b"sinkv2._" not in data
    back = pickle.loads(data)  # our own bytes, made just above
    if isinstance(value, Exception):
        assert type(back) is type(value)
        assert back.args == value.args
    else:
        assert back == value


def test_the_kits_lazy_names_show_the_kit_once_loaded():
    import sinkv2.testing

    assert sinkv2.testing.Multiset.__module__ == "sinkv2.testing"
    assert pickle.loads(pickle.dumps(sinkv2.testing.Multiset)) is sinkv2.testing.Multiset


def test_publish_leaves_constants_aliases_and_foreign_objects_alone():
    import types

    module = types.ModuleType("sinkv2_publish_probe")
    module.__all__ = ["NUMBER", "Alias", "OrderedDict", "Watermark"]  # type: ignore[attr-defined]
    module.NUMBER = 3  # type: ignore[attr-defined]
    module.Alias = list[int]  # type: ignore[attr-defined]
    from collections import OrderedDict

    module.OrderedDict = OrderedDict  # type: ignore[attr-defined]
    module.Watermark = Watermark  # type: ignore[attr-defined]
    import sys

    sys.modules[module.__name__] = module
    try:
        publish(module.__name__)
        assert OrderedDict.__module__ == "collections"
        assert Watermark.__module__ == "sinkv2_publish_probe"
    finally:
        Watermark.__module__ = "sinkv2"
        del sys.modules[module.__name__]
