"""The ops on CPU: the torch path computes what a model computes, counted by reason; the op
names, the custom ops' fake shapes and FX tracing, the packing cache, the numerics gate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import oasr_conv2d
from oasr_conv2d import ops, weights
from oasr_conv2d.numerics import make_operands, numerics_gate, reference, torch_conv

_ACT = {None: lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def _model(x, w, b, stride, pad, dil, groups, act):
    """What a model does on NCHW data, the result as NHWC."""
    y = F.conv2d(x.permute(0, 3, 1, 2).contiguous(), w, b, stride, pad, dil, groups)
    return _ACT[act](y).permute(0, 2, 3, 1)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("geo", [
    (1, 16, 3, 2, 0, 1, 1),          # the front end's first conv
    (16, 16, 3, 2, 0, 1, 1),         # its C -> C conv
    (8, 8, 3, (2, 1), (1, 0), (1, 2), 1),
    (8, 8, 3, 2, 1, 1, 8),           # depthwise (FastConformer)
    (8, 12, 1, 1, 0, 1, 1),          # pointwise
])
def test_cpu_calls_take_the_torch_path_and_match_torch(act, geo):
    cin, cout, k, stride, pad, dil, groups = geo
    x, w, b = make_operands(2, 21, 13, cin, cout, k, k, groups, "fp16")
    x, w, b = x.float(), w.float(), b.float()
    ops.reset_stats()
    y = oasr_conv2d.conv2d_activation(x, w, b, act, stride, pad, dil, groups)
    assert y.is_contiguous()
    torch.testing.assert_close(y, _model(x, w, b, stride, pad, dil, groups, act))
    assert ops.stats() == {"torch:grouped" if groups > 1 else "torch:cpu": 1}


def test_odd_parameters_are_torchs_to_judge():
    x, w, _b = make_operands(1, 10, 10, 4, 4, 3, 3, 1, "fp16")
    x, w = x.float(), w.float()
    ops.reset_stats()
    y = oasr_conv2d.conv2d(x, w, None, 1, "same")
    assert tuple(y.shape) == (1, 10, 10, 4) and ops.stats() == {"torch:params": 1}
    assert ops.params_of(1, "same", 1) is None and ops.params_of((2, 1), 0, [1, 1]) == (
        2, 1, 0, 0, 1, 1)
    with pytest.raises(RuntimeError):
        oasr_conv2d.conv2d(x, torch.empty(4, 5, 3, 3), None)


def test_op_names_key_the_activation():
    assert [ops.op_name(a) for a in (None, "relu", "gelu", "silu")] == list(ops.OPS)
    with pytest.raises(ValueError, match="activation 'tanh'"):
        oasr_conv2d.conv2d_activation(torch.empty(1, 4, 4, 1), torch.empty(4, 1, 1, 1), None,
                                      "tanh")


def test_the_custom_ops_have_fake_shapes_and_trace_into_fx():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        x = torch.empty(8, 1024, 80, 1, dtype=torch.float16)
        w = torch.empty(256, 1, 3, 3, dtype=torch.float16)
        y = torch.ops.oasr.conv2d_activation(x, w, None, "relu", [2, 2], [0, 0], [1, 1], 1)
        z = torch.ops.oasr.conv2d(x, w, None, [1, 2], [1, 1], [1, 1], 1)
    assert tuple(y.shape) == (8, 511, 39, 256) and tuple(z.shape) == (8, 1024, 40, 256)

    def front(x, w1, w2):
        h = torch.ops.oasr.conv2d_activation(x, w1, None, "relu", [2, 2], [0, 0], [1, 1], 1)
        return torch.ops.oasr.conv2d_activation(h, w2, None, "relu", [2, 2], [0, 0], [1, 1], 1)

    x, w1, w2 = torch.randn(1, 20, 16, 1), torch.randn(4, 1, 3, 3), torch.randn(4, 4, 3, 3)
    graph = make_fx(front, tracing_mode="fake")(x, w1, w2)
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.oasr.conv2d_activation.default] * 2
    torch.testing.assert_close(graph(x, w1, w2), front(x, w1, w2))


def test_packing_is_cached_on_the_weight_until_it_changes():
    w = torch.randn(256, 4, 3, 3)
    first = weights.packed(w)
    assert tuple(first.shape) == (256, 3, 3, 4) and first.is_contiguous()
    assert torch.equal(first, w.permute(0, 2, 3, 1))
    assert weights.packed(w) is first
    with torch.no_grad():
        w.mul_(2)
    again = weights.packed(w)
    assert again is not first and torch.equal(again, w.permute(0, 2, 3, 1))
    with pytest.raises(ValueError, match="is not"):
        weights.pack(torch.randn(4, 4, 3))


def test_the_gate_catches_a_wrong_edge_pixel_that_the_norm_hides():
    x, w, b = make_operands(4, 200, 80, 1, 64, 3, 3, 1, "fp16")
    ref = reference(x, w, b, 2, 0, 1, 1, "relu")
    good = torch_conv(x.float(), w.float(), b.float(), 2, 0, 1, 1, "relu").half()
    assert numerics_gate(good, good, ref)
    bad = good.clone()
    bad[0, 0, 0, 0] += 0.25
    verdict = numerics_gate(bad, good, ref)
    assert not verdict and "largest error" in verdict.reason
