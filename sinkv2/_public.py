"""Each public class and function names its public module as its ``__module__``.

A name is defined in a private module (``sinkv2._sink``) and exported by one public
one (``sinkv2``). Python records the defining module, so reprs, tracebacks, pickles
and the state names derived from a class path would show the private path, which
moves whenever the code is reorganised. `publish`, called at the end of each public
module, points the exported classes and functions at that module instead, as trio's
``fixup_module_metadata`` and NumPy's ``set_module`` do. Pickle resolves a class by
``__module__`` + ``__qualname__``, so it finds them there.

Only classes and functions of sinkv2's own packages are touched: constants, type
aliases and anything imported from elsewhere keep what they have.
"""

from __future__ import annotations

import inspect
import sys
from typing import Final

_OWN_PACKAGES: Final = ("sinkv2", "sinkv2_spark", "reference_sinks")


def publish_object(value: object, module_name: str) -> None:
    """Set ``value.__module__`` to ``module_name`` if it is one of our classes or functions."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return
    if value.__module__.split(".")[0] not in _OWN_PACKAGES:
        return
    value.__module__ = module_name


def publish(module_name: str) -> None:
    """Point every class and function in module ``module_name``'s ``__all__`` at it.

    Call it as the last statement of a public module: ``publish(__name__)``.
    """
    module = sys.modules[module_name]
    for name in module.__all__:
        publish_object(getattr(module, name), module_name)
