"""GPU tests of the Elman RNN and GRU steps (run on the H200 with ``pytest -m gpu``; the run's
``gpu-tests-recurrent`` phase collects them with the family's other GPU tests).

Every config that builds for a cell (the lane's whole-space module: one row per CTA, a K
split, many rows; 9 of the 14 for the RNN cells, all 14 for the GRU) runs a tanh, a relu and
a GRU step at (I, H) in {(320, 320), (640, 640)} and B in {1, 16}, both dtypes, with and
without biases, against the fp32 torch cell of the same operands and through the family's
numerics gate against torch's own half-precision cell. Then the ops as served (torch
untuned, the kernel a user-tier entry names, captured in a CUDA graph) and a routed
``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU`` decoding token by token against its torch self.
"""

from __future__ import annotations

import functools

import pytest
import torch
from oasr_core.kernel_testing import device_arch, device_config_ids, gpu_marks

from oasr_recurrent import jit, lanes, numerics, ops, space
from oasr_recurrent.launch import pointers
from oasr_recurrent.ops_names import LANE

pytestmark = gpu_marks()
CELLS = {"rnn_tanh_step": torch.rnn_tanh_cell, "rnn_relu_step": torch.rnn_relu_cell,
         "gru_step": torch.gru_cell}
KINDS = [(cid, cell) for cell in CELLS for cid in device_config_ids(jit.PRODUCTION, LANE)
         if space.cell_feasible(lanes.config(LANE, cid), cell)]
"""Every (config, cell) of the device's space that builds (9 configs for each RNN cell, 14
for the GRU)."""
WIDTHS = ((320, 320), (640, 640))
BATCHES = (1, 16)
TOLERANCE = {"fp16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2)}
"""(atol, rtol): the fp32 step rounded once to the dtype."""


@functools.cache
def _kernels():
    from oasr_core import jit as core_jit

    from oasr_recurrent.launch import Kernel

    module = core_jit.load(jit.MODULES.full_spec(LANE, device_arch()))
    return {(cid, cell): Kernel.bind(module, lanes.config(LANE, cid), cell)
            for cid, cell in KINDS}


def _operands(batch, input_size, hidden, dtype, bias, seed, cell):
    """``(x, h, w_ih, w_hh, b_ih, b_hh)`` of ``cell``'s step on the GPU (the family's
    operands)."""
    x, h, _c, w_ih, w_hh, b_ih, b_hh = numerics.make_operands(
        batch, input_size, hidden, dtype, bias=bias, device="cuda", seed=seed, op=cell)
    return x, h, w_ih, w_hh, b_ih, b_hh


def _f32(t):
    return None if t is None else t.float()


@pytest.mark.parametrize(("cid", "cell"), KINDS)
def test_every_kind_matches_the_fp32_torch_cell(cid, cell):
    kernel = _kernels()[(cid, cell)]
    ran = 0
    for input_size, hidden in WIDTHS:
        for batch in BATCHES:
            for dtype in ("fp16", "bf16"):
                bias = (batch + len(dtype)) % 2 == 0
                x, h, w_ih, w_hh, b_ih, b_hh = operands = _operands(
                    batch, input_size, hidden, dtype, bias, seed=batch * 31 + hidden,
                    cell=cell)
                h1 = torch.empty_like(h)
                plan = kernel.prepare(batch, input_size, hidden, dtype)
                status = plan(x.get_device(),
                              *pointers(x, h, None, w_ih, w_hh, b_ih, b_hh, h1, None))
                assert status == 0, f"{cid} {cell}: status {status}"
                torch.cuda.synchronize()
                ref = CELLS[cell](*(_f32(t) for t in operands))
                where = f"{cid} {cell} B={batch} I={input_size} H={hidden} {dtype} bias={bias}"
                atol, rtol = TOLERANCE[dtype]
                torch.testing.assert_close(h1.float(), ref, atol=atol, rtol=rtol,
                                           msg=lambda m, w=where: f"{w}: {m}")
                verdict = numerics.numerics_gate(h1, CELLS[cell](*operands), ref, dtype=dtype)
                assert verdict, f"{where}: {verdict.reason}"
                ran += 1
    assert ran == len(WIDTHS) * len(BATCHES) * 2


@pytest.mark.parametrize("cell", list(CELLS))
def test_a_nan_input_row_stays_nan_as_in_torch(cell):
    """A NaN in one batch row's input reaches every unit of that row's new state through every
    cell's activations (relu included: torch.relu keeps a NaN), and no other row."""
    kernel = _kernels()[next(kind for kind in KINDS if kind[1] == cell)]
    x, h, w_ih, w_hh, b_ih, b_hh = operands = _operands(4, 320, 320, "fp16", True, seed=5,
                                                        cell=cell)
    x[1, 7] = float("nan")
    h1 = torch.empty_like(h)
    status = kernel.prepare(4, 320, 320, "fp16")(
        x.get_device(), *pointers(x, h, None, w_ih, w_hh, b_ih, b_hh, h1, None))
    assert status == 0
    torch.cuda.synchronize()
    ref = CELLS[cell](*(_f32(t) for t in operands))
    assert torch.equal(h1.isnan(), ref.isnan())
    assert bool(h1[1].isnan().all()) and not bool(h1[[0, 2, 3]].isnan().any())


def _user_tier(tmp_path, monkeypatch, op, signatures, config_id):
    """A user tier naming ``config_id`` for ``op`` at every batch of ``signatures``."""
    import oasr_core
    from oasr_core.testing import write_system_table

    from oasr_recurrent import hooks

    (family,) = hooks.oasr_register_families()
    write_system_table(tmp_path, family, LANE, device_arch(),
                       {config_id: lanes.config(LANE, config_id)},
                       {f"recurrent|op={op}|dt=half|I={i}|H={h}":
                        {"regions": [[None, config_id]]} for i, h in signatures})
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "system"))
    oasr_core.reload()


def _served(cell):
    """The eager op of ``cell``: ``f(x, h, w_ih, w_hh, b_ih, b_hh) -> h1``."""
    import oasr_recurrent

    if cell == "gru_step":
        return oasr_recurrent.gru_step
    nonlinearity = cell.split("_")[1]
    return lambda *args: oasr_recurrent.rnn_step(*args, nonlinearity=nonlinearity)


@pytest.mark.parametrize("cell", list(CELLS))
def test_the_op_serves_torch_untuned_and_the_tiers_kernel_when_tuned(tmp_path, monkeypatch,
                                                                     cell):
    step = _served(cell)
    x, h, w_ih, w_hh, b_ih, b_hh = operands = _operands(16, 640, 640, "fp16", True, seed=9,
                                                        cell=cell)
    ops.reset_stats()
    want = step(*operands)
    assert ops.stats() == {"torch:selected": 1}
    _user_tier(tmp_path, monkeypatch, cell, [(640, 640)], "u4_r4_t128_s1")
    ops.reset_stats()
    h1 = step(*operands)
    assert ops.stats() == {}, "the tier's kernel served"
    torch.testing.assert_close(h1.float(), want.float(), atol=4e-3, rtol=4e-3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = getattr(torch.ops.oasr, cell)(*operands)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, h1)
    ops.reset_stats()
    step(x.float(), h.float(), w_ih.float(), w_hh.float(), b_ih.float(), b_hh.float())
    step(x, h.t().contiguous().t(), w_ih, w_hh, b_ih, b_hh)
    assert ops.stats() == {"torch:dtype": 1, "torch:noncontiguous": 1}


LAYERS = {"lstm_step": "LSTM", "rnn_tanh_step": "RNN", "rnn_relu_step": "RNN",
          "gru_step": "GRU"}
"""The module (and routed kind) stepping through each op."""


def _layer(cell):
    """A 2-layer batch-first ``nn.LSTM`` / ``nn.RNN`` / ``nn.GRU`` (320 -> 640) of ``cell``."""
    if cell.startswith("rnn_"):
        return torch.nn.RNN(320, 640, 2, nonlinearity=cell.split("_")[1], batch_first=True)
    return getattr(torch.nn, LAYERS[cell])(320, 640, 2, batch_first=True)


@pytest.mark.parametrize("cell", list(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_routed_layer_decodes_like_torch(tmp_path, monkeypatch, dtype, cell):
    from oasr_core.routing import route, unroute

    _user_tier(tmp_path, monkeypatch, cell, [(320, 640), (640, 640)], "u4_r1_t128_s1")
    torch.manual_seed(0)
    plain = _layer(cell).cuda().to(dtype).eval()
    routed = torch.nn.Sequential(_layer(cell)).cuda().to(dtype).eval()
    routed[0].load_state_dict(plain.state_dict())
    name = "fp16" if dtype is torch.float16 else "bf16"
    assert route(routed, dtype=name, linear=False, conv1d=False)[LAYERS[cell]] == 1
    assert "forward" in routed[0].__dict__, "a tier serves its layers: routed"
    embed = torch.randn(100, 320, device="cuda", dtype=dtype)
    tokens = torch.zeros(4, 1, dtype=torch.long, device="cuda")
    ours = theirs = None
    ops.reset_stats()
    atol = 2e-2 if dtype is torch.float16 else 6e-2
    with torch.no_grad():
        for step in range(12):
            x = embed[tokens]
            y, ours = routed[0](x, ours)
            y2, theirs = plain(x, theirs)
            torch.testing.assert_close(y, y2, atol=atol, rtol=atol,
                                       msg=lambda m, s=step: f"step {s}: {m}")
            tokens = (y2[:, 0, :100].argmax(-1, keepdim=True)) % 100
        assert ops.stats() == {}, "every layer step launched the kernel"
        seq = torch.randn(4, 9, 320, device="cuda", dtype=dtype)
        torch.testing.assert_close(routed[0](seq)[0], plain(seq)[0])
        assert ops.stats() == {}, "a sequence is the module's own forward, not the op's"
    unroute(routed)


@pytest.mark.parametrize("cell", ["lstm_step", *CELLS])
def test_the_bench_adapter_gates_every_arm_of_each_op(cell):
    """A build's arms of one op: the configs it names (one that does not build for an RNN
    cell rejected, never timed) and torch's cell, each passing the numerics gate."""
    from oasr_core.bench import BenchOptions
    from oasr_core.types import Sentinel

    from oasr_recurrent import bench

    problem = space.make_problem(640, 640, 16, "fp16", op=cell)
    choices = [lanes.config(LANE, "u4_r4_t128_s1"), lanes.config(LANE, "u2_r1_t256_s2")]
    case = bench.make_bench(problem, [*choices, Sentinel.TORCH],
                            BenchOptions(device="cuda", lane=LANE))
    builds = cell in ("lstm_step", "gru_step")
    assert set(case.arms) == {"u4_r4_t128_s1", "torch"} | ({"u2_r1_t256_s2"} if builds
                                                             else set()), case.rejected
    assert builds or "u2_r1_t256_s2" in case.rejected
    for name, arm in case.arms.items():
        verdict = case.gate(arm(0))
        assert verdict, f"{cell} {name}: {verdict.reason}"
