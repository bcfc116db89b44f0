"""Weight layouts of the conv1d kernels and the once-per-weight packing cache.

torch's conv1d weight is ``(Cout, Cin / groups, k)``. The kernels take:

- dense (groups == 1): ``(Cout, k, Cin)`` contiguous, the implicit GEMM's K-major filter
  (``oasr_conv1d.dense`` documents it);
- depthwise (groups == Cin == Cout): ``(k, C)`` contiguous, so a tap's row of channels is one
  vector access (:func:`oasr_conv1d.depthwise.pack_weight`).

:func:`packed` returns a weight's packed form, made once and kept on the weight tensor itself
(attribute ``_oasr_conv1d_packed``, the kit's prepared-weight cache) keyed by its ``data_ptr``,
``_version`` and kind, so an in-place update (``load_state_dict``, a BatchNorm fold) repacks
and a freed weight takes its cache with it. Packing allocates and copies, so it never happens
while a CUDA graph is being captured: the first eager call packs (warm-up before capture does
it), and a capture that meets an unpacked weight gets None, for which the op takes the torch
path.
"""

from __future__ import annotations

from typing import Any

from oasr_core.kit.weights import prepared

from oasr_conv1d.depthwise import pack_weight as pack_depthwise

_ATTR = "_oasr_conv1d_packed"
DENSE, DEPTHWISE = "dense", "depthwise"


def kind_of(cin: int, cout: int, groups: int) -> str | None:
    """``dense``, ``depthwise`` or None (a grouped conv no kernel takes)."""
    if groups == 1:
        return DENSE
    if groups == cin == cout:
        return DEPTHWISE
    return None


def pack(weight: Any, kind: str) -> Any:
    """``weight`` (torch's layout) in the kernels' layout for ``kind``."""
    if kind == DEPTHWISE:
        return pack_depthwise(weight)
    if kind == DENSE:
        from oasr_conv1d.dense import pack_weight as pack_dense

        return pack_dense(weight)
    raise ValueError(f"oasr_conv1d: no packed layout for kind {kind!r}")


def packed(weight: Any, kind: str) -> Any:
    """The cached packed form of ``weight`` (made now if missing or stale); None while the
    current stream is capturing a CUDA graph and the cache misses (the kit's
    :func:`oasr_core.kit.weights.prepared`, on the weight itself)."""
    try:
        version = weight._version
    except RuntimeError:  # an inference-mode tensor tracks no version; it cannot change
        version = -1
    return prepared(weight, _ATTR, (weight.data_ptr(), version, kind),
                    lambda: pack(weight.detach(), kind))
