"""The dense launch helpers on CPU: weight packing and the fp32 reference."""

from __future__ import annotations

import pytest
import torch

from oasr_conv1d import dense


def test_pack_weight_is_the_krsc_filter_with_r_1():
    w = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)  # (Cout, Cin, k)
    packed = dense.pack_weight(w)
    assert packed.shape == (2, 4, 3) and packed.is_contiguous()
    for o in range(2):
        for c in range(3):
            for t in range(4):
                assert packed[o, t, c] == w[o, c, t]


def test_pack_weight_refuses_what_is_not_a_conv1d_weight():
    with pytest.raises(ValueError, match=r"weight of shape \(6, 4\) is not \(Cout, Cin, k\)"):
        dense.pack_weight(torch.zeros(6, 4))


def test_the_reference_is_the_channels_last_conv_as_an_implicit_gemm():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((2, 23, 5), generator=gen)
    w = torch.randn((7, 5, 3), generator=gen)
    b = torch.randn((7,), generator=gen)
    stride, pad, dil = 2, 2, 2
    got = dense.reference(x, w, b, stride=stride, padding=pad, dilation=dil, activation="relu")
    # The implicit GEMM spelled out: row (n, t) of X' gathers x[n, t*stride - pad + j*dil, :].
    packed = dense.pack_weight(w).reshape(7, -1)
    padded = torch.nn.functional.pad(x, (0, 0, pad, pad))
    t_out = got.shape[1]
    rows = torch.stack([padded[:, t * stride: t * stride + 2 * dil + 1: dil, :].reshape(2, -1)
                        for t in range(t_out)], dim=1)
    want = torch.relu(rows @ packed.T + b)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == torch.float32 and got.shape == (2, (23 + 4 - 5) // 2 + 1, 7)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_the_reference_applies_each_activation_after_the_bias(activation):
    x = torch.randn((1, 9, 4), dtype=torch.float16)
    w = torch.randn((8, 4, 3), dtype=torch.float16)
    b = torch.randn((8,), dtype=torch.float16)
    plain = dense.reference(x, w, b, padding=1)
    act = {None: lambda t: t, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
           "silu": torch.nn.functional.silu}[activation]
    torch.testing.assert_close(dense.reference(x, w, b, padding=1, activation=activation),
                               act(plain))
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        dense.reference(x, w, b, activation="tanh")
