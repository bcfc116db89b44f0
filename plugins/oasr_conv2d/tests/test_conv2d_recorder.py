"""The census sees F.conv2d / nn.Conv2d and the family's ops: dims, M, point, and a counted
skip for every argument form it keys no point for; the Conformer's front end end to end."""

from __future__ import annotations

import pytest
import torch
from oasr_core.census import models
from oasr_core.census.recorder import ShapeRecorder, Skip

import oasr_conv2d
from oasr_conv2d import recorder
from oasr_conv2d.layer import conv_layer, layer_for
from oasr_conv2d.ops_names import DIMS


def _record(fn):
    rec = ShapeRecorder(recorder.recorder_patches(), strict=True)
    with rec:
        fn()
    return dict(rec.counts), rec


def test_nn_conv2d_is_recorded_with_its_exact_point():
    conv = torch.nn.Conv2d(1, 256, 3, stride=2).to("meta")
    calls, _ = _record(lambda: conv(torch.empty(8, 1, 1024, 80, device="meta")))
    (call, n), = calls.items()
    assert n == 1 and call.family == "conv2d" and call.op == "conv2d"
    assert dict(call.dims) == dict(zip(DIMS, (1, 256, 80, 3, 3, 2, 2, 0, 0, 1, 1, 1),
                                       strict=True))
    assert (call.m, call.batch, call.point) == (8 * 511 * 39, 1, "8x1024")
    assert call.flops == 2 * 8 * 511 * 39 * 256 * 9 and call.weight_elements == 256 * 9


@pytest.mark.parametrize(("kwargs", "dims", "point"), [
    (dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)), (2, 1, 1, 0, 1, 2), "2x20"),
    (dict(padding="same"), (1, 1, 1, 1, 1, 1), "2x20"),
    (dict(padding="valid", stride=2), (2, 2, 0, 0, 1, 1), "2x20"),
    # A reflect-padded conv runs F.pad, then the conv on the padded input with padding 0.
    (dict(padding=1, padding_mode="reflect"), (1, 1, 0, 0, 1, 1), "2x22"),
    (dict(groups=4, stride=2, padding=1), (2, 2, 1, 1, 1, 1), "2x20"),  # grouped: a point
])
def test_every_argument_form_is_a_point(kwargs, dims, point):
    conv = torch.nn.Conv2d(8, 8, 3, **kwargs)
    calls, _ = _record(lambda: conv(torch.randn(2, 8, 20, 12)))
    (call, _n), = calls.items()
    got = dict(call.dims)
    assert tuple(got[d] for d in ("sh", "sw", "ph", "pw", "dh", "dw")) == dims
    assert got["groups"] == kwargs.get("groups", 1) and call.point == point


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")
def test_forms_without_a_point_are_counted_skips():
    x, w = torch.randn(1, 4, 10, 10), torch.randn(4, 4, 2, 2)
    assert isinstance(recorder.record_f_conv2d(x, w, padding="same"), Skip)
    assert isinstance(recorder.record_f_conv2d(x, w, stride=(1, 1, 1)), Skip)
    assert isinstance(recorder.record_f_conv2d(x, w, padding=1.5), Skip)
    assert recorder.record_f_conv2d(x.long(), w.long()) is None
    assert recorder.record_f_conv2d(torch.randn(4, 10), w) is None
    conv = torch.nn.Conv2d(4, 4, 2, padding="same")
    calls, rec = _record(lambda: conv(x))
    assert not calls and sum(rec.skipped.values()) == 1
    unbatched = recorder.record_f_conv2d(torch.randn(4, 10, 10), w)
    assert unbatched.point == "1x10" and unbatched.m == 81


def test_the_family_ops_and_the_layer_hook_are_recorded_under_their_op():
    assert layer_for("Conv2d", "fp16", "none") is conv_layer
    assert layer_for("Conv2d", "fp16", "int8_w8a8") is None
    assert layer_for("Conv1d", "fp16", "none") is None
    conv = torch.nn.Conv2d(1, 16, 3, 2).to("meta").eval()
    x = torch.empty(4, 100, 80, 1, device="meta")

    def run():
        conv_layer(x, conv, "relu")
        oasr_conv2d.conv2d(x, conv.weight, None, 2)

    calls, _ = _record(run)
    assert sorted((c.op, n) for c, n in calls.items()) == [("conv2d", 1), ("conv2d_relu", 1)]
    assert {c.point for c in calls} == {"4x100"}


def test_the_conformer_front_end_is_recorded_served_and_unserved():
    kw = dict(input_dim=80, d_model=32, heads=2, ffn_dim=64, kernel_size=3, layers=1)
    served = models.ConformerEncoder(served={"Conv2d": conv_layer}, conv2d_frontend=True,
                                     **kw).eval()
    plain = models.ConformerEncoder(**kw).eval()
    feats = torch.randn(2, 64, 80)
    for model, op in ((served, "conv2d_relu"), (plain, "conv2d")):
        with torch.no_grad():
            calls, _ = _record(lambda m=model: m(feats))
        got = sorted((dict(c.dims)["Cin"], dict(c.dims)["W"], c.m, c.op) for c in calls)
        assert got == [(1, 80, 2 * 31 * 39, op), (32, 39, 2 * 15 * 19, op)]
