"""``oasr tune census`` through click's CliRunner, invoking the command directly."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest
from click.testing import CliRunner
from test_census_support import Conv1dFamily, GemmFamily

from oasr_core import cli, hookimpl
from oasr_core.census import capture, shapeset
from oasr_core.census.recorder import Call
from oasr_core.census.workloads import Workload
from oasr_core.commands.census import census_cmd
from oasr_core.plugins import make_plugin_manager

SMALL = ("--param", "layers=2", "--param", "family_ops=false")


def _tiny_factory(width: int = 32):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(80, width), torch.nn.Linear(width, 8))


class TinyWorkloads:
    """Registers a workload ``tiny`` and, conflicting with the built-in, ``conformer``."""

    @hookimpl
    def oasr_register_workloads(self):
        return [Workload(name="tiny", factory=_tiny_factory, params={"width": 24}),
                Workload(name="conformer", factory=_tiny_factory)]


def _run(*args, plugins=None):
    pm = make_plugin_manager(load_entrypoints=False)
    for plugin in (GemmFamily(),) if plugins is None else plugins:
        pm.register(plugin)
    return CliRunner().invoke(census_cmd, [str(a) for a in args],
                              obj=cli.CliState(plugin_manager=pm))


def _ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_offline_conformer_census_from_a_manifest(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"duration": d}) + "\n" for d in (2, 3, 4, 9, 12)))
    out = tmp_path / "offline.json"
    result = _ok(_run("--workload", "conformer", *SMALL, "--service-mode", "offline",
                      "--max-batch-size", 4, "--manifest", manifest, "--out", out))
    census = shapeset.load(out)
    assert {(p.dims["N"], p.dims["K"]) for p in census.points} == {
        (256, 4864), (256, 256), (1024, 256), (256, 1024), (512, 256)}
    assert census.provenance["keys"] == {"offline:B4xT960": 0.5, "offline:B1xT1216": 0.5}
    assert census.provenance["traffic"]["source"] == f"manifest:{manifest}"
    assert census.provenance["weight_covered"] >= 0.97
    assert "gemm|op=gemm|dt=fp16|N=256|K=4864" in result.stdout
    assert "weight covered" in result.stdout and str(out) in result.stdout


def test_streaming_census_with_a_ladder_and_histogram(tmp_path):
    out = tmp_path / "streaming.json"
    result = _ok(_run("--workload", "conformer", *SMALL, "--service-mode", "streaming",
                      "--max-batch-size", 4, "--chunk-size", 8, "--ladder", "exact",
                      "--concurrency", "1:3,3:1", "--dtype", "bf16", "--json", "--out", out))
    summary = json.loads(result.stdout)
    assert summary["must"] == summary["points"] and summary["out"] == str(out)
    census = shapeset.load(out)
    assert census.provenance["keys"] == {"streaming:W1xC8": 0.75, "streaming:W3xC8": 0.25}
    assert {p.m for p in census.points if p.dims["K"] == 4864} == {8, 24}
    assert {p.dtype for p in census.points} == {"bf16"}


def test_whisper_census_keys_exactly_3000_frames(tmp_path):
    out = tmp_path / "whisper.json"
    _ok(_run("--workload", "whisper_encoder", "--param", "layers=1", "--param",
             "family_ops=false", "--service-mode", "offline", "--max-batch-size", 2,
             "--frame-granularity", 64, "--out", out, plugins=(GemmFamily(), Conv1dFamily())))
    census = shapeset.load(out)
    assert set(census.provenance["keys"]) == {"offline:B2xT3000"}
    assert {p.point for p in census.points if p.family == "conv1d"} == {"2x3000"}
    assert {p.m for p in census.points if p.family == "gemm"} == {3000}


def test_any_module_through_model_and_its_input_description(tmp_path, monkeypatch):
    (tmp_path / "census_tiny.py").write_text(textwrap.dedent("""
        import torch

        def build(width=32):
            class Tiny(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = torch.nn.Conv1d(80, width, 3, stride=2, padding=1)
                    self.proj = torch.nn.Linear(width, 16)

                def forward(self, mel, lengths):
                    assert lengths.shape == mel.shape[:1]
                    return self.proj(self.conv(mel).transpose(1, 2))
            return Tiny()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "tiny.json"
    _ok(_run("--model", "census_tiny:build", "--input", "B,80,T", "--input", "lengths",
             "--fixed-frames", 100, "--param", "width=48", "--service-mode", "offline",
             "--max-batch-size", 1, "--probe-device", "cpu", "--out", out))
    census = shapeset.load(out)
    assert [(p.dims["N"], p.dims["K"], p.m) for p in census.points] == [(16, 48, 50)]
    assert census.provenance["probe"]["device"] == "cpu"


def test_a_model_that_needs_values_fails_on_meta_with_a_hint(tmp_path, monkeypatch):
    (tmp_path / "census_valued.py").write_text(textwrap.dedent("""
        import torch

        class Gate(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(80, 8)

            def forward(self, x):
                return self.proj(x) if x.abs().sum().item() > 0 else x

        def build():
            return Gate()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ("--model", "census_valued:build", "--service-mode", "offline", "--max-batch-size",
            1, "--out", tmp_path / "o.json")
    result = _run(*args)
    assert result.exit_code == 2 and "on meta" in result.stderr
    assert "pass --probe-device cpu)" in result.stderr and "fix --input" in result.stderr
    _ok(_run(*args[:-2], "--probe-device", "cpu", "--probe-limit", 2, *args[-2:]))
    assert len(shapeset.load(tmp_path / "o.json").provenance["keys"]) == 2


def test_a_plugin_workload_is_usable_and_a_duplicate_name_is_dropped(tmp_path):
    out = tmp_path / "tiny.json"
    _ok(_run("--workload", "tiny", "--service-mode", "streaming", "--max-batch-size", 2,
             "--out", out, plugins=(GemmFamily(), TinyWorkloads())))
    assert {(p.dims["N"], p.dims["K"]) for p in shapeset.load(out).points} == {(24, 80), (8, 24)}
    result = _run("--workload", "conformer", "--service-mode", "offline", "--max-batch-size", 2,
                  "--out", out, plugins=(GemmFamily(), TinyWorkloads()))
    assert result.exit_code == 2 and "unknown workload 'conformer'" in result.stderr


def test_capture_files_merge_into_the_census(tmp_path):
    call = Call(family="gemm", op="gemm", dtype="fp16", dims={"N": 5000, "K": 256}, m=1,
                elements=256 + 5000 * 257, flops=2 * 5000 * 256, weight_elements=5000 * 256)
    recording = tmp_path / "cap.json"
    shapeset.dump(capture.capture_shapeset(Counter({call: 100}), {"source": "capture"}),
                  recording)
    out = tmp_path / "merged.json"
    _ok(_run("--workload", "conformer", *SMALL, "--service-mode", "streaming",
             "--max-batch-size", 2, "--capture", recording, "--coverage", 1.0, "--out", out))
    census = shapeset.load(out)
    decode = [p for p in census.points if p.dims["N"] == 5000]
    assert len(decode) == 1 and decode[0].keys == ("capture",) and not decode[0].must
    assert census.provenance["captures"][0]["file"] == str(recording)


@pytest.mark.parametrize("args, needle", [
    (("--workload", "conformr"), "unknown workload 'conformr' (did you mean 'conformer'?)"),
    (("--workload", "conformer", "--model", "x:y"), "exactly one of --workload"),
    (("--model", "no_such_pkg_xyz.mod:build"), "cannot import 'no_such_pkg_xyz.mod'"),
    (("--model", "not-a-spec"), "expected package.module:factory"),
    (("--workload", "conformer", "--input", "B,T,80"), "--input, --fixed-frames and"),
    (("--workload", "conformer", "--param", "depth=3"), "cannot build it"),
    (("--workload", "conformer", "--concurrency", "1:1"), "--concurrency weights streaming"),
    (("--workload", "conformer", "--batch-buckets", "2,x"), "--batch-buckets"),
    (("--workload", "conformer", "--batch-buckets", "64"), "batch_buckets [64] must be"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    result = _run(*args, "--service-mode", "offline", "--max-batch-size", 4,
                  "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert needle in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_a_bad_manifest_line_and_a_too_new_capture_are_named(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"duration": 1}\n{"duration": "long"}\n')
    result = _run("--workload", "conformer", "--service-mode", "offline", "--max-batch-size", 2,
                  "--manifest", manifest, "--out", tmp_path / "o.json")
    assert result.exit_code == 2 and f"{manifest}:2: duration 'long'" in result.stderr
    newer = tmp_path / "cap.json"
    newer.write_text(json.dumps({"schema_version": 99, "points": []}))
    result = _run("--workload", "conformer", "--service-mode", "offline", "--max-batch-size", 2,
                  "--capture", newer, "--out", tmp_path / "o.json")
    assert result.exit_code == 2 and "newer oasr" in result.stderr


@pytest.mark.parametrize("args, needle", [
    (("--quantization", "int8_w8a8"), "Invalid value for --quantization: 'int8_w8a8' is not a "
     "scheme an installed plugin serves; offered: none (see `oasr plugins`)"),
    (("--dtype", "fp32"), "Invalid value for --dtype: 'fp32' is not a dtype the installed "
     "plugins serve with --quantization none; offered: none (fp16, bf16)"),
])
def test_dtype_and_scheme_come_from_the_installed_families(tmp_path, args, needle):
    """The in-test gemm family serves fp16 and bf16, and no family lists a quantization."""
    result = _run("--workload", "conformer", *args, "--service-mode", "offline",
                  "--max-batch-size", 4, "--out", tmp_path / "o.json")
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert not (tmp_path / "o.json").exists()


def test_without_recorder_patches_nothing_can_be_recorded(tmp_path):
    result = _run("--workload", "conformer", "--service-mode", "offline", "--max-batch-size", 2,
                  "--out", tmp_path / "o.json", plugins=())
    assert result.exit_code == 2 and "no installed family provides recorder patches" in \
        result.stderr
