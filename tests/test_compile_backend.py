"""The oasr compile backend on CPU: the post-grad pass on real FX graphs of real torch
models (sites rewritten where the shipped sm90 tables choose oasr, left where they do not;
outputs equal through the ops' torch path), the census record, the entry point torch finds,
route() for uncompiled models and the traced BatchNorm fold.

Most tests run the pass on the ATen graph AOTAutograd makes with Inductor's decompositions
(what Inductor's post-grad passes see) and execute that graph directly, which skips
Inductor's code generation; one test compiles through Inductor itself."""

from __future__ import annotations

import importlib.metadata

import pytest

torch = pytest.importorskip("torch")
from pathlib import Path  # noqa: E402

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import oasr_core.compile as oc  # noqa: E402
from oasr_core.testing import aot_pass_backend  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _shipped_tables(monkeypatch):
    """The shipped sm90 tables as the system tier (what a fresh install serves)."""
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(REPO / "db"))


class Block(nn.Module):
    """A Conformer-like block written as plain torch: the shapes the shipped sm90 gemm
    table covers (N=1024/K=256 with SiLU, N=256/K=1024 added to the residual at 0.5), an
    untuned linear (K=256 -> N=96) and a depthwise conv behind a pointwise one."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(256, 1024), nn.Linear(1024, 256)
        self.odd = nn.Linear(256, 96)
        self.pw = nn.Conv1d(256, 512, 1)
        self.dw = nn.Conv1d(256, 256, 31, padding=15, groups=256)
        self.bn = nn.BatchNorm1d(256)

    def forward(self, x):
        x = x + 0.5 * self.down(F.silu(self.up(x)))
        z = F.glu(self.pw(x.transpose(1, 2)), dim=1)
        z = F.silu(self.bn(self.dw(z)))
        x = x + z.transpose(1, 2)
        return x, self.odd(x)


def _model(dtype=torch.bfloat16):
    torch.manual_seed(0)
    block = Block().eval()
    with torch.no_grad():  # statistics a trained norm has, so that folding it shows
        block.bn.running_mean.uniform_(-0.5, 0.5)
        block.bn.running_var.uniform_(0.5, 2.0)
        block.bn.weight.uniform_(0.5, 1.5)
        block.bn.bias.uniform_(-0.5, 0.5)
    return block.to(dtype)


def _targets(graph):
    return [str(n.target) for n in graph.nodes if n.op == "call_function"]


def _run(model, x, **options):
    torch._dynamo.reset()
    backend = oc.backend(arch="sm90", **options)
    graphs = []
    with torch.no_grad():
        out = torch.compile(model, backend=aot_pass_backend(backend.graph_pass, graphs))(x)
        ref = model(x)
    return backend, graphs[0], out, ref


def _close(out, ref, tol):
    for a, b in zip(out, ref, strict=True):
        assert a.shape == b.shape
        assert float((a.float() - b.float()).abs().max()) <= tol * float(b.float().abs().max())


def test_pass_rewrites_where_the_tiers_choose_oasr_and_leaves_the_rest() -> None:
    model = _model()
    x = torch.randn(1, 1024, 256, dtype=torch.bfloat16)
    backend, graph, out, ref = _run(model, x)
    # The shipped sm90 tables: gemm_activation (1024, 256) and gemm_residual (256, 1024)
    # at M=1024 are oasr's; the linear to 96 columns has no entry (gemm's untuned choice is
    # torch). The depthwise convolution, its BatchNorm and SiLU are the eager model's folded
    # conv1d_silu, which the system tier serves at M=1024: one op, the norm folded into its
    # weight. No entry covers the pointwise convolution (the family's untuned gate was
    # measured against eager torch, not Inductor), so it stays Inductor's.
    assert backend.rewritten == {("gemm", "gemm_activation"): 1, ("gemm", "gemm_residual"): 1,
                                 ("conv1d", "conv1d_silu"): 1}
    targets = _targets(graph)
    assert targets.count("oasr.gemm_activation.default") == 1
    assert targets.count("oasr.gemm_residual.default") == 1
    assert targets.count("oasr.conv1d_batch_norm.default") == 1
    assert targets.count("aten.addmm.default") == 1  # the untuned linear stays Inductor's
    assert targets.count("aten.convolution.default") == 1
    # The norm's and the activation's pointwise work is gone from the graph.
    assert "aten.sqrt.default" not in targets and "aten.exp.default" not in targets
    _close(out, ref, 2e-2)


def test_a_tuned_convolution_goes_channels_last_to_the_op_with_its_gelu() -> None:
    # The Whisper front end's first convolution: the system tier names the conv1d
    # heuristic for conv1d_gelu at the exact point 1x3000.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(80, 512, 3, padding=1), nn.GELU()).eval().bfloat16()
    mel = torch.randn(1, 80, 3000, dtype=torch.bfloat16)
    backend, graph, out, ref = _run(model, mel)
    assert backend.rewritten == {("conv1d", "conv1d_gelu"): 1}
    targets = _targets(graph)
    assert targets.count("oasr.conv1d_activation.default") == 1
    assert "aten.convolution.default" not in targets and "aten.erf.default" not in targets
    # The mel input is channels-first and contiguous: one copy to channels-last, a sixth of
    # the output's size, before the op; the consumers read the transposed view.
    assert targets.count("aten.clone.default") == 1
    _close([out], [ref], 2e-2)


def test_without_an_arch_nothing_is_rewritten_and_an_fp32_model_neither() -> None:
    x = torch.randn(1, 1024, 256, dtype=torch.bfloat16)
    torch._dynamo.reset()
    backend = oc.backend()  # no CUDA device here: no arch, so oasr's ops would serve torch
    graphs = []
    with torch.no_grad():
        torch.compile(_model(), backend=aot_pass_backend(backend.graph_pass, graphs))(x)
    assert backend.rewritten == {}
    backend, graph, out, ref = _run(_model(torch.float32), x.float())
    assert backend.rewritten == {} and "aten.convolution.default" in _targets(graph)


def test_dynamic_time_axis_serves_signatures_with_entries() -> None:
    model = _model()
    x = torch.randn(1, 1024, 256, dtype=torch.bfloat16)
    torch._dynamo.mark_dynamic(x, 1)
    backend, graph, out, ref = _run(model, x)
    # M is symbolic: a site goes to the op where a tier entry names a config for its
    # signature in some M region (the op chooses per call): both linears, and the
    # depthwise convolution with its BatchNorm folded (conv1d_silu's system entry); no
    # entry covers the pointwise convolution, which stays Inductor's.
    assert backend.rewritten == {("gemm", "gemm_activation"): 1, ("gemm", "gemm_residual"): 1,
                                 ("conv1d", "conv1d_silu"): 1}
    _close(out, ref, 2e-2)


def test_backend_oasr_is_found_through_the_entry_point_and_compiles_with_inductor() -> None:
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert [ep.value for ep in eps if ep.name == "oasr"] == ["oasr_core.compile:oasr_backend"]
    assert torch._dynamo.lookup_backend("oasr") is oc.oasr_backend
    torch._dynamo.reset()
    # One linear: Inductor lowers it to an extern GEMM and a Python wrapper, so the test
    # compiles no C++ kernel (a pointwise op would cost seconds of compiler on a CPU).
    model = nn.Linear(64, 32).eval()
    x = torch.randn(4, 64)
    with torch.no_grad():
        out = torch.compile(model, backend="oasr")(x)
        assert torch.allclose(out, model(x), atol=1e-5)


_CACHED_RUN = """
import torch
from torch import nn
import oasr_core.compile as oc

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.SiLU()).eval().bfloat16()
x = torch.randn(1024, 256, dtype=torch.bfloat16)
backend = oc.backend(arch="sm90")
with torch.no_grad():
    out = torch.compile(model, backend=backend)(x)
    assert torch.allclose(out.float(), model(x).float(), atol=0.05, rtol=0.05)
print(sorted(backend.rewritten.items()))
"""


def test_a_graph_from_inductors_cache_finds_the_ops_in_a_new_process(tmp_path) -> None:
    # The second process loads the graph (which calls oasr::gemm_activation) from
    # Inductor's cache: the pass does not run there, yet the op is registered.
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "OASR_TUNE_SYSTEM_DB": str(REPO / "db"), "OASR_TUNE_USER_DB": "off"}
    runs = [subprocess.run([sys.executable, "-c", _CACHED_RUN], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[0].stdout.strip() == "[(('gemm', 'gemm_activation'), 1)]"
    assert runs[1].stdout.strip() == "[]"  # the cached graph: no pass ran


def test_route_sends_linears_and_convs_to_the_ops_and_back() -> None:
    from oasr_conv1d import ops as conv_ops
    from oasr_gemm import ops as gemm_ops

    import oasr_core

    model = _model(torch.float32)
    x = torch.randn(2, 64, 256)
    with torch.no_grad():
        ref = model(x)
        gemm_ops.reset_stats()
        conv_ops.reset_stats()
        assert oasr_core.route(model, dtype="fp16") == {"Linear": 3, "Conv1d": 2}
        from oasr_core.routing import own_forwards, through_ops, unroute

        # No CUDA device in this process: every routed linear's answer is torch at every
        # M, so each keeps its own forward and never reaches the op; the convs' plans
        # depend on the call (a CPU one is the module's forward, counted).
        assert own_forwards(model) == 3
        _close(model(x), ref, 1e-5)
        assert gemm_ops.stats() == {} and conv_ops.stats() == {"torch:cpu": 2}
        conv_ops.reset_stats()
        with through_ops():
            out = model(x)
            # Sent through the ops: they take their torch path, counted.
            assert sum(gemm_ops.stats().values()) == 3
            assert sum(conv_ops.stats().values()) == 2
            _close(out, ref, 1e-5)
            conv_ops.reset_stats()
            # A CPU input (here a contiguous channels-first one too, which would need a
            # copy) is the module's own forward, counted as the torch path's.
            model.pw(torch.randn(2, 256, 64))
            assert conv_ops.stats() == {"torch:cpu": 1}
        assert own_forwards(model) == 3

        assert unroute(model) == 5
        gemm_ops.reset_stats()
        _close(model(x), ref, 0)
        assert gemm_ops.stats() == {}


def test_folded_conv_traces_without_recompiling_per_layer() -> None:
    from oasr_core.census import models

    torch.manual_seed(0)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv1d(16, 16, 3, padding=1, groups=16)
                                       for _ in range(10))
            self.norms = nn.ModuleList(nn.BatchNorm1d(16) for _ in range(10))

        def forward(self, x):
            for conv, norm in zip(self.convs, self.norms, strict=True):
                folded = models.folded_conv(conv, norm)
                x = F.conv1d(x, folded.weight, folded.bias, padding=1, groups=16)
            return x

    model = Stack().eval()
    for norm in model.norms:
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 16, 32)
    torch._dynamo.reset()
    counts = torch._dynamo.utils.counters
    counts.clear()
    with torch.no_grad():
        ref = model(x)  # eager: the cached fold
        out = torch.compile(model, backend="eager", fullgraph=True)(x)
    assert torch.allclose(out, ref, atol=1e-5)
    assert counts["stats"]["unique_graphs"] == 1


def _table(user, family, entries):
    """A user-tier table of ``family`` on sm90: the shipped file's header (a header of the
    family's active sm90 lane where none ships), ``entries``."""
    import json

    from oasr_core.runtime import get_runtime

    shipped = REPO / "db" / "sm90" / f"{family}.json"
    if shipped.exists():
        data = json.loads(shipped.read_text())
    else:
        registry = get_runtime().registry
        fam = registry.family(family)
        data = {"schema_version": 2, "family": family, "family_schema_version": 1,
                "arch": {"family": "sm90", "lane": registry.active_lane(family, "sm90").name},
                "validators": {"soft": dict(fam.soft_validators())}, "configs": {}}
    data["entries"] = entries
    (user / "sm90").mkdir(parents=True, exist_ok=True)
    (user / "sm90" / f"{family}.json").write_text(json.dumps(data))


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(256, 1024), nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.down(F.silu(self.up(x)))


@pytest.mark.parametrize("family,scheme,tol", [("scaled_mm", "int8_w8a8", 2e-2),
                                               ("scaled_mm_fp8", "fp8_w8a8", 4e-2)])
def test_a_scheme_quantizes_the_linears_its_tiers_say_pay_and_leaves_the_rest(
        family, scheme, tol, tmp_path, monkeypatch) -> None:
    # The user tier names the family's tile for the up projection (1024, 256); the shipped
    # table says unquantized for the down projection (256, 1024), which falls through to
    # the full-precision patterns (the shipped gemm table's fused residual).
    _table(tmp_path, family, {f"{family}|op={family}|N=1024|K=256": {
        "regions": [[None, "heuristic"]], "source": "aot"}})
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    torch.manual_seed(0)
    model = FeedForward().eval().bfloat16()
    x = torch.randn(1, 1024, 256, dtype=torch.bfloat16)
    backend, graph, out, ref = _run(model, x, quantization=scheme)
    assert backend.rewritten == {(family, family): 1, ("gemm", "gemm_residual"): 1}
    targets = _targets(graph)
    # The quantized linear takes the bias; its SiLU stays Inductor's.
    assert targets.count(f"oasr.{family}_linear.default") == 1
    assert "aten.addmm.default" not in targets and "aten.exp.default" in targets
    _close([out], [ref], tol)
    # Without the user entry the shipped tables say unquantized at both widths (the
    # Conformer's widths never pay): nothing is quantized, both linears are gemm's.
    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    from oasr_core import runtime

    runtime.install_runtime(None)
    backend, graph, out, ref = _run(model, x, quantization=scheme)
    assert backend.rewritten == {("gemm", "gemm_activation"): 1, ("gemm", "gemm_residual"): 1}


class NormedProjections(nn.Module):
    """A pre-norm block's Q, K, V: one LayerNorm feeding three linears (V without bias)."""

    def __init__(self, keep_norm: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(256)
        self.q, self.k = nn.Linear(256, 1024), nn.Linear(256, 1024)
        self.v = nn.Linear(256, 1024, bias=False)
        self.keep_norm = keep_norm

    def forward(self, x):
        h = self.norm(x)
        y = self.q(h) * self.k(h) + self.v(h)
        return (y, h) if self.keep_norm else y


@pytest.mark.parametrize("keep_norm", [False, True])
def test_the_linears_after_a_layer_norm_share_its_quantized_rows(
        keep_norm, tmp_path, monkeypatch) -> None:
    _table(tmp_path, "scaled_mm", {"scaled_mm|op=scaled_mm|N=1024|K=256": {
        "regions": [[None, "heuristic"]], "source": "aot"}})
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    torch.manual_seed(0)
    model = NormedProjections(keep_norm).eval().bfloat16()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 100, 256, dtype=torch.bfloat16)
    backend, graph, out, ref = _run(model, x, quantization="int8_w8a8")
    assert backend.rewritten == {("scaled_mm", "scaled_mm"): 3}
    targets = _targets(graph)
    # One fused norm-and-quantize for the three linears; the norm Inductor would compute
    # is gone unless something else reads it.
    assert targets.count("oasr.scaled_mm_norm_quantize.default") == 1
    assert targets.count("oasr.scaled_mm_rows_linear.default") == 3
    assert ("aten.var_mean.correction" in targets) == keep_norm
    _close(out if keep_norm else [out], ref if keep_norm else [ref], 3e-2)


def test_a_quantized_compile_census_records_the_scheme_ops() -> None:
    from oasr_core.census.probe import compiled_calls

    with torch.no_grad():
        calls = compiled_calls(FeedForward().eval(), (torch.randn(2, 30, 256),), "bf16",
                               quantization="fp8_w8a8")
    labels = sorted((c.family, c.op, c.dtype, c.dims, c.m) for c in calls)
    assert labels == [("scaled_mm_fp8", "scaled_mm_fp8", "float8_e4m3fn", (("N", n), ("K", k)), 60)
                      for n, k in ((256, 1024), (1024, 256))]


def test_census_compiled_calls_record_each_key_and_run_without_code_generation() -> None:
    from oasr_core.census.probe import compiled_calls

    model = _model(torch.float32)
    with torch.no_grad():
        calls = compiled_calls(model, (torch.randn(3, 40, 256),), "bf16")
    labels = {(c.label, c.m, c.point): n for c, n in calls.items()}
    assert labels[("gemm|op=gemm_activation|dt=bf16|N=1024|K=256", 120, None)] == 1
    assert labels[("conv1d|op=conv1d_silu|dt=bf16|Cin=256|Cout=256|k=31|stride=1|pad=15|dil=1|"
                   "groups=256", 120, "3x40")] == 1
    call = next(c for c in calls if c.op == "gemm_activation")
    assert (call.flops, call.weight_elements) == (2 * 120 * 1024 * 256, 1024 * 256)


def test_census_probe_traces_once_for_keys_of_one_shape_class() -> None:
    from oasr_core.census.probe import CompiledProbe

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 64)).eval()
    probe = CompiledProbe(model, "fp16", dynamic=[(0, 1)])
    counts = torch._dynamo.utils.counters
    counts.clear()
    seen = []
    with torch.no_grad():
        for batch, frames in ((4, 50), (2, 30), (3, 70), (8, 11)):
            calls = probe.calls((torch.randn(batch, frames, 64),))
            seen.append(sorted((c.op, c.m) for c, n in calls.items() for _ in range(n)))
    # Batch and frames marked dynamic from the first key: one graph serves all four, and
    # each call counts its sites at its own rows.
    assert counts["stats"]["unique_graphs"] == 1
    assert seen == [[("gemm", m), ("gemm_activation", m)] for m in (200, 60, 210, 88)]


def test_a_compile_census_in_the_tiers_makes_the_next_compile_serve_every_site(
        tmp_path, monkeypatch) -> None:
    """The loop a user runs: ``oasr tune census --compile`` of the reference Conformer, its
    points in a user tier (what ``oasr tune build`` writes: an entry per signature naming a
    config over M regions), then the compiled model: every site the census
    recorded is rewritten (the census keys are the ones the pass looks up), the
    convolution module's depthwise convolution included."""
    from collections import Counter

    from click.testing import CliRunner

    from oasr_core import cli
    from oasr_core.census import models, shapeset
    from oasr_core.commands.census import census_cmd
    from oasr_core.database import signature_key
    from oasr_core.runtime import get_runtime

    out = tmp_path / "census.json"
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"duration": 1.2}\n{"duration": 1.1}\n')
    result = CliRunner().invoke(census_cmd, [
        "--workload", "conformer", "--param", "layers=1", "--service-mode", "offline",
        "--manifest", str(manifest), "--max-batch-size", "2", "--batch-buckets", "2",
        "--frame-granularity", "64", "--max-frames", "128", "--dtype", "bf16", "--compile",
        "--out", str(out)], obj=cli.CliState())
    assert result.exit_code == 0, (result.output, result.exception)
    census = shapeset.load(out)
    assert census.provenance["keys"] == {"offline:B2xT128": 1.0}
    registry = get_runtime().registry
    tables: dict = {}
    # The Conformer's frames are bucketed: its convolutions are recorded over M regions,
    # like the linears (no exact point). gemm's lane default runs every linear here; the
    # depthwise convolution takes conv1d's shape heuristic (the dense lane's default
    # cannot run it), the subsampling's two 2-D convolutions conv2d's (few-channels for the
    # one-plane input, the lane default for the other).
    choice = {"gemm": "default", "conv1d": "heuristic", "conv2d": "heuristic"}
    for point in census.points:
        fam = registry.family(point.family)
        key = signature_key(fam, point.op, fam.key_dtypes(point.dtype)[-1], point.dims)
        assert point.point is None
        tables.setdefault(point.family, {})[key] = {
            "regions": [[None, choice[point.family]]], "source": "aot"}
    assert sorted(tables) == ["conv1d", "conv2d", "gemm"]
    user = tmp_path / "user"
    for family, entries in tables.items():
        _table(user, family, entries)
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", "off")
    from oasr_core import runtime

    runtime.install_runtime(None)
    torch.manual_seed(0)
    model = models.ConformerEncoder(input_dim=80, d_model=256, heads=4, ffn_dim=1024,
                                    kernel_size=31, layers=1).eval().bfloat16()
    x = torch.randn(2, 128, 80, dtype=torch.bfloat16)
    backend, graph, out_, ref = _run(model, x)
    per_forward = Counter()
    for point in census.points:
        per_forward[(point.family, point.op)] += round(point.calls)
    assert backend.rewritten == dict(per_forward)
    # Every site: the subsampling's two convolutions and projection, the layer's 11 linears
    # and its depthwise convolution (recorded as conv1d_silu, the eager model's key: the
    # pass folds its BatchNorm and fuses its SiLU).
    assert backend.rewritten[("conv1d", "conv1d_silu")] == 1
    assert sum(n for (family, _), n in backend.rewritten.items() if family == "conv2d") == 2
    assert sum(backend.rewritten.values()) == 2 + 1 + 11 + 1
    assert "aten.mm.default" not in _targets(graph) and "aten.addmm.default" not in \
        _targets(graph)
    _close([out_], [ref], 3e-2)


def test_kernel_classes_and_compile_option_checks() -> None:
    from oasr_core.bench.e2e import E2EOptions
    from oasr_core.bench.kernel_profile import kernel_class, summarize
    from oasr_core.errors import ConfigurationError

    assert kernel_class("triton_poi_fused_clone_3") == "copies"
    assert kernel_class("triton_poi_fused_convolution_glu_1") == "pointwise"
    assert kernel_class("triton_per_fused_add_native_layer_norm_5") == "norms"
    assert kernel_class("void oasr_conv1d::depthwise::conv_kernel<half, 8>") == "conv"
    assert kernel_class("void cutlass::device_kernel<GemmUniversal<NumericConverter>>") == \
        "GEMM"
    assert kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNT") == "GEMM"
    assert kernel_class("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>") == \
        "attention"
    profile = summarize([("nvjet_a", 30.0), ("triton_poi_fused_add_0", 10.0)], forwards=2)
    assert dict((c, ms) for c, ms, _ in profile.classes)["GEMM"] == pytest.approx(0.015)
    assert profile.table()[-1].startswith("| total | 0.020 |")
    with pytest.raises(ConfigurationError, match="--compile"):
        E2EOptions(batch=1, frames=8, device="cpu", compile=True)
