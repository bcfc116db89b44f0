"""One prepared-weight cache: a weight's kernel-ready form, made once and kept on its owner.

A family's kernels may take a weight in another form than torch keeps it: conv1d's packed
layouts, a W8A8 linear's quantized weight and scales. :func:`prepared` makes that form on
first use and keeps it on an owner object (the weight tensor itself, or the layer) under the
family's attribute, beside a stamp of what it was made from; a later call whose stamp differs
-- another tensor, an in-place update (torch's version counter), another device, dtype or
shape -- makes it anew. :func:`stamp` is the identity of one tensor's contents. Making a form
allocates, so it never happens while the current stream captures a CUDA graph (``None``
then: the caller serves torch; warming up before capture makes it). Importing this module
imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stamp(t: Any) -> tuple:
    """What identifies a tensor's contents: ``(data pointer, version, device, dtype, shape)``
    (``(None,)`` for no tensor; on the meta device the object's id stands for the pointer, and
    an inference-mode tensor, which tracks no version and cannot change, has version -1)."""
    if t is None:
        return (None,)
    ptr = t.data_ptr() if t.device.type != "meta" else id(t)
    try:
        version = t._version
    except RuntimeError:  # an inference-mode tensor
        version = -1
    return (ptr, version, t.device, t.dtype, tuple(t.shape))


def prepared(owner: Any, attr: str, key: tuple, make: Callable[[], Any], *,
             in_capture: bool = False) -> Any:
    """The form kept on ``owner`` under ``attr`` when it was made under ``key``; else
    ``make()`` (under ``torch.no_grad``), kept there with ``key`` and returned. None -- nothing
    made -- while the current CUDA stream captures a graph, unless ``in_capture`` (the making
    is then captured with the call, and replays with it). An owner refusing attributes (a
    tensor subclass) gets the form made anew on each call.

    ``key`` is the caller's: :func:`stamp` of each tensor the form is made from, or a cheaper
    tuple where the owner is the tensor itself (its pointer and version, and what form)."""
    hit = getattr(owner, attr, None)
    if hit is not None and hit[0] == key:
        return hit[1]
    import torch

    if (not in_capture and torch.cuda.is_available()
            and torch.cuda.is_current_stream_capturing()):
        return None
    with torch.no_grad():
        form = make()
    try:
        object.__setattr__(owner, attr, (key, form))
    except (AttributeError, RuntimeError, TypeError):
        pass
    return form


def held(owner: Any, attr: str) -> Any:
    """The form :func:`prepared` keeps on ``owner`` under ``attr`` (None: none made yet)."""
    hit = getattr(owner, attr, None)
    return None if hit is None else hit[1]
