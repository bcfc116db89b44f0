"""ctypes binding of the gemm launchers: loaded lane libraries, workspaces, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_gemm/common.cuh``); the
Python side caches, per shape, the kit's :class:`~oasr_core.kit.calls.PreparedCall` holding
the bound launcher, the dtype/activation codes and the workspace sizes, so a call costs one
ctypes call plus the launch, on torch's current stream.

Workspaces come from the kit's grow-only pool per (device, stream)
(:class:`oasr_core.kit.WorkspacePool`): scratch (any content) and semaphores (zero-filled once;
every kernel leaves them zero). Allocation happens on the first call that needs more; call
:func:`reserve_workspace` before capturing graphs to keep it out of the capture. The loaded
production libraries and the call plans are the kit's :class:`oasr_core.kit.Serving`
(:data:`SERVING`). A production library's kernels are keyed by config id (gemm and
gemm_activation, :class:`Kernel`), by :func:`residual_key` (the fused-residual launchers of
op ``gemm_residual``, :class:`ResidualKernel`) and by :func:`bmm_key` (the batched launchers
of op ``bmm``, one per layout, :class:`BmmKernel`) and by :func:`group_key` (the grouped
launchers of op ``group_gemm``, :class:`GroupKernel`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.jit import kit
from oasr_core.jit.kit import CallArgs
from oasr_core.kit import BufferKind, LaunchError, Serving, WorkspacePool
from oasr_core.kit.binding import BoundKernel, status_text
from oasr_core.kit.calls import PreparedCall
from oasr_core.types import Config

from oasr_gemm import codegen
from oasr_gemm.config_space import BMM_OPS, GROUP_OP, RESIDUAL_OP
from oasr_gemm.feasibility import fits_arch

FLAG_PDL = kit.FLAG_PDL
"""``CallArgs.flags`` bit: launch with programmatic dependent launch (``kFlagPdl``)."""
FLAG_FUSED = kit.FLAG_FAMILY
"""``CallArgs.flags`` bit: a 3.x call without bias and activation runs the fused-epilogue
kernel rather than the plain one (``kFlagFused``; benchmarks and tests compare the two)."""
PDL_ENV = "OASR_GEMM_PDL"
_LAUNCH_ARGTYPES = (ctypes.c_void_p,) * 6
_RESIDUAL_ARGTYPES = (*(ctypes.c_void_p,) * 6, ctypes.c_float, ctypes.c_void_p)
"""call, a, w, bias, residual, d, alpha, stream."""
_BMM_ARGTYPES = (*(ctypes.c_void_p,) * 4, ctypes.c_int64, ctypes.c_void_p)
"""call, a, b, d, batch, stream."""
_BMM_WORKSPACE_ARGTYPES = (*(ctypes.c_int64,) * 4, ctypes.c_int32)
"""m, n, k, batch, dtype."""
_GROUP_ARGTYPES = (*(ctypes.c_void_p,) * 6, ctypes.c_int64, ctypes.c_void_p)
"""call, xs, ws, bs, ds, rows (host arrays), groups, stream."""
_GROUP_WORKSPACE_ARGTYPES = (*(ctypes.c_int64,) * 3, ctypes.c_int32)
"""groups, n, k, dtype."""
_WORKSPACE_ARGTYPES = (
    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
    ctypes.POINTER(ctypes.c_int64),
)


def pdl_enabled() -> bool:
    """Whether 3.x kernels launch with programmatic dependent launch (``OASR_GEMM_PDL``,
    default on; ``0`` turns it off).

    With it, a gemm that follows another oasr kernel on the same stream (eagerly or in a CUDA
    graph) is launched while that one drains and waits on the device (``griddepcontrol.wait``)
    before touching memory, hiding its launch and set-up; after any other kernel it starts as
    usual. Results are the same either way. A malformed value is a ConfigurationError.
    """
    from oasr_core.plugins import env_flag

    return os.environ.get(PDL_ENV) is None or env_flag(PDL_ENV)


@attrs.define(eq=False)
class Kernel(BoundKernel):
    """One config's launcher and workspace query in a loaded library."""

    LAUNCH = _LAUNCH_ARGTYPES
    WORKSPACE = _WORKSPACE_ARGTYPES

    @classmethod
    def bind(cls, module: Any, config: Config) -> Kernel:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if absent)."""
        return cls.bind_symbol(module, config, codegen.symbol(config))

    def prepare(self, dtype: str, m: int, n: int, k: int, activation: str | None, *,
                pdl: bool | None = None, fused: bool = False) -> PreparedCall:
        """The per-shape prepared call (queries the workspace this shape needs, once); its
        operands are ``(a_ptr, w_ptr, bias_ptr, d_ptr)``.

        ``pdl`` (default :func:`pdl_enabled`) sets the programmatic-dependent-launch flag
        for the kernels that wait on the previous grid (:func:`codegen.pdl_capable`).
        ``fused`` makes a 3.x call without bias and activation run the fused-epilogue kernel
        (:data:`FLAG_FUSED`) instead of the plain one.
        """
        split = int(self.config.params.get("split_k", 1))
        pdl = (pdl_enabled() if pdl is None else pdl) and codegen.pdl_capable(self.config)
        code = codegen.DTYPE_CODES[dtype]
        sems = ctypes.c_int64(0)
        scratch = self.workspace_fn(m, n, k, code, split, ctypes.byref(sems))
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: workspace query refused "
                              f"m={m} n={n} k={k} {dtype}")
        args = CallArgs(m=m, n=n, k=k, dtype=code, act=codegen.ACT_CODES[activation],
                        split=split, flags=(FLAG_PDL if pdl else 0) | (FLAG_FUSED if fused else 0))
        return PreparedCall(self.fn, args, self.config, (int(scratch), int(sems.value)),
                            WORKSPACES)

    def run(self, a: Any, w: Any, bias: Any = None, out: Any = None,
            activation: str | None = None, *, fused: bool = False) -> Any:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.

        ``a`` is ``[..., K]``, ``w`` ``[N, K]``, both contiguous fp16/bf16 on the current
        device; raises :class:`LaunchError` when the launcher refuses. ``fused`` as in
        :meth:`prepare`.
        """
        import torch

        n, k = w.shape
        m = a.numel() // k
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[a.dtype]
        if out is None:
            out = torch.empty((*a.shape[:-1], n), dtype=a.dtype, device=a.device)
        prepared = self.prepare(dtype, m, n, k, activation, fused=fused)
        dev = a.get_device()
        status = prepared(dev, a.data_ptr(), w.data_ptr(),
                          bias.data_ptr() if bias is not None else 0, out.data_ptr())
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused m={m} n={n} k={k} "
                              f"{dtype} {activation}: {status_text(status)}")
        return out


@attrs.define(eq=False)
class ResidualKernel(Kernel):
    """One 3.x config's fused-residual launcher (op ``gemm_residual``) in a loaded library:
    ``out = residual + alpha * (a @ w.T + bias)`` in one kernel (``sm90_residual.cuh``).

    :meth:`prepare` is :class:`Kernel`'s (no activation); the prepared call's operands are
    ``(a_ptr, w_ptr, bias_ptr, residual_ptr, d_ptr, alpha)``.
    """

    LAUNCH = _RESIDUAL_ARGTYPES

    @classmethod
    def bind(cls, module: Any, config: Config) -> ResidualKernel:
        """Bind ``config``'s fused-residual symbols (raises if absent)."""
        return cls.bind_symbol(module, config, codegen.residual_symbol(config))

    def run(self, a: Any, w: Any, bias: Any, residual: Any,  # type: ignore[override]
            alpha: float = 1.0, out: Any = None) -> Any:
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.

        ``residual`` is ``[..., N]`` like the output (``out``, default a new tensor; it may be
        ``residual`` itself); raises :class:`LaunchError` when the launcher refuses.
        """
        import torch

        n, k = w.shape
        m = a.numel() // k
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[a.dtype]
        if out is None:
            out = torch.empty((*a.shape[:-1], n), dtype=a.dtype, device=a.device)
        prepared = self.prepare(dtype, m, n, k, None)
        status = prepared(a.get_device(), a.data_ptr(), w.data_ptr(),
                          bias.data_ptr() if bias is not None else 0, residual.data_ptr(),
                          out.data_ptr(), float(alpha))
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused the fused residual "
                              f"m={m} n={n} k={k} {dtype}: {status_text(status)}")
        return out


@attrs.define(eq=False)
class BmmKernel(BoundKernel):
    """One config's batched launcher for one layout of the second operand (op ``bmm``,
    ``csrc/oasr_gemm_bmm/``): ``d[l] = a[l] @ b[l]`` for ``l < batch``, with ``b``
    ``[batch, N, K]`` row-major (``layout="tn"``) or ``[batch, K, N]`` (``"nn"``).

    The prepared call's operands are ``(a_ptr, b_ptr, d_ptr, batch)``.
    """

    LAUNCH = _BMM_ARGTYPES
    WORKSPACE = _BMM_WORKSPACE_ARGTYPES
    layout: str = "tn"

    @classmethod
    def bind(cls, module: Any, config: Config, layout: str) -> BmmKernel:  # type: ignore[override]
        """Bind ``config``'s batched symbols for ``layout`` (raises if absent)."""
        kernel = cls.bind_symbol(module, config, codegen.bmm_symbol(config, layout))
        kernel.layout = layout
        return kernel

    def prepare(self, dtype: str, batch: int, m: int, n: int, k: int, *,
                pdl: bool | None = None) -> PreparedCall:
        """The prepared call of ``batch`` problems of ``m x n x k`` each (``m`` per batch;
        queries the workspace this shape needs, once)."""
        pdl = (pdl_enabled() if pdl is None else pdl) and codegen.pdl_capable(self.config)
        code = codegen.DTYPE_CODES[dtype]
        scratch = self.workspace_fn(m, n, k, batch, code)
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: bmm {self.layout} "
                              f"workspace query refused batch={batch} m={m} n={n} k={k} {dtype}")
        args = CallArgs(m=m, n=n, k=k, dtype=code, act=0, split=1,
                        flags=FLAG_PDL if pdl else 0)
        return PreparedCall(self.fn, args, self.config, (int(scratch), 0), WORKSPACES)

    def run(self, a: Any, b: Any, out: Any = None) -> Any:  # type: ignore[override]
        """Run this config on torch tensors (no selection, no memo): tests and benchmarks.

        ``a`` is ``[L, M, K]`` contiguous; ``b`` is this kernel's layout's contiguous tensor
        (``[L, N, K]`` for ``tn``, ``[L, K, N]`` for ``nn``); raises :class:`LaunchError`
        when the launcher refuses."""
        import torch

        batch, m, k = a.shape
        n = b.shape[1] if self.layout == "tn" else b.shape[2]
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[a.dtype]
        if out is None:
            out = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
        prepared = self.prepare(dtype, batch, m, n, k)
        status = prepared(a.get_device(), a.data_ptr(), b.data_ptr(), out.data_ptr(), batch)
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused bmm {self.layout} "
                              f"batch={batch} m={m} n={n} k={k} {dtype}: {status_text(status)}")
        return out


def bmm_key(layout: str, config_id: str) -> tuple[str, str]:
    """The key of a config's batched launcher for ``layout`` among a library's kernels."""
    return (BMM_OPS[layout], config_id)


@attrs.define(slots=True, eq=False)
class GroupCall:
    """The prepared call of one group (op ``group_gemm``): G problems of fixed rows.

    ``call(device, xs, ws, biases, outs)`` writes the tensors' addresses into host arrays
    this call owns and launches once; the launcher reads the arrays during the call only (it
    hands the kernel its records by value), so rewriting them per call is safe, in a CUDA
    graph too. The rows are fixed per prepared call (the plan key holds them)."""

    prepared: PreparedCall
    groups: int
    rows: Any
    """``ctypes.c_int64 * groups``: each problem's rows."""
    arrays: tuple = attrs.field(init=False)
    """xs, ws, bs, ds: ``ctypes.c_void_p * groups`` each."""
    addresses: tuple = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.arrays = tuple((ctypes.c_void_p * self.groups)() for _ in range(4))
        self.addresses = (*(ctypes.addressof(a) for a in self.arrays),
                          ctypes.addressof(self.rows))

    @property
    def config(self) -> Config:
        return self.prepared.config

    def output(self, x: Any, n: int) -> Any:
        return self.prepared.output(x, n)

    def operands(self, xs: Any, ws: Any, biases: Any, outs: Any) -> tuple:
        """The launcher's operands for these tensors: the addresses of this call's arrays,
        filled with the tensors' (``biases``: a tensor for every problem or None for every
        problem), then the group size."""
        ax, aw, ab, ad = self.arrays
        for g in range(self.groups):
            ax[g] = xs[g].data_ptr()
            aw[g] = ws[g].data_ptr()
            ad[g] = outs[g].data_ptr()
        with_bias = biases[0] is not None
        if with_bias:
            for g in range(self.groups):
                ab[g] = biases[g].data_ptr()
        x_addr, w_addr, b_addr, d_addr, rows_addr = self.addresses
        return (x_addr, w_addr, b_addr if with_bias else 0, d_addr, rows_addr, self.groups)

    def __call__(self, device: int, xs: Any, ws: Any, biases: Any, outs: Any) -> int:
        """Launch on ``device``'s current stream; the launcher's status (0 = ok)."""
        return self.prepared(device, *self.operands(xs, ws, biases, outs))

    def launch(self, device: int, stream: int, xs: Any, ws: Any, biases: Any,
               outs: Any) -> int:
        """Launch on the raw ``stream`` of ``device`` (bench arms)."""
        return self.prepared.launch(device, stream, *self.operands(xs, ws, biases, outs))


@attrs.define(eq=False)
class GroupKernel(BoundKernel):
    """One split-free 2.x config's grouped launcher (op ``group_gemm``,
    ``csrc/oasr_gemm_group/``): ``d_g = x_g @ w_g.T (+ b_g)`` for G problems of equal
    ``(N, K)`` in one CUTLASS ``GemmGrouped`` launch."""

    LAUNCH = _GROUP_ARGTYPES
    WORKSPACE = _GROUP_WORKSPACE_ARGTYPES

    @classmethod
    def bind(cls, module: Any, config: Config) -> GroupKernel:
        """Bind ``config``'s grouped symbols (raises if absent)."""
        return cls.bind_symbol(module, config, codegen.group_symbol(config))

    def prepare(self, dtype: str, rows: tuple[int, ...], n: int, k: int) -> GroupCall:
        """The prepared call of ``len(rows)`` problems of ``rows[g] x n x k`` (queries the
        records' workspace once; refused above the launcher's group limit)."""
        code = codegen.DTYPE_CODES[dtype]
        groups = len(rows)
        scratch = self.workspace_fn(groups, n, k, code)
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id}: group_gemm workspace "
                              f"query refused G={groups} n={n} k={k} {dtype}")
        args = CallArgs(m=sum(rows), n=n, k=k, dtype=code, act=0, split=1, flags=0)
        prepared = PreparedCall(self.fn, args, self.config, (int(scratch), 0), WORKSPACES)
        return GroupCall(prepared, groups, (ctypes.c_int64 * groups)(*rows))

    def run(self, xs: Any, ws: Any, biases: Any = None) -> list:  # type: ignore[override]
        """Run this config on lists of torch tensors (no selection, no memo): tests and
        benchmarks; raises :class:`LaunchError` when the launcher refuses."""
        import torch

        n, k = ws[0].shape
        rows = tuple(x.numel() // k for x in xs)
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[xs[0].dtype]
        call = self.prepare(dtype, rows, n, k)
        outs = [torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device) for x in xs]
        status = call(xs[0].get_device(), xs, ws, biases or [None] * len(xs), outs)
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused group_gemm "
                              f"rows={rows} n={n} k={k} {dtype}: {status_text(status)}")
        return outs


def group_key(config_id: str) -> tuple[str, str]:
    """The key of a config's grouped launcher (op ``group_gemm``) among a library's kernels."""
    return (GROUP_OP, config_id)


def residual_key(config_id: str) -> tuple[str, str]:
    """The key of a config's fused-residual launcher among a library's kernels."""
    return (RESIDUAL_OP, config_id)


def reserve_workspace(scratch_bytes: int = 64 << 20, semaphore_bytes: int = 1 << 20,
                      device: int | None = None, stream: Any = None) -> None:
    """Grow the workspace of ``device``/``stream`` (default: current) ahead of graph capture.

    ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
    ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
    """
    WORKSPACES.reserve((scratch_bytes, semaphore_bytes), device, stream)


def _load(lane: str, arch: str) -> Mapping[str, Kernel] | None:
    from oasr_gemm import jit

    def bind(module: Any) -> dict[Any, Kernel]:
        configs = jit.PRODUCTION.lane_configs(lane, arch)
        kernels: dict[Any, Kernel] = {c.id: Kernel.bind(module, c) for c in configs
                                      if codegen.symbol(c) in module.exports}
        kernels.update({residual_key(c.id): ResidualKernel.bind(module, c) for c in configs
                        if codegen.has_residual(c)
                        and codegen.residual_symbol(c) in module.exports})
        kernels.update({bmm_key(layout, c.id): BmmKernel.bind(module, c, layout)
                        for layout, chosen in jit.bmm_configs(lane, arch).items()
                        for c in chosen if codegen.bmm_symbol(c, layout) in module.exports})
        kernels.update({group_key(c.id): GroupKernel.bind(module, c)
                        for c in jit.group_configs(lane, arch)
                        if codegen.group_symbol(c) in module.exports})
        return kernels

    return SERVING.load(lane, arch, jit.production_spec, bind)


def _wanted(lane: str, arch: str) -> tuple[Any, ...]:
    from oasr_gemm import jit

    return (*jit.PRODUCTION.wanted(lane, arch),
            *(residual_key(c.id) for c in jit.residual_configs(lane, arch)),
            *(bmm_key(layout, c.id) for layout, chosen in jit.bmm_configs(lane, arch).items()
              for c in chosen),
            *(group_key(c.id) for c in jit.group_configs(lane, arch)))


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks.

    Before the lane's module is loaded (and on machines without a GPU) every config counts as
    available; selection re-checks at call time and serves a missing one from torch.
    """
    return SERVING.holds(config, config.id, fits_arch)


SERVING = Serving("gemm", load=_load, ids=lambda kernels: kernels.keys(), wanted=_wanted,
                  category=RuntimeWarning)
"""The gemm ops' plans per epoch, fallback counters, warnings and production libraries."""
WORKSPACES = WorkspacePool(
    (BufferKind("scratch", 1 << 20), BufferKind("semaphores", 1 << 16, zeroed=True)),
    warn=lambda message: SERVING.warn_once("capture-alloc", f"oasr_gemm: {message} "
                                           "(oasr_gemm.reserve_workspace())"))
"""Scratch and semaphores per (device, stream)."""
LIBRARIES = SERVING.libraries
"""This process's gemm kernel libraries by (lane, arch): production modules, or a harness's
(``install``, as the benchmark does with the whole space; ``forget`` drops them all)."""
library = LIBRARIES.get
install_library = LIBRARIES.install
forget_libraries = LIBRARIES.forget
