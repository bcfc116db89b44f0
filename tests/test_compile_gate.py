"""The compile backend's measured gate on CPU: the verdict rule on scripted replay times, the
stored verdicts (a real file, a damaged one, an unwritable place), and the backend's gated
path on a real model's FX graphs: the pass moves sites, both graphs are built, the verdict
picks one, and a later compile of the same graph follows the stored verdict with one build.

Inductor's code generation is replaced by the ATen graph AOTAutograd makes with Inductor's
decompositions (what the post-grad pass sees), run as is: the gate's logic, not C++ codegen,
is under test. The replays themselves need a GPU (the H200 figures are in
benchmarks/results/h200_compile_*.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import oasr_core.compile as oc  # noqa: E402
from oasr_core.compile import gate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(REPO / "db"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(gate.GATE_ENV, raising=False)


def _scripted(monkeypatch, oasr_ms, inductor_ms, outs=None):
    def replayed(arms):
        got = outs or {name: fn() for name, fn in arms.items()}
        return {gate.KEEP_OASR: list(oasr_ms), gate.KEEP_INDUCTOR: list(inductor_ms)}, got
    monkeypatch.setattr(gate, "_replayed", replayed)


def test_the_rewrite_is_kept_only_when_faster_by_more_than_the_margin(monkeypatch) -> None:
    x = [torch.ones(4)]
    _scripted(monkeypatch, [0.98, 0.99, 0.98], [1.0, 1.0, 1.0])
    v = gate.choose(lambda *a: x, lambda *a: x, [], sites=3)
    assert (v.keep, v.sites, v.rounds, v.oasr_ms, v.inductor_ms) == ("oasr", 3, 3, 0.98, 1.0)
    _scripted(monkeypatch, [0.998] * 5, [1.0] * 5)  # within the margin: a tie is Inductor's
    assert gate.choose(lambda *a: x, lambda *a: x, [], sites=3).keep == "inductor"
    _scripted(monkeypatch, [1.02] * 5, [1.0] * 5)
    assert gate.choose(lambda *a: x, lambda *a: x, [], sites=3).keep == "inductor"


def test_outputs_that_disagree_keep_inductors_graph(monkeypatch) -> None:
    outs = {gate.KEEP_OASR: [torch.tensor([1.0, 2.0])],
            gate.KEEP_INDUCTOR: [torch.tensor([1.0, 1.0])]}
    _scripted(monkeypatch, [0.5] * 5, [1.0] * 5, outs)
    with pytest.warns(RuntimeWarning, match="outputs differ"):
        v = gate.choose(lambda *a: None, lambda *a: None, [], sites=1)
    assert v.keep == "inductor" and "outputs differ" in v.why
    assert gate._relative_error([torch.ones(2)], [torch.ones(3)]) == float("inf")
    assert gate._relative_error([torch.tensor([float("nan")])], [torch.ones(1)]) == float("inf")
    assert gate._relative_error(torch.ones(2), [torch.ones(2), None]) == 0.0


def test_a_quantized_rewrite_is_judged_by_the_schemes_error_not_full_precisions(
        monkeypatch) -> None:
    # The fp8 rewrite of the wide Conformer on the H200 (h200_compile_conformer_wide_fp8.md):
    # 8.578 ms against Inductor's unquantized 8.916 ms, outputs 3.4% apart.
    outs = {gate.KEEP_OASR: [torch.tensor([1.068, 2.0])],
            gate.KEEP_INDUCTOR: [torch.tensor([1.0, 2.0])]}
    _scripted(monkeypatch, [8.578] * 5, [8.916] * 5, outs)
    with pytest.warns(RuntimeWarning, match="outputs differ"):
        full = gate.choose(lambda *a: None, lambda *a: None, [], sites=48)
    assert full.keep == "inductor"
    assert gate.agreement("none") == gate.AGREEMENT
    bound = gate.agreement("fp8_w8a8")
    assert bound == gate.QUANTIZED_AGREEMENT == gate.agreement("int8_w8a8")
    v = gate.choose(lambda *a: None, lambda *a: None, [], sites=48, bound=bound)
    assert (v.keep, v.oasr_ms, v.inductor_ms) == ("oasr", 8.578, 8.916)
    outs[gate.KEEP_OASR] = [torch.tensor([1.8, 2.0])]  # past any scheme's error: Inductor's
    with pytest.warns(RuntimeWarning, match="outputs differ"):
        assert gate.choose(lambda *a: None, lambda *a: None, [], sites=48,
                           bound=bound).keep == "inductor"


def test_verdicts_are_stored_merged_and_damaged_files_read_as_unknown(tmp_path) -> None:
    path = tmp_path / "gate.json"
    assert gate.recall("a", path) is None
    gate.remember("a", gate.Verdict("oasr", 1.0, 2.0, 5, 3, "x"), path)
    gate.remember("b", gate.Verdict("inductor", 2.0, 1.0, 5, 3, "x"), path)
    assert (gate.recall("a", path), gate.recall("b", path)) == ("oasr", "inductor")
    document = json.loads(path.read_text())
    assert document["schema_version"] == 2 and document["decisions"]["a"]["oasr_ms"] == 1.0
    path.write_text("{not json")
    assert gate.recall("a", path) is None
    path.write_text(json.dumps({"schema_version": 99, "decisions": {"a": {"keep": "oasr"}}}))
    assert gate.recall("a", path) is None
    path.write_text(json.dumps({"schema_version": 1, "decisions": {"a": {"keep": "oasr"}}}))
    assert gate.recall("a", path) is None  # stored before the quantized bound: measured again
    path.write_text(json.dumps({"schema_version": 2, "decisions": {"a": {"keep": "cudnn"}}}))
    assert gate.recall("a", path) is None
    gate.remember("a", gate.Verdict("oasr"), path)  # a damaged file is replaced whole
    assert gate.recall("a", path) == "oasr"


def test_a_verdict_that_cannot_be_stored_is_a_warning(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.warns(RuntimeWarning, match="could not store"):
        gate.remember("a", gate.Verdict("oasr"), blocker / "gate.json")


def test_the_switch_and_the_key(monkeypatch) -> None:
    assert gate.enabled()
    monkeypatch.setenv(gate.GATE_ENV, "0")
    assert not gate.enabled() and not oc.backend().gate
    monkeypatch.setenv(gate.GATE_ENV, "maybe")
    with pytest.raises(Exception, match="OASR_COMPILE_GATE"):
        gate.enabled()
    a = torch.zeros(2, 3)
    k = gate.graph_key("code", [a], "pass")
    assert k == gate.graph_key("code", [torch.ones(2, 3)], "pass")  # values do not matter
    assert k != gate.graph_key("code", [a.t()], "pass")
    assert k != gate.graph_key("code", [a.half()], "pass")
    assert k != gate.graph_key("code", [a], "other tiers")
    assert k != gate.graph_key("other code", [a], "pass")
    assert gate.decisions_path().is_relative_to(Path(os.environ["XDG_CACHE_HOME"]))
    assert not gate.measurable([a])  # no CUDA tensor: nothing to measure, nothing gated


class Block(nn.Module):
    """Linears the shipped sm90 gemm table serves (N=1024/K=256 with SiLU, N=256/K=1024 added
    to the residual) and one it does not."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(256, 1024), nn.Linear(1024, 256)
        self.odd = nn.Linear(256, 96)

    def forward(self, x):
        x = x + 0.5 * self.down(F.silu(self.up(x)))
        return self.odd(x)


def _stand_in_compile_fx(built):
    """``compile_fx`` without code generation: the post-grad pass (when patched in) on the
    ATen graph, which then runs as is; ``built`` records each build's rewritten targets."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._inductor.decomposition import select_decomp_table

    def compile_fx(gm, example_inputs, config_patches=None):
        graph_pass = (config_patches or {}).get("post_grad_custom_post_pass")

        def fw(g, _example):
            if graph_pass is not None:
                graph_pass(g.graph)
                g.recompile()
            built.append(sorted(str(n.target) for n in g.graph.nodes
                                if str(n.target).startswith("oasr.")))
            return g.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=fw,
                                     decompositions=select_decomp_table())

    return compile_fx


@pytest.mark.parametrize("faster", ["oasr", "inductor"])
def test_the_backend_builds_both_keeps_the_verdicts_graph_and_then_builds_once(
        monkeypatch, faster) -> None:
    import torch._inductor.compile_fx as cfx

    built: list = []
    monkeypatch.setattr(cfx, "compile_fx", _stand_in_compile_fx(built))
    monkeypatch.setattr(gate, "measurable", lambda inputs: True)
    times = ([0.9] * 5, [1.0] * 5) if faster == "oasr" else ([1.1] * 5, [1.0] * 5)
    _scripted(monkeypatch, *times)
    bounds: list = []
    choose = gate.choose
    monkeypatch.setattr(gate, "choose", lambda *a, bound, **k: bounds.append(bound) or choose(
        *a, bound=bound, **k))
    torch.manual_seed(0)
    model = Block().eval().bfloat16()
    x = torch.randn(1, 1024, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        torch._dynamo.reset()
        backend = oc.backend(arch="sm90")
        out = torch.compile(model, backend=backend)(x)
        # Two builds: the rewrite (two sites moved to the gemm ops) and Inductor's alone.
        assert built == [["oasr.gemm_activation.default", "oasr.gemm_residual.default"], []]
        [verdict] = backend.verdicts
        assert (verdict.keep, verdict.sites) == (faster, 2)
        assert bounds == [gate.AGREEMENT]  # full precision: the full-precision bound
        assert float((out.float() - ref.float()).abs().max()) <= 2e-2 * float(ref.abs().max())
        stored = json.loads(gate.decisions_path().read_text())["decisions"]
        assert [d["keep"] for d in stored.values()] == [faster]
        # A new process compiling the same graph: one build, the stored verdict's way.
        built.clear()
        torch._dynamo.reset()
        again = oc.backend(arch="sm90")
        torch.compile(model, backend=again)(x)
        rewritten = ["oasr.gemm_activation.default", "oasr.gemm_residual.default"]
        assert built == [rewritten if faster == "oasr" else []]
        assert [(v.keep, v.why) for v in again.verdicts] == [(faster, "stored")]


def test_a_graph_the_pass_leaves_alone_is_built_once_and_not_measured(monkeypatch) -> None:
    import torch._inductor.compile_fx as cfx

    built: list = []
    monkeypatch.setattr(cfx, "compile_fx", _stand_in_compile_fx(built))
    monkeypatch.setattr(gate, "measurable", lambda inputs: True)
    monkeypatch.setattr(gate, "_replayed", lambda arms: pytest.fail("measured"))
    model = nn.Linear(256, 96).eval()  # fp32, untuned: nothing moves
    with torch.no_grad():
        torch._dynamo.reset()
        backend = oc.backend(arch="sm90")
        torch.compile(model, backend=backend)(torch.randn(8, 256))
    assert built == [[]] and backend.verdicts == []
    assert not gate.decisions_path().exists()
