"""GPU tests of op ``bmm`` (run on the H200 with ``pytest -m gpu``): each lane's batched
launchers in both layouts of the second operand, and the op through selection.

Covered: a subset of each lane's split-free configs (``OASR_GEMM_BMM_GPU_CONFIGS``: a comma
list of config ids, or ``all``), layouts TN (``q @ k^T``) and NN (``probs @ v``), both
dtypes, at attention's batched shapes ``(L, M, N, K)``: Whisper's 1500 frames with d_head 64
(scores and context), 255 frames of a 32-head batch, a small (8, 100, 8, 16), and their
16-byte-aligned neighbours (1504 frames, N = 256), against the fp32 ``bmm`` (the family's
numerics gate). T = 1500 and T = 255 rows are not 16-byte aligned where T is N or K (3000 and
510 bytes): the launchers refuse those shapes (status 2, checked) and the op serves them from
``torch.bmm`` (counted ``unaligned``, checked). Also: new operands through the
prepared-parameter cache, CUDA-graph capture, the op through selection (eager, 4-D attention
views, in a graph, under ``torch.compile``), and the counted torch path (unaligned,
misaligned, a batch-strided operand, autograd, untuned).
"""

from __future__ import annotations

import ctypes
import os

import pytest
import torch
from oasr_core import stamps
from oasr_core.kernel_testing import device_arch, gpu_marks, subset_selection
from oasr_core.runtime import get_runtime

from oasr_gemm import codegen, jit, launch, numerics
from oasr_gemm import config_space as cs

pytestmark = gpu_marks()

SUBSET = {
    cs.LANE_SM90: ("ws_64x128x64_c1x1_s4", "ws_64x32x64_c1x1", "pp_128x128x64_c1x1",
                   "pp_128x128x64_c1x1_e64x64", "co_128x256x64_c1x2", "ws_64x16x128_c1x1_swap",
                   "co_128x144x64_c1x1_swap"),
    cs.LANE_SM80: ("b128x128x64_w64x64x64_s3", "b64x64x64_w32x32x64_s3",
                   "b32x128x64_w32x32x64_s3", "b16x64x64_w16x32x64_s3"),
}
"""Per lane: non-persistent, ping-pong (with a wide epilogue subtile), cooperative (2-CTA
cluster) and swapped 3.x tiles; 2.x tiles of several widths."""
SHAPES = ((64, 1500, 1500, 64), (64, 1500, 64, 1500), (32, 255, 255, 64), (8, 100, 8, 16),
          (64, 1504, 1504, 64), (64, 1504, 64, 1504), (32, 255, 256, 64), (32, 256, 64, 256))
"""``(L, M, N, K)``: attention's products (scores: N = T, K = d_head; context: N = d_head,
K = T) at T = 1500 and 255, a small one, and aligned neighbours the kernels take."""
LAYOUTS = ("tn", "nn")


SELECTION = subset_selection(SUBSET, jit.lane_configs, "OASR_GEMM_BMM_GPU_CONFIGS", cs.has_bmm)
CASES = [(lane, cid) for lane, ids in SELECTION.items() for cid in ids]


@pytest.fixture(scope="session")
def kernels() -> dict[tuple[str, str], launch.BmmKernel]:
    """The selection's batched launchers by (layout, config id), one module per lane
    (compiled here, or cache hits)."""
    from oasr_core import jit as core_jit

    arch = device_arch()
    if not SELECTION:
        pytest.skip(f"no gemm config runs on {arch}")
    found = {}
    for lane, ids in SELECTION.items():
        configs = [cs.config(lane, cid) for cid in ids]
        spec = jit.module_spec(lane, arch, (), name=f"{jit.MODULE_PREFIX[lane]}_bmm_gpu",
                               bmm=[(c, layout) for c in configs for layout in LAYOUTS])
        core_jit.prebuild([spec], jobs=os.cpu_count())
        module = core_jit.load(spec, build_missing=False)
        found.update({(layout, c.id): launch.BmmKernel.bind(module, c, layout)
                      for c in configs for layout in LAYOUTS
                      if codegen.bmm_symbol(c, layout) in module.exports})
    return found


def _aligned(n: int, k: int) -> bool:
    return n % 8 == 0 and k % 8 == 0


def _check(out, a, b, what):
    ref = numerics.bmm_reference(a, b)
    verdict = numerics.numerics_gate(out, torch.bmm(a, b), ref)
    assert verdict, f"{what}: {verdict.reason} (err {verdict.error:.3g}, torch " \
                    f"{verdict.torch_error:.3g})"


def _launch(prepared, a, b, out, batch) -> int:
    return prepared(a.get_device(), a.data_ptr(), b.data_ptr(), out.data_ptr(), batch)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("lane,cid", CASES)
def test_config_matches_the_fp32_reference_and_refuses_unaligned_rows(kernels, lane, cid,
                                                                      layout):
    kernel = kernels.get((layout, cid))
    if kernel is None:
        pytest.fail(f"{cid} {layout}: its batched unit did not compile or load")
    for dtype in ("fp16", "bf16"):
        for i, (batch, m, n, k) in enumerate(SHAPES):
            what = f"{lane}/{cid} {layout} {dtype} L={batch} M={m} N={n} K={k}"
            if not _aligned(n, k):
                with pytest.raises(launch.LaunchError, match="workspace query refused"):
                    kernel.prepare(dtype, batch, m, n, k)
                continue
            a, b = numerics.make_bmm_operands(batch, m, n, k, layout, dtype, device="cuda",
                                              seed=i)
            out = torch.empty(batch, m, n, dtype=a.dtype, device="cuda")
            store = b.transpose(1, 2) if layout == "tn" else b  # the contiguous tensor
            assert store.is_contiguous()
            status = _launch(kernel.prepare(dtype, batch, m, n, k), a, store, out, batch)
            assert status == 0, f"{what}: {launch.status_text(status)}"
            torch.cuda.synchronize()
            _check(out, a, b, what)
    # The C side refuses unaligned rows itself too, prepared or not.
    args = launch.CallArgs(m=1500, n=1500, k=64, dtype=0, act=0, split=1)
    assert kernel.fn(ctypes.addressof(args), 0, 0, 0, 64, 0) == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_new_operands_through_the_prepared_parameter_cache(kernels, layout):
    (lane, cid) = CASES[0]
    kernel = kernels[(layout, cid)]
    batch, m, n, k = 32, 256, 256, 64
    sets = [numerics.make_bmm_operands(batch, m, n, k, layout, "fp16", device="cuda", seed=s)
            for s in range(3)]
    out = torch.empty(batch, m, n, dtype=torch.float16, device="cuda")
    prepared = kernel.prepare("fp16", batch, m, n, k)
    for which in (0, 1, 2, 1, 0):
        a, b = sets[which]
        store = b.transpose(1, 2) if layout == "tn" else b
        assert _launch(prepared, a, store, out, batch) == 0
        torch.cuda.synchronize()
        _check(out, a, b, f"{cid} {layout} operands {which}")


@pytest.mark.parametrize("lane,cid", CASES[:1] + CASES[-1:])
def test_batched_launch_under_cuda_graph_capture(kernels, lane, cid):
    kernel = kernels[("nn", cid)]
    batch, m, n, k = 64, 1504, 64, 1504
    a, b = numerics.make_bmm_operands(batch, m, n, k, "nn", "bf16", device="cuda", seed=5)
    out = torch.empty(batch, m, n, dtype=a.dtype, device="cuda")
    prepared = kernel.prepare("bf16", batch, m, n, k)
    stream = torch.cuda.Stream()
    launch.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        assert _launch(prepared, a, b, out, batch) == 0
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        _launch(prepared, a, b, out, batch)
    a.copy_(numerics.make_bmm_operands(batch, m, n, k, "nn", "bf16", device="cuda", seed=6)[0])
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a, b, f"{cid} graph replay")


TUNED_WIDTHS = {"tn": ((1504, 64), (256, 64)), "nn": ((64, 1504), (64, 256))}
"""The signatures the op tests' tier serves with the lane default."""


@pytest.fixture
def bmm_tier(tmp_path, monkeypatch):
    """A user tier serving bmm_tn and bmm_nn with the lane default at every M for the
    attention shapes the op tests call, and a library holding that config's launchers."""
    from oasr_core import database, reload
    from oasr_core import jit as core_jit

    arch = device_arch()
    if not SELECTION:
        pytest.skip(f"no gemm config runs on {arch}")
    lane_name = cs.LANE_SM90 if cs.LANE_SM90 in SELECTION else cs.LANE_SM80
    rt = get_runtime()
    family = rt.registry.family("gemm")
    lane = rt.registry.lane(lane_name)
    entries = {database.signature_key(family, cs.BMM_OPS[layout], "half", dims):
               database.Entry(regions=((None, "default"),))
               for layout, widths in TUNED_WIDTHS.items() for dims in widths}
    database.write_entries(database.tier_path(tmp_path, arch, family), family=family, arch=arch,
                           lane=lane, entries=entries,
                           configs={c.id: c for c in lane.config_space},
                           soft=stamps.current_soft_validators(family))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    reload()
    default = cs.config(lane_name, cs.DEFAULTS[lane_name])
    spec = jit.module_spec(lane_name, arch, [default],
                           name=f"{jit.MODULE_PREFIX[lane_name]}_bmm_default",
                           bmm=[(default, layout) for layout in LAYOUTS])
    core_jit.prebuild([spec], jobs=os.cpu_count())
    module = core_jit.load(spec, build_missing=False)
    held = {default.id: launch.Kernel.bind(module, default)}
    held.update({launch.bmm_key(layout, default.id): launch.BmmKernel.bind(module, default,
                                                                           layout)
                 for layout in LAYOUTS})
    launch.install_library(lane_name, arch, held)
    yield
    launch.forget_libraries()
    monkeypatch.undo()
    reload()


def _heads(batch, heads, t, d, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(batch, heads, t, d, generator=gen, device="cuda", dtype=dtype)
            for _ in range(3)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_op_through_selection_on_attention_views(bmm_tier, dtype):
    import oasr_gemm

    for t in (1504, 256):
        q, k, v = _heads(8, 8, t, 64, dtype, t)
        q3, k3, v3 = (x.flatten(0, 1) for x in (q, k, v))
        scores = oasr_gemm.bmm(q3, k3.transpose(1, 2))  # TN
        _check(scores, q3, k3.transpose(1, 2), f"scores T={t}")
        probs = scores.float().softmax(-1).to(dtype)
        context = oasr_gemm.bmm(probs, v3)  # NN
        _check(context, probs, v3, f"context T={t}")
        out = torch.empty_like(context)
        assert oasr_gemm.bmm(probs, v3, out=out) is out
        _check(out, probs, v3, f"context out= T={t}")
    assert oasr_gemm.stats() == {}, oasr_gemm.stats()
    counts = get_runtime().counts
    assert counts[("gemm", cs.BMM_OPS["tn"], "user")] == 2, "one per shape"
    assert counts[("gemm", cs.BMM_OPS["nn"], "user")] == 2


def test_op_inside_a_cuda_graph_and_under_torch_compile(bmm_tier):
    import oasr_gemm

    q, k, _ = _heads(8, 8, 1504, 64, torch.float16, 9)
    a, b = q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)
    stream = torch.cuda.Stream()
    oasr_gemm.reserve_workspace(stream=stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        oasr_gemm.bmm(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        y = oasr_gemm.bmm(a, b)
    a.copy_(_heads(8, 8, 1504, 64, torch.float16, 10)[0].flatten(0, 1))
    graph.replay()
    torch.cuda.synchronize()
    _check(y, a, b, "graph")

    def scores(x, kt):
        return oasr_gemm.bmm(x, kt) * 2

    out = torch.compile(scores, fullgraph=True)(a, b)
    torch.cuda.synchronize()
    _check(out / 2, a, b, "torch.compile")
    assert oasr_gemm.stats() == {}


def test_unaligned_unsupported_and_untuned_calls_take_the_counted_torch_path(bmm_tier):
    """T = 1500 and T = 255 rows (3000 and 510 bytes) are not 16-byte aligned where T is N or
    K: ``torch.bmm`` serves them (cuBLAS), counted ``unaligned``; so are misaligned and
    autograd calls and an untuned width."""
    import oasr_gemm

    for t in (1500, 255):
        q, k, v = (x.flatten(0, 1) for x in _heads(4, 8, t, 64, torch.float16, t))
        _check(oasr_gemm.bmm(q, k.transpose(1, 2)), q, k.transpose(1, 2), f"scores T={t}")
        probs = torch.softmax(torch.randn(32, t, t, device="cuda"), -1).half()
        _check(oasr_gemm.bmm(probs, v), probs, v, f"context T={t}")
    q, k, _ = (x.flatten(0, 1) for x in _heads(4, 8, 256, 64, torch.float16, 1))
    buf = torch.empty(32 * 256 * 256 + 1, dtype=torch.float16, device="cuda")
    shifted = buf[1:].view(32, 256, 256)
    assert oasr_gemm.bmm(q, k.transpose(1, 2), out=shifted) is shifted
    _check(shifted, q, k.transpose(1, 2), "misaligned out")
    with torch.enable_grad():
        qg = q.clone().requires_grad_()
        _check(oasr_gemm.bmm(qg, k.transpose(1, 2)).detach(), q, k.transpose(1, 2), "autograd")
    strided = torch.randn(256, 32, 64, device="cuda", dtype=torch.float16).transpose(0, 1)
    _check(oasr_gemm.bmm(q, strided.transpose(1, 2)), q, strided.transpose(1, 2), "strided")
    q2, k2, _ = (x.flatten(0, 1) for x in _heads(4, 8, 128, 64, torch.float16, 2))
    _check(oasr_gemm.bmm(q2, k2.transpose(1, 2)), q2, k2.transpose(1, 2), "untuned width")
    assert oasr_gemm.stats() == {"torch:unaligned": 4, "torch:misaligned": 1,
                                 "torch:autograd": 1, "torch:noncontiguous": 1,
                                 "torch:selected": 1}
