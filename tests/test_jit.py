"""Tests of oasr_core.jit on a CPU machine with nvcc: keys, partial failures, caching,
exported symbols, ctypes loading, prebuild, toolchain errors and concurrent builders.

Every compile here is a few-line CUDA file (about a second each); CUTLASS is never compiled.
nvcc is reached through a wrapper script that logs each invocation, which is how the tests
know whether a build ran the compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

from oasr_core import jit
from oasr_core.errors import ConfigurationError, JitBuildError, ToolchainError
from oasr_core.jit import cache, compiler, kit

REAL_NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(REAL_NVCC is None, reason="needs nvcc on PATH")
REPO = Path(__file__).resolve().parents[1]

GOOD = """\
#include <cuda_runtime.h>
__global__ void scale_kernel(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
OASR_EXPORT int t_scale(float* x, float a, int n, cudaStream_t stream) {
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, a, n);
  return (int)cudaGetLastError();
}
OASR_EXPORT int t_answer(void) { return 42; }
"""
BAD = "OASR_EXPORT int t_bad(void) { return 1 +; }\n"


def small_unit(name: str, value: int) -> jit.TranslationUnit:
    """A tiny host-only unit exporting ``<name>_value()`` that returns ``value``."""
    return jit.TranslationUnit(
        name, f"OASR_EXPORT int {name}_value(void) {{ return {value}; }}\n", (f"{name}_value",))


def make_wrapper(path: Path, log: Path, *, version: str | None = None,
                 compile_error: str | None = None) -> Path:
    """An nvcc stand-in that logs its arguments, then runs the real nvcc (or fakes a reply)."""
    lines = ["#!/bin/sh", f'echo "$*" >> "{log}"']
    if version is not None:
        lines.append(f'if [ "$1" = "--version" ]; then printf "{version}\\n"; exit 0; fi')
    if compile_error is not None:
        lines += [
            'case " $* " in *" --dryrun "*) ;; *" -c "*)',
            f'  echo "{compile_error}" >&2; exit 255;;',
            "esac",
        ]
    lines.append(f'exec "{REAL_NVCC}" "$@"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def compiles(log: Path) -> list[str]:
    """The compile commands (not version queries or arch probes) a wrapper logged."""
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines()
            if " -c " in f" {line} " and "--dryrun" not in line]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A private cache dir and a logging nvcc wrapper, both set in the environment."""
    log = tmp_path / "nvcc.log"
    wrapper = make_wrapper(tmp_path / "nvcc", log)
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "jit"))
    monkeypatch.setenv("OASR_NVCC", str(wrapper))
    for name in jit.spec.NVCC_ENV:
        monkeypatch.delenv(name, raising=False)
    return types.SimpleNamespace(root=tmp_path / "jit", log=log, nvcc=wrapper, tmp=tmp_path)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    """A 2-unit module (one unit has a syntax error) built once for several tests."""
    tmp = tmp_path_factory.mktemp("built")
    log = tmp / "nvcc.log"
    wrapper = make_wrapper(tmp / "nvcc", log)
    spec = jit.JitSpec(
        name="t_mod", arch="90a", cutlass=False,
        units=(jit.TranslationUnit("good", GOOD, ("t_scale", "t_answer")),
               jit.TranslationUnit("bad", BAD, ("t_bad",))),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OASR_JIT_DIR", str(tmp / "jit"))
        mp.setenv("OASR_NVCC", str(wrapper))
        first = jit.build(spec, jobs=2)
    return types.SimpleNamespace(spec=spec, first=first, log=log, nvcc=wrapper, root=tmp / "jit")


@pytest.fixture
def built_env(built: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OASR_JIT_DIR", str(built.root))
    monkeypatch.setenv("OASR_NVCC", str(built.nvcc))
    return built


def run_python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter with the repository importable; its stdout."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_importing_runs_no_compiler_and_imports_no_torch(env) -> None:
    out = run_python("""
        import sys
        import oasr_core.jit
        print(sorted(m for m in ("torch", "cutlass_library") if m in sys.modules))
    """)
    assert out.strip() == "[]"
    assert not env.log.exists()


KEY_SCRIPT = """
    import json
    from oasr_core import jit
    spec = jit.JitSpec(name="k", arch="90a", cutlass=False,
                       units=(jit.TranslationUnit("a", "int a;", ()),))
    print(json.dumps([spec.key, dict(spec.unit_keys())]))
"""


def test_key_is_stable_across_processes_and_has_no_device(env, monkeypatch) -> None:
    keys = {run_python(KEY_SCRIPT, CUDA_VISIBLE_DEVICES=v) for v in ("", "0", "1,0")}
    assert len(keys) == 1
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: True, get_device_capability=lambda *a: (8, 6)))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    spec = jit.JitSpec(name="k", arch="90a", cutlass=False,
                       units=(jit.TranslationUnit("a", "int a;", ()),))
    assert json.dumps([spec.key, dict(spec.unit_keys())]) == keys.pop().strip()
    assert len(spec.key) == 20 and int(spec.key, 16) >= 0


def _header_spec(inc: Path, **changes) -> jit.JitSpec:
    fields = dict(name="k", arch="90a", cutlass=False, include_dirs=(str(inc),),
                  units=(jit.TranslationUnit("a", '#include "cfg.h"\nint a;\n', ("a",)),))
    fields.update(changes)
    return jit.JitSpec(**fields)


@pytest.fixture
def headers(tmp_path: Path) -> Path:
    inc = tmp_path / "inc"
    (inc / "sub").mkdir(parents=True)
    (inc / "cfg.h").write_text('#pragma once\n#include "sub/deep.h"\n')
    (inc / "sub" / "deep.h").write_text("#define DEEP 1\n")
    (inc / "unrelated.h").write_text("#define OTHER 1\n")
    return inc


def test_key_changes_with_every_input_and_nothing_else(env, headers, monkeypatch) -> None:
    base = _header_spec(headers)
    unit = base.units[0]
    object_key = base.unit_keys()["a"]
    same = [
        _header_spec(headers),
        _header_spec(headers, arch="sm_90a"),
    ]
    assert {s.key for s in same} == {base.key}
    (headers / "unrelated.h").write_text("#define OTHER 2\n")
    assert _header_spec(headers).key == base.key
    moved = shutil.copytree(headers, env.tmp / "elsewhere")
    assert _header_spec(moved).key == base.key

    def keys(spec: jit.JitSpec) -> tuple[str, str]:
        return spec.unit_keys()["a"], spec.key

    variants = {
        "source": keys(_header_spec(headers, units=(jit.TranslationUnit(
            "a", unit.source + "int b;\n", ("a",)),))),
        "flags": keys(_header_spec(headers, extra_flags=("-lineinfo",))),
        "arch": keys(_header_spec(headers, arch="80")),
    }
    (headers / "sub" / "deep.h").write_text("#define DEEP 2\n")
    variants["header byte"] = keys(_header_spec(headers))
    (headers / "sub" / "deep.h").write_text("#define DEEP 1\n")
    assert _header_spec(headers).key == base.key
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DX=1")
    variants["NVCC_APPEND_FLAGS"] = keys(_header_spec(headers))
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    fake = make_wrapper(env.tmp / "nvcc_other", env.log,
                        version="Cuda compilation tools, release 13.0, V13.0.99\\nBuild fake")
    monkeypatch.setenv("OASR_NVCC", str(fake))
    variants["nvcc version"] = keys(_header_spec(headers))
    monkeypatch.setenv("OASR_NVCC", str(env.nvcc))
    assert keys(_header_spec(headers)) == (object_key, base.key)
    for what, (unit_key, module_key) in variants.items():
        assert unit_key != object_key, what
        assert module_key != base.key, what
    assert len({v for v in variants.values()}) == len(variants)

    renamed_export = _header_spec(headers, units=(jit.TranslationUnit("a", unit.source, ("b",)),))
    assert renamed_export.unit_keys()["a"] == object_key
    assert renamed_export.key != base.key
    assert _header_spec(headers, link_flags=("-lcuda",)).key != base.key


def test_listed_header_counts_and_missing_one_is_named(env, headers) -> None:
    listed = _header_spec(headers, headers=("unrelated.h",))
    before = listed.key
    assert before != _header_spec(headers).key
    (headers / "unrelated.h").write_text("#define OTHER 3\n")
    assert listed.key != before
    with pytest.raises(ConfigurationError, match="header nope.h"):
        jit.plan(_header_spec(headers, headers=("nope.h",)))
    with pytest.raises(ConfigurationError, match="include dir"):
        jit.plan(_header_spec(env.tmp / "missing"))


def test_one_unit_fails_alone_with_its_error_kept(built_env) -> None:
    report = built_env.first
    assert report.status is jit.BuildStatus.BUILT and report.path.is_file()
    assert report.units["good"].status == "built" and report.units["good"].compiled
    bad = report.units["bad"]
    assert bad.status == "failed" and bad.compiled
    assert "bad.cu(1): error" in bad.error and "expected an expression" in bad.error
    assert dict(report.failed) == {"bad": bad.error}
    assert len(compiles(built_env.log)) == 2
    manifest = json.loads((report.path.parent / "manifest.json").read_text())
    assert manifest["units"]["good"] == {"status": "linked", "exports": ["t_scale", "t_answer"],
                                         "object": report.units["good"].key, "error": None}
    assert manifest["units"]["bad"]["status"] == "failed"
    assert "expected an expression" in manifest["units"]["bad"]["error"]
    marker = cache.failure_path(built_env.root, bad.key)
    assert json.loads(marker.read_text())["unit"] == "bad"
    assert not cache.object_path(built_env.root, bad.key).exists()


def test_second_build_is_all_cache_hits_without_nvcc(built_env) -> None:
    before = len(compiles(built_env.log))
    again = jit.build(built_env.spec)
    assert again.status == "cached" and again.path == built_env.first.path
    assert again.units["good"].status == "cached"
    assert again.units["bad"].status == "failed" and not again.units["bad"].compiled
    assert "expected an expression" in again.units["bad"].error

    relinked_spec = jit.JitSpec(name="t_mod_copy", arch="90a", cutlass=False,
                                units=built_env.spec.units)
    relinked = jit.build(relinked_spec)
    assert relinked.status == "built"
    assert {n: (u.status.value, u.compiled) for n, u in relinked.units.items()} == {
        "good": ("cached", False), "bad": ("failed", False)}
    assert len(compiles(built_env.log)) == before


def test_a_link_records_its_toolchain_for_reports_that_run_no_nvcc(built_env) -> None:
    from oasr_core.jit import toolchains

    known = toolchains.known()
    assert known.source == "recorded by a build"
    assert known.toolchain == jit.toolchain()
    assert known.build_version == jit.toolchain().build_version


def test_retry_failed_recompiles_only_the_failed_unit(built_env) -> None:
    before = compiles(built_env.log)
    retried = jit.build(built_env.spec, retry_failed=True)
    after = compiles(built_env.log)
    assert len(after) == len(before) + 1
    assert built_env.spec.unit_keys()["bad"] in after[-1]
    assert retried.units["bad"].compiled and retried.units["good"].status == "cached"


def test_library_exports_only_launchers_and_loads_on_cpu(built_env) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    out = subprocess.run([nm, "-D", "--defined-only", "--format=posix",
                          str(built_env.first.path)], capture_output=True, text=True, check=True)
    assert {line.split()[0] for line in out.stdout.splitlines()} == {"t_scale", "t_answer"}

    module = jit.load(built_env.spec, build_missing=False)
    assert module.exports == {"t_scale", "t_answer"}
    assert list(module.failed) == ["bad"]
    assert module.function("t_answer")() == 42
    with pytest.raises(JitBuildError, match=r"unit bad failed \(.*expected an expression"):
        module.function("t_bad")
    with pytest.raises(JitBuildError, match="no export 'nope'"):
        module.function("nope")


def test_load_builds_a_missing_module_with_one_warning(built_env) -> None:
    spec = jit.JitSpec(name="t_mod_lazy", arch="90a", cutlass=False,
                       units=built_env.spec.units[:1])
    assert not jit.is_prebuilt(spec)
    with pytest.raises(JitBuildError, match="oasr tune prebuild"):
        jit.load(spec, build_missing=False)
    with pytest.warns(jit.NotPrebuiltWarning, match="t_mod_lazy was not prebuilt"):
        module = jit.load(spec)
    assert module.function("t_answer")() == 42
    assert jit.is_prebuilt(spec)
    assert jit.load(spec, build_missing=False).path == module.path


def test_prebuild_builds_modules_concurrently(env, monkeypatch) -> None:
    log_times = env.tmp / "times.log"
    timed = env.tmp / "nvcc_timed"
    timed.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> "{env.log}"
        echo "start $(date +%s.%N) $*" >> "{log_times}"
        "{REAL_NVCC}" "$@"; rc=$?
        echo "end $(date +%s.%N) $*" >> "{log_times}"
        exit $rc
    """))
    timed.chmod(0o755)
    monkeypatch.setenv("OASR_NVCC", str(timed))
    ghost = jit.TranslationUnit("ghost", "int t_ghost(void) { return 0; }\n", ("t_ghost",))
    first = jit.JitSpec(name="t_pre_a", arch="90a", cutlass=False, units=(small_unit("pa", 1),))
    second = jit.JitSpec(name="t_pre_b", arch="90a", cutlass=False,
                         units=(small_unit("pb", 2), ghost))
    unsupported = jit.JitSpec(name="t_pre_c", arch="12", cutlass=False,
                              units=(small_unit("pc", 3),))
    reports = jit.prebuild([first, second, unsupported], jobs=2)
    assert [r.name for r in reports] == ["t_pre_a", "t_pre_b", "t_pre_c"]
    assert [r.status.value for r in reports] == ["built", "built", "failed"]
    assert "cannot compile for arch '12'" in reports[2].error
    assert "does not export t_ghost" in reports[1].units["ghost"].error
    assert reports[0].peak_child_rss_mib is None or reports[0].peak_child_rss_mib > 0

    spans = {}
    for line in log_times.read_text().splitlines():
        kind, stamp, *args = line.split()
        if " -c " in f" {' '.join(args)} " and "--dryrun" not in args:
            spans.setdefault(args[1], {})[kind] = float(stamp)
    assert len(spans) == 3
    starts = sorted(s["start"] for s in spans.values())
    ends = sorted(s["end"] for s in spans.values())
    assert starts[1] < ends[0], "the two modules' compiles did not overlap"

    again = jit.prebuild([first, second], jobs=2)
    assert [r.status.value for r in again] == ["cached", "cached"]
    assert len(spans) == len(compiles(env.log))


def test_prebuild_compiles_every_module_s_units_in_one_queue_heaviest_first(env) -> None:
    heavy = jit.TranslationUnit(
        "heavy", "// cutlass::gemm stands in for a CUTLASS unit here\n"
        + small_unit("hv", 7).source, small_unit("hv", 7).exports)
    first = jit.JitSpec(name="t_q_a", arch="90a", cutlass=False,
                        units=(small_unit("qa", 4), small_unit("qb", 5)))
    second = jit.JitSpec(name="t_q_b", arch="90a", cutlass=False, units=(heavy,))
    reports = jit.prebuild([first, second], jobs=1)
    assert [r.status.value for r in reports] == ["built", "built"]
    assert {n: u.status.value for r in reports for n, u in r.units.items()} == {
        "qa": "built", "qb": "built", "heavy": "built"}
    compiled = compiles(env.log)
    heavy_key = jit.plan(second).units[0].key
    assert len(compiled) == 3 and heavy_key in compiled[0], compiled


def test_transient_compiler_death_leaves_no_failure_marker(env, monkeypatch) -> None:
    dying = make_wrapper(env.tmp / "nvcc_dying", env.log,
                         compile_error="nvcc error   : 'cicc' died due to signal 9 (Kill signal)")
    monkeypatch.setenv("OASR_NVCC", str(dying))
    spec = jit.JitSpec(name="t_dies", arch="90a", cutlass=False, units=(small_unit("d", 1),))
    report = jit.build(spec)
    assert report.status == "failed" and report.path is None
    assert "died due to signal" in report.units["d"].error
    assert not cache.failure_path(env.root, report.units["d"].key).exists()
    with pytest.raises(JitBuildError, match="t_dies could not be built.*died due to signal"):
        with pytest.warns(jit.NotPrebuiltWarning):
            jit.load(spec)


def test_nvcc_override_that_does_not_exist_is_named(env, monkeypatch) -> None:
    monkeypatch.setenv("OASR_NVCC", str(env.tmp / "no" / "nvcc"))
    with pytest.raises(ToolchainError, match="OASR_NVCC=.*does not exist"):
        jit.toolchain()


def test_nvcc_lookup_order_and_absence(env, monkeypatch) -> None:
    monkeypatch.delenv("OASR_NVCC")
    home = env.tmp / "cuda"
    (home / "bin").mkdir(parents=True)
    make_wrapper(home / "bin" / "nvcc", env.log)
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert jit.toolchain().nvcc == home / "bin" / "nvcc"
    assert jit.toolchain().release == "13.0"
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(env.tmp / "empty"))
    monkeypatch.setattr(compiler, "FALLBACK_NVCC", env.tmp / "none" / "nvcc")
    with pytest.raises(ToolchainError, match="nvcc not found.*set CUDA_HOME, or put nvcc on PATH"):
        jit.toolchain()


def test_unsupported_or_malformed_arch(env) -> None:
    spec = jit.JitSpec(name="t_arch", arch="12", cutlass=False, units=(small_unit("x", 1),))
    with pytest.raises(ToolchainError, match=r"cannot compile for arch '12' \(it supports .*90"):
        jit.build(spec)
    assert compiles(env.log) == []
    with pytest.raises(ValueError, match="not a CUDA arch"):
        jit.JitSpec(name="t_arch", arch="sm_9x", cutlass=False, units=(small_unit("x", 1),))


def test_cutlass_missing_says_how_to_install(env, monkeypatch) -> None:
    monkeypatch.setattr(compiler.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolchainError, match=r"pip install nvidia-cutlass==4\.2\.0\.0"):
        jit.cutlass_include_dirs()
    spec = jit.JitSpec(name="t_cut", arch="90a", units=(small_unit("x", 1),))
    with pytest.raises(ToolchainError, match="nvidia-cutlass"):
        jit.build(spec)


def test_cutlass_headers_found_without_importing_and_stamped(env, monkeypatch) -> None:
    pkg = env.tmp / "site" / "cutlass_library"
    version_h = pkg / "source" / "include" / "cutlass" / "version.h"
    version_h.parent.mkdir(parents=True)
    (pkg / "source" / "tools" / "util" / "include").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('cutlass_library must not be imported')\n")
    version_h.write_text(
        "#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n#define CUTLASS_PATCH 0\n")
    monkeypatch.syspath_prepend(str(env.tmp / "site"))
    assert jit.cutlass_include_dirs() == (str(pkg / "source" / "include"),
                                          str(pkg / "source" / "tools" / "util" / "include"))
    assert jit.cutlass_version() == "4.2.0"
    spec = jit.JitSpec(name="t_cut", arch="90a", units=(small_unit("x", 1),))
    key = spec.key
    assert jit.plan(spec).include_dirs == (str(kit.INCLUDE_DIR), *jit.cutlass_include_dirs())
    version_h.write_text(version_h.read_text() + "// patched\n")
    assert spec.key != key
    assert "cutlass_library" not in sys.modules


@pytest.mark.parametrize(("text", "arch"), [
    ("9.0", "90a"), ("9.0a", "90a"), ("8.0", "80"), ("8.6+PTX", "86"), ("10.0", "100a"),
    ("sm_90a", "90a"), ("compute_80", "80"), ("90", "90"), ("100f", "100f"),
])
def test_normalize_arch(text, arch) -> None:
    assert jit.normalize_arch(text) == arch


def test_target_arch_from_env_then_device_then_default(monkeypatch) -> None:
    monkeypatch.setenv("OASR_CUDA_ARCH_LIST", "9.0")
    assert jit.target_arch() == "90a"
    monkeypatch.setenv("OASR_CUDA_ARCH_LIST", "8.0; 9.0a")
    assert jit.target_arches() == ("80", "90a")
    with pytest.raises(ConfigurationError, match="names 2 archs"):
        jit.target_arch()
    monkeypatch.setenv("OASR_CUDA_ARCH_LIST", "hopper")
    with pytest.raises(ConfigurationError, match="OASR_CUDA_ARCH_LIST='hopper'"):
        jit.target_arch()
    monkeypatch.delenv("OASR_CUDA_ARCH_LIST")
    device = {"available": True}
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: device["available"], get_device_capability=lambda *a: (9, 0)))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert jit.target_arch(default="8.0") == "90a"
    device["available"] = False
    assert jit.target_arch(default="8.0") == "80"
    with pytest.raises(ConfigurationError, match="set OASR_CUDA_ARCH_LIST"):
        jit.target_arch()


def test_cache_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path))
    assert jit.cache_dir() == tmp_path
    monkeypatch.delenv("OASR_JIT_DIR")
    assert jit.cache_dir().parts[-2:] == ("oasr", "jit")


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": "Bad-Name"}, "module name"),
    ({"units": ()}, "no translation units"),
    ({"units": (small_unit("x", 1), small_unit("x", 2))}, "appears twice"),
    ({"units": (small_unit("x", 1), jit.TranslationUnit("y", "", ("x_value",)))},
     "also exported by 'x'"),
])
def test_spec_validation(fields, message) -> None:
    base = {"name": "ok", "arch": "90a", "cutlass": False, "units": (small_unit("x", 1),)}
    with pytest.raises(ValueError, match=message):
        jit.JitSpec(**{**base, **fields})
    with pytest.raises(ValueError, match="not a C identifier"):
        jit.TranslationUnit("u", "", ("not-c",))


BUILDER = """
    import json
    from oasr_core import jit
    spec = jit.JitSpec(name="t_race", arch="90a", cutlass=False, units=(
        jit.TranslationUnit("ra", "OASR_EXPORT int ra(void) { return 7; }", ("ra",)),
        jit.TranslationUnit("rb", "OASR_EXPORT int rb(void) { return 8; }", ("rb",)),
    ))
    report = jit.build(spec, jobs=2)
    print(json.dumps([report.status.value, report.key, str(report.path)]))
"""


def test_concurrent_processes_build_once(env) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(BUILDER)],
                              env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        outputs.append(json.loads(stdout))
    assert sorted(o[0] for o in outputs) in (["built", "cached"], ["cached", "built"])
    assert outputs[0][1:] == outputs[1][1:]
    compiled = compiles(env.log)
    assert len(compiled) == 2
    assert len({line.split()[1] for line in compiled}) == 2


def test_threads_in_one_process_share_object_locks(env) -> None:
    shared = small_unit("shared", 5)
    specs = [jit.JitSpec(name=f"t_thr_{i}", arch="90a", cutlass=False, units=(shared,))
             for i in range(3)]
    results: list[jit.ModuleBuild] = []
    threads = [threading.Thread(target=lambda s=s: results.append(jit.build(s))) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status.value for r in results) == ["built"] * 3
    assert len(compiles(env.log)) == 1
