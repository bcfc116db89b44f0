"""Integration: the census with the real gemm family's recorder patches and ops.

The core census tests use an in-test gemm family (``test_census_support``); these check the
gemm plugin's own recorder rules (matmuls with a 2-D weight, the family ops recorded once) and
a live capture through it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import torch
from oasr_gemm.recorder import recorder_patches

from oasr_core.census import capture, models, shapeset
from oasr_core.census.recorder import ShapeRecorder

SCRIPT = textwrap.dedent("""
    import torch
    from torch.nn.functional import linear   # bound before the capture starts

    import oasr_core.census as census
    from oasr_gemm.recorder import recorder_patches

    assert census.capture_from_env(patches=recorder_patches()) is not None
    x, w = torch.randn(6, 32), torch.randn(64, 32)
    for _ in range(3):
        linear(x, w)
    torch.nn.Linear(64, 16)(linear(x, w))
    x @ torch.randn(32, 8)
""")


def _by_signature(counts: Counter) -> Counter:
    out: Counter = Counter()
    for call, n in counts.items():
        out[(call.op, dict(call.dims)["N"], dict(call.dims)["K"])] += n
    return out


def test_a_live_process_writes_its_calls_at_exit(tmp_path):
    pattern = tmp_path / "capture-{pid}.json"
    env = {**os.environ, capture.ENV: str(pattern), "OASR_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = list(tmp_path.glob("capture-*.json"))
    assert len(files) == 1 and files[0].name != pattern.name, "{pid} is substituted"
    recorded = shapeset.load(files[0])
    counts = Counter({(p.dims["N"], p.dims["K"], p.m): p.calls for p in recorded.points})
    assert counts == {(64, 32, 6): 4, (16, 64, 6): 1, (8, 32, 6): 1}
    assert all(not p.must and p.eager_fraction == 1.0 and p.keys == ("capture",)
               for p in recorded.points)
    assert {p.dtype for p in recorded.points} == {"fp32"}, "a live process records real dtypes"
    assert recorded.provenance["source"] == "capture"
    assert int(files[0].stem.split("-")[1]) == recorded.provenance["pid"]


def test_family_ops_are_recorded_as_their_own_ops_and_not_twice():
    """With oasr_gemm's ops (the linear its oasr_linear hook serves), the FFN's first GEMM is
    gemm_activation and a GEMM before a residual add is gemm_residual; their torch path calls
    F.linear inside, which must not be counted again."""
    from oasr_gemm import hooks

    patches = recorder_patches()
    linear = hooks.oasr_linear(dtype="fp16", quantization="none")
    model = models.ConformerEncoder(layers=1, linear=linear).eval()
    with ShapeRecorder(patches) as rec, torch.no_grad():
        model(torch.randn(1, 4 * 8 + 3, 80))
    sig = _by_signature(rec.counts)
    assert sig[("gemm_activation", 1024, 256)] == 2
    assert sig[("gemm", 1024, 256)] == 0
    assert sig[("gemm_residual", 256, 1024)] == 2 and sig[("gemm", 256, 1024)] == 0
    assert sig[("gemm_residual", 256, 256)] == 2
    # 12 GEMMs, and the relative-position attention's three batched products (T = 8 frames,
    # 15 positions, d_head 64), each once.
    assert sum(n for (op, *_), n in sig.items() if not op.startswith("bmm")) == 12
    assert {k: n for k, n in sig.items() if k[0].startswith("bmm")} == {
        ("bmm_nn", 8, 64): 1, ("bmm_nn", 15, 64): 1, ("bmm_nn", 64, 8): 1}


def test_matmul_counts_a_two_dimensional_weight_as_gemm_and_batched_operands_as_bmm():
    a, w = torch.randn(2, 5, 8), torch.randn(8, 16)
    with ShapeRecorder(recorder_patches()) as rec:
        a @ w
        torch.matmul(a, w)
        a.matmul(w)
        torch.mm(a[0], w)
        torch.addmm(torch.zeros(16), a[0], w)
        torch.matmul(a, torch.randn(2, 8, 4))
    assert Counter({(c.op, c.m, dict(c.dims)["N"], dict(c.dims)["K"]): n
                    for c, n in rec.counts.items()}) == {
        ("gemm", 10, 16, 8): 3, ("gemm", 5, 16, 8): 2, ("bmm_nn", 10, 4, 8): 1}
