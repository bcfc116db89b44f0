"""Selection and the tuning report for a family whose fallback is a shape heuristic.

Resolution walks user, system, then the heuristic (the core's model tier needs a lane cost
model); an entry naming a config the active lane cannot serve (another lane's, a Stream-K
tile for the quantizing op) is warned about once and the heuristic answers. Given a census,
the report says how many of its layers have a tuning entry and how many run the heuristic.
"""

from __future__ import annotations

import json
import warnings

import pytest
from test_census_support import GemmFamily

import oasr_core
from oasr_core import database, hookimpl, runtime, selection
from oasr_core.census import shapeset
from oasr_core.cost_model import ModelTier
from oasr_core.errors import OasrWarning
from oasr_core.plugins import make_plugin_manager
from oasr_core.report import Coverage, tuning_report
from oasr_core.testing import (
    FAKE_INT8_FAMILY,
    FakeInt8Plugin,
    fake_int8_heuristic,
    fake_int8_lane_record,
)
from oasr_core.types import Config, Lane, Problem, Sentinel, Tier

ARCH = "sm90"
LANE = fake_int8_lane_record()
ALT = "fake_int8_alt"


class AltLane:
    """A second lane of the int8 family on sm90 (the native-kernel A/B arm), not default."""

    @hookimpl
    def oasr_register_lanes(self):
        return [Lane(name=ALT, family=FAKE_INT8_FAMILY, arch_families=(ARCH,),
                     config_space=[Config(id="alt_tile", lane=ALT, params={"tile": 256})],
                     default_config="alt_tile")]


@pytest.fixture
def tiers(tmp_path, monkeypatch):
    user, system = tmp_path / "user", tmp_path / "system"
    user.mkdir()
    system.mkdir()
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system))
    pm = make_plugin_manager(load_entrypoints=False)
    for name, plugin in (("fake_int8", FakeInt8Plugin()), ("alt", AltLane()),
                         ("gemm", GemmFamily())):
        pm.register(plugin, name=name)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    return {"user": user, "system": system, "rt": rt}


def key(op: str, n: int, k: int) -> str:
    return f"{FAKE_INT8_FAMILY}|op={op}|N={n}|K={k}"


def write(root, entries: dict, lane: str = LANE.name, fresh: bool = False) -> None:
    rt = runtime.get_runtime()
    fam = rt.registry.family(FAKE_INT8_FAMILY)
    space = {c.id: c for ln in rt.registry.lanes_of(FAKE_INT8_FAMILY) for c in ln.config_space}
    out, used = {}, set()
    for k, regions in entries.items():
        out[k] = database.Entry(regions=tuple(tuple(r) for r in regions))
        used.update(c for _, c in regions if Sentinel.parse(c) is None)
    database.write_entries(database.tier_path(root, ARCH, fam), family=fam, arch=ARCH,
                           lane=lane, entries=out, configs={c: space[c] for c in used},
                           soft={}, fresh=fresh)
    rt.reload()


def select(m: int, op: str = "scaled_mm", dims=(768, 256)):
    return oasr_core.select(FAKE_INT8_FAMILY, op, "int8", dims, m, ARCH)


def problem(m: int, op: str = "scaled_mm", n: int = 768, k: int = 256) -> Problem:
    return Problem(FAKE_INT8_FAMILY, op, "int8", (("N", n), ("K", k)), m)


# -- selection ------------------------------------------------------------------------------

def test_untuned_shapes_run_the_heuristic_memoised_and_counted(tiers):
    first = select(4096)
    assert (first.choice, first.tier, first.lane) == (Sentinel.HEURISTIC, Tier.HEURISTIC,
                                                      LANE.name)
    assert first.config == fake_int8_heuristic(problem(4096), LANE)
    assert select(4096) is first
    assert select(16).config.id == "m64_n64"
    counts = tiers["rt"].counts
    assert counts[(FAKE_INT8_FAMILY, "scaled_mm", "heuristic")] == 2
    assert sum(counts.values()) == 2


def test_user_then_system_then_heuristic(tiers):
    write(tiers["system"], {key("scaled_mm", 768, 256): [[256, "m128_n128"],
                                                         [None, "heuristic"]]})
    write(tiers["user"], {key("scaled_mm", 768, 256): [[64, "m64_n128"]]})
    assert (select(16).config.id, select(16).tier) == ("m64_n128", Tier.USER)
    assert (select(200).config.id, select(200).tier) == ("m128_n128", Tier.SYSTEM)
    big = select(4096)
    assert (big.choice_id, big.tier) == ("heuristic", Tier.SYSTEM)
    assert big.config == fake_int8_heuristic(problem(4096), LANE)
    other = select(4096, dims=(512, 256))
    assert other.tier is Tier.HEURISTIC


def test_no_model_tier_without_a_lane_cost_model(tiers):
    """The core's model tier declines a lane without cost_features, whatever the payload."""
    assert any(isinstance(p, ModelTier) for p in tiers["rt"].pm.get_plugins())
    fam = tiers["rt"].registry.family(FAKE_INT8_FAMILY)
    candidates = tuple(c for c in LANE.config_space if LANE.supports(c, problem(64)))
    assert ModelTier().oasr_model_select(family=fam, lane=LANE, problem=problem(64),
                                         candidates=candidates,
                                         model={"serve": "structure"}) is None
    assert select(64).tier is Tier.HEURISTIC


def test_another_lanes_config_is_warned_once_and_the_heuristic_answers(tiers):
    write(tiers["system"], {key("scaled_mm", 768, 256): [[None, "alt_tile"]]}, lane=ALT)
    with pytest.warns(OasrWarning, match="belongs to lane 'fake_int8_alt'") as caught:
        sel = select(64)
    assert (sel.tier, sel.config) == (Tier.HEURISTIC, fake_int8_heuristic(problem(64), LANE))
    assert len([w for w in caught if "alt_tile" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select(2048).tier is Tier.HEURISTIC
    # On the lane it was measured on, the same entry serves.
    assert oasr_core.select(FAKE_INT8_FAMILY, "scaled_mm", "int8", (768, 256), 64, ARCH,
                            lane=ALT).tier is Tier.SYSTEM


def test_a_stream_k_entry_for_the_quantizing_op_is_skipped(tiers):
    write(tiers["system"], {key("scaled_mm_quant", 768, 16384): [[None, "sk_m128_n256"]],
                            key("scaled_mm", 768, 16384): [[None, "sk_m128_n256"]]})
    assert select(64, dims=(768, 16384)).config.id == "sk_m128_n256"
    with pytest.warns(OasrWarning, match="cannot run this shape"):
        sel = select(64, op="scaled_mm_quant", dims=(768, 16384))
    assert sel.tier is Tier.HEURISTIC and not sel.config.params["stream_k"]


# -- the report -----------------------------------------------------------------------------

def census_doc(tmp_path):
    """A quantized Conformer's census: 4 int8 signatures (22 layers), one fp16 one."""
    points, signatures = [], {}
    layers = {(1024, 256): 4, (256, 1024): 4, (256, 256): 12, (512, 256): 2}
    for (n, k), per_step in layers.items():
        for m in (94, 1502):
            points.append(shapeset.ShapePoint(family=FAKE_INT8_FAMILY, op="scaled_mm",
                                              dtype="int8", dims={"N": n, "K": k}, m=m,
                                              calls=1.0, weight=1.0, must=True))
        label = shapeset.signature_label(FAKE_INT8_FAMILY, "scaled_mm", "int8",
                                         (("N", n), ("K", k)))
        signatures[label] = shapeset.SignatureInfo(n * k, per_step)
    points.append(shapeset.ShapePoint(family="gemm", op="gemm", dtype="fp16",
                                      dims={"N": 256, "K": 4864}, m=94, calls=1.0))
    doc = shapeset.ShapeSet(points=points, signatures=signatures, working_set_bytes=1 << 20,
                            provenance={"workload": "conformer"})
    return doc, shapeset.dump(doc, tmp_path / "census.json")


def test_report_without_tuning_puts_every_layer_on_the_heuristic(tiers, tmp_path):
    doc, _ = census_doc(tmp_path)
    report = tuning_report(arch=ARCH, census=doc)
    assert report.coverage == (Coverage(family=FAKE_INT8_FAMILY, arch=ARCH, layers=22,
                                        signatures=4, tiers=(), fallback=22),)
    assert str(report).splitlines()[-1] == (
        "fake_int8: 22 quantized layer(s) over 4 signature(s): 0 with a tuning entry, "
        "22 on the shape heuristic")


def test_report_counts_layers_by_the_tier_serving_every_point(tiers, tmp_path):
    _, path = census_doc(tmp_path)
    write(tiers["system"], {
        key("scaled_mm", 1024, 256): [[None, "heuristic"]],           # measured: counts
        key("scaled_mm", 256, 1024): [[256, "m64_n64"], [None, "heuristic"]],
        key("scaled_mm", 512, 256): [[128, "m64_n64"]],               # 1502 uncovered
    })
    write(tiers["user"], {key("scaled_mm", 256, 256): [[None, "m128_n128"]],
                          key("scaled_mm", 256, 1024): [[100, "m64_n128"]]})
    report = tuning_report(arch=ARCH, census=path)
    cov, = report.coverage
    # 256x1024: user serves M=94, system M=1502; a tie goes to the user tier.
    assert cov.tiers == (("user", 12 + 4), ("system", 4)) and cov.fallback == 2
    assert cov.line() == ("fake_int8: 22 quantized layer(s) over 4 signature(s): 20 with a "
                          "tuning entry (user=16, system=4), 2 on the shape heuristic")
    assert cov.line() in str(report)
    data = report.to_json()["coverage"]
    assert data == [{"family": FAKE_INT8_FAMILY, "arch": ARCH, "layers": 22, "signatures": 4,
                     "tiers": {"user": 16, "system": 4}, "fallback": 2, "quantized": True,
                     "line": cov.line()}]
    json.dumps(report.to_json())
    # A config the lane cannot serve there is no tuning entry (the runtime skips it).
    write(tiers["user"], {key("scaled_mm", 256, 256): [[None, "alt_tile"]]}, lane=ALT,
          fresh=True)
    with pytest.warns(OasrWarning):
        cov, = tuning_report(arch=ARCH, census=[path]).coverage
    assert dict(cov.tiers) == {"system": 8} and cov.fallback == 14


def test_report_keeps_its_callers_and_filters_families(tiers, tmp_path):
    doc, _ = census_doc(tmp_path)
    plain = tuning_report(arch=ARCH)
    assert plain.coverage == () and plain.to_json()["coverage"] == []
    assert tuning_report(arch=ARCH, families=["gemm"], census=doc).coverage == ()
    selection.clear_memo()
