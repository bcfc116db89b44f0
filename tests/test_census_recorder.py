"""The shape recorder: what it sees, however the observed function was imported."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from test_census_support import (
    SMALL_CONFORMER,
    Conv1dFamily,
    GemmFamily,
    conv1d_patches,
    gemm_patches,
)

from oasr_core import hookimpl
from oasr_core.census import models
from oasr_core.census.engine import EngineConfig, Traffic
from oasr_core.census.probe import run_census
from oasr_core.census.recorder import Call, RecorderPatch, ShapeRecorder, patches_of
from oasr_core.census.workloads import builtin_workloads
from oasr_core.errors import OasrWarning, PluginError
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.types import Family

WORKLOADS = {w.name: w for w in builtin_workloads()}


def _by_signature(counts: Counter) -> Counter:
    out: Counter = Counter()
    for call, n in counts.items():
        out[(call.op, dict(call.dims)["N"], dict(call.dims)["K"])] += n
    return out


def test_conformer_records_every_linear_including_one_imported_before_patching():
    """A real CPU forward: 11 GEMMs per layer plus the subsampling projection, which calls
    the ``linear`` models.py imported from torch before any recorder existed."""
    assert models.linear is F.linear
    model = models.ConformerEncoder(layers=SMALL_CONFORMER["layers"]).eval()
    frames = 4 * 20 + 3
    with ShapeRecorder(gemm_patches()) as rec, torch.no_grad():
        model(torch.randn(3, frames, 80))
    t = models.subsampled_frames(frames)
    assert t == 20
    assert _by_signature(rec.counts) == {
        ("gemm", 256, 4864): 1,
        ("gemm", 256, 256): 12,
        ("gemm", 1024, 256): 4,
        ("gemm", 256, 1024): 4,
        ("gemm", 512, 256): 2,
    }
    ms = {(dict(c.dims)["N"], dict(c.dims)["K"], c.m): n for c, n in rec.counts.items()}
    assert ms[(256, 4864, 3 * t)] == 1
    assert ms[(256, 256, 2 * t - 1)] == 2, "linear_pos runs at M = 2T - 1 once per layer"
    assert ms[(256, 256, 3 * t)] == 10
    assert {c.dtype for c in rec.counts} == {"fp32"}


def test_full_conformer_census_has_exactly_the_signatures_its_layers_imply():
    config = EngineConfig(service_mode="offline", max_batch_size=4)
    result = run_census(WORKLOADS["conformer"], config, Traffic(durations_s=(3.0,)),
                        gemm_patches(), params={"family_ops": False}, dtype="bf16")
    assert {(p.op, p.dims["N"], p.dims["K"]) for p in result.points} == {
        ("gemm", 256, 4864), ("gemm", 256, 256), ("gemm", 1024, 256), ("gemm", 256, 1024),
        ("gemm", 512, 256)}
    assert {p.dtype for p in result.points} == {"bf16"}
    steps = {label: info.calls_per_step for label, info in result.signatures.items()}
    assert steps["gemm|op=gemm|dt=bf16|N=256|K=256"] == 16 * 6, (
        "q, k, v, out, linear_pos and the last pointwise conv of each layer")
    assert steps["gemm|op=gemm|dt=bf16|N=1024|K=256"] == 32
    with torch.device("meta"):
        params = sum(p.numel() for p in models.ConformerEncoder().parameters())
    assert result.working_set_bytes == 2 * params, "every weight, at 2 bytes (bf16)"


def test_fp32_probe_is_recorded_as_the_deployment_dtype():
    with ShapeRecorder(gemm_patches(), deploy_dtype="bf16") as rec:
        F.linear(torch.randn(4, 8), torch.randn(8, 8))
        F.linear(torch.randn(4, 8, dtype=torch.float16), torch.randn(8, 8, dtype=torch.float16))
    assert sorted(c.dtype for c in rec.counts) == ["bf16", "fp16"]


@pytest.fixture
def early_importer(tmp_path, monkeypatch):
    """Modules ``census_ops`` (a plain-Python op) and ``census_user``, which imported the op
    and torch's linear by name before any recorder was created."""
    (tmp_path / "census_ops.py").write_text(textwrap.dedent("""
        import torch.nn.functional as F

        def fused(x, w):
            return F.linear(x, w).relu()

        class Kernels:
            @staticmethod
            def run(x, w):
                return fused(x, w)
    """))
    (tmp_path / "census_user.py").write_text(textwrap.dedent("""
        from torch.nn.functional import linear as early_linear
        from census_ops import fused

        def forward(x, w):
            return fused(early_linear(x, w), w)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    user = importlib.import_module("census_user")
    yield user, sys.modules["census_ops"]
    for name in ("census_user", "census_ops"):
        sys.modules.pop(name, None)


def _fused_patch(op: str = "fused") -> RecorderPatch:
    def record(x, w):
        return Call(family="gemm", op=op, dtype="fp32", dims={"N": w.shape[0], "K": w.shape[1]},
                    m=x.numel() // w.shape[1])

    return RecorderPatch(family="gemm", target="census_ops:fused", record=record)


def test_names_bound_before_patching_are_seen_and_restored(early_importer):
    user, ops = early_importer
    original = ops.fused
    x, w = torch.randn(3, 8), torch.randn(8, 8)
    with ShapeRecorder([_fused_patch(), *gemm_patches()]) as rec:
        assert user.fused is not original, "the early binding is rebound while recording"
        user.forward(x, w)
        ops.Kernels.run(x, w)
    assert user.fused is original and ops.fused is original
    ops_seen = Counter(c.op for c in rec.counts.elements())
    assert ops_seen == {"fused": 2, "gemm": 1}, "the linears inside fused() are not recounted"
    user.forward(x, w)
    assert sum(rec.counts.values()) == 3, "nothing is recorded after the recorder stops"


def test_a_class_attribute_target_is_patched_and_restored(early_importer):
    _user, ops = early_importer

    def record(x, w):
        return Call(family="gemm", op="gemm", dtype="fp32", dims={"N": 8, "K": 8}, m=x.shape[0])

    staticmethod_before = ops.Kernels.__dict__["run"]
    patch = RecorderPatch(family="gemm", target="census_ops:Kernels.run", record=record)
    with ShapeRecorder([patch]) as rec:
        ops.Kernels.run(torch.randn(2, 8), torch.randn(8, 8))
    assert ops.Kernels.__dict__["run"] is staticmethod_before
    assert sum(rec.counts.values()) == 1


def test_conv1d_through_a_patch_records_exact_points():
    """Whisper's front end through an in-test conv1d family: point BxT, M = B * T_out."""
    config = EngineConfig(service_mode="offline", max_batch_size=2)
    result = run_census(WORKLOADS["whisper_encoder"], config, Traffic(durations_s=(20.0, 25.0)),
                        [*gemm_patches(), *conv1d_patches()],
                        params={"layers": 1, "family_ops": False})
    conv = sorted((p.dims["Cin"], p.dims["stride"], p.m, p.point)
                  for p in result.points if p.family == "conv1d")
    assert conv == [(80, 1, 6000, "2x3000"), (512, 2, 3000, "2x3000")]
    gemm_ms = {p.m for p in result.points if p.family == "gemm"}
    assert gemm_ms == {2 * 1500}


def test_an_epilogue_patch_refiles_the_call_whose_output_it_consumes():
    """A ``consumes`` patch gets the call counted for its input's producer and replaces that
    count; a producer it declines, a value no recorded call produced, or a producer already
    taken keep their counts."""
    def record_linear(x, w, b=None):
        return Call(family="gemm", op="gemm", dtype="fp32", dims={"N": w.shape[0],
                                                                  "K": w.shape[1]},
                    m=x.numel() // w.shape[1])

    def record_relu(producer, x, inplace=False):
        seen.append(producer)
        if producer is None or producer.op != "gemm":
            return None
        return Call(family="gemm", op="gemm_relu", dtype=producer.dtype, dims=producer.dims,
                    m=producer.m)

    seen: list = []
    patches = [RecorderPatch(family="gemm", target="torch.nn.functional:linear",
                             record=record_linear),
               RecorderPatch(family="gemm", target="torch.nn.functional:relu",
                             record=record_relu, consumes=True)]
    x, w = torch.randn(4, 8), torch.randn(16, 8)
    with ShapeRecorder(patches) as rec:
        F.relu(F.linear(x, w))          # one fused call
        y = F.linear(x, w)
        F.relu(y + 1)                   # not the linear's output
        F.relu(torch.randn(3))          # no producer
        F.relu(F.linear(x[:2], w))      # another M: its own call, fused
        taken = F.linear(x, w)
        counted = rec.take()
        F.relu(taken)                   # its producer's count was taken: nothing to refile
    assert {(c.op, c.m): n for c, n in counted.items()} == {("gemm_relu", 4): 1,
                                                            ("gemm", 4): 2,
                                                            ("gemm_relu", 2): 1}
    assert not rec.counts
    assert [c.op if c else None for c in seen] == ["gemm", None, None, "gemm", "gemm"]
    assert not rec._produced, "the outputs' entries end with the recording"


def test_a_broken_record_function_warns_once_or_raises_when_strict():
    def broken(input, weight, bias=None):
        raise RuntimeError("boom")

    patch = RecorderPatch(family="gemm", target="torch.nn.functional:linear", record=broken)
    with pytest.warns(OasrWarning, match="record failed.*boom"):
        with ShapeRecorder([patch]) as rec:
            F.linear(torch.randn(2, 4), torch.randn(4, 4))
            F.linear(torch.randn(2, 4), torch.randn(4, 4))
    assert not rec.counts
    with pytest.raises(RuntimeError, match="boom"), ShapeRecorder([patch], strict=True):
        F.linear(torch.randn(2, 4), torch.randn(4, 4))


def test_an_unresolvable_target_is_reported_and_skipped():
    patch = RecorderPatch(family="gemm", target="no_such_module_xyz:op", record=lambda: None)
    with pytest.warns(OasrWarning, match="cannot be resolved"):
        with ShapeRecorder([patch]) as rec:
            pass
    assert rec.unresolved == ["no_such_module_xyz:op"]


def test_patch_records_validate_their_fields():
    with pytest.raises(ValueError, match="module:attribute"):
        RecorderPatch(family="gemm", target="torch.nn.functional.linear", record=print)
    with pytest.raises(TypeError, match="callable"):
        RecorderPatch(family="gemm", target="torch:matmul", record=None)


def test_patches_come_from_families_and_bad_ones_are_named():
    class Broken:
        @hookimpl
        def oasr_register_families(self):
            return [Family(name="broken", ops=("x",), dims=("N",), dtypes=("fp16",),
                           recorder_patches=lambda: [RecorderPatch])]

    plugin_manager = make_plugin_manager(load_entrypoints=False)
    plugin_manager.register(GemmFamily(), name="gemm_test")
    plugin_manager.register(Conv1dFamily(), name="conv_test")
    plugin_manager.register(Broken(), name="broken_test")
    registry = Registry.from_plugin_manager(plugin_manager)
    patches = patches_of(registry)
    assert {p.family for p in patches} == {"gemm", "conv1d"}
    strict = Registry.from_plugin_manager(plugin_manager, strict=True)
    with pytest.raises(PluginError, match="broken_test.*Forgotten the `\\(\\)`"):
        patches_of(strict)


def test_importing_the_census_imports_no_torch():
    code = ("import sys, oasr_core, oasr_core.census, oasr_core.commands.census, "
            "oasr_core.census.workloads, oasr_core.census.engine, oasr_core.census.shapeset, "
            "oasr_core.census.capture; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def test_the_whisper_encoder_refuses_anything_but_its_window():
    with torch.device("meta"):
        model = models.WhisperEncoder(layers=1)
        with pytest.raises(ValueError, match="exactly 3000 frames, got 3008"):
            model(torch.empty(1, 80, 3008))
        assert model(torch.empty(1, 80, 3000)).shape == (1, 1500, 512)
