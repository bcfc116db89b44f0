"""The ShapeSet document, merging, coverage, and how must-tune and eager fraction arise."""

from __future__ import annotations

import json

import pytest
from test_census_support import SMALL_CONFORMER, gemm_patches

from oasr_core.census import shapeset as ss
from oasr_core.census.engine import EngineConfig, Traffic
from oasr_core.census.probe import PointBuilder, estimate_ms, run_census
from oasr_core.census.recorder import Call
from oasr_core.census.workloads import builtin_workloads

CONFORMER = {w.name: w for w in builtin_workloads()}["conformer"]
POINT_FIELDS = {"family", "op", "dtype", "dims", "M", "batch", "point", "calls", "weight",
                "must", "eager_fraction", "keys"}


def _call(m: int, n: int = 256, k: int = 256) -> Call:
    return Call(family="gemm", op="gemm", dtype="fp16", dims={"N": n, "K": k}, m=m,
                elements=m * k + n * k + m * n, flops=2 * m * n * k, weight_elements=n * k)


def _point(m: int, calls: float, **kw) -> ss.ShapePoint:
    return ss.ShapePoint(family="gemm", op="gemm", dtype="fp16", dims={"N": 256, "K": 256},
                         m=m, calls=calls, weight=calls * 0.01, **kw)


@pytest.fixture(scope="module")
def census() -> ss.ShapeSet:
    """A small offline Conformer census in which the longest batch runs eagerly."""
    config = EngineConfig(service_mode="offline", max_batch_size=4, max_graph_frames=1024)
    traffic = Traffic(durations_s=(2.0,) * 8 + (20.0,) * 4, source="test")
    return run_census(CONFORMER, config, traffic, gemm_patches(), params=SMALL_CONFORMER)


def test_must_tune_comes_from_captured_keys_and_alpha_from_eager_ones(census):
    probabilities = census.provenance["keys"]
    assert probabilities == {"offline:B4xT256": pytest.approx(2 / 3),
                             "offline:B4xT2048:eager": pytest.approx(1 / 3)}
    eager = [p for p in census.points if p.keys == ("offline:B4xT2048:eager",)]
    captured = [p for p in census.points if p.keys == ("offline:B4xT256",)]
    assert eager and captured and len(eager) + len(captured) == len(census.points)
    assert all(not p.must and p.eager_fraction == 1.0 for p in eager)
    assert all(p.must and p.eager_fraction == 0.0 for p in captured)
    sub = next(p for p in captured if p.dims["K"] == 4864)
    assert sub.m == 4 * 63 and sub.calls == pytest.approx(2 / 3)
    assert sub.weight == pytest.approx(2 / 3 * estimate_ms(_call(4 * 63, 256, 4864)))


def test_a_point_reached_by_captured_and_eager_keys_gets_a_fractional_alpha():
    builder = PointBuilder()
    builder.add({_call(64): 2, _call(128): 1}, share=0.75, captured=True, label="a")
    builder.add({_call(64): 2}, share=0.25, captured=False, label="b:eager")
    points = {p.m: p for p in builder.points()}
    assert points[64].calls == pytest.approx(2.0)
    assert points[64].eager_fraction == pytest.approx(0.25)
    assert points[64].must and points[64].keys == ("a", "b:eager")
    assert points[128].eager_fraction == 0.0


def test_round_trip_and_documented_field_names(census, tmp_path):
    path = ss.dump(census, tmp_path / "c.json")
    raw = json.loads(path.read_text())
    assert list(raw)[0] == "schema_version" and raw["schema_version"] == ss.SCHEMA_VERSION
    assert set(raw) == {"schema_version", "working_set_bytes", "signatures", "points",
                        "provenance"}
    assert set(raw["points"][0]) == POINT_FIELDS
    assert set(next(iter(raw["signatures"].values()))) == {"weight_bytes", "calls_per_step"}
    assert ss.load(path) == census


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.update(schema_version=2), "newer oasr"),
    (lambda d: d.pop("schema_version"), "no valid schema_version"),
    (lambda d: d["points"][0].update(M=0), "M 0 is not a positive integer"),
    (lambda d: d["points"][0].update(extra=1), "extra"),
    (lambda d: d["points"][0].update(eager_fraction=1.5), "eager_fraction"),
    (lambda d: d["points"][0]["dims"].update(N="256"), "expected an integer"),
])
def test_bad_documents_are_refused_with_the_reason(census, tmp_path, edit, needle):
    doc = ss.to_json(census)
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ss.ShapeSetError, match=needle):
        ss.load(path)


def test_unreadable_files_are_refused(tmp_path):
    with pytest.raises(ss.ShapeSetError, match="missing.json: no such file"):
        ss.load(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_text("\n")
    with pytest.raises(ss.ShapeSetError, match="empty.json: empty file"):
        ss.load(tmp_path / "empty.json")
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(ss.ShapeSetError, match="not valid JSON"):
        ss.load(tmp_path / "x.json")


def test_merging_censuses_adds_traffic_and_keeps_the_strictest_flags():
    a = ss.ShapeSet(points=[_point(64, 2.0, must=True, keys=("offline:B4xT256",)),
                            _point(128, 1.0, must=True)],
                    working_set_bytes=100, provenance={"workload": "a"},
                    signatures={"sig": ss.SignatureInfo(10, 3)})
    b = ss.ShapeSet(points=[_point(64, 2.0, eager_fraction=1.0, keys=("streaming:W4xC16",)),
                            _point(16, 1.0, eager_fraction=1.0)],
                    working_set_bytes=300, provenance={"workload": "b"},
                    signatures={"sig": ss.SignatureInfo(10, 5)})
    merged = ss.merge([a, b])
    points = {p.m: p for p in merged.points}
    assert sorted(points) == [16, 64, 128]
    assert points[64].calls == 4.0 and points[64].must
    assert points[64].eager_fraction == pytest.approx(0.5)
    assert set(points[64].keys) == {"offline:B4xT256", "streaming:W4xC16"}
    assert merged.working_set_bytes == 300
    assert merged.signatures["sig"] == ss.SignatureInfo(10, 5)
    assert [p["workload"] for p in merged.provenance["merged"]] == ["a", "b"]


def test_selection_keeps_must_tune_and_covers_weight_and_calls():
    heavy = [_point(m, 10.0) for m in (8, 16, 24, 32)]
    light = [_point(1000 + m, 0.01) for m in range(5)]
    must = _point(4096, 0.001, must=True)
    result = ss.ShapeSet(points=[*heavy, *light, must]).select(0.97)
    assert {p.m for p in result.points} == {8, 16, 24, 32, 4096}
    assert result.provenance["points_seen"] == 10 and result.provenance["points_kept"] == 5
    assert result.provenance["weight_covered"] == pytest.approx(40.0 / 40.05, abs=1e-4)
    assert len(ss.ShapeSet(points=[*heavy, *light]).select(1.0).points) == 9
    with pytest.raises(ValueError):
        ss.ShapeSet(points=heavy).select(0.0)


def test_several_census_files_load_as_one(census, tmp_path):
    a = ss.dump(census, tmp_path / "a.json")
    b = ss.dump(ss.ShapeSet(points=[_point(7, 1.0)], working_set_bytes=1), tmp_path / "b.json")
    assert ss.load_all([a]) == census
    both = ss.load_all([a, b])
    assert len(both.points) == len(census.points) + 1
    assert both.total_calls == pytest.approx(census.total_calls + 1.0)
    assert both.working_set_bytes == census.working_set_bytes
    with pytest.raises(ss.ShapeSetError, match="no ShapeSet"):
        ss.load_all([])
