"""ctypes binding of the scaled_mm launchers: loaded lane libraries, workspaces, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_scaled_mm/common.cuh``);
the Python side caches, per shape, a :class:`Prepared` record holding the bound launcher, the
output dtype code and the scratch size, so a call costs one ctypes call plus the launch.
Launches go to torch's current stream through ``torch._C._cuda_getCurrentRawStream`` (about
0.1 us, where ``current_stream().cuda_stream`` costs several).

Only Stream-K configs need scratch (int32 partials and barrier flags, which the launcher zeroes
before each launch). It lives in grow-only buffers per (device, stream), owned here; outgrown
buffers are kept alive because a captured CUDA graph may still use them. Call
:func:`reserve_workspace` before capturing graphs to keep the allocation out of the capture.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.errors import OasrError
from oasr_core.jit.libraries import Libraries
from oasr_core.types import Config

from oasr_scaled_mm import codegen
from oasr_scaled_mm.config_space import OP_MM, OP_QUANT, OPS, serves
from oasr_scaled_mm.feasibility import fits_arch


class CallArgs(ctypes.Structure):
    """The per-shape call record of the C ABI (``oasr_smm::CallArgs`` in common.cuh)."""

    _fields_ = [
        ("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("out_dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_int64),
    ]


_LAUNCH_ARGTYPES = (*(ctypes.c_void_p,) * 7, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p)
_WORKSPACE_ARGTYPES = (ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32)
OUT_DTYPE_OF_OP = {OP_QUANT: "int8"}


class LaunchError(OasrError):
    """A launcher returned a non-zero status (the message names the config and the status)."""


@attrs.define(eq=False)
class Kernel:
    """One (config, op)'s launcher and workspace query in a loaded library."""

    config: Config
    op: str
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind(cls, module: Any, config: Config, op: str = OP_MM) -> Kernel:
        """Bind the symbols of ``config`` for ``op`` in a loaded module (raises if absent)."""
        fn = module.function(codegen.symbol(config, op))
        fn.argtypes, fn.restype = _LAUNCH_ARGTYPES, ctypes.c_int32
        ws = module.function(codegen.workspace_symbol(config, op))
        ws.argtypes, ws.restype = _WORKSPACE_ARGTYPES, ctypes.c_int64
        return cls(config, op, fn, ws)

    def prepare(self, out_dtype: str, m: int, n: int, k: int) -> Prepared:
        """The per-shape call record (queries the scratch this shape needs, once)."""
        code = codegen.OUT_CODES[out_dtype]
        scratch = self.workspace_fn(m, n, k, code)
        if scratch < 0:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}): workspace "
                              f"query refused m={m} n={n} k={k} {out_dtype}")
        args = CallArgs(m=m, n=n, k=k, out_dtype=code)
        return Prepared(self.fn, args, ctypes.addressof(args), int(scratch), self.config, self.op)

    def run(self, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any = None, *,
            out_dtype: Any = None, out_scale: Any = None, out: Any = None) -> Any:
        """Run this kernel on torch tensors (no selection, no checks): tests and benchmarks.

        ``a [..., K]`` / ``w [N, K]`` int8, ``a_scale [M]`` / ``w_scale [N]`` / ``bias [N]``
        float32, all contiguous on the current device; ``out_scale`` a float or a float32
        device tensor (``scaled_mm_quant``). Raises :class:`LaunchError` when refused.
        """
        import torch

        n, k = w.shape
        m = a.numel() // k
        if self.op == OP_QUANT:
            tdtype, name = torch.int8, "int8"
        else:
            tdtype = out_dtype or torch.float16
            name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[tdtype]
        if out is None:
            out = torch.empty((*a.shape[:-1], n), dtype=tdtype, device=a.device)
        prepared = self.prepare(name, m, n, k)
        os_ptr, os_val = out_scale_args(out_scale)
        dev = a.get_device()
        status = prepared.launch(a.data_ptr(), w.data_ptr(), a_scale.data_ptr(),
                                 w_scale.data_ptr(), bias.data_ptr() if bias is not None else 0,
                                 os_ptr, os_val, out.data_ptr(), dev,
                                 torch._C._cuda_getCurrentRawStream(dev))
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} ({self.op}) refused m={m} "
                              f"n={n} k={k} {name}: {status_text(status)}")
        return out


def out_scale_args(out_scale: Any) -> tuple[int, float]:
    """``(pointer, value)`` of an out_scale: a device tensor's pointer, or a float's value."""
    if out_scale is None:
        return 0, 1.0
    if hasattr(out_scale, "data_ptr"):
        return out_scale.data_ptr(), 1.0
    return 0, float(out_scale)


@attrs.define(slots=True, eq=False)
class Prepared:
    """What a call of one shape needs besides its tensors: the launcher and its call record."""

    fn: Any
    args: CallArgs
    address: int
    """``ctypes.addressof(args)``, passed to the launcher."""
    scratch_bytes: int
    config: Config
    op: str

    def launch(self, a_ptr: int, w_ptr: int, a_scale_ptr: int, w_scale_ptr: int, bias_ptr: int,
               out_scale_ptr: int, out_scale: float, d_ptr: int, device: int,
               stream: int) -> int:
        """Run on ``stream``; returns the launcher's status (0 = ok).

        Configs without scratch reuse one call record; Stream-K ones get a copy holding the
        (device, stream) buffer, so concurrent calls on other streams never share one.
        """
        if not self.scratch_bytes:
            return self.fn(self.address, a_ptr, w_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
                           out_scale_ptr, out_scale, d_ptr, stream)
        args = CallArgs.from_buffer_copy(self.args)
        args.workspace, args.workspace_bytes = workspace(device, stream, self.scratch_bytes)
        return self.fn(ctypes.addressof(args), a_ptr, w_ptr, a_scale_ptr, w_scale_ptr, bias_ptr,
                       out_scale_ptr, out_scale, d_ptr, stream)


def status_text(status: int) -> str:
    """What a launcher status code means."""
    return codegen.STATUS.get(status, f"unknown status {status}")


@attrs.define(eq=False)
class _Buffer:
    scratch: Any = None
    retired: list = attrs.field(factory=list)


_WORKSPACES: dict[tuple[int, int], _Buffer] = {}
_WS_LOCK = threading.Lock()
_MIN_SCRATCH = 1 << 20


def workspace(device: int, stream: int, scratch_bytes: int) -> tuple[int, int]:
    """Pointer and size of the (device, stream) scratch buffer, grown to ``scratch_bytes``."""
    buf = _WORKSPACES.get((device, stream))
    if buf is None or buf.scratch is None or buf.scratch.numel() < scratch_bytes:
        buf = _grow(device, stream, scratch_bytes)
    return buf.scratch.data_ptr(), buf.scratch.numel()


def _grow(device: int, stream: int, scratch_bytes: int) -> _Buffer:
    import torch

    with _WS_LOCK:
        buf = _WORKSPACES.setdefault((device, stream), _Buffer())
        if buf.scratch is not None and buf.scratch.numel() >= scratch_bytes:
            return buf
        if torch.cuda.is_current_stream_capturing():
            _warn_once("capture-alloc", "oasr_scaled_mm: a Stream-K workspace was allocated "
                       "during CUDA graph capture; call oasr_scaled_mm.reserve_workspace() (or "
                       "run the shape once eagerly on the capture stream) before capturing")
        old = buf.scratch.numel() if buf.scratch is not None else 0
        if buf.scratch is not None:
            buf.retired.append(buf.scratch)
        size = max(scratch_bytes, _MIN_SCRATCH, 2 * old)
        buf.scratch = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device))
        return buf


def reserve_workspace(scratch_bytes: int = 64 << 20, device: int | None = None,
                      stream: Any = None) -> None:
    """Grow the Stream-K scratch of ``device``/``stream`` (default: current) before capture.

    ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
    ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
    """
    import torch

    device = torch.cuda.current_device() if device is None else int(device)
    raw = (torch._C._cuda_getCurrentRawStream(device) if stream is None
           else int(getattr(stream, "cuda_stream", stream)))
    workspace(device, raw, scratch_bytes)


Kernels = Mapping[tuple[str, str], Kernel]
"""Loaded kernels by ``(op, config id)``."""

_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def bind_all(module: Any, configs: Any) -> dict[tuple[str, str], Kernel]:
    """Every (op, config) launcher of ``configs`` present in a loaded module."""
    kernels: dict[tuple[str, str], Kernel] = {}
    for config in configs:
        for op in OPS:
            if serves(config, op) and codegen.symbol(config, op) in module.exports:
                kernels[(op, config.id)] = Kernel.bind(module, config, op)
    return kernels


def library(lane: str, arch: str) -> Kernels | None:
    """The kernels of ``lane``'s production module on ``arch`` (None: unusable).

    Loaded once per process (until a reload refreshes it, :func:`refresh_production`); a
    module that cannot be built or loaded is warned about once and reported as None, so
    callers serve from torch instead.
    """
    return LIBRARIES.get(lane, arch)


def refresh_production() -> list[tuple[str, str]]:
    """After a reload: drop each production module lacking a config the new epoch's tiers
    reference (see :class:`oasr_core.jit.libraries.Libraries`); returns the pairs dropped."""
    return LIBRARIES.refresh()


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_scaled_mm import jit

    if jit.compile_set() == "all":
        return ()
    return jit.production_ids(lane, arch, jit.runtime_referenced(lane, arch))


def _load(lane: str, arch: str) -> Kernels | None:
    from oasr_core import jit as core_jit

    from oasr_scaled_mm import jit

    try:
        spec = jit.production_spec(lane, arch)
        module = core_jit.load(spec)
    except Exception as exc:  # a broken toolchain or library must never take the op down
        _warn_once(f"load:{lane}:{arch}", f"oasr_scaled_mm: the {lane} module for {arch} is "
                   f"unavailable ({exc}); scaled_mm calls take the torch path")
        return None
    if module.failed:
        _warn_once(f"failed:{lane}:{arch}", f"oasr_scaled_mm: {len(module.failed)} unit(s) of "
                   f"{spec.name} failed to compile ({', '.join(sorted(module.failed)[:5])}); "
                   "their configs are served by the next tier")
    return bind_all(module, jit.lane_configs(lane, arch))


def install_library(lane: str, arch: str, kernels: Kernels | None) -> None:
    """Serve ``lane`` on ``arch`` from ``kernels`` instead of the production module (harnesses
    that loaded a module with the configs they need; ``None`` marks the lane unavailable)."""
    LIBRARIES.install(lane, arch, kernels)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks.

    Before the lane's module is loaded (and on machines without a GPU) every config counts as
    available; the ops re-check at call time and serve a missing one from torch.
    """
    for (lane, arch), kernels in LIBRARIES.items():
        if lane == config.lane and kernels is not None and fits_arch(config, arch):
            return (OP_MM, config.id) in kernels
    return True


def forget_libraries() -> None:
    """Drop loaded-library bookkeeping (tests; a new production set on the next call)."""
    LIBRARIES.forget()


LIBRARIES = Libraries(load=_load, ids=lambda kernels: {cid for _op, cid in kernels},
                      wanted=_wanted)
"""This process's scaled_mm kernel libraries (production modules, or a harness's)."""
