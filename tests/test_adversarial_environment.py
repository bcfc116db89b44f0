"""Every ``OASR_*`` variable is validated when a process first reads oasr's configuration:
a bad value is one line naming the variable and its value, exit 2 from every CLI command
(whether or not a shape would reach the code that uses it), ConfigurationError from the API.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import oasr_core
from oasr_core import runtime
from oasr_core.cli import CliState, main
from oasr_core.errors import ConfigurationError
from oasr_core.variables import VARIABLES, check_environment

BAD = {
    "OASR_TUNE_MODEL_FALLBACK": "maybe",
    "OASR_GEMM_COMPILE_SET": "some",
    "OASR_SCALED_MM_PDL": "sometimes",
    "OASR_STRICT_PLUGINS": "2",
    "OASR_DISABLE_PLUGIN_AUTOLOAD": "yes please",
    "OASR_TRACE_PLUGINS": "-1",
    "OASR_MAX_FILE_MB": "lots",
    "OASR_CUDA_ARCH_LIST": "9.0;banana",
    "OASR_TUNE_SYSTEM_DB": "/no/such/oasr/dir",
    "OASR_TUNE_USER_DB": "/etc/passwd",
    "OASR_JIT_DIR": "a\x00b",
    "OASR_PLUGINS": "gemm,$(rm -rf)",
}
COMMANDS = {
    "status": ["tune", "status", "--arch", "sm90"],
    "covered_select": ["tune", "select", "--family", "gemm", "--op", "gemm_activation",
                       "--dtype", "fp16", "--dim", "N=1024", "--dim", "K=256", "--m", "64",
                       "--arch", "sm90"],
    "plugins": ["plugins"],
}


def test_every_variable_oasr_reads_is_in_the_table():
    import pathlib
    import re

    root = pathlib.Path(oasr_core.__file__).parent
    read = set()
    for path in root.rglob("*.py"):
        read.update(re.findall(r'"(OASR_[A-Z0-9_]+)"', path.read_text()))
    families = {n for n in read if n.endswith(("_COMPILE_SET", "_PDL"))}
    assert read - families - {"OASR_EXPORT"} <= set(VARIABLES)


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_value_is_exit_2_with_one_line(monkeypatch, name, command):
    if "\x00" in BAD[name]:
        pytest.skip("the environment cannot carry a NUL byte; the parser is checked below")
    monkeypatch.setenv(name, BAD[name])
    runtime.install_runtime(None)
    got = CliRunner().invoke(main, COMMANDS[command], obj=CliState())
    assert got.exit_code == 2, got.output
    lines = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and name in lines[0] and repr(BAD[name])[1:-1] in lines[0]
    assert "Traceback" not in got.output


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_api_raises_before_resolving(monkeypatch, name):
    if "\x00" in BAD[name]:
        with pytest.raises(ConfigurationError, match=name):
            VARIABLES[name](name, BAD[name])
        return
    monkeypatch.setenv(name, BAD[name])
    runtime.install_runtime(None)
    with pytest.raises(ConfigurationError, match=name):
        oasr_core.select("gemm", "gemm_activation", "fp16", (1024, 256), 64, "sm90")


def test_good_values_pass(monkeypatch, tmp_path):
    for name, value in {"OASR_TUNE_MODEL_FALLBACK": "auto", "OASR_GEMM_COMPILE_SET": "ALL",
                        "OASR_STRICT_PLUGINS": "off", "OASR_MAX_FILE_MB": "0.5",
                        "OASR_CUDA_ARCH_LIST": "9.0a 8.0", "OASR_TUNE_USER_DB": str(tmp_path),
                        "OASR_UNKNOWN_TO_THIS_OASR": "anything"}.items():
        monkeypatch.setenv(name, value)
    check_environment()


@pytest.mark.parametrize("limit", ["100000", "1e13", "1e300"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_huge_file_limit_reads_every_file(monkeypatch, limit, command):
    """A huge OASR_MAX_FILE_MB ("no limit") reads files at their size: no MemoryError or
    OverflowError from reserving the limit."""
    from pathlib import Path

    monkeypatch.setenv("OASR_MAX_FILE_MB", limit)
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(Path(__file__).resolve().parents[1] / "db"))
    runtime.install_runtime(None)
    got = CliRunner().invoke(main, COMMANDS[command], obj=CliState())
    assert got.exit_code == 0, got.output
    assert "Traceback" not in got.output and "warning" not in got.stderr
    if command == "covered_select":
        assert "tier system" in got.stdout


def test_a_jit_dir_that_cannot_be_one_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    afile = tmp_path / "file"
    afile.write_text("")
    for value, allowed in ((afile, "a directory (this is a file)"),
                           (afile / "jit", f"a directory oasr can create ({afile} is a file)"),
                           ("/proc/oasr-jit", "/proc is on a pseudo file system")):
        monkeypatch.setenv("OASR_JIT_DIR", str(value))
        with pytest.raises(ConfigurationError, match="OASR_JIT_DIR=") as caught:
            check_environment()
        assert allowed in str(caught.value)
    monkeypatch.setenv("OASR_JIT_DIR", str(tmp_path / "new" / "jit"))
    check_environment()  # made on first build
    assert not (tmp_path / "new").exists()
