"""The device a family's shape heuristic reads: arch family and SM count, asked once.

A shape heuristic (``Family.sentinel_heuristic``) sizes its answer by the SMs of the device
it will run on. :func:`heuristic_device` is that device for a lane in this process: the
current CUDA device when its arch family is one of the lane's, else the lane's first default
arch with a stated SM count, so the CPU paths (census, build replay, tests) answer the same
way on every machine. The device is asked once per runtime
(:meth:`oasr_core.runtime.Runtime.device`). Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oasr_core.runtime import DeviceFacts, current_runtime

DEFAULT_SM_COUNT = {"sm80": 108, "sm86": 84, "sm87": 16, "sm89": 128, "sm90": 132}
"""SMs per arch family when no device can be asked (A100, A10/A40-class, Orin, L4/4090-class,
H100/H200)."""


def current_index() -> int | None:
    """The current CUDA device's index, or None (no torch, no CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    try:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    except (RuntimeError, AssertionError):
        return None


def heuristic_device(arch_families: Sequence[str], default_on: Sequence[str] = (), *,
                     index: int | None = None,
                     sm_counts: Mapping[str, int] = DEFAULT_SM_COUNT) -> tuple[str, int]:
    """``(arch family, SM count)`` of device ``index`` (default: the current one) when it is
    of one of ``arch_families``, else of the first of ``default_on`` (or ``arch_families``)
    with ``sm_counts`` (108 for an arch it does not list)."""
    index = current_index() if index is None else index
    facts = None
    if index is not None:
        rt = current_runtime()
        facts = rt.device(index) if rt is not None else DeviceFacts.query(index)
    if facts is not None and facts.arch in arch_families:
        return facts.arch, facts.sm_count
    arch = (tuple(default_on) or tuple(arch_families))[0]
    return arch, sm_counts.get(arch, 108)
