"""How the census sees conv1d calls: the conv1d family's recorder patches.

``recorder_patches()`` is the conv1d ``Family.recorder_patches``. It observes
``torch.nn.functional.conv1d`` (so ``nn.Conv1d`` too; its input is torch's ``(B, Cin, T)``
or unbatched ``(Cin, T)``) and the family's own ops on channels-last ``(B, T, Cin)`` data
(``oasr_conv1d.ops.conv1d``, ``conv1d_activation``). Each call is filed under op ``conv1d``
or ``conv1d_<activation>`` with dims ``(Cin, Cout, k, stride, pad, dil, groups)``,
``m = B * T_out`` and the exact point ``"<B>x<T_in>"`` (``batch`` stays 1: it counts
independent problems of a batched GEMM, and B is already in ``m`` and the point). A call with string
padding is filed with torch's equivalent integer padding when it has one (``"valid"`` is 0;
``"same"`` at an odd span); otherwise it is a :class:`~oasr_core.census.recorder.Skip` (the
op serves it from torch), counted in the census summary. Padding 0 is a valid dim
(``Family.zero_dims``). Grouped convolutions that are neither dense nor depthwise are
recorded like any other; the census counts them as torch's when no lane config supports
them. Only floating-point operands are recorded (an fp32 CPU probe is recorded as the
deployment dtype by the census).

Importing this module imports neither torch nor the ops; the functions only read shapes.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, Skip, dtype_name
from oasr_core.kit import convolution

from oasr_conv1d.geometry import FAMILY, out_length
from oasr_conv1d.ops_names import ACTIVATIONS

_FLOAT = frozenset({"fp16", "bf16", "fp32"})
DIMS = ("Cin", "Cout", "k", "stride", "pad", "dil", "groups")


def _one(value: Any) -> Any:
    if isinstance(value, (tuple, list)) and len(value) == 1:
        return value[0]
    return value


def conv_call(op: str, dtype: Any, batch: int, t_in: int, cin: int, weight: Any, stride: Any,
              padding: Any, dilation: Any, groups: Any) -> Call | Skip | None:
    """The :class:`Call` of one convolution; a :class:`Skip` for one the family keys no
    point for; None when it is not the family's (not floating point, not 1-D, not a valid
    convolution: torch raises on it)."""
    dt = dtype_name(dtype)
    if dt not in _FLOAT or weight is None or not hasattr(weight, "dim") or weight.dim() != 3:
        return None
    stride, dilation, groups = _one(stride), _one(dilation), _one(groups)
    cout, cpg, k = (int(v) for v in weight.shape)
    padding = _one(padding)
    if padding == "valid":
        padding = 0
    elif padding == "same":
        span = dilation * (k - 1) if isinstance(dilation, int) else 1
        if span % 2 or stride != 1:
            return Skip("padding='same' pads unevenly here (even kernel span or a stride)",
                        f"Cin={cin} Cout={cout} k={k} stride={stride} dil={dilation}")
        padding = span // 2
    if not all(isinstance(v, int) and not isinstance(v, bool)
               for v in (stride, padding, dilation, groups)):
        return Skip("a stride, padding, dilation or groups that is not one integer",
                    f"Cin={cin} Cout={cout} k={k} stride={stride!r} padding={padding!r}")
    if groups < 1 or cin != cpg * groups or min(batch, t_in, stride, dilation) < 1 or padding < 0:
        return None
    t_out = out_length(t_in, k, stride, padding, dilation)
    if t_out <= 0:
        return None
    m = batch * t_out
    return Call(family=FAMILY, op=op, dtype=dt,
                dims=tuple(zip(DIMS, (cin, cout, k, stride, padding, dilation, groups),
                               strict=True)),
                m=m, point=f"{batch}x{t_in}",
                elements=batch * t_in * cin + cout * cpg * k + m * cout,
                flops=2 * m * cout * cpg * k, weight_elements=cout * cpg * k)


def record_f_conv1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                    padding: Any = 0, dilation: Any = 1, groups: Any = 1) -> Call | Skip | None:
    """``torch.nn.functional.conv1d`` on ``(B, Cin, T)`` (or unbatched ``(Cin, T)``)."""
    if not hasattr(input, "dim") or input.dim() not in (2, 3):
        return None
    batch = int(input.shape[0]) if input.dim() == 3 else 1
    cin, t_in = (int(v) for v in input.shape[-2:])
    return conv_call("conv1d", input.dtype, batch, t_in, cin, weight, stride, padding,
                     dilation, groups)


def _channels_last(op: str, x: Any, weight: Any, stride: Any, padding: Any, dilation: Any,
                   groups: Any) -> Call | Skip | None:
    if not hasattr(x, "dim") or x.dim() != 3:
        return None
    batch, t_in, cin = (int(v) for v in x.shape)
    return conv_call(op, x.dtype, batch, t_in, cin, weight, stride, padding, dilation, groups)


record_conv1d, record_conv1d_activation = convolution.op_recorders(
    FAMILY, ACTIVATIONS, "silu", _channels_last)
"""The recorders of ``oasr_conv1d.conv1d`` and ``oasr_conv1d.conv1d_activation``
(channels-last data)."""


def recorder_patches() -> list[RecorderPatch]:
    """The conv1d family's patches (``Family.recorder_patches``)."""
    rows = convolution.recorder_rows(FAMILY, record_conv1d, record_conv1d_activation,
                                     record_f_conv1d, "nn.Conv1d and F.conv1d")
    return [RecorderPatch(family=FAMILY, target=target, record=fn, description=text)
            for target, fn, text in rows]
