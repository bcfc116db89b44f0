"""Tier-file content the family or lane rules out, through the eager loader, the runtime's
lazy reader and selection, in both tiers: duplicate keys, entries a family cannot have, a
lane nobody registered, a stamped ``default``; and the untuned fallback's own guard.

Real inputs: the shipped sm90 gemm table and the installed gemm plugin (a fake family only
where no real plugin can produce the case).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import oasr_core
from oasr_core import database, runtime
from oasr_core.database.codec import parse_text
from oasr_core.errors import DatabaseError
from oasr_core.selection import clear_memo, select
from oasr_core.types import Config, Family, Lane, Sentinel, Tier

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "db/sm90/gemm.json"
KEY = "gemm|op=gemm_activation|dt=half|N=1024|K=256"
SHAPE = ("gemm", "gemm_activation", "fp16", (1024, 256), 64, "sm90")


@pytest.fixture(params=["system", "user"])
def tier(request, tmp_path, monkeypatch):
    """``write(doc_or_text)`` puts a gemm table in the parametrised tier (the other empty)."""
    roots = {t: tmp_path / t for t in ("system", "user")}
    for root in roots.values():
        (root / "sm90").mkdir(parents=True)
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(roots["system"]))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(roots["user"]))
    path = roots[request.param] / "sm90" / "gemm.json"

    def write(doc):
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        runtime.install_runtime(None)
        clear_memo()
        return path

    yield Tier(request.param), write
    runtime.install_runtime(None)


def _shipped():
    return json.loads(SHIPPED.read_text())


def _family_and_lanes():
    rt = runtime.get_runtime()
    return rt.registry.family("gemm"), {x.name: x for x in rt.registry.lanes_of("gemm")}


def _select_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select(*SHAPE)
    return sel, [str(w.message) for w in caught]


def test_a_duplicate_key_makes_the_file_unreadable(tier):
    t, write = tier
    text = SHIPPED.read_text()
    entry = json.dumps(_shipped()["entries"][KEY])
    text = text.replace('"entries": {', f'"entries": {{"{KEY}": {entry}, ', 1)
    with pytest.raises(DatabaseError, match="duplicate key"):
        parse_text(text.encode(), origin="t")
    write(text)
    sel, caught = _select_warnings()
    assert sel.tier is not t
    assert any("duplicate key" in m for m in caught)


EDITS = {
    "points_on_gemm": lambda e: e.__setitem__("points", {"1x3000": "torch"}),
    "disallowed_sentinel": lambda e: e["regions"].__setitem__(0, [128, "heuristic"]),
}


@pytest.mark.parametrize("edit", [*sorted(EDITS), "foreign_key"])
def test_an_entry_the_family_cannot_have_fails_eager_and_lazy_alike(tier, edit):
    """Both readers refuse the file when first read, and selection never serves it."""
    t, write = tier
    doc = _shipped()
    if edit == "foreign_key":
        doc["entries"]["conv1d|op=conv1d|dt=half|Cin=8|Cout=8|k=3|stride=1|pad=1|dil=1"
                       "|groups=1"] = doc["entries"][KEY]
    else:
        EDITS[edit](doc["entries"][KEY])
    path = write(doc)
    fam, lanes = _family_and_lanes()
    with pytest.raises(DatabaseError):
        database.load_tuning_file(path, family=fam, arch="sm90", lanes=lanes)
    with pytest.raises(DatabaseError):
        database.open_tuning_file(path, family=fam, arch="sm90", lanes=lanes)
    sel, caught = _select_warnings()
    assert sel.tier is not t
    assert any(str(path) in m for m in caught)


def test_a_forged_mark_still_refuses_the_bad_entry_at_lookup(tier):
    """A mark (only a writer records one) defers checks, never skips them: the bad entry is
    refused when looked up; the file's other entries serve (by design, see validated)."""
    from oasr_core.database import validated

    t, write = tier
    if t is Tier.SYSTEM:
        pytest.skip("marks live in the user tier")
    doc = _shipped()
    EDITS["disallowed_sentinel"](doc["entries"][KEY])
    path = write(doc)
    fam, lanes = _family_and_lanes()
    validated.record(validated.mark_for(path.read_bytes(), fam))
    lazy = database.open_tuning_file(path, family=fam, arch="sm90", lanes=lanes)
    with pytest.raises(DatabaseError, match="heuristic"):
        lazy.entries[KEY]
    sel, caught = _select_warnings()
    assert sel.tier is not t and any("entry skipped" in m for m in caught)


def test_a_file_of_a_lane_nobody_registered_is_skipped(tier):
    t, write = tier
    doc = _shipped()
    doc["arch"]["lane"] = "sm90_nope"
    write(doc)
    sel, caught = _select_warnings()
    assert sel.tier is not t
    assert sum("sm90_nope" in m for m in caught) == 1


def test_a_stamped_default_serves_the_config_it_was_measured_as(tier):
    t, write = tier
    doc = _shipped()
    stamped = "ws_64x64x64_c1x1_s4"
    doc["validators"]["soft"]["default"] = stamped
    doc["entries"][KEY]["regions"][0][1] = "default"
    write(doc)
    sel, _ = _select_warnings()
    lane = runtime.get_runtime().registry.lane("sm90_wgmma")
    assert lane.default_config != stamped
    assert sel.tier is t and sel.choice is Sentinel.DEFAULT and sel.config.id == stamped


def test_the_writer_moves_a_corrupt_file_aside(tmp_path):
    path = tmp_path / "user" / "sm90" / "gemm.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema_version": 2, "entries": [')
    fam, _ = _family_and_lanes()
    lane = runtime.get_runtime().registry.lane("sm90_wgmma")
    with pytest.warns(database.TuningDatabaseWarning, match="moved it aside"):
        database.write_entries(path, family=fam, arch="sm90", lane=lane,
                               entries={KEY: database.Entry(regions=((None, "torch"),))},
                               configs={}, soft={})
    [aside] = path.parent.glob("gemm.json.corrupt-*")
    assert aside.read_bytes() == b'{"schema_version": 2, "entries": ['


class _WideOnly:
    """A family whose untuned default (the lane default ``wide``) runs only N >= 128."""

    @oasr_core.hookimpl
    def oasr_register_families(self):
        return [Family(name="tw", ops=("mm",), dims=("N", "K"), dtypes=("fp16",))]

    @oasr_core.hookimpl
    def oasr_register_lanes(self):
        cfgs = [Config(id="wide", lane="tw_lane", params={"tile": [128, 64]})]
        return [Lane(name="tw_lane", family="tw", arch_families=("sm90",), default_on=("sm90",),
                     config_space=cfgs, default_config="wide",
                     supports=lambda c, p: p.dim("N") >= 128)]


def test_the_untuned_fallback_never_serves_a_config_the_shape_cannot_run(monkeypatch, tmp_path):
    from oasr_core.plugins import make_plugin_manager

    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(_WideOnly())
    runtime.install_runtime(runtime.Runtime(pm=pm))
    clear_memo()
    try:
        narrow = select("tw", "mm", "fp16", (64, 256), 32, "sm90")
        wide = select("tw", "mm", "fp16", (256, 256), 32, "sm90")
    finally:
        runtime.install_runtime(None)
    assert narrow.config is None and "cannot run this shape" in narrow.reason
    assert wide.config is not None and wide.config.id == "wide"
