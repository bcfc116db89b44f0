"""Mutated inputs through every reader: the harness of the adversarial suite's fuzz tests.

Each :class:`Reader` takes one kind of file (a tier file, a census, a measurement log, an
autotune cache) from a path and runs one oasr entry point on it: a CLI command in process
(``click.testing.CliRunner``) or a Python API call. :func:`classify` sorts the outcome:

- ``ok``: exit 0, or the API returned;
- ``refused``: exit 2 with exactly one ``error:`` line, or the API raised an
  :class:`~oasr_core.errors.OasrError` whose message is one line;
- ``crash``: anything else (a traceback, exit 1, another exception, a multi-line error);
- ``bad_serve``: a selection served a config its lane does not hold under that id with
  those parameters, finds infeasible, or says cannot run the shape.

:func:`fuzz` runs seeded mutations (:mod:`adversarial_files`) through every reader for a
count or a time budget and returns its figures; ``hang`` counts calls slower than
``HANG_S``.
"""

from __future__ import annotations

import json
import random
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from adversarial_files import REPO, mutate_bytes, mutations
from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.errors import OasrError

SHIPPED = REPO / "db/sm90/gemm.json"
SHIPPED_INT8 = REPO / "db/sm90/scaled_mm.json"
SHIPPED_FP8 = REPO / "db/sm90/scaled_mm_fp8.json"
SHIPPED_CONV1D = REPO / "db/sm90/conv1d.json"
CENSUS = REPO / "benchmarks/census/build_speed_14.json"
LOG = REPO / "db/sm90/measurements/gemm.jsonl"
HANG_S = 20.0
LOG_LINES = 120
"""Rows of the shipped log a mutated log starts from (a replay of them takes well under 1 s)."""


class BadServe(Exception):
    """A selection served what its lane rejects."""


@attrs.frozen
class Reader:
    """One entry point reading one kind of file: ``run(path, tmp)`` raises or returns a
    CliRunner result (None for API readers)."""

    name: str
    kind: str
    run: Callable[[Path, Path], Any]


def _cli(*args: str):
    from oasr_core.cli import CliState, main

    runtime.install_runtime(None)
    return CliRunner().invoke(main, list(args), obj=CliState())


def _check_selection(sel, problem) -> None:
    if sel.config is None:
        return
    lane = runtime.get_runtime().registry.lane(sel.lane)
    own = lane.config(sel.config.id)
    if own is None or own.to_json() != sel.config.to_json():
        raise BadServe(f"{sel.config.id}: not the lane's record")
    if not lane.is_feasible(own) or not lane.supports(own, problem):
        raise BadServe(f"{sel.config.id}: the lane rejects it for {problem}")


def _system_tier(path: Path, tmp: Path, stem: str = "gemm") -> None:
    import os

    root = tmp / "system"
    (root / "sm90").mkdir(parents=True, exist_ok=True)
    target = root / "sm90" / f"{stem}.json"
    target.write_bytes(path.read_bytes())
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(root)
    runtime.install_runtime(None)


_CONV = {"Cin": 80, "Cout": 512, "k": 3, "stride": 1, "pad": 1, "dil": 1, "groups": 1}
_DW = {"Cin": 512, "Cout": 512, "k": 31, "stride": 1, "pad": 15, "dil": 1, "groups": 512}
_FP8 = "float8_e4m3fn"
SELECT_SHAPES = {
    # (family, op, dtype, dims, m, exact point)
    "gemm": (("gemm", "gemm_activation", "fp16", {"N": 1024, "K": 256}, 64, None),
             ("gemm", "gemm_activation", "fp16", {"N": 1024, "K": 256}, 20000, None),
             ("gemm", "gemm", "fp16", {"N": 512, "K": 2048}, 16, None),
             ("gemm", "gemm", "bf16", {"N": 768, "K": 256}, 300, None),
             ("gemm", "gemm", "fp16", {"N": 999, "K": 256}, 64, None)),
    "scaled_mm": (("scaled_mm", "scaled_mm", "int8", {"N": 768, "K": 256}, 7136, None),
                  ("scaled_mm", "scaled_mm_quant", "int8", {"N": 1000, "K": 256}, 64, None)),
    "scaled_mm_fp8": (("scaled_mm_fp8", "scaled_mm_fp8", _FP8, {"N": 1024, "K": 256}, 64, None),
                      ("scaled_mm_fp8", "scaled_mm_fp8", _FP8, {"N": 256, "K": 1024}, 30000,
                       None),
                      ("scaled_mm_fp8", "scaled_mm_fp8_quant", _FP8, {"N": 1000, "K": 256}, 7,
                       None)),
    "conv1d": (("conv1d", "conv1d_gelu", "fp16", _CONV, 3000, "1x3000"),
               ("conv1d", "conv1d_gelu", "fp16", _CONV, 6000, "2x3000"),
               ("conv1d", "conv1d_gelu", "fp16", _CONV, 12000, "4x3000"),
               ("conv1d", "conv1d_gelu", "fp16", _CONV, 640, None),
               ("conv1d", "conv1d_silu", "fp16", _DW, 1, None),
               ("conv1d", "conv1d_silu", "fp16", _DW, 20000, None)),
}


def _select_all(stem: str) -> list[Any]:
    """Every shape of ``stem``'s family selected and checked; the answers."""
    from oasr_core.selection import select
    from oasr_core.types import Problem

    answers = []
    for family, op, dtype, dims, m, point in SELECT_SHAPES[stem]:
        sel = select(family, op, dtype, dims, m, "sm90", point=point)
        problem = Problem(family=family, op=op, dtype=dtype, dims=tuple(dims.items()), m=m,
                          point=point)
        _check_selection(sel, problem)
        answers.append((sel.tier.value, sel.config.id if sel.config else str(sel.choice)))
    return answers


def _api_select(path: Path, tmp: Path, stem: str) -> None:
    _system_tier(path, tmp, stem)
    _select_all(stem)


def _api_user_select(path: Path, tmp: Path, stem: str) -> None:
    """The file as the user tier (the shipped tables as the system tier), read three ways:
    unmarked (the full first check), marked as a writer marks what it wrote (the lazy path:
    only looked-up entries checked), and a second marked read in a new runtime. A file the
    first read accepted must answer the same every time."""
    import os

    from oasr_core.database import validated
    from oasr_core.selection import clear_memo

    user = tmp / "user"
    (user / "sm90").mkdir(parents=True, exist_ok=True)
    target = user / "sm90" / f"{stem}.json"
    target.write_bytes(path.read_bytes())
    os.environ["OASR_TUNE_USER_DB"] = str(user)
    os.environ["OASR_TUNE_SYSTEM_DB"] = str(REPO / "db")
    try:
        runtime.install_runtime(None)
        clear_memo()
        first = _select_all(stem)
        fam = runtime.get_runtime().registry.family(SELECT_SHAPES[stem][0][0])
        validated.record(validated.mark_for(target.read_bytes(), fam))
        for _ in range(2):
            runtime.install_runtime(None)
            clear_memo()
            again = _select_all(stem)
            accepted = any(tier == "user" for tier, _ in first)
            if accepted and again != first:
                raise BadServe(f"a marked read answered {again}, the first read {first}")
    finally:
        os.environ["OASR_TUNE_USER_DB"] = "off"
        runtime.install_runtime(None)


def _cli_select(path: Path, tmp: Path):
    _system_tier(path, tmp)
    result = _cli("tune", "select", "--family", "gemm", "--op", "gemm_activation", "--dtype",
                  "fp16", "--dim", "N=1024", "--dim", "K=256", "--m", "64", "--arch", "sm90",
                  "--json")
    if result.exit_code == 0:
        data = json.loads(result.stdout)
        if data["config"] is not None:
            lane = runtime.get_runtime().registry.lane(data["lane"])
            own = lane.config(data["config"])
            if own is None or own.to_json() != data["params"]:
                raise BadServe(f"CLI reported {data['config']} with the file's parameters")
    return result


def _cli_status(path: Path, tmp: Path):
    _system_tier(path, tmp)
    return _cli("tune", "status", "--arch", "sm90", "--json")


def _cli_diff(path: Path, tmp: Path):
    return _cli("tune", "diff", str(SHIPPED), str(path))


def _writer(path: Path, tmp: Path) -> None:
    from oasr_core import database
    from oasr_core.database import signature_key

    rt = runtime.get_runtime()
    fam = rt.registry.family("gemm")
    lane = rt.registry.lane("sm90_wgmma")
    target = tmp / "user" / "sm90" / "gemm.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(path.read_bytes())
    key = signature_key(fam, "gemm", "half", (4096, 4096))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        database.write_entries(target, family=fam, arch="sm90", lane=lane,
                               entries={key: database.Entry(regions=((None, "torch"),))},
                               configs={}, soft={})
    database.load_tuning_file(target, family=fam, arch="sm90",
                              lanes={x.name: x for x in rt.registry.lanes_of("gemm")})


def _census_status(path: Path, tmp: Path):
    return _cli("tune", "status", "--arch", "sm90", "--census", str(path))


def _census_build(path: Path, tmp: Path):
    return _cli("tune", "build", "--census", str(path), "--family", "gemm", "--arch", "sm90",
                "--out", str(tmp / "out.json"))


def _census_api(path: Path, tmp: Path) -> None:
    from oasr_core.census import shapeset

    shapeset.load(path)


def _log_build(path: Path, tmp: Path):
    return _cli("tune", "build", "--from-log", str(path), "--out", str(tmp / "out.json"))


def _log_evaluate(path: Path, tmp: Path):
    return _cli("tune", "evaluate", "--log", str(path), "--db", f"x={SHIPPED}")


def _cache_api(path: Path, tmp: Path) -> None:
    from oasr_core.autotuning import cache

    cache.load_cache(path, "sm90")


READERS = (
    Reader("tune select", "tier", _cli_select),
    Reader("tune status", "tier", _cli_status),
    Reader("tune diff", "tier", _cli_diff),
    Reader("select()", "tier", lambda p, t: _api_select(p, t, "gemm")),
    Reader("select() int8", "tier_int8", lambda p, t: _api_select(p, t, "scaled_mm")),
    Reader("select() fp8", "tier_fp8", lambda p, t: _api_select(p, t, "scaled_mm_fp8")),
    Reader("select() conv1d", "tier_conv1d", lambda p, t: _api_select(p, t, "conv1d")),
    Reader("select() user gemm", "tier", lambda p, t: _api_user_select(p, t, "gemm")),
    Reader("select() user conv1d", "tier_conv1d",
           lambda p, t: _api_user_select(p, t, "conv1d")),
    Reader("select() user fp8", "tier_fp8",
           lambda p, t: _api_user_select(p, t, "scaled_mm_fp8")),
    Reader("write_entries()", "tier", _writer),
    Reader("tune status --census", "census", _census_status),
    Reader("tune build --census", "census", _census_build),
    Reader("read_shapeset()", "census", _census_api),
    Reader("tune build --from-log", "log", _log_build),
    Reader("tune evaluate", "log", _log_evaluate),
    Reader("load_cache()", "cache", _cache_api),
)


def classify(run: Callable[[], Any]) -> tuple[str, str]:
    """Run one reader call; ``(outcome, detail)`` (see the module docstring)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = run()
    except BadServe as exc:
        return "bad_serve", str(exc)
    except OasrError as exc:
        text = str(exc)
        return ("refused", text) if text and "\n" not in text else ("crash", repr(text))
    except Exception:  # noqa: BLE001 - what the suite exists to find
        return "crash", traceback.format_exc(limit=6)
    if result is None:
        return "ok", ""
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "crash", "".join(traceback.format_exception(result.exception, limit=6))
    if "Traceback" in output:
        return "crash", output[-2000:]
    if result.exit_code == 0:
        return "ok", ""
    errors = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    if result.exit_code == 2 and len(errors) == 1:
        return "refused", errors[0]
    return "crash", f"exit {result.exit_code}: {output[-2000:]}"


def seed_documents(tmp: Path) -> dict[str, tuple[Any, bytes | None]]:
    """Per kind: the parsed seed document (None for the log) and its raw bytes."""
    from oasr_core.autotuning import cache as ac

    cache_path = tmp / "seed-cache.json"
    ac.write_cache(cache_path, arch="sm90", results=[
        ac.Result(key="gemm|op=gemm|dt=fp16|N=512|K=256", bucket=104, m=100, choice="torch",
                  lane="sm90_wgmma")])
    log = b"".join(LOG.read_bytes().splitlines(keepends=True)[:LOG_LINES])
    return {"tier": (json.loads(SHIPPED.read_text()), None),
            "tier_int8": (json.loads(SHIPPED_INT8.read_text()), None),
            "tier_fp8": (json.loads(SHIPPED_FP8.read_text()), None),
            "tier_conv1d": (json.loads(SHIPPED_CONV1D.read_text()), None),
            "census": (json.loads(CENSUS.read_text()), None),
            "cache": (json.loads(cache_path.read_text()), None),
            "log": (None, log)}


def _mutated_log(log: bytes, rng: random.Random) -> bytes:
    from adversarial_files import mutate_document

    lines = log.splitlines(keepends=True)
    if rng.random() < 0.3:
        return mutate_bytes(log, rng)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(lines))
        try:
            row = json.loads(lines[i])
        except ValueError:
            continue
        lines[i] = json.dumps(mutate_document(row, rng)).encode() + b"\n"
    return b"".join(lines)


def fuzz(tmp: Path, *, seed: int, per_reader: int | None = None,
         budget_s: float | None = None) -> dict[str, Any]:
    """Run mutations through every reader; the figures (files tried, outcomes, crashes with
    their first lines, hangs, slowest call)."""
    rng = random.Random(seed)
    seeds = seed_documents(tmp)
    counts: Counter = Counter()
    crashes: list[dict[str, str]] = []
    slowest, hangs, tried = 0.0, 0, 0
    started = time.monotonic()
    i = 0
    while True:
        if per_reader is not None and i >= per_reader:
            break
        if budget_s is not None and time.monotonic() - started > budget_s:
            break
        for reader in READERS:
            doc, raw = seeds[reader.kind]
            data = _mutated_log(raw, rng) if reader.kind == "log" else next(
                mutations(doc, rng, 1))
            case = tmp / f"case-{i}-{reader.name.replace(' ', '_').replace('/', '')}"
            case.mkdir()
            path = case / ("input.jsonl" if reader.kind == "log" else "input.json")
            path.write_bytes(data)
            t0 = time.monotonic()
            outcome, detail = classify(lambda r=reader, p=path, c=case: r.run(p, c))
            elapsed = time.monotonic() - t0
            slowest = max(slowest, elapsed)
            hangs += elapsed > HANG_S
            tried += 1
            counts[(reader.name, outcome)] += 1
            if outcome in ("crash", "bad_serve"):
                kept = tmp / f"kept-{len(crashes)}.bin"
                kept.write_bytes(data)
                crashes.append({"reader": reader.name, "outcome": outcome, "file": str(kept),
                                "detail": detail[-600:]})
        i += 1
    return {"seed": seed, "files_tried": tried, "rounds": i,
            "seconds": round(time.monotonic() - started, 1), "hangs": hangs,
            "slowest_call_s": round(slowest, 2),
            "outcomes": {f"{r} {o}": n for (r, o), n in sorted(counts.items())},
            "crashes": crashes}
