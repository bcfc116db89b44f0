"""``oasr tune bench`` and ``benchmarks/e2e.py`` on a CPU: a tiny Conformer through the real
plugins (their ops take the torch path here), eager only, through click's CliRunner and as a
subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oasr_core import cli
from oasr_core.commands.bench import bench_cmd
from oasr_core.plugins import make_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
TINY = ("--param", "layers=1", "--param", "d_model=32", "--param", "heads=2",
        "--param", "ffn_dim=64", "--batch", "2", "--frames", "48", "--iters", "2",
        "--warmup", "1")


def tiny_factory(width: int = 32):
    """A two-layer model over ``[B, T, 80]``."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(80, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 8))


class _Perturbed:
    """Builds a model whose output depends on a random buffer the state dict does not carry,
    so two builds with the same weights disagree."""

    def __call__(self):
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(80, 8)
                self.register_buffer("noise", torch.randn(8), persistent=False)

            def forward(self, x):
                return self.linear(x) + self.noise

        return Model()


perturbed_factory = _Perturbed()


def _invoke(*args):
    pm = make_plugin_manager()
    return CliRunner().invoke(bench_cmd, [str(a) for a in args],
                              obj=cli.CliState(plugin_manager=pm))


def _errors(result):
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_tiny_conformer_table_and_tiers():
    result = _invoke("--workload", "conformer", *TINY, "--cpu")
    assert result.exit_code == 0, (result.output, result.exception)
    out = result.stdout
    assert out.startswith("# end to end: conformer on CPU")
    assert "**No oasr kernel ran** (on the CPU oasr's ops take their torch path)" in out
    assert "| model | mode | oasr ms | torch ms | speedup |" in out
    row = next(line for line in out.splitlines() if line.startswith("| conformer | eager |"))
    oasr_ms, torch_ms, speedup = (c.strip() for c in row.split("|")[3:6])
    assert float(oasr_ms) > 0 and float(torch_ms) > 0 and speedup.endswith("x")
    assert "CUDA graph |" not in out  # a CPU run is eager only
    # Folding the conv module's BatchNorm into its convolution rounds differently in fp32.
    agreement = re.search(r"agreement: max \|oasr - torch\| / max \|torch\| = (\S+) \(bound "
                          r"0\.0001\)", out)
    assert agreement and float(agreement.group(1)) < 1e-6
    # Eleven linears and the depthwise conv of a layer go through oasr's ops (the four
    # linears before a residual add with the add fused); the subsampling stays torch's.
    assert "calls of one forward served by oasr's ops: 12" in out
    assert "conv1d/conv1d_silu: torch (cpu) x1" in out
    assert "gemm/gemm: torch (cpu) x5" in out and "gemm/gemm_activation: torch (cpu) x2" in out
    assert "gemm/gemm_residual: torch (cpu) x4" in out
    # The CPU's forwards are counted on stderr (the last line at least), never on stdout.
    total = 2 * (int(TINY[TINY.index("--warmup") + 1]) + int(TINY[TINY.index("--iters") + 1]))
    assert _errors(result)[-1].startswith(f"progress: {total}/{total} forwards, ")
    assert "progress:" not in out


def test_json_output_and_out_file(tmp_path):
    out = tmp_path / "r.json"
    result = _invoke("--model", "test_e2e_bench:tiny_factory", "--param", "width=16",
                     "--batch", "3", "--frames", "5", "--iters", "2", "--cpu", "--json",
                     "--out", out)
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads(result.stdout)
    assert data == json.loads(out.read_text())
    assert (data["batch"], data["frames"], data["dtype"]) == (3, 5, "fp32")
    assert [r["mode"] for r in data["rows"]] == ["eager"]
    assert data["error"] <= data["bound"] == 1e-4
    # Both linears keep their own forward (no tier serves their widths), and the tally
    # still counts them, through the ops, as served by torch.
    assert data["calls"] == [{"family": "gemm", "op": "gemm", "served_by": "torch (cpu)",
                              "calls": 2}]
    assert data["oasr_kernel_calls"] == 0 and data["own_forwards"] == 2


def test_a_model_that_disagrees_fails_in_one_line():
    result = _invoke("--model", "test_e2e_bench:perturbed_factory", "--batch", "2",
                     "--frames", "4", "--cpu")
    assert result.exit_code == 1
    (line,) = _errors(result)
    assert line.startswith("error: oasr and torch outputs disagree (eager): max |oasr - torch|")


@pytest.mark.parametrize(("args", "needle"), [
    (("--workload", "conformr", "--batch", "1", "--frames", "8"),
     "unknown workload 'conformr' (did you mean 'conformer'?)"),
    (("--workload", "conformer", "--batch", "0", "--frames", "8"),
     "--batch 0: expected a positive integer"),
    (("--workload", "conformer", "--model", "a.b:c", "--batch", "1", "--frames", "8"),
     "give exactly one of --workload NAME and --model"),
    (("--workload", "whisper_encoder", "--batch", "1", "--frames", "8"),
     "takes exactly 3000 frames"),
    (("--workload", "conformer", "--batch", "1", "--frames", "8", "--quantization", "int4"),
     "--quantization 'int4' is not a scheme"),
    (("--model", "no_such_module:f", "--batch", "1", "--frames", "8"), "cannot import"),
])
def test_bad_arguments_are_one_line(args, needle):
    result = _invoke(*args, "--cpu")
    assert result.exit_code == 2
    (line,) = _errors(result)
    assert line.startswith("error: ") and needle in line


def test_without_cuda_it_refuses_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    result = _invoke("--workload", "conformer", *TINY)
    assert result.exit_code == 2
    (line,) = _errors(result)
    assert line.startswith("error: no CUDA device")


def test_benchmarks_e2e_script_writes_markdown_and_json(tmp_path):
    out = tmp_path / "e2e.md"
    env = {**os.environ, "OASR_TUNE_USER_DB": "off"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "e2e.py"), "--workload", "conformer",
         *TINY, "--quantization", "int8_w8a8", "--cpu", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text == proc.stdout
    assert text.startswith("# end to end, int8_w8a8 vs torch fp32: conformer on CPU")
    assert "| model | mode | oasr ms | torch fp32 ms | speedup |" in text
    assert "scaled_mm/scaled_mm: torch (cpu) x11" in text
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["quantization"] == "int8_w8a8" and 0 < data["error"] <= data["bound"]
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e.py"), "--workload",
                          "nope", "--batch", "1", "--frames", "8", "--cpu"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("e2e: unknown workload 'nope'")


def test_benchmarks_e2e_script_adds_the_ctc_head(capsys):
    """``--ctc-vocab V`` gives the reference encoder its CTC head: one gemm_log_softmax call a
    forward; a ``--model`` has no such option (one line)."""
    from bench_scripts import script as bench_script

    script = bench_script("e2e")
    assert script.main(["--workload", "conformer", *TINY, "--cpu", "--ctc-vocab", "40"]) == 0
    text = capsys.readouterr().out
    assert "parameters ctc_vocab=40, d_model=32" in text
    assert "gemm/gemm_log_softmax: torch (cpu) x1" in text
    assert script.main(["--model", "tests.test_e2e_bench:tiny_factory", "--batch", "1",
                        "--frames", "8", "--cpu", "--ctc-vocab", "40"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("e2e: --ctc-vocab: only a registered --workload")
