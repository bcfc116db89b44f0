"""A quantized census: the reference workloads quantized online through a plugin's hook.

``oasr tune census --quantization int8_w8a8`` asks ``oasr_quantized_linear`` for the
scheme's quantized linear; the reference model's linear layers run through it, so the
quantized family's recorder sees them, while the rest of the model stays full precision.
The fake int8 family of :mod:`oasr_core.testing` stands in for the scaled_mm plugin.
"""

from __future__ import annotations

import json

import pytest
from test_census_support import GemmFamily

from oasr_core import build, hookimpl
from oasr_core.census import shapeset
from oasr_core.census.workloads import builtin_workloads, collect_workloads, quantized_linear
from oasr_core.errors import ConfigurationError, PluginError
from oasr_core.testing import (
    FAKE_INT8_FAMILY,
    FakeInt8Plugin,
    fake_int8_family_record,
    fake_int8_linear,
)

SMALL = ("--param", "layers=2", "--param", "family_ops=false")
CENSUS = ("tune", "census", "--workload", "conformer", *SMALL, "--service-mode", "offline",
          "--max-batch-size", 2)
# Conformer (M) widths: FFN in/out, attention q/k/v/out/pos and the conv module's pointwise
# out (256x256), its pointwise in (GLU: 512x256).
QUANTIZED = {(1024, 256), (256, 1024), (256, 256), (512, 256)}
SUBSAMPLING = (256, 4864)


@pytest.fixture
def quantized(register_plugin):
    register_plugin(GemmFamily(), name="gemm")
    return register_plugin(FakeInt8Plugin(), name="fake_int8")


def _ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_quantized_conformer_census_records_the_int8_gemm(quantized, cli_runner, tmp_path):
    out = tmp_path / "int8.json"
    _ok(cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--out", out))
    census = shapeset.load(out)
    int8 = [p for p in census.points if p.family == FAKE_INT8_FAMILY]
    half = [p for p in census.points if p.family == "gemm"]
    assert {(p.dims["N"], p.dims["K"]) for p in int8} == QUANTIZED
    assert {(p.op, p.dtype) for p in int8} == {("scaled_mm", "int8")}
    # The subsampling projection (a torch linear outside the layers' GEMM ops) stays fp16.
    assert {(p.dims["N"], p.dims["K"], p.dtype) for p in half} == {(*SUBSAMPLING, "fp16")}
    assert census.provenance["quantization"] == "int8_w8a8"
    assert census.provenance["params"]["quantization"] == "int8_w8a8"
    # Two layers of 11 linears: 2 FFN x 2, q/k/v/out/pos, conv pointwise in and out.
    layers = {label: info.calls_per_step for label, info in census.signatures.items()
              if label.startswith(FAKE_INT8_FAMILY)}
    assert sum(layers.values()) == 22
    assert layers[f"{FAKE_INT8_FAMILY}|op=scaled_mm|dt=int8|N=256|K=256"] == 12
    # int8 weights: one byte per element.
    assert census.signatures[f"{FAKE_INT8_FAMILY}|op=scaled_mm|dt=int8|N=1024|K=256"] \
        .weight_bytes == 1024 * 256


def test_the_unquantized_census_of_the_same_plugins_has_no_int8_point(quantized, cli_runner,
                                                                     tmp_path):
    out = tmp_path / "fp16.json"
    _ok(cli_runner(*CENSUS, "--out", out))
    census = shapeset.load(out)
    assert {p.family for p in census.points} == {"gemm"}
    assert {(p.dims["N"], p.dims["K"]) for p in census.points} == QUANTIZED | {SUBSAMPLING}
    # The quantized model's working set holds its linears' weights at one byte each.
    _ok(cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--out", tmp_path / "int8.json"))
    int8 = shapeset.load(tmp_path / "int8.json")
    weights = 4 * 1024 * 256 + 4 * 256 * 1024 + 12 * 256 * 256 + 2 * 512 * 256
    assert int8.working_set_bytes == census.working_set_bytes - weights


def test_the_census_keys_a_family_without_dt_for_the_build(quantized, cli_runner, tmp_path):
    """The ShapeSet labels points by operand dtype; the build keys them as the family does."""
    out = tmp_path / "int8.json"
    _ok(cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--out", out))
    raw = json.loads(out.read_text())
    assert all(p["dtype"] == "int8" for p in raw["points"] if p["family"] == FAKE_INT8_FAMILY)
    fam = fake_int8_family_record()
    census = build.read_census(out, fam)
    assert census.skipped == ("16 census point(s) skipped: family gemm",)
    keys = {sig.key for sig in build.plan(census, fam, fill=False)}
    assert keys == {f"{FAKE_INT8_FAMILY}|op=scaled_mm|N={n}|K={k}" for n, k in QUANTIZED}
    assert build.census_families([out]) == (["fake_int8", "gemm"], 0)


def test_whisper_quantizes_its_linears_but_not_its_convolutions(quantized, cli_runner,
                                                               tmp_path):
    out = tmp_path / "whisper.json"
    _ok(cli_runner("tune", "census", "--workload", "whisper_encoder", "--param", "layers=1",
                   "--param", "family_ops=false", "--quantization", "int8_w8a8",
                   "--service-mode", "offline", "--max-batch-size", 1, "--out", out))
    census = shapeset.load(out)
    assert {p.family for p in census.points} == {FAKE_INT8_FAMILY}
    assert {(p.dims["N"], p.dims["K"], p.m) for p in census.points} == {
        (512, 512, 1500), (2048, 512, 1500), (512, 2048, 1500)}


@pytest.mark.parametrize("scheme, int8_plugin", [("int8_w8a8", False), ("fp8_w8a8", True)])
def test_no_plugin_for_the_scheme_is_one_line(register_plugin, cli_runner, tmp_path, scheme,
                                              int8_plugin):
    register_plugin(GemmFamily(), name="gemm")
    if int8_plugin:
        register_plugin(FakeInt8Plugin(), name="fake_int8")
    result = cli_runner(*CENSUS, "--quantization", scheme, "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert f"quantization {scheme!r}: no installed plugin provides a quantized linear" in \
        result.stderr
    assert "oasr_quantized_linear" in result.stderr
    assert not (tmp_path / "o.json").exists()


class NotCallable:
    @hookimpl
    def oasr_quantized_linear(self, quantization):
        return "scaled_mm"


class Raises:
    @hookimpl
    def oasr_quantized_linear(self, quantization):
        raise RuntimeError("no kernels for this GPU")


class Declines:
    @hookimpl(tryfirst=True)
    def oasr_quantized_linear(self, quantization):
        return None


def test_the_hook_is_firstresult_and_a_bad_answer_names_the_hook(plugin_manager,
                                                                 register_plugin):
    register_plugin(FakeInt8Plugin(), name="fake_int8")
    register_plugin(Declines(), name="declines")
    assert quantized_linear(plugin_manager, "int8_w8a8") is fake_int8_linear
    assert quantized_linear(plugin_manager, "none") is None
    register_plugin(NotCallable(), name="bad")
    with pytest.raises(PluginError, match="oasr_quantized_linear answered a str"):
        quantized_linear(plugin_manager, "int8_w8a8")
    plugin_manager.unregister(name="bad")
    register_plugin(Raises(), name="raises")
    with pytest.raises(PluginError, match="raised RuntimeError .*no kernels"):
        quantized_linear(plugin_manager, "int8_w8a8")


def test_reference_factories_resolve_through_the_collecting_manager(plugin_manager,
                                                                    register_plugin):
    import torch

    register_plugin(FakeInt8Plugin(), name="fake_int8")
    conformer = collect_workloads(plugin_manager)["conformer"][0]
    with torch.device("meta"):
        model = conformer.factory(**{**conformer.params, "layers": 1}, family_ops=False,
                                  quantization="int8_w8a8")
    assert model.layers[0].ff1.ops.quantized is fake_int8_linear
    # Without a manager (the plain built-ins), only the unquantized model builds.
    bare = {w.name: w for w in builtin_workloads()}["conformer"]
    assert bare.factory(layers=1, d_model=64, heads=4, ffn_dim=128, family_ops=False) \
        .layers[0].ff1.ops.quantized is None
    with pytest.raises(ConfigurationError, match="int8_w8a8"):
        bare.factory(layers=1, family_ops=False, quantization="int8_w8a8")
    assert bare == conformer  # the manager a factory asks is not part of its identity


def test_the_quantized_linear_computes_the_layer_on_cpu():
    """The fake plugin's linear really is a W8A8 linear (its op only makes the output)."""
    import torch

    from oasr_core import testing

    layer = torch.nn.Linear(64, 32)
    x = torch.randn(3, 5, 64)
    seen = []

    def exact(xq, wq, x_scale, w_scale, bias=None, out_dtype=None):
        seen.append((xq.dtype, wq.dtype, tuple(xq.shape), tuple(wq.shape)))
        acc = torch.matmul(xq.to(torch.int32), wq.to(torch.int32).t()).to(torch.float32)
        return (acc * x_scale * w_scale.t() + bias).to(out_dtype)

    original = testing.fake_int8_scaled_mm
    testing.fake_int8_scaled_mm = exact
    try:
        y = fake_int8_linear(x, layer)
    finally:
        testing.fake_int8_scaled_mm = original
    assert seen == [(torch.int8, torch.int8, (3, 5, 64), (32, 64))]
    assert torch.allclose(y, layer(x), atol=0.05)
