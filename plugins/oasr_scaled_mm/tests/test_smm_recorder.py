"""The census sees scaled_mm calls: a real small torch model on the CPU and on meta."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from oasr_core.census.recorder import Call, ShapeRecorder, patches_of
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from torch import nn

import oasr_scaled_mm.hooks
import oasr_scaled_mm.quantize
from oasr_scaled_mm import config_space as cs
from oasr_scaled_mm import ops, recorder
from oasr_scaled_mm.quantize import quantized_linear


class TinyQuantized(nn.Module):
    """Two quantized linears around a ReLU, and one quantizing GEMM called directly."""

    def __init__(self, d: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(quantized_linear(x, self.up))
        y = quantized_linear(h, self.down)
        state = oasr_scaled_mm.quantize.quantized_weight(self.up)
        q, scale = oasr_scaled_mm.quantize.quantize_rows(x)
        ops.scaled_mm_quant(q, state.weight, scale, state.scale, 0.1, state.bias)
        return y


def _expected(b: int, t: int) -> dict[Call, int]:
    m = b * t

    def call(op, n, k):
        return Call(family=cs.FAMILY, op=op, dtype="int8", dims=(("N", n), ("K", k)), m=m,
                    elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)

    return {call(cs.OP_MM, 128, 64): 1, call(cs.OP_MM, 64, 128): 1,
            call(cs.OP_QUANT, 128, 64): 1}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_small_quantized_model_is_recorded(device):
    model = TinyQuantized().to(device).eval()
    x = torch.randn(3, 7, 64, device=device)
    with ShapeRecorder(recorder.recorder_patches(), strict=True) as rec, torch.no_grad():
        y = model(x)
    assert y.shape == (3, 7, 64) and y.dtype == torch.float32 and y.device.type == device
    assert dict(rec.counts) == _expected(3, 7)
    assert rec.unresolved == []
    assert ops.stats() == ({} if device == "meta" else {"torch:cpu": 3})


def test_a_name_imported_before_recording_is_seen(monkeypatch):
    module = types.ModuleType("smm_alias_user")
    exec("from oasr_scaled_mm.ops import scaled_mm as smm\n"
         "def run(*args):\n    return smm(*args)\n", module.__dict__)
    monkeypatch.setitem(sys.modules, "smm_alias_user", module)
    a = torch.empty(5, 256, dtype=torch.int8, device="meta")
    w = torch.empty(768, 256, dtype=torch.int8, device="meta")
    with ShapeRecorder(recorder.recorder_patches(), strict=True) as rec:
        module.run(a, w, torch.empty(5, device="meta"), torch.empty(768, device="meta"))
    (call,) = rec.counts
    assert (call.op, call.dtype, call.dims, call.m) == (cs.OP_MM, "int8",
                                                        (("N", 768), ("K", 256)), 5)
    assert module.smm is ops.scaled_mm


def test_record_functions_ignore_what_is_not_an_int8_gemm():
    f16 = torch.empty(4, 64, dtype=torch.float16, device="meta")
    i8 = torch.empty(4, 64, dtype=torch.int8, device="meta")
    w8 = torch.empty(32, 64, dtype=torch.int8, device="meta")
    assert recorder.record_scaled_mm(f16, w8) is None
    assert recorder.record_scaled_mm(i8, torch.empty(32, 48, dtype=torch.int8)) is None
    assert recorder.record_scaled_mm(i8[:0], w8) is None
    got = recorder.record_scaled_mm_quant(i8, w8, None, None, 0.5)
    assert got.label == "scaled_mm|op=scaled_mm_quant|dt=int8|N=32|K=64" and got.m == 4


def test_the_family_patches_are_found_through_the_registry():
    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    pm.register(oasr_scaled_mm.hooks, name="scaled_mm")
    patches = patches_of(Registry.from_plugin_manager(pm, strict=True))
    assert {p.target for p in patches} == {"oasr_scaled_mm.ops:scaled_mm",
                                           "oasr_scaled_mm.ops:scaled_mm_quant"}


def test_the_reference_conformer_quantized_through_the_hook_on_meta():
    from oasr_core.census import workloads

    pm = make_plugin_manager(load_entrypoints=False, strict=True)
    pm.register(oasr_scaled_mm.hooks, name="scaled_mm")
    from oasr_scaled_mm import linear

    assert workloads.served_linear(pm, dtype="fp16", quantization="int8_w8a8") is linear.linear
    model = workloads.ReferenceFactory("ConformerEncoder", pm)(
        family_ops=False, quantization="int8_w8a8", dtype="fp16", layers=2)
    model = model.to(device="meta", dtype=torch.float16).eval()
    with ShapeRecorder(recorder.recorder_patches(), strict=True) as rec, torch.no_grad():
        model(torch.empty(2, 101, 80, device="meta", dtype=torch.float16))
    ops_seen = {(c.op, c.dtype, dict(c.dims)["N"], dict(c.dims)["K"]) for c in rec.counts}
    assert (cs.OP_MM, "int8", 1024, 256) in ops_seen                # feed-forward up
    assert (cs.OP_MM, "int8", 256, 1024) in ops_seen                # feed-forward down
    assert all(c.family == cs.FAMILY for c in rec.counts)
    assert ops.stats() == {}

