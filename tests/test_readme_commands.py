"""Every command block of the README and of each plugin's README, so the docs cannot drift.

A ``bash`` block whose commands all run on a CPU machine in seconds runs for real, as a shell
script, in a scratch directory that links the checkout's ``db/``, ``benchmarks/`` and
``examples/`` (``/tmp/`` in a command becomes the scratch directory, so nothing is written
outside pytest's); every command must succeed, ``cmp`` included. The other blocks (a GPU, nvcc
for minutes, a cluster, files the reader brings) are checked without running: each ``oasr``
line is parsed by the real command line (options, choices, required options, the subcommand
chain), each ``python3 benchmarks/...`` script answers ``--help``, each ``python -c`` compiles,
and each ``pytest`` line names paths that exist and markers the suite registers. ``python``
blocks must compile.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

from oasr_core import cli

REPO = Path(__file__).resolve().parents[1]
READMES = [REPO / "README.md", *sorted(REPO.glob("plugins/*/README.md"))]
LINKED = ("db", "benchmarks", "examples")
"""What a block run for real finds in its scratch directory (links to the checkout)."""

NOT_HERE = {
    "mylib.encoders": "a library the reader has installed",
    "serve.py": "the reader's own serving process",
    "sweep.jsonl": "the log of a GPU sweep",
    "/shared/": "a filesystem every host of a cluster mounts",
}
"""A block naming one of these runs elsewhere: it is parsed, not run (the reason)."""


def _blocks(path: Path) -> list[tuple[str, int, str]]:
    """``(language, first line, text)`` of every fenced block of a markdown file."""
    out, lang, start, lines = [], None, 0, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and lang is None:
            lang, start, lines = fence.group(1) or "text", number + 1, []
        elif line.startswith("```") and lang is not None:
            out.append((lang, start, "\n".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return out


def _commands(text: str) -> list[list[str]]:
    """The block's commands as words: continuations joined, comments dropped, ``&&`` and a
    trailing ``&`` split."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "&"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def _program(words: list[str]) -> list[str]:
    """The command without its leading ``NAME=value`` environment assignments."""
    i = 0
    while i < len(words) and re.match(r"^[A-Z_][A-Z0-9_]*=", words[i]):
        i += 1
    return words[i:]


def _gpu_or_slow(words: list[str]) -> str | None:
    """Why a command cannot run here in seconds (None: it can)."""
    prog = _program(words)
    if not prog:
        return "an environment assignment"
    if prog[0] in ("pip", "dask", "export"):
        return f"{prog[0]}: setup or a cluster"
    if prog[0] in ("pytest", "python", "python3") and "pytest" in prog[:3]:
        return "the test suite itself"
    if prog[0] in ("python", "python3") and prog[1:2] == ["-c"]:
        return "a compile of minutes"
    if prog[:1] == ["oasr"]:
        sub = prog[1:3]
        if sub == ["tune", "prebuild"]:
            return "nvcc for minutes"
        if sub == ["tune", "build"] and "--from-log" not in prog:
            return "measures on a GPU"
        if sub == ["tune", "bench"] and "--cpu" not in prog:
            return "times on a GPU"
        if any("~/" in w for w in prog):
            return "reads what a GPU build wrote"
    if prog[0] in ("python", "python3") and prog[1:2] and prog[1].endswith(".py") and \
            ("sweep" in prog or "gemm_vs_torch" in prog[1]):
        return "times on a GPU"
    return next((why for name, why in NOT_HERE.items() if any(name in w for w in words)),
                None)


BASH = [(path, start, text) for path in READMES for lang, start, text in _blocks(path)
        if lang in ("bash", "sh", "shell")]
PYTHON = [(path, start, text) for path in READMES for lang, start, text in _blocks(path)
          if lang == "python"]
RUN = [b for b in BASH if not any(_gpu_or_slow(c) for c in _commands(b[2]))]
PARSE = [b for b in BASH if b not in RUN]


def _id(block: tuple[Path, int, str]) -> str:
    return f"{block[0].relative_to(REPO)}:{block[1]}"


def test_the_readmes_have_blocks_of_both_kinds():
    assert len(RUN) >= 3 and len(PARSE) >= 8, ([_id(b) for b in RUN], [_id(b) for b in PARSE])


@pytest.mark.parametrize("block", RUN, ids=_id)
def test_a_cpu_block_runs_as_written(block, tmp_path):
    path, start, text = block
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    script = "set -euo pipefail\n" + re.sub(r"\\\n", "\\\n", text).replace("/tmp/",
                                                                          f"{tmp_path}/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OASR_")
           and k not in ("COLUMNS", "PYTHONPATH")}
    env.update(OASR_TUNE_USER_DB=str(tmp_path / "user-tier"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, f"{_id(block)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    _check_what_it_claims(text, tmp_path, res.stdout)


def _check_what_it_claims(text: str, tmp_path: Path, stdout: str) -> None:
    """What the README says a block shows, beyond its exit status."""
    if "--quantization int8_w8a8 --out /tmp/mine_int8.json" in text:
        # "Your own model": run from its folder, quantized the way bench quantizes (routed
        # linears), its keys printed whole although stdout is a pipe.
        points = json.loads((tmp_path / "mine_int8.json").read_text())["points"]
        assert {p["family"] for p in points} == {"scaled_mm", "conv1d"}
        assert "conv1d|op=conv1d|dt=fp16|Cin=256|Cout=256|k=15|stride=1|pad=7|dil=1|" \
               "groups=256" in stdout and "…" not in stdout
        assert "**No oasr kernel ran**" in stdout


@pytest.mark.parametrize("block", PARSE, ids=_id)
def test_a_gpu_block_parses(block, tmp_path):
    path, start, text = block
    for words in _commands(text):
        prog = _program(words)
        if not prog or prog[0] in ("cd", "cmp", "pip", "dask", "export"):
            continue
        if prog[0] == "oasr":
            _parse_oasr(prog[1:], where=_id(block))
        elif prog[0] in ("python", "python3") and prog[1:2] == ["-c"]:
            compile(prog[2], f"{_id(block)} python -c", "exec")
        elif "pytest" in prog[:3]:
            _check_pytest_line(prog, where=_id(block))
        elif prog[0] in ("python", "python3") and prog[1].endswith(".py"):
            if any(name in prog[1] for name in NOT_HERE):
                continue  # the reader's own script
            script = REPO / prog[1]
            sub = [w for w in prog[2:3] if not w.startswith("-")]  # a subcommand (sweep, fit)
            res = subprocess.run([sys.executable, str(script), *sub, "--help"], cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, f"{_id(block)}: {prog[1]} --help: {res.stderr[-2000:]}"
        else:
            pytest.fail(f"{_id(block)}: no rule checks {' '.join(prog)!r}")


def _parse_oasr(args: list[str], *, where: str) -> None:
    """Parse ``oasr ARGS`` with the real command line, down the subcommand chain, without
    running anything (``~`` paths expanded as a shell would)."""
    args = [os.path.expanduser(a) for a in args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # click 8.2's protected_args
            ctx = cli.main.make_context("oasr", list(args), obj=cli.CliState())
            while isinstance(ctx.command, click.Group) and ctx.protected_args + ctx.args:
                rest = ctx.protected_args + ctx.args
                name, command, rest = ctx.command.resolve_command(ctx, rest)
                ctx = command.make_context(name, rest, parent=ctx)
    except click.BadParameter as exc:
        message = exc.format_message()
        if "does not exist" not in message and "no such file" not in message:
            # a file an earlier GPU step writes
            pytest.fail(f"{where}: oasr {' '.join(args)}: {exc.format_message()}")
    except click.ClickException as exc:
        pytest.fail(f"{where}: oasr {' '.join(args)}: {exc.format_message()}")


def _check_pytest_line(prog: list[str], *, where: str) -> None:
    words = prog[prog.index("pytest") + 1:]
    registered = {m.split(":")[0] for m in _markers()}
    i = 0
    while i < len(words):
        if words[i] == "-m":
            names = set(re.findall(r"[A-Za-z_]\w*", words[i + 1])) - {"not", "and", "or"}
            assert names <= registered, f"{where}: unknown marker(s) {names - registered}"
            i += 2
            continue
        if not words[i].startswith("-"):
            assert (REPO / words[i]).exists(), f"{where}: {words[i]} does not exist"
        i += 1


def _markers() -> list[str]:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return data["tool"]["pytest"]["ini_options"]["markers"]


@pytest.mark.parametrize("block", PYTHON, ids=_id)
def test_a_python_block_compiles(block):
    path, start, text = block
    compile(text, _id(block), "exec")
