"""The ctypes side of a scaled-GEMM family's C ABI (the W8A8 families, int8 and fp8).

Every unit of such a family exports (``oasr_kit/launcher.cuh`` holds the call record)::

    int32_t <sym>(const CallArgs* call, a, w, a_scale, w_scale, bias, out_scale_ptr,
                  float out_scale, d, stream)
    int64_t <sym>_workspace(m, n, k, out_dtype)

A family names what differs -- its symbols, its output dtype codes, its quantizing op and that
op's output dtype, its workspace pool -- in a :class:`ScaledAbi` on a subclass of
:class:`ScaledKernel` (its ``launch.Kernel``); the binding, the per-shape prepared call and the
test/benchmark ``run`` are here. Importing this module imports no torch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
from oasr_core.jit.kit import CallArgs
from oasr_core.kit.binding import bind_launcher, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config

LAUNCH_ARGTYPES = (*(ctypes.c_void_p,) * 7, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p)
WORKSPACE_ARGTYPES = (ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
_TORCH_NAMES = {"float16": "fp16", "bfloat16": "bf16"}


@attrs.frozen
class ScaledAbi:
    """What one scaled-GEMM family's launchers differ in."""

    ops: tuple[str, ...] = attrs.field(converter=tuple)
    """The family's ops, the plain one first (``bind``'s default)."""
    symbol: Callable[[Config, str], str]
    """The launcher symbol of (config, op)."""
    workspace_symbol: Callable[[Config, str], str]
    out_codes: Mapping[str, int]
    """Output dtype code by name (``fp16``, ``bf16``, and the quantizing op's)."""
    quant_op: str
    quant_out: str
    """The quantizing op's output dtype name in :attr:`out_codes` (``int8``, ``fp8``)."""
    quant_torch: str
    """Its torch dtype attribute (``int8``, ``float8_e4m3fn``)."""
    default_out: str
    """The torch dtype attribute of the other op's default output (``float16``)."""
    workspaces: Callable[[], Any]
    """The family's :class:`~oasr_core.kit.WorkspacePool` (asked when a call is prepared)."""


def out_scale_args(out_scale: Any) -> tuple[int, float]:
    """``(pointer, value)`` of an out_scale: a device tensor's pointer, or a float's value."""
    if out_scale is None:
        return 0, 1.0
    if hasattr(out_scale, "data_ptr"):
        return out_scale.data_ptr(), 1.0
    return 0, float(out_scale)


@attrs.define(eq=False)
class ScaledKernel:
    """One (config, op)'s launcher and workspace query in a loaded library; a family's
    subclass sets :attr:`ABI`."""

    ABI: ClassVar[ScaledAbi]
    config: Config
    op: str
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind(cls, module: Any, config: Config, op: str | None = None) -> ScaledKernel:
        """Bind the symbols of ``config`` for ``op`` (default: the plain op) in a loaded
        module (raises if absent)."""
        op = cls.ABI.ops[0] if op is None else op
        return cls(config, op, *bind_launcher(module, cls.ABI.symbol(config, op),
                                              LAUNCH_ARGTYPES, WORKSPACE_ARGTYPES))

    def prepare(self, out_dtype: str, m: int, n: int, k: int) -> PreparedCall:
        """The per-shape prepared call (queries the scratch this shape needs, once); its
        operands are ``(a_ptr, w_ptr, a_scale_ptr, w_scale_ptr, bias_ptr, out_scale_ptr,
        out_scale, d_ptr)``."""
        code = self.ABI.out_codes[out_dtype]
        scratch = self.workspace_fn(m, n, k, code)
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}): workspace "
                              f"query refused m={m} n={n} k={k} {out_dtype}")
        args = CallArgs(m=m, n=n, k=k, dtype=code, split=1)
        return PreparedCall(self.fn, args, self.config, (int(scratch),), self.ABI.workspaces())

    def run(self, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any = None, *,
            out_dtype: Any = None, out_scale: Any = None, out: Any = None) -> Any:
        """Run this kernel on torch tensors (no selection, no checks), into ``out`` when
        given: tests and benchmarks. ``a [..., K]`` / ``w [N, K]`` of the family's operand
        dtype, ``a_scale [M]`` / ``w_scale [N]`` / ``bias [N]`` float32, contiguous on the
        current device; ``out_scale`` a float or a float32 device tensor (the quantizing
        op). Raises :class:`LaunchError` when refused."""
        import torch

        n, k = w.shape
        m = a.numel() // k
        abi = self.ABI
        if self.op == abi.quant_op:
            tdtype, name = getattr(torch, abi.quant_torch), abi.quant_out
        else:
            tdtype = out_dtype or getattr(torch, abi.default_out)
            name = _TORCH_NAMES[str(tdtype).removeprefix("torch.")]
        if out is None:
            out = torch.empty((*a.shape[:-1], n), dtype=tdtype, device=a.device)
        prepared = self.prepare(name, m, n, k)
        os_ptr, os_val = out_scale_args(out_scale)
        status = prepared(a.get_device(), a.data_ptr(), w.data_ptr(), a_scale.data_ptr(),
                          w_scale.data_ptr(), bias.data_ptr() if bias is not None else 0,
                          os_ptr, os_val, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}) refused m={m} "
                              f"n={n} k={k} {name}: {status_text(status)}")
        return out


def bind_all(kernel: type[ScaledKernel], module: Any, configs: Iterable[Config],
             serves: Callable[[Config, str], bool] = lambda _c, _op: True
             ) -> dict[tuple[str, str], ScaledKernel]:
    """Every (op, config) launcher of ``configs`` (that ``serves`` the op) present in a
    loaded module, by ``(op, config id)``."""
    return {(op, c.id): kernel.bind(module, c, op) for c in configs for op in kernel.ABI.ops
            if serves(c, op) and kernel.ABI.symbol(c, op) in module.exports}


def scaled_kernel_arm(prepared: Any, index: int, a: Any, weights: Sequence[Any], a_scale: Any,
                      w_scale: Any, bias: Any, out_scale: float, out: Any, what: str,
                      before: Callable[[], None] | None = None) -> Any:
    """A W8A8 family's kernel arm: ``prepared`` launched with the C ABI's operand list
    ``(a, w, a_scale, w_scale, bias, out_scale tensor (none), out_scale, out)`` for each
    weight copy (the kit's :func:`~oasr_core.kit.benching.kernel_arm`), after ``before()``
    (the activation quantizer a quantized linear runs first; None: nothing)."""
    operands = [(a.data_ptr(), wi.data_ptr(), a_scale.data_ptr(), w_scale.data_ptr(),
                 bias.data_ptr(), 0, out_scale, out.data_ptr()) for wi in weights]
    from oasr_core.kit.benching import kernel_arm

    gemm = kernel_arm(prepared, index, operands, out, what)
    if before is None:
        return gemm

    def run(i: int) -> Any:
        before()
        return gemm(i)

    return run
