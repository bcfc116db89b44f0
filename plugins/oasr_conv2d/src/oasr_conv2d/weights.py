"""The conv2d kernels' weight layout and the once-per-weight packing cache.

torch's conv2d weight is ``(Cout, Cin, kh, kw)``; the kernels take ``(Cout, kh, kw, Cin)``
contiguous, CUTLASS's KRSC filter (:func:`pack`). :func:`packed` returns a weight's packed
form, made once and kept on the weight tensor itself (attribute ``_oasr_conv2d_packed``)
keyed by its ``data_ptr`` and ``_version``, so an in-place update (``load_state_dict``)
repacks and a freed weight takes its cache with it. Packing allocates and copies, so it never
happens while a CUDA graph is being captured: the first eager call packs (warm-up before
capture does it), and a capture that meets an unpacked weight gets None, for which the op
takes the torch path.
"""

from __future__ import annotations

from typing import Any

_ATTR = "_oasr_conv2d_packed"


def pack(weight: Any) -> Any:
    """nn.Conv2d's weight ``(Cout, Cin, kh, kw)`` as the kernels read it:
    ``(Cout, kh, kw, Cin)`` contiguous."""
    if weight.dim() != 4:
        raise ValueError(f"oasr_conv2d.weights.pack: weight of shape {tuple(weight.shape)} "
                         f"is not (Cout, Cin, kh, kw)")
    return weight.permute(0, 2, 3, 1).contiguous()


def _stamp(weight: Any) -> tuple[int, int]:
    try:
        version = weight._version
    except RuntimeError:  # an inference-mode tensor tracks no version; it cannot change
        version = -1
    return weight.data_ptr(), version


def packed(weight: Any) -> Any:
    """The cached packed form of ``weight`` (made now if missing or stale); None while the
    current stream is capturing a CUDA graph and the cache misses."""
    import torch

    stamp = _stamp(weight)
    hit = getattr(weight, _ATTR, None)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    if weight.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    with torch.no_grad():
        result = pack(weight.detach())
    try:
        setattr(weight, _ATTR, (stamp, result))
    except (AttributeError, RuntimeError):  # a tensor subclass refusing attributes: no cache
        pass
    return result
