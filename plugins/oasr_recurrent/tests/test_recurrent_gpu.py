"""GPU tests of the recurrent lane (run on the H200 with ``pytest -m gpu``).

Every config that runs on this device (the lane's whole-space module) runs one LSTM step at
the prediction networks' widths (I, H) in {(320, 320), (640, 640), (640, 1024), (256, 320)}
and batches {1, 3, 16, 64}, both dtypes, with and without biases, against the fp32 step of
the same operands. Then refusals, CUDA-graph capture and the op as served (torch untuned, the
kernel a user-tier entry names, captured); a routed ``nn.LSTM`` decoding token by token
against its torch self is ``test_recurrent_cells_gpu.py``'s, with the RNN and GRU.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from oasr_core.kernel_testing import device_arch, device_config_ids, gpu_marks

from oasr_recurrent import jit, lanes, numerics, ops, space
from oasr_recurrent.ops_names import LANE

pytestmark = gpu_marks()
CONFIGS = device_config_ids(jit.PRODUCTION, LANE)
WIDTHS = ((320, 320), (640, 640), (640, 1024), (256, 320))
BATCHES = (1, 3, 16, 64)
TOLERANCE = {"fp16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2)}
"""(atol, rtol): the fp32 step rounded once to the dtype, on outputs of magnitude up to 2."""


@functools.cache
def _kernels():
    from oasr_core import jit as core_jit

    from oasr_recurrent.launch import Kernel

    module = core_jit.load(jit.MODULES.full_spec(LANE, device_arch()))
    return {cid: Kernel.bind(module, lanes.config(LANE, cid)) for cid in CONFIGS}


@functools.cache
def _operands(batch, input_size, hidden, dtype, bias):
    return numerics.make_operands(batch, input_size, hidden, dtype, bias=bias, device="cuda",
                                  seed=batch * 7919 + input_size * 31 + hidden)


@pytest.mark.parametrize("cid", CONFIGS)
def test_every_config_matches_the_fp32_reference(cid):
    kernel = _kernels()[cid]
    config = lanes.config(LANE, cid)
    ran = 0
    for input_size, hidden in WIDTHS:
        for batch in BATCHES:
            if not space.supports(config, space.make_problem(input_size, hidden, batch)):
                continue
            for dtype in ("fp16", "bf16"):
                bias = (batch + len(dtype)) % 2 == 0
                operands = _operands(batch, input_size, hidden, dtype, bias)
                h1, c1 = kernel.run(*operands)
                ref = numerics.reference(*operands)
                atol, rtol = TOLERANCE[dtype]
                where = f"{cid} B={batch} I={input_size} H={hidden} {dtype} bias={bias}"
                torch.testing.assert_close(numerics.stacked(h1, c1).float(), ref, atol=atol,
                                           rtol=rtol, msg=lambda m, w=where: f"{w}: {m}")
                torch_out = numerics.stacked(*numerics.torch_step(*operands))
                verdict = numerics.numerics_gate(numerics.stacked(h1, c1), torch_out, ref,
                                                 dtype=dtype)
                assert verdict, f"{where}: {verdict.reason}"
                ran += 1
    assert ran == len(WIDTHS) * len(BATCHES) * 2, f"{cid} ran {ran} cases"


def test_refusals_and_graph_capture():
    from oasr_core.kit import LaunchError

    kernel = _kernels()[space.DEFAULT]
    with pytest.raises(LaunchError):
        kernel.prepare(4, 644, 640, "fp16")  # I not a multiple of 8
    operands = _operands(16, 640, 640, "fp16", True)
    h1, c1 = kernel.run(*operands)
    plan = kernel.prepare(16, 640, 640, "fp16")
    out = torch.empty((2, 16, 640), dtype=torch.float16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan(0, *(t.data_ptr() for t in operands), out[0].data_ptr(), out[1].data_ptr())
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[0], h1) and torch.equal(out[1], c1)


def _user_tier(tmp_path, signatures, config_id):
    from oasr_recurrent import hooks

    (family,) = hooks.oasr_register_families()
    raw = {"schema_version": 2, "family": "recurrent", "family_schema_version": 1,
           "arch": {"family": device_arch(), "lane": LANE},
           "validators": {"soft": dict(family.soft_validators())},
           "configs": {config_id: lanes.config(LANE, config_id).to_json()},
           "entries": {f"recurrent|op=lstm_step|dt=half|I={i}|H={h}":
                       {"regions": [[None, config_id]]} for i, h in signatures}}
    path = tmp_path / device_arch() / "recurrent.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(raw))


def test_the_op_serves_torch_untuned_and_the_tiers_kernel_when_tuned(tmp_path, monkeypatch):
    import oasr_core

    operands = _operands(16, 640, 640, "fp16", True)
    ops.reset_stats()
    want = ops.lstm_step(*operands)
    assert ops.stats() == {"torch:selected": 1}
    _user_tier(tmp_path, [(640, 640)], "u4_r4_t128_s1")
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    oasr_core.reload()
    ops.reset_stats()
    h1, c1 = ops.lstm_step(*operands)
    assert ops.stats() == {}, "the tier's kernel served"
    torch.testing.assert_close(numerics.stacked(h1, c1).float(),
                               numerics.stacked(*want).float(), atol=4e-3, rtol=4e-3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops.lstm_step(*operands)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], h1) and torch.equal(captured[1], c1)
    x, h, c, w_ih, w_hh, b_ih, b_hh = operands
    ops.reset_stats()
    ops.lstm_step(x.float(), h.float(), c.float(), w_ih.float(), w_hh.float(), b_ih.float(),
                  b_hh.float())
    ops.lstm_step(x, h.t().contiguous().t(), c, w_ih, w_hh, b_ih, b_hh)
    assert ops.stats() == {"torch:dtype": 1, "torch:noncontiguous": 1}
