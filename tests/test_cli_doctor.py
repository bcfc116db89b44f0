"""``oasr doctor``: one screen (or --json) of what this machine has, fast without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from oasr_test_plugins import write

from oasr_core import cli
from oasr_core.commands import doctor


@pytest.fixture
def run(tiers, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    state = cli.CliState(plugin_manager=tiers["rt"].pm)
    write(tiers["system"], "tg", {("gemm", "half", (512, 256)): [[None, "a"]]})
    return lambda *args: CliRunner().invoke(cli.main, ["doctor", *args], obj=state)


def _manifest(root, name, key, arch, statuses):
    path = root / "lib" / name / key / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "schema_version": 1, "name": name, "arch": arch, "library_sha256": "0" * 64,
        "units": {f"u{i}": {"status": s, "exports": []} for i, s in enumerate(statuses)}}))


def test_doctor_without_gpu_names_what_to_pass(run):
    res = run()
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("GPU       none (CUDA_VISIBLE_DEVICES hides every device)")
    assert "--arch 9.0a" in lines[0]
    assert any(line.startswith("nvcc ") for line in lines)
    assert any(line.startswith("CUTLASS ") for line in lines)
    assert any(line.startswith("tiers     sm90/tg (lane tg_main): user absent; system 1 "
                               "entries") for line in lines)
    assert any(line.startswith("JIT cache ") and "(absent: made by the first build)" in line
               for line in lines)
    assert len(lines) <= 25


def test_doctor_counts_the_jit_cache_per_family(run, tmp_path):
    root = tmp_path / "jit"
    _manifest(root, "tg_sm90_main", "k1", "90a", ["linked", "linked", "failed"])
    _manifest(root, "tq_sm80", "k2", "80", ["linked"])
    data = json.loads(run("--json").stdout)
    rows = {(r["family"], r["arch"]): r for r in data["jit_cache"]["families"]}
    assert rows[("tg", "90a")] == {"family": "tg", "arch": "90a", "modules": 1, "linked": 2,
                                   "failed": 1}
    assert rows[("tq", "80")]["linked"] == 1
    assert data["gpu"]["present"] is False
    text = run().stdout
    assert "  tg           90a   1 modules, 2 units, 1 failed" in text


def test_doctor_rejects_a_bad_arch(run):
    res = run("--arch", "nonsense")
    assert res.exit_code == 2 and "--arch" in res.output


def test_doctor_is_fast_and_imports_no_torch_without_a_gpu():
    code = ("import sys, time; t = time.perf_counter(); from oasr_core import cli\n"
            "try: cli.main(['doctor'], obj=cli.CliState())\n"
            "except SystemExit: pass\n"
            "print('torch' in sys.modules, time.perf_counter() - t, file=sys.stderr)")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    imported, seconds = proc.stderr.strip().splitlines()[-1].split()
    assert imported == "False"
    assert float(seconds) < 5.0 and time.perf_counter() - started < 30


def test_render_marks_missing_tools():
    doc = {"gpu": {"present": False, "reason": "x"},
           "toolchain": {"nvcc": {"error": "nvcc not found"}, "cutlass": {"error": "no wheel"},
                         "target_env": []},
           "jit_cache": {"dir": "/c", "exists": False, "objects": 0, "failure_markers": 0,
                         "families": []},
           "production": {}, "tiers": [],
           "plugins": {"loaded": [], "blocked": ["gemm"], "failures": []}}
    text = "\n".join(doctor.render(doc))
    assert "nvcc      MISSING: nvcc not found" in text
    assert "CUTLASS   MISSING: no wheel" in text
    assert "blocked: gemm" in text


def test_a_jit_cache_the_loader_would_refuse_is_named_and_exit_1(run, tmp_path):
    root = tmp_path / "jit"
    root.mkdir()
    root.chmod(0o777)
    res = run()
    assert res.exit_code == 1
    assert f"JIT cache {root} UNUSABLE: {root} is writable by group and others" in res.stdout
    assert res.stderr.startswith(f"error: JIT cache {root} (OASR_JIT_DIR): ")
    assert len(res.stderr.splitlines()) == 1


@pytest.mark.parametrize("value", ["/proc/oasr-jit", "/proc", "/sys/oasr/jit"])
def test_a_jit_dir_no_file_can_be_stored_in_is_exit_2_naming_the_variable(value, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "oasr_core.cli", "doctor"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OASR_JIT_DIR": value,
                               "OASR_TUNE_USER_DB": str(tmp_path / "u")})
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: OASR_JIT_DIR={value!r} is not allowed")
    assert "pseudo file system" in proc.stderr and len(proc.stderr.splitlines()) == 1
