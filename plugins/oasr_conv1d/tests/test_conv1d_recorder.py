"""The census sees F.conv1d / nn.Conv1d and the family's ops, with dims, M, batch and point."""

from __future__ import annotations

import pytest
import torch
from oasr_core.census.recorder import ShapeRecorder, Skip

import oasr_conv1d
from oasr_conv1d import recorder
from oasr_conv1d.layer import conv_layer, layer_for

DIMS = ("Cin", "Cout", "k", "stride", "pad", "dil", "groups")


def _record(fn):
    rec = ShapeRecorder(recorder.recorder_patches(), strict=True)
    with rec:
        fn()
    return dict(rec.counts)


def test_nn_conv1d_is_recorded_with_its_exact_point():
    conv = torch.nn.Conv1d(80, 512, 3, stride=2, padding=1).to("meta")
    calls = _record(lambda: conv(torch.empty(8, 80, 3000, device="meta")))
    (call, n), = calls.items()
    assert n == 1 and call.family == "conv1d" and call.op == "conv1d"
    assert dict(call.dims) == dict(zip(DIMS, (80, 512, 3, 2, 1, 1, 1), strict=True))
    assert (call.m, call.batch, call.point) == (8 * 1500, 1, "8x3000")
    assert call.flops == 2 * 8 * 1500 * 512 * 80 * 3


def test_the_family_ops_are_recorded_once_under_their_op():
    x = torch.empty(4, 100, 256, device="meta")
    w = torch.empty(256, 1, 31, device="meta")

    def run():
        oasr_conv1d.conv1d_activation(x, w, None, "silu", padding=15, groups=256)
        oasr_conv1d.conv1d(x, w, None, 1, 15, 1, 256)

    calls = _record(run)
    assert sorted((c.op, n) for c, n in calls.items()) == [("conv1d", 1), ("conv1d_silu", 1)]
    for call in calls:
        assert dict(call.dims)["groups"] == 256 and call.point == "4x100" and call.m == 400


def test_the_layer_hook_runs_on_meta_and_is_recorded():
    assert layer_for("Conv1d", "fp16", "none") is conv_layer
    assert layer_for("Conv1d", "fp16", "int8_w8a8") is None
    assert layer_for("Linear", "fp16", "none") is None
    conv = torch.nn.Conv1d(144, 144, 31, padding=15, groups=144).to("meta").eval()
    out = {}
    calls = _record(lambda: out.setdefault("y", conv_layer(torch.empty(2, 77, 144, device="meta"),
                                                           conv, "silu")))
    assert tuple(out["y"].shape) == (2, 77, 144)
    (call, _n), = calls.items()
    assert call.op == "conv1d_silu" and call.point == "2x77"


def test_string_padding_and_odd_inputs():
    w = torch.empty(16, 16, 3, device="meta")
    same = recorder.record_f_conv1d(torch.empty(1, 16, 10, device="meta"), w, padding="same")
    assert dict(same.dims)["pad"] == 1 and same.m == 10
    even = torch.empty(16, 16, 4, device="meta")
    skip = recorder.record_f_conv1d(torch.empty(1, 16, 10, device="meta"), even,
                                    padding="same")
    assert isinstance(skip, Skip) and "unevenly" in skip.reason and "k=4" in skip.example
    unbatched = recorder.record_f_conv1d(torch.empty(16, 10, device="meta"), w)
    assert unbatched.point == "1x10" and unbatched.m == 8
    int8 = torch.empty(1, 16, 10, dtype=torch.int8, device="meta")
    assert recorder.record_f_conv1d(int8, w) is None
    assert recorder.record_conv1d_activation(torch.empty(1, 10, 16, device="meta"), w, None,
                                             "tanh") is None


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_padding_zero_is_a_point_and_string_padding_without_an_integer_is_a_counted_skip():
    from oasr_core.plugins import make_plugin_manager
    from oasr_core.registry import Registry

    families = Registry.from_plugin_manager(make_plugin_manager()).families
    rec = ShapeRecorder(recorder.recorder_patches(), families=families)
    strided = torch.nn.Conv1d(512, 512, 3, stride=2).to("meta")
    even = torch.nn.Conv1d(16, 16, 4, padding="same").to("meta")
    with rec:
        strided(torch.empty(2, 512, 99, device="meta"))
        even(torch.empty(2, 16, 10, device="meta"))
    (call, n), = rec.counts.items()
    assert n == 1 and dict(call.dims)["pad"] == 0 and dict(call.dims)["stride"] == 2
    assert dict(rec.skipped) == {
        "conv1d: padding='same' pads unevenly here (even kernel span or a stride)": 1}
