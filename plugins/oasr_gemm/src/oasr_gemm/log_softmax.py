"""The row log-softmax of op ``gemm_log_softmax`` and the plan that composes it with a GEMM.

A ``gemm_log_softmax`` call served by a kernel is two launches on one stream: the tuned gemm
config writing the logits ``a @ w.T + bias`` into ``out`` (the same prepared call a ``gemm``
with bias makes), then :data:`KERNEL`, the in-place row log-softmax over ``out``
(``csrc/oasr_gemm_rows/row_log_softmax.cu``: fp32; the row in registers when it fits, its
max then its sum of exps reduced across the row's threads; an online max and sum over two
passes otherwise). :class:`LogSoftmaxCall` is that pair, launched and
timed as one call (the op's plan, the build's arm).

The row kernel is a kit :class:`~oasr_core.kit.helpers.HelperKernel`: one tiny module per
arch family, no CUTLASS, prebuilt beside each lane's production module
(:func:`oasr_gemm.jit.lane_specs`); where it cannot be built or loaded it is warned about once
and the op's torch path serves. Its source sits outside ``csrc/oasr_gemm/``, so it is not part
of the GEMM units' ``impl_hash``: adding it changed no gemm table's stamps. Importing this
module imports no torch.
"""

from __future__ import annotations

import ctypes
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
from oasr_core.kit.helpers import HelperKernel

from oasr_gemm.feasibility import LOG_SOFTMAX_MAX_N

SYMBOL = "oasr_gemm_row_log_softmax"
MODULE = "gemm_row_log_softmax"
SOURCE = "oasr_gemm_rows/row_log_softmax.cu"
"""The kernel's source, relative to the package's ``csrc`` directory."""
ARGTYPES = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
"""``(x, dtype 0 fp16 / 1 bf16, rows, n, stream)``; the export returns an int32 status."""
MAX_N = LOG_SOFTMAX_MAX_N
"""The longest row the kernel takes (``kMaxN``: its int32 indexing within a row)."""
ALIGN = 8
"""The kernel reads 16-byte vectors: ``n`` a multiple of 8 elements, rows 16-byte aligned."""
IN_REGISTERS = {"warp": 1024, "cta": 8192}
"""The longest rows read once (held in registers): a warp a row up to 1024 elements, a CTA of
256 threads up to 8192; longer rows take a second pass."""


def source_path() -> Path:
    """The ``.cu`` file of the row log-softmax (package data)."""
    return Path(str(resources.files("oasr_gemm") / "csrc")) / SOURCE


def spec(arch: str) -> Any:
    """The row log-softmax's :class:`oasr_core.jit.JitSpec` for arch family ``arch``: one unit,
    the kit headers only (no CUTLASS)."""
    from oasr_core.jit import JitSpec, TranslationUnit

    from oasr_gemm.jit import EXTRA_FLAGS, jit_arch

    unit = TranslationUnit(name="row_log_softmax", source=source_path().read_text(),
                           exports=(SYMBOL,))
    return JitSpec(name=MODULE, arch=jit_arch(arch), units=(unit,), extra_flags=EXTRA_FLAGS,
                   cutlass=False)


KERNEL = HelperKernel(spec, SYMBOL, ARGTYPES, ctypes.c_int32,
                      label="oasr_gemm: the row log-softmax",
                      fallback="op gemm_log_softmax takes the torch path")
"""The loaded row log-softmax per arch family (None, warned once, where it cannot load)."""


def takes(n: int) -> bool:
    """Whether the row kernel takes rows of ``n`` elements (a multiple of 8, at most
    :data:`MAX_N`)."""
    return 0 < n <= MAX_N and n % ALIGN == 0


def _torch() -> Any:
    import torch

    return torch


_stream_of: Any = None
"""``torch._C._cuda_getCurrentRawStream`` and ``torch._C._cuda_getDevice``, bound on the first
launch (importing this module imports no torch; a launch then costs no import statement)."""
_device_now: Any = None


def _bind() -> None:
    global _stream_of, _device_now
    torch = _torch()
    _stream_of, _device_now = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice


@attrs.define(slots=True, eq=False)
class LogSoftmaxCall:
    """A gemm config's prepared call (:class:`oasr_core.kit.calls.PreparedCall`, writing the
    logits into ``d``) followed by the row log-softmax over ``d``: the plan of one
    ``gemm_log_softmax`` call shape. Called like the prepared call, with its operands
    ``(a_ptr, w_ptr, bias_ptr, d_ptr)``; the status is the GEMM's when it refuses, else the row
    kernel's."""

    gemm: Any
    """The GEMM's prepared call (bias epilogue, no activation)."""
    rows_fn: Any
    """The loaded row log-softmax (:data:`KERNEL`'s function for the arch)."""
    dtype_code: int
    m: int
    n: int

    @property
    def config(self) -> Any:
        """The gemm config serving the call."""
        return self.gemm.config

    def output(self, a: Any, n: int, dtype: Any = None) -> Any:
        """A new output for ``a``'s rows (the GEMM's :meth:`PreparedCall.output`)."""
        return self.gemm.output(a, n, dtype)

    def __call__(self, device: int, a_ptr: int, w_ptr: int, b_ptr: int, d_ptr: int) -> int:
        """Launch both on ``device``'s current stream; the first non-zero status, else 0."""
        if _stream_of is None:
            _bind()
        if _device_now() != device:
            with _torch().cuda.device(device):
                return self(device, a_ptr, w_ptr, b_ptr, d_ptr)
        return self.launch(device, _stream_of(device), a_ptr, w_ptr, b_ptr, d_ptr)

    def launch(self, device: int, stream: int, a_ptr: int, w_ptr: int, b_ptr: int,
               d_ptr: int) -> int:
        """Launch both on the raw ``stream`` (``device`` current): what a bench arm times as
        one call (:func:`oasr_core.kit.benching.kernel_arm`)."""
        status = self.gemm.launch(device, stream, a_ptr, w_ptr, b_ptr, d_ptr)
        if status:
            return status
        return self.rows_fn(d_ptr, self.dtype_code, self.m, self.n, stream)


def compose(prepared: Any, arch: str, dtype_code: int, m: int, n: int) -> LogSoftmaxCall:
    """The :class:`LogSoftmaxCall` of a gemm ``prepared`` call on ``arch``;
    :class:`~oasr_core.kit.LaunchError` when the row kernel cannot load or take rows of ``n``
    (the op's plan then turns to torch, the build rejects the arm)."""
    from oasr_core.kit import LaunchError

    if not takes(n):
        raise LaunchError(f"the row log-softmax takes rows of a multiple of {ALIGN} elements "
                          f"up to {MAX_N}, not {n}")
    fn = KERNEL.get(arch)
    if fn is None:
        raise LaunchError(f"the row log-softmax for {arch} is unavailable")
    return LogSoftmaxCall(prepared, fn, dtype_code, m, n)


def log_softmax_rows_(x: Any, arch: str) -> bool:
    """Replace the rows of a contiguous fp16/bf16 CUDA tensor ``x [..., n]`` by their
    log-softmax in place, on the current stream; False (``x`` untouched) when the kernel is
    unavailable or refuses (tests, benchmarks)."""
    torch = _torch()
    fn = KERNEL.get(arch)
    n = x.shape[-1]
    if fn is None or not takes(n) or not x.is_contiguous():
        return False
    rows = x.numel() // n
    if rows == 0:
        return True
    code = {torch.float16: 0, torch.bfloat16: 1}.get(x.dtype)
    if code is None:
        return False
    status = fn(x.data_ptr(), code, rows, n,
                torch._C._cuda_getCurrentRawStream(x.device.index))
    return status == 0
