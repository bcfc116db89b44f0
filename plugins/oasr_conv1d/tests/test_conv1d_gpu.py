"""GPU tests of the depthwise kernels and the ops (run on the H200 with ``pytest -m gpu``).

Covered: every depthwise config of the device's lanes at the Conformer's shapes (C = 144,
256, 512, kernel 31, pad 15; B 1..32, T 50..1024) and at odd shapes (T shorter than a tile,
the halo larger than T, C not a multiple of the C tile, the general kernel at strides and
dilations), both dtypes, every activation with and without bias; the ops through selection
(a user tier naming configs), the torch fallback when a launcher refuses, CUDA-graph capture
after an eager warm-up (the weight packed outside the capture), ``torch.compile`` of a
module calling the op, and the ``oasr_layer`` answer on an ``nn.Conv1d``. Correctness is the
family's numerics gate (:mod:`oasr_conv1d.numerics`): relative error within 4x of torch's
and the largest error within 8x of torch's largest, against an fp32 reference.
"""

from __future__ import annotations

import json

import pytest
import torch
from oasr_core.kit import LaunchError

from oasr_conv1d import bench, jit, lanes, launch, numerics, ops, weights
from oasr_conv1d import depthwise as dw
from oasr_conv1d.geometry import LANE_SM80, LANE_SM90, geometry

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CONFORMER = ((144, 1, 50), (144, 8, 256), (256, 1, 64), (256, 16, 256), (256, 32, 1024),
             (512, 4, 500), (512, 2, 2000), (1024, 2, 128))
ODD = ((256, 3, 7, 31, 1, 15, 1), (64, 2, 20, 31, 1, 40, 1), (200, 2, 77, 31, 1, 15, 1),
       (48, 1, 300, 15, 1, 7, 1), (8, 2, 33, 5, 2, 2, 3), (6, 3, 41, 3, 1, 1, 1),
       (136, 2, 99, 9, 3, 4, 2))
"""(C, B, T, k, stride, pad, dil)."""


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}"


def _lanes() -> tuple[str, ...]:
    return tuple(lane for lane in (LANE_SM90, LANE_SM80) if jit.lane_configs(lane, _arch()))


@pytest.fixture(scope="module")
def kernels():
    """Every depthwise config of each lane, in one module per lane (whole depthwise space)."""
    from oasr_core import jit as core_jit

    out = {}
    for lane in _lanes():
        configs = [c for c in jit.lane_configs(lane, _arch()) if dw.is_depthwise(c)]
        module = core_jit.load(jit.module_spec(lane, _arch(), configs,
                                               name=f"{jit.MODULE_PREFIX[lane]}_dw_tests"))
        out[lane] = {c.id: launch.Kernel.bind(module, c) for c in configs
                     if lanes.symbol(c) in module.exports}
        assert len(out[lane]) == len(configs), (lane, sorted(module.failed))
    return out


def _check(kernel, c, batch, t_in, k, stride, pad, dil, dtype, act, bias=True, seed=0):
    x, w, b = numerics.make_operands(batch, t_in, c, c, k, c, dtype, bias=bias, device="cuda",
                                     seed=seed)
    geo = geometry(batch, t_in, c, c, k, stride, pad, dil, c)
    out = kernel.run(x, weights.pack(w, weights.DEPTHWISE), b, geo, act)
    torch.cuda.synchronize()
    ref = numerics.reference(x, w, b, stride, pad, dil, c, act)
    mine = numerics.torch_conv(x, w, b, stride, pad, dil, c, act)
    verdict = numerics.numerics_gate(out, mine, ref, dtype=dtype)
    assert verdict, (kernel.config.id, c, batch, t_in, k, stride, pad, dil, dtype, act, verdict)


@pytest.mark.parametrize("shape", CONFORMER, ids=lambda s: "C{}_B{}_T{}".format(*s))
def test_every_depthwise_config_at_the_conformer_shapes(kernels, shape):
    c, batch, t_in = shape
    for by_id in kernels.values():
        for kernel in by_id.values():
            cfg = kernel.config
            probe = bench_problem(c, 31, 1, 15, 1, batch, t_in, "conv1d_silu")
            if not lanes.supports(cfg, probe):
                continue
            _check(kernel, c, batch, t_in, 31, 1, 15, 1, "fp16", "silu")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_activations_dtypes_and_bias(kernels, dtype, act):
    for by_id in kernels.values():
        for cid in (dw.DEFAULT, "dw31_v4_16x8_tp8_smem", dw.space.GENERAL_DEFAULT):
            for bias in (True, False):
                _check(by_id[cid], 256, 3, 100, 31, 1, 15, 1, dtype, act, bias=bias)


@pytest.mark.parametrize("shape", ODD, ids=lambda s: "C{}_B{}_T{}_k{}_s{}_p{}_d{}".format(*s))
def test_odd_shapes_on_every_config_that_takes_them(kernels, shape):
    c, batch, t_in, k, stride, pad, dil = shape
    ran = 0
    for by_id in kernels.values():
        for kernel in by_id.values():
            if lanes.supports(kernel.config, bench_problem(c, k, stride, pad, dil, batch, t_in,
                                                           "conv1d_gelu")):
                _check(kernel, c, batch, t_in, k, stride, pad, dil, "bf16", "gelu")
                ran += 1
    assert ran, f"no depthwise config takes {shape}"


def bench_problem(c, k, stride, pad, dil, batch, t_in, op):
    from oasr_core.types import Problem

    t_out = (t_in + 2 * pad - dil * (k - 1) - 1) // stride + 1
    return Problem(family="conv1d", op=op, dtype="fp16",
                   dims=(("Cin", c), ("Cout", c), ("k", k), ("stride", stride), ("pad", pad),
                         ("dil", dil), ("groups", c)), m=batch * t_out, point=f"{batch}x{t_in}")


def test_a_refused_shape_returns_the_status_and_the_op_falls_back(kernels):
    lane = _lanes()[0]
    kernel = kernels[lane][dw.DEFAULT]
    geo = geometry(2, 64, 256, 256, 15, 1, 7, 1, 256)  # 15 taps: the 31-tap kernel refuses
    with pytest.raises(LaunchError):
        kernel.prepare(geo, "fp16", None)


def _user_tier(tmp_path, monkeypatch, lane, choice, key_op="conv1d_silu", c=256, points=None):
    (family,) = __import__("oasr_conv1d.hooks").hooks.oasr_register_families()
    key = (f"conv1d|op={key_op}|dt=half|Cin={c}|Cout={c}|k=31|stride=1|pad=15|dil=1|"
           f"groups={c}")
    raw = {"schema_version": 2, "family": "conv1d", "family_schema_version": 1,
           "arch": {"family": _arch(), "lane": lane},
           "validators": {"soft": dict(family.soft_validators())},
           "configs": {choice: lanes.config(lane, choice).to_json()},
           "entries": {key: {"regions": [[None, choice]], "points": points or {}}}}
    path = tmp_path / "user" / _arch() / "conv1d.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    monkeypatch.setenv("OASR_CONV1D_COMPILE_SET", "tuned")
    from oasr_core import runtime
    runtime.get_runtime().reload()


def _lane_default_on():
    return LANE_SM90 if _arch() == "sm90" else LANE_SM80


def test_the_op_serves_a_tuned_config_and_matches_torch(tmp_path, monkeypatch):
    lane = _lane_default_on()
    _user_tier(tmp_path, monkeypatch, lane, "dw31_v4_16x8_tp8_smem")
    x, w, b = numerics.make_operands(4, 300, 256, 256, 31, 256, "fp16", device="cuda")
    ops.reset_stats()
    y = ops.conv1d_activation(x, w, b, "silu", padding=15, groups=256)
    assert ops.stats() == {}, "served by the kernel, not torch"
    ref = numerics.reference(x, w, b, 1, 15, 1, 256, "silu")
    assert numerics.numerics_gate(y, numerics.torch_conv(x, w, b, 1, 15, 1, 256, "silu"), ref)
    # No entry for GELU: the untuned route answers. At M = B * T = 1200 it serves the
    # heuristic's depthwise config (measured to beat torch there); below lanes.UNTUNED_MIN_M
    # torch serves it, counted.
    ops.reset_stats()
    y = ops.conv1d_activation(x, w, b, "gelu", padding=15, groups=256)
    assert ops.stats() == {}, "the untuned route serves GELU at M 1200 with a kernel"
    ref = numerics.reference(x, w, b, 1, 15, 1, 256, "gelu")
    assert numerics.numerics_gate(y, numerics.torch_conv(x, w, b, 1, 15, 1, 256, "gelu"), ref)
    small = x[:1, :64].contiguous()
    assert small.shape[0] * small.shape[1] < lanes.UNTUNED_MIN_M
    ops.conv1d_activation(small, w, b, "gelu", padding=15, groups=256)
    assert ops.stats() == {"torch:selected": 1}, "no entry, below the untuned M: torch"


def test_graph_capture_after_an_eager_warm_up(tmp_path, monkeypatch):
    _user_tier(tmp_path, monkeypatch, _lane_default_on(), dw.DEFAULT)
    x, w, b = numerics.make_operands(8, 256, 256, 256, 31, 256, "fp16", device="cuda")
    eager = ops.conv1d_activation(x, w, b, "silu", padding=15, groups=256)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        ops.conv1d_activation(x, w, b, "silu", padding=15, groups=256)
        with torch.cuda.graph(graph, stream=stream):
            captured = ops.conv1d_activation(x, w, b, "silu", padding=15, groups=256)
    torch.cuda.current_stream().wait_stream(stream)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    again = ops.conv1d_activation(x, w, b, "silu", padding=15, groups=256)
    torch.testing.assert_close(captured, again, rtol=0, atol=0)
    assert not torch.equal(eager, again)
    fresh = torch.randn_like(w)
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph2, stream=stream):
        ops.conv1d_activation(x, fresh, b, "silu", padding=15, groups=256)
    assert ops.stats().get("torch:unpacked") == 1, "an unpacked weight is never packed in capture"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(256, 256, 31, padding=15, groups=256)

    def forward(self, x):
        from oasr_conv1d.layer import conv_layer

        return conv_layer(x, self.conv, "silu") + 1.0


def test_torch_compile_of_a_module_calling_the_op(tmp_path, monkeypatch):
    _user_tier(tmp_path, monkeypatch, _lane_default_on(), dw.DEFAULT)
    block = _Block().cuda().half().eval()
    x = torch.randn(2, 128, 256, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)(x)
        expect = numerics.torch_conv(x, block.conv.weight, block.conv.bias, 1, 15, 1, 256,
                                     "silu") + 1.0
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    torch.testing.assert_close(eager, expect, rtol=2e-2, atol=2e-2)


def test_the_bench_adapter_gates_and_times_every_arm():
    from oasr_core.bench import BenchOptions

    lane = _lane_default_on()
    problem = bench_problem(256, 31, 1, 15, 1, 4, 200, "conv1d_silu")
    choices = [lanes.config(lane, dw.DEFAULT), lanes.config(lane, "dw31_v8_8x16_tp4_smem")]
    from oasr_core.types import Sentinel

    options = BenchOptions(device="cuda", lane=lane)
    case = bench.make_bench(problem, [*choices, Sentinel.TORCH], options)
    assert set(case.arms) == {dw.DEFAULT, "dw31_v8_8x16_tp4_smem", "torch"}, case.rejected
    for arm in case.arms.values():
        assert case.gate(arm(0))
