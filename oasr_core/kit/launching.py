"""Launching a prepared call on torch's current stream of the operands' device.

For a family's ops module (it imports torch). The stream comes from
``torch._C._cuda_getCurrentRawStream`` (about 0.1 us, where ``current_stream().cuda_stream``
costs several), so a launch is capturable in a CUDA graph on whatever stream captures; when the
operands live on another device than the current one, the launch runs under that device.
"""

from __future__ import annotations

from typing import Any

import torch

# A CPU-only torch build lacks both; nothing launches there (no tensor is on a CUDA device).
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)


def launch_on(device: int, plan: Any, *pointers: Any) -> int:
    """``plan.launch(*pointers, device, stream)`` on ``device``'s current stream; the
    launcher's status (0 = ok)."""
    stream = _current_stream(device)
    if _current_device() == device:
        return plan.launch(*pointers, device, stream)
    with torch.cuda.device(device):
        return plan.launch(*pointers, device, stream)


def into_out(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``result``, or ``out`` filled with it when the caller passed one."""
    if out is None:
        return result
    out.copy_(result)
    return out
