"""GPU tests of the conv2d lane (run on the H200 with ``pytest -m gpu``).

Every config that runs on this device (the lane's whole-space module) runs at the speech front
end's shapes (the Conformer's 1 -> C 3x3 s2 and C -> C 3x3 s2 on 80 mel bins, a
depthwise-separable front end's pointwise 1x1) and at odd ones (extents no tile divides,
rectangular windows and strides, padding, dilation, narrow and unaligned widths), wherever the
config says it supports them: both dtypes, with and without a bias, every activation, against
an fp32 torch reference. Then refusals, CUDA-graph capture, and the op as served: torch for an
untuned shape, the kernel a user-tier entry names, graph capture of the served front end, and
the Conformer with ``conv2d_frontend`` against its torch self.
"""

from __future__ import annotations

import functools
import json
import zlib

import pytest
import torch
from oasr_core.kernel_testing import device_arch, device_config_ids, gpu_marks

from oasr_conv2d import jit, lanes, numerics, ops, space, weights
from oasr_conv2d.geometry import LANE, geometry

pytestmark = gpu_marks()
CONFIGS = device_config_ids(jit.PRODUCTION, LANE)

# (batch, h_in, w_in, c_in, c_out, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
SHAPES = {
    "conformer_first": (2, 203, 80, 1, 256, (3, 3), (2, 2), (0, 0), (1, 1)),
    "conformer_second": (2, 101, 39, 256, 256, (3, 3), (2, 2), (0, 0), (1, 1)),
    "small_width": (1, 77, 80, 1, 176, (3, 3), (2, 2), (0, 0), (1, 1)),
    "pointwise": (2, 50, 20, 256, 256, (1, 1), (1, 1), (0, 0), (1, 1)),
    "padded_odd": (3, 37, 29, 24, 40, (3, 5), (1, 2), (1, 2), (1, 1)),
    "dilated": (1, 40, 33, 16, 32, (3, 3), (1, 1), (2, 2), (2, 2)),
    "two_channels": (2, 31, 17, 2, 64, (3, 3), (2, 2), (1, 1), (1, 1)),
    "unaligned": (2, 20, 15, 7, 13, (3, 3), (1, 1), (1, 1), (1, 1)),
}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": (2e-2, 1e-2), "bf16": (6e-2, 2e-2)}


def _problem(name):
    b, h, w, cin, cout, k, s, p, d = SHAPES[name]
    return space.make_problem("conv2d", cin, cout, w, b, h, kernel=k, stride=s, padding=p,
                              dilation=d)


@functools.cache
def _kernels():
    from oasr_core import jit as core_jit

    from oasr_conv2d.launch import Kernel

    module = core_jit.load(jit.MODULES.full_spec(LANE, device_arch()))
    return {cid: Kernel.bind(module, lanes.config(LANE, cid)) for cid in CONFIGS}


@functools.cache
def _operands(name, dtype):
    b, h, w, cin, cout, (kh, kw), *_ = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()))
    x = (torch.rand((b, h, w, cin), generator=gen, device="cuda") * 2 - 1).to(TORCH_DTYPES[dtype])
    wt = ((torch.rand((cout, cin, kh, kw), generator=gen, device="cuda") * 2 - 1)
          / (cin * kh * kw) ** 0.5).to(TORCH_DTYPES[dtype])
    bias = (torch.rand(cout, generator=gen, device="cuda") * 2 - 1).to(TORCH_DTYPES[dtype])
    return x, wt, bias


@pytest.mark.parametrize("cid", CONFIGS)
def test_every_config_matches_the_fp32_reference_where_it_runs(cid):
    config = lanes.config(LANE, cid)
    kernel = _kernels()[cid]
    ran = 0
    for name, (b, h, w, cin, cout, k, s, p, d) in SHAPES.items():
        if not space.supports(config, _problem(name)):
            continue
        geo = geometry(b, h, w, cin, cout, *k, *s, *p, *d)
        for dtype in ("fp16", "bf16"):
            x, wt, bias = _operands(name, dtype)
            packed = weights.pack(wt)
            for act, with_bias in ((None, False), ("relu", True), ("gelu", True),
                                   ("silu", False)):
                b_arg = bias if with_bias else None
                y = kernel.run(x, packed, b_arg, geo, act)
                ref = numerics.reference(x, wt, b_arg, s, p, d, 1, act)
                atol, rtol = TOLERANCE[dtype]
                where = f"{cid} {name} {dtype} {act}"
                torch.testing.assert_close(y.float(), ref, atol=atol, rtol=rtol,
                                           msg=lambda m, w=where: f"{w}: {m}")
            ran += 1
    assert ran, f"{cid} supports none of the shapes"


def test_refusals_and_graph_capture():
    from oasr_core.kit import LaunchError

    kernel = _kernels()[space.DEFAULT]
    x, wt, bias = _operands("conformer_second", "fp16")
    geo = geometry(2, 101, 39, 256, 256, 3, 3, 2, 2)
    with pytest.raises(LaunchError):
        kernel.prepare(geometry(2, 20, 15, 7, 16, 3, 3), "fp16", None)  # Cin 7: not 16-byte
    packed = weights.pack(wt)
    out = kernel.run(x, packed, bias, geo, "relu")
    plan = kernel.prepare(geo, "fp16", "relu")
    replay = torch.empty_like(out)
    dev = x.get_device()
    plan(dev, x.data_ptr(), packed.data_ptr(), bias.data_ptr(), replay.data_ptr())
    graph = torch.cuda.CUDAGraph()
    captured = torch.zeros_like(out)
    with torch.cuda.graph(graph):
        plan(dev, x.data_ptr(), packed.data_ptr(), bias.data_ptr(), captured.data_ptr())
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, out) and torch.equal(replay, out)


def _user_tier(tmp_path, key, config_id, point):
    from oasr_conv2d import hooks

    (family,) = hooks.oasr_register_families()
    raw = {"schema_version": 2, "family": "conv2d", "family_schema_version": 1,
           "arch": {"family": device_arch(), "lane": LANE},
           "validators": {"soft": dict(family.soft_validators())},
           "configs": {config_id: lanes.config(LANE, config_id).to_json()},
           "entries": {key: {"regions": [], "points": {point: config_id}}}}
    path = tmp_path / device_arch() / "conv2d.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(raw))


def test_the_op_serves_torch_untuned_and_the_tiers_kernel_when_tuned(tmp_path, monkeypatch):
    import oasr_core

    x, wt, bias = _operands("conformer_first", "fp16")
    ops.reset_stats()
    y = ops.conv2d_activation(x, wt, bias, "relu", stride=2)
    assert ops.stats() == {"torch:selected": 1}
    key = ("conv2d|op=conv2d_relu|dt=half|Cin=1|Cout=256|W=80|kh=3|kw=3|sh=2|sw=2|ph=0|pw=0|"
           "dh=1|dw=1|groups=1")
    _user_tier(tmp_path, key, space.FEW_CHANNELS_DEFAULT, "2x203")
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    oasr_core.reload()
    ops.reset_stats()
    tuned = ops.conv2d_activation(x, wt, bias, "relu", stride=2)
    assert ops.stats() == {}, "the tier's kernel served"
    torch.testing.assert_close(tuned.float(), y.float(), atol=2e-2, rtol=1e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops.conv2d_activation(x, wt, bias, "relu", stride=2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, tuned)


def test_the_conformer_front_end_served_matches_torch():
    from oasr_core.census import models

    from oasr_conv2d.layer import conv_layer

    kw = dict(d_model=144, heads=4, ffn_dim=576, kernel_size=31, layers=2)
    torch.manual_seed(0)
    plain = models.ConformerEncoder(**kw).cuda().half().eval()
    torch.manual_seed(0)
    served = models.ConformerEncoder(served={"Conv2d": conv_layer}, conv2d_frontend=True,
                                     **kw).cuda().half().eval()
    feats = torch.randn(2, 300, 80, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        torch.testing.assert_close(served(feats).float(), plain(feats).float(), atol=3e-2,
                                   rtol=3e-2)
