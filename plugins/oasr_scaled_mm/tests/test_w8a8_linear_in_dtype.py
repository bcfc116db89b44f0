"""A quantized linear's unquantized path (``oasr_scaled_mm.w8a8.scaled_ops.linear_in_dtype``):
through the unquantized linear an installed plugin serves for the activation dtype, with the
activation handed to it, resolved once per epoch; ``F.linear`` and the activation in torch
without one."""

from __future__ import annotations

import pytest
import torch
from oasr_core import hookimpl, runtime
from oasr_core.errors import OasrWarning
from oasr_core.plugins import make_plugin_manager
from torch import nn
from torch.nn import functional as F

from oasr_scaled_mm import ops as int8_ops
from oasr_scaled_mm.w8a8 import scaled_ops


class Unquantized:
    """A plugin serving an unquantized fp16 linear that records its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.asked: list[tuple[str, str]] = []
        self.calls: list[tuple[tuple[int, ...], str | None]] = []
        self.fail = fail

    @hookimpl
    def oasr_linear(self, dtype, quantization):
        self.asked.append((dtype, quantization))
        if self.fail:
            raise RuntimeError("broken on purpose")
        if dtype != "fp16" or quantization != "none":
            return None

        def linear(x, layer, activation=None):
            self.calls.append((tuple(x.shape), activation))
            y = F.linear(x, layer.weight, layer.bias)
            return y if activation is None else getattr(F, activation)(y)

        return linear


@pytest.fixture
def install():
    def make(*plugins):
        pm = make_plugin_manager(load_entrypoints=False)
        for i, plugin in enumerate(plugins):
            pm.register(plugin, name=f"plugin{i}")
        rt = runtime.Runtime(pm=pm)
        runtime.install_runtime(rt)
        int8_ops.clear_memo()
        return rt

    yield make
    runtime.install_runtime(None)
    int8_ops.clear_memo()


def layer_and_input(dtype=torch.float16):
    torch.manual_seed(0)
    layer = nn.Linear(16, 8).to(dtype)
    return layer, torch.randn(4, 16).to(dtype)


def test_the_installed_linear_serves_with_the_activation_fused(install):
    plugin = Unquantized()
    install(plugin)
    layer, x = layer_and_input()
    y = scaled_ops.linear_in_dtype(x, layer, "silu", serving=int8_ops.SERVING)
    assert plugin.calls == [((4, 16), "silu")]
    assert torch.equal(y, F.silu(F.linear(x, layer.weight, layer.bias)))
    scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING)
    assert plugin.calls[-1] == ((4, 16), None)
    assert plugin.asked == [("fp16", "none")], "resolved once per epoch"


def test_without_a_plugin_or_serving_it_is_torch(install):
    install()
    layer, x = layer_and_input()
    want = F.gelu(F.linear(x, layer.weight, layer.bias))
    assert torch.equal(scaled_ops.linear_in_dtype(x, layer, "gelu", serving=int8_ops.SERVING),
                       want)
    plugin = Unquantized()
    install(plugin)
    assert torch.equal(scaled_ops.linear_in_dtype(x, layer, "gelu"), want)
    assert plugin.calls == [] and plugin.asked == [], "no serving: never asked"


def test_a_weight_in_another_dtype_is_converted_and_runs_on_torch(install):
    plugin = Unquantized()
    install(plugin)
    layer, x = layer_and_input(torch.float32)
    x = x.half()
    y = scaled_ops.linear_in_dtype(x, layer, "relu", serving=int8_ops.SERVING)
    assert plugin.calls == [] and y.dtype == torch.float16
    assert torch.equal(y, F.relu(F.linear(x, layer.weight.half(), layer.bias.half())))


def test_a_failing_hook_is_one_warning_and_torch(install):
    install(Unquantized(fail=True))
    layer, x = layer_and_input()
    with pytest.warns(OasrWarning, match="no unquantized linear for fp16"):
        y = scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING)
    assert torch.equal(y, F.linear(x, layer.weight, layer.bias))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING)


class WithResidual(Unquantized):
    """An unquantized linear that also takes a residual (as the gemm family's does)."""

    @hookimpl
    def oasr_linear(self, dtype, quantization):
        if dtype != "fp16" or quantization != "none":
            return None

        def linear(x, layer, activation=None, *, residual=None, alpha=1.0):
            self.calls.append((tuple(x.shape), "residual" if residual is not None else None))
            y = F.linear(x, layer.weight, layer.bias)
            return y if residual is None else residual + alpha * y

        return linear


def test_a_residual_is_handed_to_a_linear_that_takes_one_else_added_in_torch(install):
    layer, x = layer_and_input()
    residual = torch.randn(4, 8).half()
    y_lin = F.linear(x, layer.weight, layer.bias)
    fused = WithResidual()
    install(fused)
    y = scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING, residual=residual,
                                   alpha=0.5)
    assert fused.calls == [((4, 16), "residual")]
    assert torch.equal(y, residual + 0.5 * y_lin)
    plain = Unquantized()
    install(plain)
    y = scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING, residual=residual)
    assert plain.calls == [((4, 16), None)] and torch.equal(y, residual + y_lin)
    install()
    y = scaled_ops.linear_in_dtype(x, layer, serving=int8_ops.SERVING, residual=residual,
                                   alpha=0.5)
    assert torch.equal(y, residual + 0.5 * y_lin)
    with pytest.raises(ValueError, match="residual add after activation 'silu'"):
        scaled_ops.linear_in_dtype(x, layer, "silu", residual=residual)


def test_both_quantized_linears_take_a_residual():
    from oasr_core.census.models import takes_residual
    from oasr_scaled_mm_fp8 import linear as fp8_linear

    from oasr_scaled_mm import linear as int8_linear

    assert takes_residual(int8_linear.linear) and takes_residual(fp8_linear.linear)
