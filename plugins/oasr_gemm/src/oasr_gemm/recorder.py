"""How the census sees GEMM calls: the gemm family's recorder patches.

``recorder_patches()`` is the gemm ``Family.recorder_patches``. It observes the family's own
ops (``oasr_gemm.gemm``, ``oasr_gemm.gemm_activation``, ``oasr_gemm.gemm_residual``) and the
plain torch calls they stand for in a model that does not use them yet:
``torch.nn.functional.linear`` and a matmul whose second operand is a 2-D weight
(``torch.matmul``, ``Tensor.matmul`` i.e. ``x @ w``, ``torch.mm``, ``torch.addmm``). Each call
is recorded as family ``gemm``, op ``gemm``, ``gemm_activation``, ``gemm_residual`` or
``gemm_log_softmax``, dims
``(N, K)``, ``M = numel(A) / K``, batch 1 (a torch model's residual add is not a GEMM: its
linears are recorded as ``gemm``). A batched matmul of two 3-D or 4-D operands with the same
batch dims (attention written without SDPA: ``q @ k.transpose(-1, -2)``, ``probs @ v``, a
relative-position ``q @ p.transpose(-1, -2)``), through ``torch.matmul``, ``Tensor.matmul``,
``torch.bmm`` or ``oasr_gemm.bmm``, is op ``bmm``: keyed ``bmm_tn`` when the second operand
is the transposed view of a contiguous tensor and ``bmm_nn`` otherwise (the layout
``torch.matmul`` hands ``bmm``: it copies any other operand contiguous), dims ``(N, K)`` and
``M`` the rows of the first operand across the batch (``L * M``, a 4-D ``[B, H, T, d]`` being
``L = B * H``), batch 1, as the op is keyed. A broadcast batch (``[B, H, T, d] @ [1, H, d,
T]``) or a rank above 4 is counted as skipped, torch's. A CTC head -- a linear (or the
``gemm`` op) whose output goes straight into a log-softmax over its last dim
(``F.log_softmax``, ``torch.log_softmax``, ``Tensor.log_softmax``, ``nn.LogSoftmax``), in the
output's dtype -- is one
``gemm_log_softmax`` call: the log-softmax patches are epilogue patches
(``RecorderPatch.consumes``) that re-file the linear's count. Only floating-point
operands are the family's (fp16, bf16; an fp32 CPU probe is recorded as the deployment dtype
by the census); an int8 or fp8 operand belongs to a quantized family and is left to it.

The recorder, not this module, decides how a target is reached (see
:mod:`oasr_core.census.recorder`); the functions here only read shapes. Importing this module
imports neither torch nor the ops.
"""

from __future__ import annotations

from typing import Any

import attrs
from oasr_core.census.recorder import Call, RecorderPatch, Skip, dtype_name

from oasr_gemm.config_space import BMM_OPS, GROUP_OP

FAMILY = "gemm"
_FLOAT = frozenset({"fp16", "bf16", "fp32"})


def gemm_call(op: str, a: Any, n: int, k: int) -> Call | None:
    """The :class:`Call` of ``a [..., K] x W^T`` for a weight ``[N, K]``; None if not ours."""
    dtype = dtype_name(a.dtype)
    if dtype not in _FLOAT or k <= 0 or n <= 0 or a.dim() < 1 or a.shape[-1] != k:
        return None
    m = a.numel() // k
    if m == 0:
        return None
    return Call(family=FAMILY, op=op, dtype=dtype, dims=(("N", n), ("K", k)), m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def _linear_call(op: str, a: Any, w: Any) -> Call | None:
    if w is None or w.dim() != 2:
        return None
    return gemm_call(op, a, int(w.shape[0]), int(w.shape[1]))


def _transposed_contiguous(b: Any) -> bool:
    """Whether ``b [..., K, N]`` is the transposed view of a contiguous ``[..., N, K]``."""
    return b.transpose(-1, -2).is_contiguous()


def bmm_call(a: Any, b: Any) -> Call | Skip | None:
    """The op ``bmm`` :class:`Call` of ``a [..., M, K] @ b [..., K, N]`` with 3-D or 4-D
    operands of equal batch dims (see the module docstring); a :class:`Skip` for a batched
    matmul the op does not take (a broadcast batch, a rank above 4, mismatched dims); None
    when it is not a floating-point batched matmul."""
    if not (hasattr(a, "dim") and hasattr(b, "dim")) or a.dim() < 3 or b.dim() < 3:
        return None
    dtype = dtype_name(a.dtype)
    if dtype not in _FLOAT or dtype_name(b.dtype) != dtype:
        return None
    example = f"{list(a.shape)} @ {list(b.shape)}"
    if a.dim() != b.dim() or a.dim() > 4 or a.shape[:-2] != b.shape[:-2]:
        return Skip("a batched matmul with a broadcast batch or a rank above 4: torch serves "
                    "it", example)
    m, k = int(a.shape[-2]), int(a.shape[-1])
    n = int(b.shape[-1])
    batch = a.numel() // (m * k) if m * k else 0
    if int(b.shape[-2]) != k or batch * m == 0 or n == 0 or k == 0:
        return Skip("a batched matmul of mismatched or empty operands", example)
    layout = "tn" if _transposed_contiguous(b) else "nn"
    return Call(family=FAMILY, op=BMM_OPS[layout], dtype=dtype, dims=(("N", n), ("K", k)),
                m=batch * m, elements=batch * (m * k + k * n + m * n),
                flops=2 * batch * m * n * k)


def _matmul_call(a: Any, b: Any) -> Call | Skip | None:
    """``a @ b`` with ``b`` a 2-D ``[K, N]`` weight (op ``gemm``), or two batched operands
    (op ``bmm``, :func:`bmm_call`)."""
    if hasattr(b, "dim") and b.dim() >= 3 and hasattr(a, "dim") and a.dim() >= 3:
        return bmm_call(a, b)
    if not hasattr(b, "dim") or b.dim() != 2 or not hasattr(a, "dim") or a.dim() < 1:
        return None
    return gemm_call("gemm", a, int(b.shape[1]), int(b.shape[0]))


def record_linear(input: Any, weight: Any, bias: Any = None) -> Call | None:
    """``torch.nn.functional.linear(input, weight, bias)``."""
    return _linear_call("gemm", input, weight)


def record_matmul(input: Any, other: Any, **_kwargs: Any) -> Call | Skip | None:
    """``torch.matmul(input, other)``, ``torch.mm`` and ``input @ other``."""
    return _matmul_call(input, other)


def record_addmm(input: Any, mat1: Any, mat2: Any, **_kwargs: Any) -> Call | None:
    """``torch.addmm(bias, mat1, mat2)`` (a linear layer written as addmm)."""
    return _matmul_call(mat1, mat2)


def record_gemm(a: Any, w: Any, bias: Any = None, out: Any = None) -> Call | None:
    """``oasr_gemm.gemm(a, w, bias, out)``."""
    return _linear_call("gemm", a, w)


def record_gemm_activation(a: Any, w: Any, bias: Any = None, activation: str = "relu",
                           out: Any = None) -> Call | None:
    """``oasr_gemm.gemm_activation(a, w, bias, activation, out)``."""
    return _linear_call("gemm_activation", a, w)


def record_gemm_residual(a: Any, w: Any, bias: Any = None, residual: Any = None,
                         alpha: float = 1.0, out: Any = None) -> Call | None:
    """``oasr_gemm.gemm_residual(a, w, bias, residual, alpha, out)``; the residual read is
    counted in the call's elements."""
    call = _linear_call("gemm_residual", a, w)
    if call is None:
        return None
    return attrs.evolve(call, elements=call.elements + call.m * int(w.shape[0]))


LOG_SOFTMAX_OP = "gemm_log_softmax"


def _log_softmax_call(producer: Call | None, x: Any, dim: Any, dtype: Any) -> Call | None:
    """The ``gemm_log_softmax`` call of a plain ``gemm`` ``producer`` whose output ``x`` goes
    into a log-softmax over its last dim in its own dtype; None otherwise. The row pass reads
    and writes the logits once more: ``2 * M * N`` elements on top of the GEMM's."""
    if producer is None or producer.family != FAMILY or producer.op != "gemm":
        return None
    if not hasattr(x, "dim") or type(dim) is not int or dim not in (-1, x.dim() - 1):
        return None
    if dtype is not None and dtype != x.dtype:
        return None
    n = dict(producer.dims)["N"]
    return attrs.evolve(producer, op=LOG_SOFTMAX_OP,
                        elements=producer.elements + 2 * producer.m * n)


def record_functional_log_softmax(producer: Call | None, input: Any, dim: Any = None,
                                  _stacklevel: int = 3, dtype: Any = None) -> Call | None:
    """``torch.nn.functional.log_softmax(input, dim, dtype=dtype)`` (``nn.LogSoftmax`` too)."""
    return _log_softmax_call(producer, input, dim, dtype)


def record_log_softmax(producer: Call | None, input: Any, dim: Any = None, dtype: Any = None,
                       **_kwargs: Any) -> Call | None:
    """``torch.log_softmax(input, dim, dtype)`` and ``input.log_softmax(dim, dtype)``."""
    return _log_softmax_call(producer, input, dim, dtype)


def record_gemm_log_softmax(a: Any, w: Any, bias: Any = None, out: Any = None) -> Call | None:
    """``oasr_gemm.gemm_log_softmax(a, w, bias, out)``; the row pass counted in the call's
    elements."""
    call = _linear_call(LOG_SOFTMAX_OP, a, w)
    if call is None:
        return None
    return attrs.evolve(call, elements=call.elements + 2 * call.m * int(w.shape[0]))


def record_bmm(input: Any, mat2: Any, **_kwargs: Any) -> Call | Skip | None:
    """``torch.bmm(input, mat2)`` (and ``Tensor.bmm``'s torch function)."""
    return bmm_call(input, mat2)


def record_oasr_bmm(a: Any, b: Any, out: Any = None) -> Call | Skip | None:
    """``oasr_gemm.bmm(a, b, out)``."""
    return bmm_call(a, b)


def record_group_gemm(xs: Any, ws: Any, biases: Any = None, out: Any = None
                      ) -> Call | Skip | None:
    """``oasr_gemm.group_gemm(xs, ws, biases, out)``: one op ``group_gemm`` point, dims the
    weights' (N, K), M the rows summed over the group; skipped when the weights' shapes
    differ (torch's loop serves such a group), None when an input is not ours. The op has no
    torch function of its own to observe: only its own calls are recorded."""
    if not xs or len(ws) != len(xs) or ws[0].dim() != 2:
        return None
    n, k = int(ws[0].shape[0]), int(ws[0].shape[1])
    if any(tuple(w.shape) != (n, k) for w in ws):
        return Skip("a group of linears of unequal weight shapes: torch serves it",
                    " ".join(f"{tuple(w.shape)}" for w in ws))
    calls = [gemm_call(GROUP_OP, x, n, k) for x in xs]
    if any(c is None or c.dtype != calls[0].dtype for c in calls):
        return None
    m = sum(c.m for c in calls)
    return Call(family=FAMILY, op=GROUP_OP, dtype=calls[0].dtype, dims=(("N", n), ("K", k)),
                m=m, elements=m * k + len(xs) * n * k + m * n, flops=2 * m * n * k,
                weight_elements=len(xs) * n * k)


def recorder_patches() -> list[RecorderPatch]:
    """The gemm family's patches (``Family.recorder_patches``)."""
    table = (
        ("oasr_gemm.ops:gemm", record_gemm, "the family op"),
        ("oasr_gemm.ops:gemm_activation", record_gemm_activation, "the fused-epilogue op"),
        ("oasr_gemm.ops:gemm_residual", record_gemm_residual, "the fused-residual op"),
        ("oasr_gemm.ops:gemm_log_softmax", record_gemm_log_softmax, "the CTC head op"),
        ("torch.nn.functional:linear", record_linear, "nn.Linear and F.linear"),
        ("oasr_gemm.ops:bmm", record_oasr_bmm, "the batched op"),
        ("oasr_gemm.ops:group_gemm", record_group_gemm, "the grouped op"),
        ("torch:matmul", record_matmul, "torch.matmul on a 2-D weight or batched operands"),
        ("torch:Tensor.matmul", record_matmul,
         "x @ w and x.matmul(w) on a 2-D weight or batched operands"),
        ("torch:bmm", record_bmm, "torch.bmm"),
        ("torch:mm", record_matmul, "torch.mm"),
        ("torch:addmm", record_addmm, "torch.addmm (bias + x @ w)"),
    )
    heads = (
        ("torch.nn.functional:log_softmax", record_functional_log_softmax,
         "a linear's output into F.log_softmax or nn.LogSoftmax: the CTC head"),
        ("torch:log_softmax", record_log_softmax, "a linear's output into torch.log_softmax"),
        ("torch:Tensor.log_softmax", record_log_softmax,
         "a linear's output into Tensor.log_softmax"),
    )
    return [*(RecorderPatch(family=FAMILY, target=target, record=fn, description=text)
              for target, fn, text in table),
            *(RecorderPatch(family=FAMILY, target=target, record=fn, description=text,
                            consumes=True) for target, fn, text in heads)]
