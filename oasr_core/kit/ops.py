"""The skeleton of a family's ops module, written once (this module imports torch).

A family's ``ops.py`` keeps what is its own -- the inline fast-path checks of a served call,
the plan key, the launch arguments, its torch function -- and takes the rest from here:

- :class:`TorchPath` (:func:`torch_path`): the torch path of one op, counted by reason on the
  family's :class:`~oasr_core.kit.Serving` (:meth:`Serving.stats
  <oasr_core.kit.Serving.stats>`), and the refused call (:meth:`TorchPath.refused`: the
  launcher said no, the shape turns to torch for the epoch, this call is served by torch);
- :func:`resolve`: the miss path of a call shape, the family's plan function run with the
  operands' device current (a heuristic may read that device's SM count);
- :func:`check_like`: the out (or residual) check, one ``ValueError`` naming what was
  expected and what came;
- :func:`custom_op`: a ``torch.library`` custom op with its fake implementation, so the op
  traces under ``torch.compile`` and runs in CUDA graphs;
- :func:`into_out` and :func:`on_device`, the small pieces around them.

A served call stays the family's own inline code: one dict lookup in the epoch's plans
(``serving.plans.table.get(key)``), its checks, ``plan(device, *pointers)`` (a
:class:`~oasr_core.kit.calls.PreparedCall`); every other call ends in one of the functions
here. A family whose tiers chose torch for a shape may count that call inline on the hot path
(``serving.fallbacks[SELECTED] += 1``, :data:`SELECTED`), the one count not made through a
:class:`TorchPath`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from oasr_core.kit.serving import Serving
from oasr_core.types import Config

SELECTED = "torch:selected"
"""The counter of calls whose shape the tiers (or a refusal) left to torch."""

# A CPU-only torch build lacks it; there no tensor is on a CUDA device.
_current_device = getattr(torch._C, "_cuda_getDevice", None)


def on_device(device: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` with CUDA device ``device`` current (for work that reads the current device,
    such as resolving a plan whose heuristic asks for the device's SM count)."""
    if _current_device is None or _current_device() == device:
        return fn()
    with torch.cuda.device(device):
        return fn()


def resolve(device: int, plan: Callable[[Any], Any], key: Hashable) -> Any:
    """The miss path: ``plan(key)`` (the family's: select, bind, prepare through
    :meth:`Serving.plan <oasr_core.kit.Serving.plan>`, which memoises the answer) with
    ``device`` current; the prepared call, or :data:`~oasr_core.kit.TORCH`."""
    return on_device(device, lambda: plan(key))


def into_out(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """``result``, or ``out`` filled with it when the caller passed one."""
    if out is None:
        return result
    out.copy_(result)
    return out


class TorchPath:
    """The torch path of one op of a family: ``path(reason, *args)`` counts one call under
    ``torch:<reason>`` on ``serving`` and returns ``fn(*args)`` (torch's computation of the op,
    ``out`` handling included).

    The reasons a family counts are its own (``cpu``, ``dtype``, ``unaligned``, ...); the kit
    counts ``selected`` (the tiers chose torch) and ``refused`` (:meth:`refused`).
    """

    __slots__ = ("fallbacks", "fn", "serving")

    def __init__(self, serving: Serving, fn: Callable[..., Any]) -> None:
        self.serving = serving
        self.fn = fn
        self.fallbacks = serving.fallbacks

    def __call__(self, reason: str, *args: Any) -> Any:
        self.fallbacks["torch:" + reason] += 1
        return self.fn(*args)

    def refused(self, key: Hashable, config: Config, status: str, what: str,
                *args: Any) -> Any:
        """A launcher refused this call (``status`` says why): torch serves ``key``'s shape
        for the rest of the epoch (warned about once, :meth:`Serving.refused
        <oasr_core.kit.Serving.refused>`) and this call now."""
        self.serving.refused(key, config, status, what)
        return self("refused", *args)


def torch_path(serving: Serving, fn: Callable[..., Any]) -> TorchPath:
    """The :class:`TorchPath` of ``fn`` counted on ``serving``."""
    return TorchPath(serving, fn)


def op_name(family: str, activations: Any, activation: str | None) -> str:
    """The op an activation is keyed under: ``<family>`` or ``<family>_<activation>``; a
    ``ValueError`` naming the family for an activation not in ``activations``."""
    if activation is None:
        return family
    if activation not in activations:
        raise ValueError(f"oasr_{family}: activation {activation!r} is not one of "
                         f"{activations} or None")
    return f"{family}_{activation}"


HALF_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
"""The half-precision dtypes by name (what :func:`unsupported_operands` takes by default)."""
_grad_enabled = torch.is_grad_enabled


def unsupported_operands(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         out_features: int, dtypes: Any = HALF_DTYPES) -> str | None:
    """Why a kernel taking ``x``, ``weight`` and an optional ``bias (out_features,)`` cannot
    take these operands (None: it can), as the torch path's reason: ``cpu``, ``dtype`` (not
    one of ``dtypes``, or mixed), ``noncontiguous`` (``x``), ``device`` (mixed), ``bias``,
    ``autograd`` (grad mode on and an operand requiring grad). Shapes are the caller's."""
    if not (x.is_cuda and weight.is_cuda):
        return "cpu"
    dtype = x.dtype
    if dtype not in dtypes or weight.dtype != dtype:
        return "dtype"
    if not x.is_contiguous():
        return "noncontiguous"
    dev = x.get_device()
    if weight.get_device() != dev:
        return "device"
    if bias is not None and (bias.dtype != dtype or tuple(bias.shape) != (out_features,)
                             or bias.get_device() != dev or not bias.is_contiguous()):
        return "bias"
    if _grad_enabled() and (x.requires_grad or weight.requires_grad
                            or (bias is not None and bias.requires_grad)):
        return "autograd"
    return None


def check_like(t: torch.Tensor, shape: tuple, dtype: Any, device: Any = None, *,
               name: str = "out", prefix: str = "") -> None:
    """Raise ``ValueError`` unless ``t`` has ``shape`` and ``dtype`` (and is on ``device``,
    when given): ``"<prefix><name> must be a <dtype> tensor of shape <shape>[ on <device>];
    got ..."``."""
    if tuple(t.shape) == shape and t.dtype == dtype and (device is None or t.device == device):
        return
    where, got = ("", "") if device is None else (f" on {device}", f" on {t.device}")
    raise ValueError(f"{prefix}{name} must be a {dtype} tensor of shape {shape}{where}; got "
                     f"{t.dtype} {tuple(t.shape)}{got}")


def custom_op(name: str, schema: str, impl: Callable[..., Any],
              fake: Callable[..., Any]) -> Any:
    """Register ``torch.ops.oasr.<name>`` (``schema``, no mutated arguments) running
    ``impl`` (the family's eager path, which takes any inputs), with ``fake`` computing the
    output's metadata (shape, dtype, device: an empty tensor) for tracing; returns the op.

    Each family's eager functions route to its op while ``torch.compile`` traces
    (``torch.compiler.is_compiling()``), so a compiled graph holds one node per call."""
    op = torch.library.custom_op(f"oasr::{name}", impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op
