"""``oasr doctor``: what this machine has for oasr, on one screen.

GPU and arch (or what to pass without one), nvcc and CUTLASS, the JIT cache (where, for which
arch, how many units per family, whether each family's production modules are prebuilt), the
tiers and their staleness, and the plugins. torch is imported only when a GPU device node
exists (:func:`oasr_core.gpu_probe.gpu_visible`), so on a CPU machine it answers in well under
a second. It writes nothing and starts no subprocess: nvcc's version is the one a build
recorded (``--probe-nvcc`` runs nvcc instead). An unusable JIT cache (one the loader's trust
check would refuse) is reported and makes the exit status 1.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from oasr_core import jit
from oasr_core.cli import JSON_HELP, CliState, handle_errors
from oasr_core.commands.device import seen_arch
from oasr_core.commands.prebuild import collect_specs
from oasr_core.errors import JitBuildError, OasrError
from oasr_core.gpu_probe import gpu_visible
from oasr_core.jit import cache, family_target, toolchains, trust
from oasr_core.report import tier_arches, tuning_report
from oasr_core.stamps import current_sku


def gpu_facts(rt: Any) -> dict[str, Any]:
    """The current GPU (name, arch family, nvcc target, SMs), or why there is none."""
    if not gpu_visible():
        seen_arch(rt)
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        return {"present": False, "reason": "CUDA_VISIBLE_DEVICES hides every device"
                if hidden is not None else "no /dev/nvidia* device"}
    facts = rt.device(None)
    if facts is None:
        return {"present": False, "reason": "torch sees no CUDA device"}
    sku = current_sku() or {}
    return {"present": True, "arch": facts.arch, "target": family_target(facts.arch),
            "name": sku.get("name"), "sms": facts.sm_count}


def toolchain_facts(probe: bool = False) -> dict[str, Any]:
    """nvcc (path, version, where the version came from) and CUTLASS (version, headers).

    Without ``probe`` no nvcc runs (a read-only command starts no compiler): the version is
    what a build recorded for this very nvcc, else the toolkit's ``version.json``
    (:mod:`oasr_core.jit.toolchains`); ``probe`` runs ``nvcc --version`` and
    ``--list-gpu-arch``, as a build would."""
    out: dict[str, Any] = {}
    try:
        if probe:
            tc = jit.toolchain()
            out["nvcc"] = {"path": str(tc.nvcc), "version": tc.build_version,
                           "source": "probed", "archs": list(tc.supported_archs())}
            out["identity"] = tc
        else:
            known = toolchains.known()
            out["nvcc"] = {"path": str(known.nvcc), "version": known.build_version,
                           "source": known.source}
            out["identity"] = known.toolchain
    except OasrError as exc:
        out["nvcc"] = {"error": str(exc).splitlines()[0]}
        out["identity"] = None
    try:
        out["cutlass"] = {"version": jit.cutlass_version(),
                          "include": jit.cutlass_include_dirs()[0]}
    except OasrError as exc:
        out["cutlass"] = {"error": str(exc).splitlines()[0]}
    try:
        out["target_env"] = list(jit.target_arches())
    except OasrError as exc:
        out["target_env"] = {"error": str(exc).splitlines()[0]}
    return out


def cache_facts(root: Path, families: list[str]) -> dict[str, Any]:
    """What the JIT cache at ``root`` holds: per family and arch, modules and linked / failed
    units (from the modules' manifests), and the object and failure-marker counts."""
    per: dict[tuple[str, str], Counter] = {}
    damaged = 0
    for manifest in sorted(root.glob("lib/*/*/manifest.json")):
        doc = cache.read_json(manifest)  # the one reader: size and depth limits
        if doc is None or cache.manifest_problem(doc) is not None:
            damaged += 1  # rebuilt when its module is next built or loaded
            continue
        name = str(doc.get("name", manifest.parent.parent.name))
        family = max((f for f in families if name == f or name.startswith(f + "_")),
                     key=len, default="other")
        counts = per.setdefault((family, str(doc.get("arch"))), Counter())
        counts["modules"] += 1
        for unit in (doc.get("units") or {}).values():
            counts["failed" if unit.get("status") == "failed" else "linked"] += 1
    problem = None
    if root.is_dir():
        try:
            trust.check_place(root, root)
        except JitBuildError as exc:
            problem = str(exc).removeprefix(f"refusing to load {root}: ")
    objects = sum(1 for _ in root.glob("obj/*/*.o")) if root.is_dir() else 0
    markers = sum(1 for _ in root.glob("obj/*/*.failed.json")) if root.is_dir() else 0
    return {"dir": str(root), "exists": root.is_dir(), "problem": problem, "objects": objects,
            "failure_markers": markers, "damaged_manifests": damaged,
            "families": [{"family": f, "arch": a, **dict(c)} for (f, a), c in sorted(per.items())]}


def production_prebuilt(registry: Any, families: list[str], target: str,
                        tc: jit.Toolchain | None) -> dict[str, Any]:
    """Per family: how many of the production modules for ``target`` are in the cache, keyed
    for toolchain ``tc`` (the nvcc's identity is part of every key; None: not known without
    running nvcc, so not counted)."""
    out: dict[str, Any] = {}
    for name in families:
        if tc is None:
            out[name] = {"error": "nvcc not probed"}
            continue
        try:
            specs = collect_specs(registry, (name,), target, "production", tc)
        except OasrError as exc:
            out[name] = {"error": str(exc).splitlines()[0]}
            continue
        out[name] = {"modules": len(specs),
                     "prebuilt": sum(1 for s in specs if jit.is_prebuilt(s, tc))}
    return out


def tier_facts(arches: list[str]) -> list[dict[str, Any]]:
    """Per family and arch: each tier's file, entries and staleness."""
    rows = []
    for fs in tuning_report(arch=None if not arches else arches[0]).families \
            if len(arches) <= 1 else [f for a in arches for f in tuning_report(arch=a).families]:
        rows.append({"family": fs.family, "arch": fs.arch, "lane": fs.lane, "tiers": [
            {"tier": t.tier, "path": t.path, "loaded": t.loaded, "entries": t.entries,
             "stale": list(t.stale), "stale_entries": len(t.stale_entries),
             "problem": t.problem} for t in fs.tiers]})
    return rows


def _tier_text(t: dict[str, Any]) -> str:
    if not t["loaded"]:
        return f"SKIPPED ({t['problem']})" if t["problem"] else (
            "absent" if t["path"] else "off")
    text = f"{t['entries']} entries"
    if t["stale"]:
        text += f", STALE ({'; '.join(t['stale'])})"
    elif t["stale_entries"]:
        text += f", {t['stale_entries']} stale"
    else:
        text += ", current"
    return text


def render(doc: dict[str, Any]) -> list[str]:
    """The one-screen text of a doctor document."""
    gpu, tc, cache = doc["gpu"], doc["toolchain"], doc["jit_cache"]
    lines = []
    if gpu["present"]:
        lines.append(f"GPU       {gpu.get('name') or '?'}: {gpu['arch']} (nvcc target "
                     f"{gpu['target']}), {gpu['sms']} SMs")
    else:
        lines.append(f"GPU       none ({gpu['reason']}): pass --arch, e.g. "
                     "`oasr tune prebuild --arch 9.0a`, `oasr tune select --arch sm90`")
    nvcc = tc["nvcc"]
    if "error" in nvcc:
        lines.append(f"nvcc      MISSING: {nvcc['error']}")
    elif nvcc["version"] is None:
        lines.append(f"nvcc      at {nvcc['path']} (version unknown until a build records "
                     "it; --probe-nvcc runs it)")
    else:
        source = "" if nvcc["source"] == "probed" else f" ({nvcc['source']})"
        lines.append(f"nvcc      {nvcc['version']} at {nvcc['path']}{source}")
    cutlass = tc["cutlass"]
    lines.append(f"CUTLASS   {cutlass['version']} ({cutlass['include']})" if "version" in cutlass
                 else f"CUTLASS   MISSING: {cutlass['error']}")
    env = tc["target_env"]
    if env:
        lines.append(f"target    OASR_CUDA_ARCH_LIST={os.environ.get('OASR_CUDA_ARCH_LIST')}"
                     + (f" ({env['error']})" if isinstance(env, dict) else ""))
    if cache.get("problem"):
        lines.append(f"JIT cache {cache['dir']} UNUSABLE: {cache['problem']}")
    else:
        lines.append(f"JIT cache {cache['dir']}"
                     + ("" if cache["exists"] else " (absent: made by the first build)")
                     + (f": {cache['objects']} objects, {cache['failure_markers']} failed"
                        if cache["exists"] else "")
                     + (f", {cache['damaged_manifests']} damaged modules (rebuilt when next "
                        "built or loaded)" if cache.get("damaged_manifests") else ""))
    for row in cache["families"]:
        failed = f", {row.get('failed', 0)} failed" if row.get("failed") else ""
        lines.append(f"  {row['family']:<12} {row['arch']:<5} {row.get('modules', 0)} modules, "
                     f"{row.get('linked', 0)} units{failed}")
    for target, fams in doc["production"].items():
        if fams and all(v.get("error") == "nvcc not probed" for v in fams.values()):
            lines.append(f"  production modules prebuilt for {target}: unknown (no build "
                         "recorded this nvcc; --probe-nvcc runs it)")
            continue
        parts = [f"{f} {v['prebuilt']}/{v['modules']}" if "modules" in v else f"{f} -"
                 for f, v in fams.items()]
        lines.append(f"  production modules prebuilt for {target}: {', '.join(parts)}")
    for row in doc["tiers"]:
        lines.append(f"tiers     {row['arch']}/{row['family']} (lane {row['lane'] or '-'}): "
                     + "; ".join(f"{t['tier']} {_tier_text(t)}" for t in row["tiers"]))
    plugins = doc["plugins"]
    names = ", ".join(f"{p['name']} {p['version'] or ''}".strip() for p in plugins["loaded"])
    lines.append(f"plugins   {names or 'none'}"
                 + (f"; blocked: {', '.join(plugins['blocked'])}" if plugins["blocked"] else ""))
    for f in plugins["failures"]:
        text = f"  † {f['plugin']} ({f['distribution']}): {f['error']}"
        lines.append(text if len(text) <= 150 else text[:147] + "...")
    return lines


def diagnose(rt: Any, arch: str | None, probe: bool = False) -> dict[str, Any]:
    """The doctor document (see the module docstring); ``arch`` an nvcc target to check the
    production modules for (default: this GPU's, else ``OASR_CUDA_ARCH_LIST``'s); ``probe``
    runs nvcc (:func:`toolchain_facts`)."""
    registry = rt.registry
    families = sorted(registry.families)
    gpu = gpu_facts(rt)
    tc = toolchain_facts(probe)
    identity = tc.pop("identity")
    targets = [jit.normalize_arch(arch)] if arch else (
        [gpu["target"]] if gpu["present"] else
        (tc["target_env"] if isinstance(tc["target_env"], list) else []))
    arches = [gpu["arch"]] if gpu["present"] else tier_arches()
    production = {}
    if "version" in tc["cutlass"]:
        production = {t: production_prebuilt(registry, families, t, identity) for t in targets}
    rows = registry.describe()
    return {
        "gpu": gpu, "toolchain": tc, "jit_cache": cache_facts(jit.cache_dir(), families),
        "production": production, "tiers": tier_facts(arches),
        "plugins": {"loaded": [{"name": r["name"], "version": r["version"]} for r in rows
                               if r["status"] == "loaded" and r.get("distribution")],
                    "blocked": [r["name"] for r in rows if r["status"] == "blocked"],
                    "failures": [{"plugin": f.plugin, "distribution": f.distribution,
                                  "kind": f.kind, "error": f.error}
                                 for f in registry.failures]},
    }


@click.command("doctor", epilog="""\b
Examples:
  oasr doctor
  oasr doctor --arch 9.0a      also check the production modules prebuilt for sm90
  oasr doctor --probe-nvcc     also run nvcc to check it works
  oasr doctor --json""")
@click.option("--arch", default=None, metavar="TARGET", help="nvcc target whose production "
              "modules to look for in the JIT cache, e.g. 9.0a (default: this GPU's, else "
              "OASR_CUDA_ARCH_LIST's).")
@click.option("--probe-nvcc", "probe", is_flag=True, help="Run nvcc (--version, "
              "--list-gpu-arch) to check it works; without it doctor starts no subprocess and "
              "reports the nvcc version the last build recorded.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_obj
@handle_errors
def doctor_cmd(state: CliState, arch: str | None, probe: bool, as_json: bool) -> None:
    """What this machine has for oasr: GPU, nvcc, CUTLASS, JIT cache, tiers, plugins."""
    if arch is not None:
        try:
            jit.normalize_arch(arch)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--arch") from None
    doc = diagnose(state.runtime(), arch, probe)
    if as_json:
        click.echo(json.dumps(doc, indent=1, sort_keys=True, default=str))
    else:
        for line in render(doc):
            click.echo(line)
    if doc["jit_cache"]["problem"]:
        # No library in this cache would load: a problem to fix, not a state to report.
        click.echo(f"error: JIT cache {doc['jit_cache']['dir']} (OASR_JIT_DIR): "
                   f"{doc['jit_cache']['problem']}", err=True)
        sys.exit(1)
