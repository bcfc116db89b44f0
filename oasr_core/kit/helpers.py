"""Small helper kernels a family loads beside its GEMM modules (an activation quantizer, ...).

:class:`HelperKernel` is one exported function of a tiny JIT module, bound from its declared
argument types and loaded once per arch family and process: :meth:`HelperKernel.get` returns
the bound ctypes function, or None -- with one warning per arch -- when the module cannot be
built or loaded (no toolchain, a failed build), so the caller's torch path serves. (The W8A8
families' row quantizer is one: ``oasr_scaled_mm.w8a8.rows``.) Importing this module imports
no torch.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from oasr_core import jit
from oasr_core.errors import JitBuildError, OasrWarning, ToolchainError


class HelperKernel:
    """One function ``symbol`` of the module ``spec_of(arch)``, per arch family (see the
    module docstring); ``label`` names it in the warning (``oasr_x: the activation
    quantizer``)."""

    def __init__(self, spec_of: Callable[[str], Any], symbol: str, argtypes: Sequence[Any],
                 restype: Any, *, label: str, fallback: str = "torch serves") -> None:
        self.spec_of = spec_of
        self.symbol = symbol
        self.argtypes = tuple(argtypes)
        self.restype = restype
        self.label = label
        self.fallback = fallback
        self._loaded: dict[str, Any] = {}
        self._failed: set[str] = set()
        self._lock = threading.Lock()

    def get(self, arch: str) -> Any:
        """The loaded function for ``arch``, or None when it cannot be loaded (warned once)."""
        fn = self._loaded.get(arch)
        if fn is not None or arch in self._failed:
            return fn
        with self._lock:
            if arch in self._loaded or arch in self._failed:
                return self._loaded.get(arch)
            try:
                fn = jit.load(self.spec_of(arch)).function(self.symbol)
            except (JitBuildError, ToolchainError, OSError) as exc:
                self._failed.add(arch)
                warnings.warn(f"{self.label} for {arch} is unavailable "
                              f"({str(exc).splitlines()[0]}); {self.fallback}", OasrWarning,
                              stacklevel=3)
                return None
            fn.argtypes, fn.restype = self.argtypes, self.restype
            self._loaded[arch] = fn
            return fn

    def forget(self) -> None:
        """Drop what was loaded or failed (tests; a loaded library stays mapped)."""
        with self._lock:
            self._loaded.clear()
            self._failed.clear()
