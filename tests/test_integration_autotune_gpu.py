"""On a GPU (``pytest -m gpu``): a real ``oasr_gemm.gemm`` under ``oasr_core.autotune()``.

The call measures the lane's candidates and torch at its own shape through the CUDA-graph
bench protocol, serves the winner, and leaving the context publishes it to a temporary user
tier at the measured M; ``select`` then serves it from the user tier, the op runs it with the
family's numerics, and a larger size of the same bucket is not served by it.

``OASR_GEMM_COMPILE_SET=all`` makes the production module the same library the bench loads
(the lane's whole space), so the published config is compiled in this process; with a
prebuilt ``OASR_JIT_DIR`` nothing is compiled here. Without one, the first measurement
compiles the lane's full module (minutes).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture
def gemm_runtime(tmp_path, monkeypatch):
    from oasr_gemm import hooks, launch, ops

    from oasr_core import runtime
    from oasr_core.plugins import make_plugin_manager

    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
    monkeypatch.setenv("OASR_GEMM_COMPILE_SET", "all")
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name="gemm")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    ops.clear_memo()
    ops.reset_stats()
    launch.forget_libraries()
    yield tmp_path / "user"
    runtime.install_runtime(None)
    ops.clear_memo()
    launch.forget_libraries()


def test_gemm_under_autotune_publishes_what_select_then_serves(gemm_runtime, tmp_path):
    import oasr_gemm
    from oasr_gemm import numerics

    import oasr_core
    from oasr_core import database
    from oasr_core.autotuning import Timing, read_cache
    from oasr_core.runtime import get_runtime
    from oasr_core.shapes import bucket
    from oasr_core.types import Tier

    m, n, k = 200, 512, 256
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm{major}{minor}"
    a, w, b = numerics.make_operands(m, n, k, "fp16", device="cuda", seed=3)
    key = f"gemm|op=gemm|dt=fp16|N={n}|K={k}"
    cache = tmp_path / "tune.json"

    with oasr_core.autotune(cache=cache) as session:
        inside = oasr_gemm.gemm(a, w, b)
        torch.cuda.synchronize()
    results = [r for r in session.results if r.key == key]
    assert len(results) == 1, session.results
    result = results[0]
    assert (result.m, result.bucket, result.timing) == (m, bucket(m), Timing.GRAPH)
    assert len(result.evidence) >= 2 and result.ms > 0
    assert session.published is not None and session.published.published >= 1

    family = get_runtime().registry.family("gemm")
    tf = database.read_tuning_file(database.tier_path(gemm_runtime, arch, family))
    assert [(r.m_hi, r.choice) for r in tf.entries[key].regions] == [(m, result.choice)]
    assert [(r.m, r.choice) for r in read_cache(cache).results if r.key == key] == \
        [(m, result.choice)]

    sel = oasr_core.select("gemm", "gemm", "fp16", (n, k), m, arch)
    assert (sel.tier, sel.choice_id) == (Tier.USER, result.choice)
    assert oasr_core.select("gemm", "gemm", "fp16", (n, k), m - 50, arch).tier is Tier.USER
    above = oasr_core.select("gemm", "gemm", "fp16", (n, k), m + 1, arch)
    assert above.tier is not Tier.USER  # same bucket (256), never measured at 201

    reference = numerics.reference(a, w, b)
    torch_out = numerics.torch_output(a, w, b)
    for out in (inside, oasr_gemm.gemm(a, w, b)):
        torch.cuda.synchronize()
        verdict = numerics.numerics_gate(out, torch_out, reference, dtype="fp16")
        assert verdict, verdict
    if sel.config is not None:
        assert oasr_gemm.stats().get("torch:selected", 0) == 0


def test_the_production_module_is_refreshed_to_run_a_published_winner(gemm_runtime,
                                                                      monkeypatch):
    """Without ``COMPILE_SET=all``: the module loaded before the block lacks most of the
    space; the reload at the block's end replaces it with one holding the winner."""
    import oasr_gemm
    from oasr_gemm import launch, numerics

    import oasr_core
    from oasr_core.types import Tier

    monkeypatch.delenv("OASR_GEMM_COMPILE_SET")
    m, n, k = 300, 768, 256
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm{major}{minor}"
    a, w, b = numerics.make_operands(m, n, k, "fp16", device="cuda", seed=4)
    oasr_gemm.gemm(a, w, b)  # loads the production module: default + coverage basis
    with oasr_core.autotune() as session:
        oasr_gemm.gemm(a, w, b)
    (result,) = [r for r in session.results if r.m == m]
    sel = oasr_core.select("gemm", "gemm", "fp16", (n, k), m, arch)
    assert (sel.tier, sel.choice_id) == (Tier.USER, result.choice)
    oasr_gemm.reset_stats()
    out = oasr_gemm.gemm(a, w, b)
    torch.cuda.synchronize()
    verdict = numerics.numerics_gate(out, numerics.torch_output(a, w, b),
                                     numerics.reference(a, w, b), dtype="fp16")
    assert verdict, verdict
    if sel.config is not None:
        assert sel.config.id in launch.library(sel.lane, arch)
        assert oasr_gemm.stats().get("torch:selected", 0) == 0
