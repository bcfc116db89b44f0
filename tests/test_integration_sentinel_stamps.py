"""Integration: the shipped sm90 tables serve the same selection for every entry whether read in
their schema-version-1 form (no sentinel stamps) or as shipped (version 2, stamped), with the
real gemm and scaled_mm plugins.

The version-1 form is the shipped document with its ``schema_version`` set back to 1 and the
sentinel stamps the rewrite added removed, which is byte for byte what was committed before
the tables were rebuilt with the stamps; both go through ``oasr_core.select`` at every
region's bounds, one past them, and every measured M of every entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import oasr_gemm.hooks
import oasr_scaled_mm.hooks
import pytest

import oasr_core
from oasr_core import runtime
from oasr_core.database import parse_signature_key
from oasr_core.plugins import make_plugin_manager
from oasr_core.sentinels import DEFAULT_STAMP

REPO = Path(__file__).resolve().parent.parent
ARCH = "sm90"
SHIPPED = ("gemm", "scaled_mm")


def _version_1(doc: dict) -> dict:
    old = json.loads(json.dumps(doc))
    old["schema_version"] = 1
    old["validators"]["soft"].pop(DEFAULT_STAMP, None)
    return old


def _points(entry: dict) -> list[int]:
    ms = {1}
    for m_hi, _choice in entry.get("regions", []):
        if m_hi is not None:
            ms.update((m_hi, m_hi + 1))
    for point in entry.get("evidence", {}):
        if point.startswith("M="):
            ms.add(int(point[2:]))
    return sorted(ms)


def _served(doc: dict, family: str, root: Path, monkeypatch) -> dict:
    folder = root / ARCH
    folder.mkdir(parents=True)
    (folder / f"{family}.json").write_text(json.dumps(doc))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(root))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(oasr_gemm.hooks, name="gemm")
    pm.register(oasr_scaled_mm.hooks, name="scaled_mm")
    runtime.install_runtime(runtime.Runtime(pm=pm))
    fam = runtime.get_runtime().registry.family(family)
    served = {}
    for key, entry in doc["entries"].items():
        sig = parse_signature_key(key)
        dims = tuple(int(dict(sig.dims)[d]) for d in fam.dims)
        dtype = sig.dtype if sig.dtype in fam.dtypes else fam.dtypes[0]
        for m in _points(entry):
            sel = oasr_core.select(family, sig.op, dtype, dims, m, ARCH)
            served[(key, m)] = (sel.tier.value, sel.choice_id,
                                sel.config.id if sel.config is not None else None)
    runtime.install_runtime(None)
    return served


@pytest.mark.parametrize("family", SHIPPED)
def test_the_stamped_table_serves_what_the_unstamped_one_did(tmp_path, monkeypatch, family):
    shipped = json.loads((REPO / "db" / ARCH / f"{family}.json").read_text())
    assert shipped["schema_version"] == 2
    before = _served(_version_1(shipped), family, tmp_path / "v1", monkeypatch)
    after = _served(shipped, family, tmp_path / "v2", monkeypatch)
    assert before == after
    assert {tier for tier, _, _ in after.values()} >= {"system"}
