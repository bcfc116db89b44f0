"""A family package's lazy ``__init__``: its public names load their module on first access.

``import oasr_<family>`` must stay cheap -- no torch, no CUTLASS, nothing compiled -- while
``oasr_<family>.<op>`` is the op itself. A package's ``__init__`` names its lazy attributes
once::

    __getattr__ = lazy_attributes(__name__, "ops", {"gemm", "gemm_activation", ...})

and the first access of one imports ``<package>.ops`` and returns its attribute (later
accesses go through the same function: the module is in ``sys.modules`` by then). Importing
this module imports nothing beyond the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


def lazy_attributes(package: str, module: str, names: Iterable[str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` returning ``<package>.<module>.<name>`` for
    each of ``names`` (an ``AttributeError`` naming ``package`` for anything else)."""
    lazy = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in lazy:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def lazy_layer_hooks(package: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(oasr_layer, oasr_compile_patterns)`` hook functions of a family whose
    ``<package>.layer.layer_for(kind, dtype, quantization)`` and
    ``<package>.compiled.patterns_for(quantization)`` answer them, importing each module on
    the first call (a plugin's ``hooks`` module marks them with its ``hookimpl``)."""

    def oasr_layer(kind: str, dtype: str, quantization: Any) -> Any:
        return importlib.import_module(f"{package}.layer").layer_for(kind, dtype, quantization)

    def oasr_compile_patterns(quantization: Any) -> Any:
        return importlib.import_module(f"{package}.compiled").patterns_for(quantization)

    return oasr_layer, oasr_compile_patterns
