"""How the census sees conv2d calls: the conv2d family's recorder patches.

``recorder_patches()`` is the conv2d ``Family.recorder_patches``. It observes
``torch.nn.functional.conv2d`` (so ``nn.Conv2d`` too, whose non-zero padding modes call it
on the padded input with padding 0: what runs is recorded) on torch's ``(B, Cin, H, W)`` or
unbatched ``(Cin, H, W)`` input, and the family's own ops on NHWC ``(B, H, W, Cin)`` data
(``oasr_conv2d.ops.conv2d``, ``conv2d_activation``). Each call is filed under op ``conv2d``
or ``conv2d_<activation>`` with dims :data:`~oasr_conv2d.ops_names.DIMS` (channels, the input
width, the window per axis, groups), ``m = B * H_out * W_out`` and the exact point
``"<B>x<H>"``.

Every torch argument form is either a point or a counted
:class:`~oasr_core.census.recorder.Skip`: ints and ``(h, w)`` pairs are points; padding
``"valid"`` is 0; ``"same"`` (stride 1 in torch) is the half span per axis where the span is
even, a Skip where it is odd (torch pads one side more, which the kernels do not); any other
form (a float, a wrong length) is a Skip. Padding 0 is a valid dim (``Family.zero_dims``).
Depthwise and grouped convolutions are recorded like any other; the census counts them as
torch's, since no lane config supports them. Only floating-point operands are recorded (an
fp32 CPU probe is recorded as the deployment dtype by the census).

Importing this module imports neither torch nor the ops; the functions only read shapes.
"""

from __future__ import annotations

from typing import Any

from oasr_core.census.recorder import Call, RecorderPatch, Skip, dtype_name
from oasr_core.kit import convolution

from oasr_conv2d.geometry import FAMILY, out_length, pair
from oasr_conv2d.ops_names import ACTIVATIONS, DIMS

_FLOAT = frozenset({"fp16", "bf16", "fp32"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def conv_call(op: str, dtype: Any, batch: int, h_in: int, w_in: int, cin: int, weight: Any,
              stride: Any, padding: Any, dilation: Any, groups: Any) -> Call | Skip | None:
    """The :class:`Call` of one convolution; a :class:`Skip` for one the family keys no
    point for; None when it is not the family's (not floating point, not 2-D, not a valid
    convolution: torch raises on it)."""
    dt = dtype_name(dtype)
    if dt not in _FLOAT or weight is None or not hasattr(weight, "dim") or weight.dim() != 4:
        return None
    cout, cpg, kh, kw = (int(v) for v in weight.shape)
    example = f"Cin={cin} Cout={cout} k={kh}x{kw} stride={stride!r} padding={padding!r}"
    sh, sw = pair(stride)
    dh, dw = pair(dilation)
    if not all(_is_int(v) for v in (sh, sw, dh, dw, groups)):
        return Skip("a stride, dilation or groups that is not an integer or (h, w) pair",
                    example)
    if padding == "valid":
        ph = pw = 0
    elif padding == "same":
        spans = (dh * (kh - 1), dw * (kw - 1))
        if any(s % 2 for s in spans):
            return Skip("padding='same' pads unevenly here (an odd kernel span)", example)
        ph, pw = (s // 2 for s in spans)
    else:
        ph, pw = pair(padding)
        if not (_is_int(ph) and _is_int(pw)):
            return Skip("a padding that is not an integer, (h, w) pair, 'valid' or 'same'",
                        example)
    if (groups < 1 or cin != cpg * groups or min(batch, h_in, w_in, sh, sw, dh, dw) < 1
            or min(ph, pw) < 0):
        return None
    h_out, w_out = out_length(h_in, kh, sh, ph, dh), out_length(w_in, kw, sw, pw, dw)
    if h_out <= 0 or w_out <= 0:
        return None
    m = batch * h_out * w_out
    taps = cpg * kh * kw
    return Call(family=FAMILY, op=op, dtype=dt,
                dims=tuple(zip(DIMS, (cin, cout, w_in, kh, kw, sh, sw, ph, pw, dh, dw, groups),
                               strict=True)),
                m=m, point=f"{batch}x{h_in}",
                elements=batch * h_in * w_in * cin + cout * taps + m * cout,
                flops=2 * m * cout * taps, weight_elements=cout * taps)


def record_f_conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                    padding: Any = 0, dilation: Any = 1, groups: Any = 1) -> Call | Skip | None:
    """``torch.nn.functional.conv2d`` on ``(B, Cin, H, W)`` (or unbatched ``(Cin, H, W)``)."""
    if not hasattr(input, "dim") or input.dim() not in (3, 4):
        return None
    batch = int(input.shape[0]) if input.dim() == 4 else 1
    cin, h_in, w_in = (int(v) for v in input.shape[-3:])
    return conv_call("conv2d", input.dtype, batch, h_in, w_in, cin, weight, stride, padding,
                     dilation, groups)


def _nhwc(op: str, x: Any, weight: Any, stride: Any, padding: Any, dilation: Any,
          groups: Any) -> Call | Skip | None:
    if not hasattr(x, "dim") or x.dim() != 4:
        return None
    batch, h_in, w_in, cin = (int(v) for v in x.shape)
    return conv_call(op, x.dtype, batch, h_in, w_in, cin, weight, stride, padding, dilation,
                     groups)


record_conv2d, record_conv2d_activation = convolution.op_recorders(
    FAMILY, ACTIVATIONS, "relu", _nhwc)
"""The recorders of ``oasr_conv2d.conv2d`` and ``oasr_conv2d.conv2d_activation`` (NHWC data)."""


def recorder_patches() -> list[RecorderPatch]:
    """The conv2d family's patches (``Family.recorder_patches``)."""
    rows = convolution.recorder_rows(FAMILY, record_conv2d, record_conv2d_activation,
                                     record_f_conv2d, "nn.Conv2d and F.conv2d")
    return [RecorderPatch(family=FAMILY, target=target, record=fn, description=text)
            for target, fn, text in rows]
