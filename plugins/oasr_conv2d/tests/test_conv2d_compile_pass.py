"""The conv2d pattern of the oasr compile backend on CPU: a real front end (two 3x3 stride-2
convs with ReLU, then the projection's transpose) traced by AOTAutograd with Inductor's
decompositions, the pass run on that ATen graph and the graph executed (the op's torch path
computes it): untuned, both convs stay Inductor's; where a tier names a config, the site
becomes the fused op on NHWC data, its ReLU taken, the output handed back as NCHW."""

from __future__ import annotations

import json

import oasr_core
import oasr_core.compile as oc
import pytest
import torch
from oasr_core.testing import aot_pass_backend
from torch import nn

from oasr_conv2d import hooks, lanes, space
from oasr_conv2d.geometry import LANE


class FrontEnd(nn.Module):
    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, c, 3, 2), nn.ReLU(), nn.Conv2d(c, c, 3, 2),
                                  nn.ReLU())

    def forward(self, feats):
        h = self.conv(feats.unsqueeze(1))
        b, c, t, f = h.shape
        return h.transpose(1, 2).reshape(b, t, c * f)


def _run(model, x):
    torch._dynamo.reset()
    backend = oc.backend(arch="sm90")
    graphs = []
    with torch.no_grad():
        out = torch.compile(model, backend=aot_pass_backend(backend.graph_pass, graphs))(x)
        ref = model(x)
    targets = [str(n.target) for n in graphs[0].nodes if n.op == "call_function"]
    return backend, targets, out, ref


def _table(root, key, config_id, point):
    (family,) = hooks.oasr_register_families()
    raw = {"schema_version": 2, "family": "conv2d", "family_schema_version": 1,
           "arch": {"family": "sm90", "lane": LANE},
           "validators": {"soft": dict(family.soft_validators())},
           "configs": {config_id: lanes.config(LANE, config_id).to_json()},
           "entries": {key: {"regions": [], "points": {point: config_id}}}}
    path = root / "sm90" / "conv2d.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(raw))


def test_untuned_convs_stay_inductors(model):
    _untuned(model)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return FrontEnd().eval().bfloat16()


def _untuned(model):
    x = torch.randn(2, 64, 40, dtype=torch.bfloat16)
    backend, targets, out, ref = _run(model, x)
    assert not backend.rewritten
    assert targets.count("aten.convolution.default") == 2
    torch.testing.assert_close(out, ref)
    return targets


def test_a_tuned_conv_goes_nhwc_to_the_op_with_its_relu(model, tmp_path, monkeypatch):
    untuned = _untuned(model)
    key = ("conv2d|op=conv2d_relu|dt=half|Cin=1|Cout=32|W=40|kh=3|kw=3|sh=2|sw=2|ph=0|pw=0|"
           "dh=1|dw=1|groups=1")
    _table(tmp_path, key, space.FEW_CHANNELS_DEFAULT, "2x64")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    oasr_core.reload()
    x = torch.randn(2, 64, 40, dtype=torch.bfloat16)
    backend, targets, out, ref = _run(model, x)
    assert backend.rewritten == {("conv2d", "conv2d_relu"): 1}
    assert targets.count("oasr.conv2d_activation.default") == 1
    assert targets.count("aten.convolution.default") == 1, "the C -> C conv has no entry"
    # One input plane: [B, 1, T, F] is NHWC already, so no copy before the op (the clone
    # the graph holds is the projection's transpose, there untuned too).
    assert targets.count("aten.clone.default") == untuned.count("aten.clone.default")
    assert "aten.relu.default" in targets and targets.count("aten.relu.default") == 1
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    other = torch.randn(2, 96, 40, dtype=torch.bfloat16)  # another point: no entry
    backend, targets, _, _ = _run(model, other)
    assert not backend.rewritten
