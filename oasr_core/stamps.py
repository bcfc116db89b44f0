"""The soft stamps this process measures and writes under: its GPU, its nvcc, and each
family's own (``impl_hash``, ``cutlass``).

A tuning file records them (:mod:`oasr_core.database.validators` compares a file's stamps
with these to mark entries stale); this module sits above the database and the JIT
toolchain it asks, so the database never reaches the toolchain or the GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from oasr_core.errors import PluginError, ToolchainError
from oasr_core.gpu_probe import gpu_visible
from oasr_core.jit import toolchains
from oasr_core.jit.compiler import clear_toolchain_cache, toolchain
from oasr_core.serialization import Invalid, check_json
from oasr_core.types import Family, thaw


@functools.cache
def current_sku() -> dict[str, Any] | None:
    """This process's GPU as ``{name, sms, l2}``, or None without CUDA (cached)."""
    if not gpu_visible():
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": props.name, "sms": props.multi_processor_count,
            "l2": getattr(props, "L2_cache_size", None)}


def nvcc_version(probe: bool = True) -> str | None:
    """The build version (``13.0.88``) of the nvcc the JIT compiles with, found as
    :func:`oasr_core.jit.compiler.toolchain` finds it (``OASR_NVCC``, ``CUDA_HOME``, ``PATH``,
    ``/usr/local/cuda``); None when there is none. The toolchain caches it per process for
    the current values of those variables. ``probe=False`` runs no nvcc: the version a build
    recorded or the toolkit's ``version.json`` says (:mod:`oasr_core.jit.toolchains`), else
    None (unknown: it then makes nothing stale)."""
    try:
        return toolchain().build_version if probe else toolchains.known().build_version
    except ToolchainError:
        return None


def reset_caches() -> None:
    """Forget the cached SKU and nvcc version (a new epoch may see a new toolchain)."""
    current_sku.cache_clear()
    clear_toolchain_cache()


def current_soft_validators(family: Family, probe: bool = True) -> dict[str, Any]:
    """The stamp a write by this process carries: the family's own plus ``sku`` and ``nvcc``.

    ``family.soft_validators()`` supplies the family's stamps (``impl_hash``, ``cutlass``);
    the core adds ``sku`` (None without a GPU) and ``nvcc`` (None without nvcc). A reader
    comparing stamps passes ``probe=False``: no nvcc runs (:func:`nvcc_version`).
    """
    stamps: dict[str, Any] = {}
    if family.soft_validators is not None:
        own = family.soft_validators()
        try:
            if not isinstance(own, Mapping):
                raise Invalid(f"returned {type(own).__name__}, expected a mapping")
            check_json(own)
        except Invalid as exc:
            raise PluginError(f"family {family.name}: soft_validators() {exc}; return a "
                              "mapping of JSON values") from None
        stamps.update(thaw(own))
    stamps["sku"] = current_sku()
    stamps["nvcc"] = nvcc_version(probe)
    return stamps
