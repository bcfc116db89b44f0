"""The census sees nn.LSTM steps, LSTM cells and the family's op: one lstm_step point per
layer at M = the batch, a counted skip for what the step does not serve; the reference RNN-T
prediction networks end to end."""

from __future__ import annotations

import pytest
import torch
from oasr_core.census.engine import EngineConfig, Traffic
from oasr_core.census.probe import run_census
from oasr_core.census.recorder import ShapeRecorder
from oasr_core.census.workloads import builtin_workloads

import oasr_recurrent
from oasr_recurrent import recorder
from oasr_recurrent.numerics import make_operands


def _record(fn):
    rec = ShapeRecorder(recorder.recorder_patches(), strict=True)
    with rec, torch.no_grad():
        fn()
    return dict(rec.counts), rec


def _points(calls):
    return sorted((c.op, dict(c.dims)["I"], dict(c.dims)["H"], c.m, c.dtype, n)
                  for c, n in calls.items())


@pytest.mark.parametrize("batch_first", [True, False])
def test_an_lstm_over_one_step_is_one_point_per_layer(batch_first):
    lstm = torch.nn.LSTM(320, 640, 2, batch_first=batch_first).to("meta").half()
    x = torch.empty((16, 1, 320) if batch_first else (1, 16, 320), device="meta",
                    dtype=torch.float16)
    calls, _ = _record(lambda: lstm(x))
    assert _points(calls) == [("lstm_step", 320, 640, 16, "fp16", 1),
                              ("lstm_step", 640, 640, 16, "fp16", 1)]
    first = next(c for c in calls if dict(c.dims)["I"] == 320)
    assert first.label == "recurrent|op=lstm_step|dt=fp16|I=320|H=640"
    assert first.flops == 2 * 16 * 4 * 640 * (320 + 640)
    assert first.weight_elements == 4 * 640 * 960 + 8 * 640


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_what_the_step_does_not_serve_is_a_counted_skip():
    seq = torch.nn.LSTM(8, 16)
    bi = torch.nn.LSTM(8, 16, bidirectional=True)
    proj = torch.nn.LSTM(8, 16, proj_size=8)

    def run():
        seq(torch.randn(5, 2, 8))
        bi(torch.randn(1, 2, 8))
        proj(torch.randn(1, 2, 8))
        packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(3, 2, 8), [3, 1])
        seq(packed)

    calls, rec = _record(run)
    assert calls == {}
    reasons = " | ".join(rec.skipped)
    for why in ("more than one time step", "bidirectional", "projection", "packed sequence"):
        assert why in reasons, reasons


def test_cells_and_the_op_are_recorded_once_each():
    cell = torch.nn.LSTMCell(16, 24)
    x, h, c, w_ih, w_hh, b_ih, b_hh = make_operands(3, 16, 24, "fp32")

    def run():
        cell(x)
        oasr_recurrent.lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)  # its torch path: a cell

    calls, _ = _record(run)
    assert _points(calls) == [("lstm_step", 16, 24, 3, "fp32", 2)]


def test_the_routed_step_of_an_lstm_is_recorded_as_the_lstm_is():
    from oasr_recurrent.layer import lstm_layer_step

    lstm = torch.nn.LSTM(16, 24, 2, batch_first=True).eval()
    x = torch.randn(4, 1, 16)
    direct, _ = _record(lambda: lstm(x))
    stepped, _ = _record(lambda: lstm_layer_step(lstm, x))
    assert _points(direct) == _points(stepped) == [("lstm_step", 16, 24, 4, "fp32", 1),
                                                   ("lstm_step", 24, 24, 4, "fp32", 1)]


@pytest.mark.parametrize(("name", "dims"), [("rnnt_predictor", [(640, 640)]),
                                            ("rnnt_predictor_2x320", [(320, 320), (320, 320)])])
def test_the_reference_prediction_networks_decode_at_each_batch(name, dims):
    workload = {w.name: w for w in builtin_workloads()}[name]
    config = EngineConfig(service_mode="streaming", max_batch_size=64,
                          width_ladder=(1, 4, 16, 64))
    shapes = run_census(workload, config, Traffic(concurrency={1: 4.0, 3: 2.0, 16: 1.0,
                                                               50: 1.0}),
                        recorder.recorder_patches(), strict=True)
    points = sorted((p.op, p.dims["I"], p.dims["H"], p.m) for p in shapes.points)
    want = sorted(("lstm_step", i, h, b) for b in (1, 4, 16, 64) for i, h in set(dims))
    assert points == want
    assert all(p.must for p in shapes.points), "a captured decoding step is must-tune"
