"""ctypes binding of the gemm launchers: loaded lane libraries, workspaces, prepared calls.

The C side caches prepared kernel parameters per call key (``csrc/oasr_gemm/common.cuh``); the
Python side caches, per shape, a :class:`Prepared` record holding the bound launcher, the
dtype/activation codes and the workspace sizes, so a call costs one ctypes call plus the
launch. Launches go to torch's current stream through
``torch._C._cuda_getCurrentRawStream`` (about 0.1 us, where ``current_stream().cuda_stream``
costs several).

Workspaces are grow-only buffers per (device, stream), owned here: scratch (any content) and
semaphores (zero-filled once; every kernel leaves them zero). Buffers that are outgrown are
kept alive, because a captured CUDA graph may still use them. Allocation happens on the first
call that needs more; call :func:`reserve_workspace` before capturing graphs to keep it out of
the capture.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
from oasr_core.errors import OasrError
from oasr_core.jit.libraries import Libraries
from oasr_core.types import Config

from oasr_gemm import codegen
from oasr_gemm.feasibility import fits_arch


class CallArgs(ctypes.Structure):
    """The per-shape call record of the C ABI (``oasr_gemm::CallArgs`` in common.cuh)."""

    _fields_ = [
        ("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
        ("dtype", ctypes.c_int32), ("act", ctypes.c_int32), ("split", ctypes.c_int32),
        ("flags", ctypes.c_int32), ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_int64), ("semaphores", ctypes.c_void_p),
        ("semaphore_bytes", ctypes.c_int64),
    ]


FLAG_PDL = 1
"""``CallArgs.flags`` bit: launch with programmatic dependent launch (``kFlagPdl``)."""
FLAG_FUSED = 2
"""``CallArgs.flags`` bit: a 3.x call without bias and activation runs the fused-epilogue
kernel rather than the plain one (``kFlagFused``; benchmarks and tests compare the two)."""
PDL_ENV = "OASR_GEMM_PDL"
_LAUNCH_ARGTYPES = (ctypes.c_void_p,) * 6
_WORKSPACE_ARGTYPES = (
    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32,
    ctypes.POINTER(ctypes.c_int64),
)


class LaunchError(OasrError):
    """A launcher returned a non-zero status (the message names the config and the status)."""


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
class Kernel:
    """One config's launcher and workspace query in a loaded library."""

    config: Config
    fn: Any
    workspace_fn: Any

    @classmethod
    def bind(cls, module: Any, config: Config) -> Kernel:
        """Bind ``config``'s symbols in a :class:`oasr_core.jit.LoadedModule` (raises if absent)."""
        fn = module.function(codegen.symbol(config))
        fn.argtypes, fn.restype = _LAUNCH_ARGTYPES, ctypes.c_int32
        ws = module.function(codegen.workspace_symbol(config))
        ws.argtypes, ws.restype = _WORKSPACE_ARGTYPES, ctypes.c_int64
        return cls(config, fn, ws)

    def prepare(self, dtype: str, m: int, n: int, k: int, activation: str | None, *,
                pdl: bool | None = None, fused: bool = False) -> Prepared:
        """The per-shape call record (queries the workspace this shape needs, once).

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
        return Prepared(self.fn, args, ctypes.addressof(args), int(scratch), int(sems.value),
                        self.config)

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
        status = prepared.launch(a.data_ptr(), w.data_ptr(),
                                 bias.data_ptr() if bias is not None else 0, out.data_ptr(),
                                 dev, torch._C._cuda_getCurrentRawStream(dev))
        if status:
            raise LaunchError(f"{self.config.lane}/{self.config.id} refused m={m} n={n} k={k} "
                              f"{dtype} {activation}: {status_text(status)}")
        return out


@attrs.define(slots=True, eq=False)
class Prepared:
    """What a call of one shape needs besides its tensors: the launcher and its call record."""

    fn: Any
    args: CallArgs
    """Sizes, codes and split-K factor (workspace fields are filled per call when needed)."""
    address: int
    """``ctypes.addressof(args)``, passed to the launcher."""
    scratch_bytes: int
    semaphore_bytes: int
    config: Config

    def launch(self, a_ptr: int, w_ptr: int, bias_ptr: int, d_ptr: int, device: int,
               stream: int) -> int:
        """Run on ``stream``; returns the launcher's status (0 = ok).

        Configs without a workspace reuse one call record; the others get a copy holding the
        (device, stream) buffers, so concurrent calls on other streams never share one.
        """
        if not (self.scratch_bytes or self.semaphore_bytes):
            return self.fn(self.address, a_ptr, w_ptr, bias_ptr, d_ptr, stream)
        args = CallArgs.from_buffer_copy(self.args)
        (args.workspace, args.workspace_bytes, args.semaphores,
         args.semaphore_bytes) = workspace(device, stream, self.scratch_bytes,
                                           self.semaphore_bytes)
        return self.fn(ctypes.addressof(args), a_ptr, w_ptr, bias_ptr, d_ptr, stream)


def status_text(status: int) -> str:
    """What a launcher status code means."""
    return codegen.STATUS.get(status, f"unknown status {status}")


@attrs.define(eq=False)
class _Buffers:
    scratch: Any = None
    semaphores: Any = None
    retired: list = attrs.field(factory=list)


_WORKSPACES: dict[tuple[int, int], _Buffers] = {}
_WS_LOCK = threading.Lock()
_MIN_SCRATCH = 1 << 20
_MIN_SEMAPHORES = 1 << 16


def workspace(device: int, stream: int, scratch_bytes: int,
              semaphore_bytes: int) -> tuple[int, int, int, int]:
    """Pointers and sizes of the (device, stream) buffers, grown to at least these sizes."""
    bufs = _WORKSPACES.get((device, stream))
    if (bufs is None or bufs.scratch is None or bufs.scratch.numel() < scratch_bytes
            or bufs.semaphores is None or bufs.semaphores.numel() * 4 < semaphore_bytes):
        bufs = _grow(device, stream, scratch_bytes, semaphore_bytes)
    return (bufs.scratch.data_ptr(), bufs.scratch.numel(), bufs.semaphores.data_ptr(),
            bufs.semaphores.numel() * 4)


def _grow(device: int, stream: int, scratch_bytes: int, semaphore_bytes: int) -> _Buffers:
    import torch

    with _WS_LOCK:
        bufs = _WORKSPACES.setdefault((device, stream), _Buffers())
        if torch.cuda.is_current_stream_capturing():
            _warn_once("capture-alloc", "oasr_gemm: a gemm workspace was allocated during CUDA "
                       "graph capture; call oasr_gemm.reserve_workspace() (or run the shape "
                       "once eagerly on the capture stream) before capturing")
        dev = torch.device("cuda", device)
        if bufs.scratch is None or bufs.scratch.numel() < scratch_bytes:
            size = max(scratch_bytes, _MIN_SCRATCH, 2 * (bufs.scratch.numel() if bufs.scratch
                                                          is not None else 0))
            if bufs.scratch is not None:
                bufs.retired.append(bufs.scratch)
            bufs.scratch = torch.empty(size, dtype=torch.uint8, device=dev)
        if bufs.semaphores is None or bufs.semaphores.numel() * 4 < semaphore_bytes:
            old = bufs.semaphores.numel() * 4 if bufs.semaphores is not None else 0
            size = max(semaphore_bytes, _MIN_SEMAPHORES, 2 * old)
            if bufs.semaphores is not None:
                bufs.retired.append(bufs.semaphores)
            bufs.semaphores = torch.zeros((size + 3) // 4, dtype=torch.int32, device=dev)
        return bufs


def reserve_workspace(scratch_bytes: int = 64 << 20, semaphore_bytes: int = 1 << 20,
                      device: int | None = None, stream: Any = None) -> None:
    """Grow the workspace of ``device``/``stream`` (default: current) ahead of graph capture.

    ``stream`` is a ``torch.cuda.Stream`` or a raw handle; capture with
    ``torch.cuda.graph(g, stream=s)`` and reserve for ``s``.
    """
    import torch

    device = torch.cuda.current_device() if device is None else int(device)
    if stream is None:
        raw = torch._C._cuda_getCurrentRawStream(device)
    else:
        raw = int(getattr(stream, "cuda_stream", stream))
    workspace(device, raw, scratch_bytes, semaphore_bytes)


_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def library(lane: str, arch: str) -> Mapping[str, Kernel] | None:
    """The kernels of ``lane``'s production module on ``arch`` by config id (None: unusable).

    Loaded once per process (until a reload refreshes it, :func:`refresh_production`); a
    module that cannot be built or loaded is warned about once and reported as None, so
    callers serve from torch instead.
    """
    return LIBRARIES.get(lane, arch)


def refresh_production() -> list[tuple[str, str]]:
    """After a reload: drop each production module lacking a config the new epoch's tiers
    reference, so the next call loads the new production set (see
    :class:`oasr_core.jit.libraries.Libraries`). Returns the (lane, arch) pairs dropped."""
    return LIBRARIES.refresh()


def _wanted(lane: str, arch: str) -> tuple[str, ...]:
    from oasr_gemm import jit

    if jit.compile_set() == "all":
        return ()
    return jit.production_ids(lane, arch, jit.runtime_referenced(lane, arch))


def _load(lane: str, arch: str) -> Mapping[str, Kernel] | None:
    from oasr_core import jit as core_jit

    from oasr_gemm import jit

    try:
        spec = jit.production_spec(lane, arch)
        module = core_jit.load(spec)
    except Exception as exc:  # a broken toolchain or library must never take the op down
        _warn_once(f"load:{lane}:{arch}", f"oasr_gemm: the {lane} module for {arch} is "
                   f"unavailable ({exc}); gemm calls take the torch path")
        return None
    kernels: dict[str, Kernel] = {}
    for config in jit.lane_configs(lane, arch):
        if codegen.symbol(config) in module.exports:
            kernels[config.id] = Kernel.bind(module, config)
    if module.failed:
        _warn_once(f"failed:{lane}:{arch}", f"oasr_gemm: {len(module.failed)} unit(s) of "
                   f"{spec.name} failed to compile ({', '.join(sorted(module.failed)[:5])}); "
                   "their configs are served by the next tier")
    return kernels


def install_library(lane: str, arch: str, kernels: Mapping[str, Kernel] | None) -> None:
    """Serve ``lane`` on ``arch`` from ``kernels`` instead of the production module.

    For harnesses that already loaded a module holding the configs they need (the benchmark
    loads the whole space); ``None`` marks the lane unavailable.
    """
    LIBRARIES.install(lane, arch, kernels)


def is_available(config: Config) -> bool:
    """``Lane.is_available``: False only for a config this process's loaded module lacks.

    Before the lane's module is loaded (and on machines without a GPU) every config counts as
    available; selection re-checks at call time and serves a missing one from torch.
    """
    for (lane, arch), kernels in LIBRARIES.items():
        if lane == config.lane and kernels is not None and fits_arch(config, arch):
            return config.id in kernels
    return True


def forget_libraries() -> None:
    """Drop loaded-library bookkeeping (tests; a new production set on the next call)."""
    LIBRARIES.forget()


LIBRARIES = Libraries(load=_load, ids=lambda kernels: kernels.keys(), wanted=_wanted)
"""This process's gemm kernel libraries (production modules, or a harness's)."""
