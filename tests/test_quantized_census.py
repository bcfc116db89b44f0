"""A quantized census: the reference workloads quantized online through a plugin's hook.

``oasr tune census --quantization int8_w8a8`` accepts the scheme because a family lists it
(``Family.quantizations``) and asks ``oasr_linear`` for the scheme's linear; the reference
model's linear layers run through it, so the quantized family's recorder sees them, while the
rest of the model stays full precision. The fake int8 family of :mod:`oasr_core.testing`
stands in for the scaled_mm plugin.
"""

from __future__ import annotations

import json
import warnings

import attrs
import pytest
from test_census_support import GemmFamily

from oasr_core import build, hookimpl
from oasr_core.census import shapeset
from oasr_core.census.workloads import builtin_workloads, collect_workloads, served_linear
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
    assert build.census_families([out]) == ["fake_int8", "gemm"]


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
def test_a_scheme_no_family_lists_is_a_bad_parameter(register_plugin, cli_runner, tmp_path,
                                                     scheme, int8_plugin):
    register_plugin(GemmFamily(), name="gemm")
    if int8_plugin:
        register_plugin(FakeInt8Plugin(), name="fake_int8")
    result = cli_runner(*CENSUS, "--quantization", scheme, "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    offered = "none, int8_w8a8" if int8_plugin else "none"
    assert f"Invalid value for --quantization: {scheme!r} is not a scheme an installed " \
        f"plugin serves; offered: {offered} (see `oasr plugins`)" in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_a_dtype_the_scheme_does_not_take_lists_the_offer(quantized, cli_runner, tmp_path):
    result = cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--dtype", "fp32",
                        "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    assert "Invalid value for --dtype: 'fp32' is not a dtype the installed plugins serve " \
        "with --quantization int8_w8a8; offered: none (fp16, bf16), int8_w8a8 (fp16, bf16)" \
        in result.stderr
    _ok(cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--dtype", "bf16",
                   "--out", tmp_path / "bf16.json"))
    assert shapeset.load(tmp_path / "bf16.json").provenance["dtype"] == "bf16"


class ListsTheSchemeOnly:
    """A family listing ``int8_w8a8`` whose plugin serves no linear for it."""

    @hookimpl
    def oasr_register_families(self):
        return [attrs.evolve(fake_int8_family_record(), name="listed")]


def test_a_listed_scheme_nobody_serves_is_one_line(register_plugin, cli_runner, tmp_path):
    register_plugin(GemmFamily(), name="gemm")
    register_plugin(ListsTheSchemeOnly(), name="listed")
    result = cli_runner(*CENSUS, "--quantization", "int8_w8a8", "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "quantization 'int8_w8a8': no installed plugin provides a quantized linear" in \
        result.stderr and "oasr_linear" in result.stderr
    assert not (tmp_path / "o.json").exists()


class NotCallable:
    @hookimpl
    def oasr_linear(self, dtype, quantization):
        return "scaled_mm"


class Raises:
    @hookimpl
    def oasr_linear(self, dtype, quantization):
        raise RuntimeError("no kernels for this GPU")


class Declines:
    @hookimpl(tryfirst=True)
    def oasr_linear(self, dtype, quantization):
        return None


def test_the_hook_is_firstresult_and_a_bad_answer_names_the_hook(plugin_manager,
                                                                 register_plugin):
    register_plugin(FakeInt8Plugin(), name="fake_int8")
    register_plugin(Declines(), name="declines")
    assert served_linear(plugin_manager, dtype="fp16", quantization="int8_w8a8") \
        is fake_int8_linear
    assert served_linear(plugin_manager, dtype="fp16") is None
    with pytest.raises(ConfigurationError, match="family_ops=true: no installed plugin serves"):
        served_linear(plugin_manager, dtype="fp16", required=True)
    register_plugin(NotCallable(), name="bad")
    with pytest.raises(PluginError, match="oasr_linear answered a str"):
        served_linear(plugin_manager, dtype="fp16", quantization="int8_w8a8")
    plugin_manager.unregister(name="bad")
    register_plugin(Raises(), name="raises")
    with pytest.raises(PluginError, match="raised RuntimeError .*no kernels"):
        served_linear(plugin_manager, dtype="fp16", quantization="int8_w8a8")


class PlainLinear:
    """Serves full-precision fp16 linears with an op the in-test gemm family records as
    ``gemm_activation`` when an activation follows (as the real gemm plugin's ops do)."""

    calls: list = []

    @hookimpl
    def oasr_linear(self, dtype, quantization):
        if quantization != "none" or dtype != "fp16":
            return None

        def linear(x, layer, activation=None):
            import torch.nn.functional as F

            from oasr_core.census.models import activate

            self.calls.append(activation)
            return activate(F.linear(x, layer.weight, layer.bias), activation)

        return linear


def test_plain_linears_go_through_the_hook_with_their_activation(register_plugin, cli_runner,
                                                                  tmp_path):
    register_plugin(GemmFamily(), name="gemm")
    plugin = register_plugin(PlainLinear(), name="plain")
    plugin.calls.clear()
    _ok(cli_runner("tune", "census", "--workload", "conformer", "--param", "layers=1",
                   "--service-mode", "offline", "--max-batch-size", 1, "--max-frames", 64,
                   "--out", tmp_path / "fp16.json"))
    # Per key: 11 linears per layer, the two FFN up-projections followed by SiLU.
    assert plugin.calls and plugin.calls.count("silu") * 11 == 2 * len(plugin.calls)
    assert set(plugin.calls) == {None, "silu"}
    plugin.calls.clear()
    _ok(cli_runner("tune", "census", "--workload", "conformer", "--param", "layers=1",
                   "--param", "family_ops=false", "--service-mode", "offline",
                   "--max-batch-size", 1, "--max-frames", 64, "--out", tmp_path / "torch.json"))
    assert plugin.calls == []
    assert shapeset.load(tmp_path / "fp16.json").points == \
        shapeset.load(tmp_path / "torch.json").points
    plugin.calls.clear()
    _ok(cli_runner("tune", "census", "--workload", "conformer", "--param", "layers=1",
                   "--dtype", "bf16", "--service-mode", "offline", "--max-batch-size", 1,
                   "--max-frames", 64, "--out", tmp_path / "bf16.json"))
    assert plugin.calls == [], "the plugin declined bf16: torch served it"


class Deprecated:
    @hookimpl
    def oasr_quantized_linear(self, quantization):
        return fake_int8_linear if quantization == "int8_w8a8" else None


def test_the_deprecated_quantized_hook_still_serves_with_a_warning(plugin_manager,
                                                                   register_plugin):
    register_plugin(GemmFamily(), name="gemm")
    with pytest.warns(DeprecationWarning, match="oasr_quantized_linear is deprecated"):
        register_plugin(Deprecated(), name="old")
    import torch

    linear = served_linear(plugin_manager, dtype="fp16", quantization="int8_w8a8")
    layer = torch.nn.Linear(16, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = linear(torch.randn(2, 16), layer, "relu")
    assert y.shape == (2, 8) and bool((y >= 0).all())


def test_reference_factories_resolve_through_the_collecting_manager(plugin_manager,
                                                                    register_plugin):
    import torch

    register_plugin(FakeInt8Plugin(), name="fake_int8")
    conformer = collect_workloads(plugin_manager)["conformer"][0]
    assert conformer.dtype_param == "dtype"
    with torch.device("meta"):
        model = conformer.factory(**{**conformer.params, "layers": 1}, family_ops=False,
                                  quantization="int8_w8a8")
    assert model.layers[0].ff1.ops.served is fake_int8_linear
    # Without a manager (the plain built-ins), only the unquantized model builds.
    bare = {w.name: w for w in builtin_workloads()}["conformer"]
    assert bare.factory(layers=1, d_model=64, heads=4, ffn_dim=128) \
        .layers[0].ff1.ops.served is None
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
