"""The plugin kit: what every kernel family's Python needs and is not the family's own.

A family plugin is its config space, feasibility, kernels, numerics and recorder; the kit
serves its ops and keeps its per-epoch state:

- :class:`~oasr_core.epoch.Epoch` and :class:`~oasr_core.epoch.EpochMemo` (from the core's
  :mod:`oasr_core.epoch`): the runtime's per-epoch state and memo tables that follow it: a
  reload or a new runtime empties them, no call needed;
- :mod:`oasr_core.kit.serving`: :class:`Serving`, one family's call plans per epoch, counted
  torch fallbacks, warn-once per epoch, its loaded production libraries, refresh on reload;
- :mod:`oasr_core.kit.calls`: :class:`PreparedCall`, one kernel's call at one shape,
  launched on the operands' device and torch's current stream;
- :mod:`oasr_core.kit.ops`: the skeleton of a family's ops module (imports torch): the torch
  path counted by reason and the refused call (:class:`~oasr_core.kit.ops.TorchPath`), the
  miss path (:func:`~oasr_core.kit.ops.resolve`), out checks, custom-op and fake registration
  (:func:`~oasr_core.kit.ops.custom_op`);
- :mod:`oasr_core.kit.binding`: a config's launcher and workspace query bound from their
  declared ctypes argument types (:func:`~oasr_core.kit.binding.bind_launcher`);
- :mod:`oasr_core.kit.weights`: the prepared-weight cache (a weight's kernel-ready form kept
  on its owner, remade when the weight changes, never made during graph capture);
- :mod:`oasr_core.kit.lazy`: a family package's lazy ``__init__``
  (:func:`~oasr_core.kit.lazy.lazy_attributes`);
- :mod:`oasr_core.kit.workspace`: :class:`WorkspacePool`, grow-only buffers per (device,
  stream);
- :mod:`oasr_core.kit.production`: :class:`ProductionSet`, the production compile set of a
  family's lanes from the tiers, and the ``Lane.jit_specs`` / soft-stamp helpers;
- :mod:`oasr_core.kit.lanes`: :class:`LaneSpaces`, :class:`LaneRules` and per-lane predicates;
- :mod:`oasr_core.kit.registration`: a family's ``Family`` and ``Lane`` records built from its
  sibling modules (:func:`~oasr_core.kit.registration.family_record`,
  :func:`~oasr_core.kit.registration.lane_records`);
- :mod:`oasr_core.kit.implicit_gemm`: CUTLASS 2.x implicit-GEMM convolution configs (ids,
  params, static and per-problem rules, the tile lists every convolution family lists);
- :mod:`oasr_core.kit.convolution`: convolution geometry as torch defines it (output extents,
  parameter pairs), a shape record's fields and checks, the units' dtype and activation
  codes and call record, a convolution family's two custom ops and their census recorders;
- :mod:`oasr_core.kit.tiles`: CUTLASS tile ids (``b{tile}_w{warp}_s{stages}``,
  ``{tag}_{tile}_c{cluster}``) and tile lists written as them;
- :mod:`oasr_core.kit.benching`: the family-agnostic half of a family's ``make_bench``;
- :mod:`oasr_core.kit.helpers`: :class:`~oasr_core.kit.helpers.HelperKernel`, a small helper
  kernel (an activation quantizer) bound from its declared argument types and loaded once per
  arch, torch serving where it cannot load;

What only quantized W8A8 families need (the row quantizer, tile ladders, the scaled GEMM C ABI,
the weight cache) is not here: it is the W8A8 code base its plugins share.

Importing the kit (all but :mod:`~oasr_core.kit.ops`) imports no torch and builds no
runtime; the names above load their module on first access.
"""

from __future__ import annotations

from typing import Any

from oasr_core.epoch import Epoch as Epoch
from oasr_core.epoch import EpochMemo as EpochMemo

_NAMES = {"LaneSpaces": "lanes", "LaneRules": "lanes",
          "by_lane": "lanes", "fits_arch": "lanes", "ProductionSet": "production",
          "cutlass_stamps": "production", "lane_specs": "production", "PreparedCall": "calls",
          "TORCH": "serving", "LaunchError": "serving", "Serving": "serving",
          "BufferKind": "workspace", "WorkspacePool": "workspace"}

__all__ = sorted([*_NAMES, "Epoch", "EpochMemo"])


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'oasr_core.kit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"oasr_core.kit.{module}"), name)
    globals()[name] = value
    return value
