"""Torch-side helpers of a family's ops module (it imports torch).

Launching itself is the prepared call's (:class:`oasr_core.kit.calls.PreparedCall`: the
current stream of the operands' device, under that device); here are the pieces around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# A CPU-only torch build lacks it; there no tensor is on a CUDA device.
_current_device = getattr(torch._C, "_cuda_getDevice", None)


def on_device(device: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` with CUDA device ``device`` current (for work that reads the current device,
    such as resolving a plan whose heuristic asks for the device's SM count)."""
    if _current_device is None or _current_device() == device:
        return fn()
    with torch.cuda.device(device):
        return fn()


def into_out(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``result``, or ``out`` filled with it when the caller passed one."""
    if out is None:
        return result
    out.copy_(result)
    return out
