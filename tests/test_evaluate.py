"""Regret of selectors against the measured oracle of a log; the evaluate command."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

import oasr_core
from oasr_core import database, evaluate
from oasr_core.bench import ArmResult, ArmStatus
from oasr_core.cli import CliState
from oasr_core.commands.evaluate import evaluate_cmd
from oasr_core.measurements import arm_row, read_logs
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FakeFamilyPlugin, fake_family_record, fake_lane_record

FAM = fake_family_record()
LANE = fake_lane_record()
KEY = "fake|op=fake|dt=half|N=512|K=256"
TABLE = {16: dict(default=10.0, torch=8.0, n64_k32_s1=4.0, n64_k64_s1=9.0),
         64: dict(default=10.0, torch=8.5, n64_k32_s1=4.2, n64_k64_s1=9.0),
         256: dict(default=12.0, torch=9.0, n64_k32_s1=11.0, n64_k64_s1=7.0),
         1024: dict(default=20.0, torch=14.0, n64_k32_s1=30.0, n64_k64_s1=15.0)}


def rows(run="r1", fill=(), alpha=0.0):
    out = []
    for m, arms in TABLE.items():
        ctx = {"run": run, "phase": "main", "family": "fake", "arch": "sm90", "lane": "fake_lane",
               "key": KEY, "op": "fake", "dtype": "fp16", "dims": {"N": 512, "K": 256}, "M": m,
               "weight": 2.0 if m == 16 else 1.0, "must": False, "alpha": alpha,
               "fill": m in fill, "census_max": 1024, "l2": "warm"}
        for name, us in arms.items():
            config = LANE.config(name)
            params = config.to_json() if config else {"kind": name}
            if name == "default":
                params["config"] = LANE.default_config
            arm = ArmResult(name, ArmStatus.OK, median_ms=us / 1000, sigma_ms=us / 1e5,
                            rounds=24, issue_us=10.0 if name == "torch" else 5.0)
            out.append(arm_row(arm, {**ctx, "params": params}))
    return out


def table(tmp_path, regions, name="t.json"):
    path = tmp_path / name
    configs = {c: LANE.config(c) for _, c in regions if LANE.config(c)}
    database.write_entries(path, family=FAM, arch="sm90", lane="fake_lane",
                           entries={KEY: database.Entry(regions=regions)}, configs=configs,
                           soft={})
    return database.read_tuning_file(path)


def by_name(report):
    return {r.name: r for r in report.selectors}


def test_default_regret_against_the_oracle():
    report = evaluate.evaluate(rows(), FAM, [evaluate.FixedSelector("default", "default")])
    stats = by_name(report)["default"].overall
    expected = [10 / 4, 10 / 4.2, 12 / 7, 20 / 14]
    assert stats.n == 4 and stats.missing == 0
    assert stats.geomean == pytest.approx(math.exp(sum(map(math.log, expected)) / 4) - 1)
    assert stats.max == pytest.approx(1.5) and stats.p95 == pytest.approx(1.5)
    weighted = (2 * 1.5 + (10 / 4.2 - 1) + (12 / 7 - 1) + (20 / 14 - 1)) / 5
    assert stats.weighted == pytest.approx(weighted)
    assert by_name(report)["default"].per_signature[KEY] == stats


def test_a_table_is_looked_up_by_region_and_missing_choices_are_counted(tmp_path):
    good = table(tmp_path, [(64, "n64_k32_s1"), (256, "n64_k64_s1"), (None, "torch")])
    bad = table(tmp_path, [(64, "n128_k64_s2"), (None, "torch")], "bad.json")
    report = evaluate.evaluate(rows(), FAM, [evaluate.TableSelector("good", good, FAM),
                                             evaluate.TableSelector("bad", bad, FAM)])
    g, b = by_name(report)["good"].overall, by_name(report)["bad"].overall
    assert (g.n, g.missing, g.geomean, g.max) == (4, 0, 0.0, 0.0)
    assert (b.n, b.missing) == (2, 2)
    assert b.max == pytest.approx(9 / 7 - 1)


def test_a_miss_falls_to_the_fallback_and_the_default_id_means_default(tmp_path):
    short = table(tmp_path, [(64, LANE.default_config)])
    report = evaluate.evaluate(rows(), FAM, [evaluate.TableSelector("short", short, FAM)])
    rep = by_name(report)["short"]
    assert rep.overall.missing == 0
    assert rep.choices[(KEY, 16)] == "default" and rep.choices[(KEY, 1024)] == "default"


def test_a_miss_falls_to_the_familys_untuned_choice(tmp_path):
    """A family whose untuned shapes run on torch (gemm) is scored as the runtime serves it."""
    import attrs

    from oasr_core.types import Sentinel

    fam = attrs.evolve(FAM, untuned=Sentinel.TORCH)
    short = table(tmp_path, [(64, LANE.default_config)])
    report = evaluate.evaluate(rows(), fam, [evaluate.TableSelector("short", short, fam)])
    rep = by_name(report)["short"]
    assert rep.choices[(KEY, 16)] == "default" and rep.choices[(KEY, 1024)] == "torch"


def test_the_objective_includes_alpha_times_issue_cost():
    report = evaluate.evaluate(rows(alpha=1.0), FAM, [evaluate.FixedSelector("torch", "torch")])
    points = report.points[KEY]
    assert points[0].time("torch") == pytest.approx(0.008 + 0.010)
    assert by_name(report)["torch"].overall.max == pytest.approx(18.5 / 9.2 - 1)


def test_a_model_is_never_scored_on_its_own_calibration_log():
    def pick(problem, measured):
        return "n64_k32_s1"

    own = evaluate.ModelSelector("own", pick, FAM, frozenset({"r1"}))
    unknown = evaluate.ModelSelector("unknown", pick, FAM, None)
    held_out = evaluate.ModelSelector("held_out", pick, FAM, frozenset({"other-run"}))
    report = by_name(evaluate.evaluate(rows(), FAM, [own, unknown, held_out]))
    assert report["own"].overall is None and "r1" in report["own"].excluded
    assert report["unknown"].overall is None and "provenance" in report["unknown"].excluded
    assert report["held_out"].overall.n == 4


def test_census_only_leaves_fill_points_out():
    report = evaluate.evaluate(rows(fill=(64, 256)), FAM,
                               [evaluate.FixedSelector("default", "default")], census_only=True)
    assert by_name(report)["default"].overall.n == 2


def test_stats_of_empty_and_p95():
    empty = evaluate.Stats.of([None, None], [1.0, 1.0])
    assert empty.n == 0 and empty.missing == 2 and math.isnan(empty.geomean)
    many = evaluate.Stats.of([i / 100 for i in range(100)], [1.0] * 100)
    assert many.p95 == pytest.approx(0.94) and many.max == pytest.approx(0.99)


def _log(tmp_path, run="r1"):
    path = tmp_path / "log.jsonl"
    header = {"row": "run", "run": run, "family": "fake", "arch": "sm90", "lane": "fake_lane",
              "soft": {}}
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *rows(run)]))
    return path


def test_cli_scores_dbs_and_draws_a_plot(tmp_path):
    table(tmp_path, [(64, "n64_k32_s1"), (256, "n64_k64_s1"), (None, "torch")])
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin(), name="fake")
    log = _log(tmp_path)
    plot = tmp_path / "plot.png"
    result = CliRunner().invoke(
        evaluate_cmd, ["--log", str(log), "--db", f"new={tmp_path / 't.json'}", "--plot",
                       str(plot)], obj=CliState(plugin_manager=pm))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["selector", "n", "miss"]
    assert any(line.startswith("new ") and " 0.0" in line for line in lines)
    assert any(line.startswith("default ") for line in lines) and KEY in result.output
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"
    as_json = CliRunner().invoke(evaluate_cmd, ["--log", str(log), "--json"],
                                 obj=CliState(plugin_manager=pm))
    data = json.loads(as_json.output)
    assert data["runs"] == ["r1"] and data["selectors"][0]["name"] == "default"
    bad = CliRunner().invoke(evaluate_cmd, ["--log", str(log), "--db", "nopath"],
                             obj=CliState(plugin_manager=pm))
    assert bad.exit_code == 2 and "NAME=PATH" in bad.output


def test_log_matrix_reads_cross_evaluation_rescaled_by_anchors(tmp_path):
    main = rows()
    cross = []
    for r in main:
        if r["M"] == 16 and r["config"] in ("default", "n64_k32_s1"):
            cross.append({**r, "phase": "cross", "median_ms": r["median_ms"] * 1.1})
    extra = {**main[0], "phase": "cross", "config": "n128_k64_s2",
             "params": LANE.config("n128_k64_s2").to_json(), "median_ms": 0.0055}
    _, _, bad = read_logs([_log(tmp_path)])
    assert bad == 0
    sigs, matrix, aliases = evaluate.log_matrix([*main, *cross, extra], FAM)
    point = matrix[KEY][0]
    assert point.cells["n128_k64_s2"].gpu_ms == pytest.approx(0.005)
    assert point.cells["default"].gpu_ms == pytest.approx(0.010)
    assert aliases == {LANE.default_config: "default"}


class FirstCandidate:
    @oasr_core.hookimpl
    def oasr_model_select(self, family, lane, problem, candidates, model):
        return sorted(candidates, key=lambda c: c.id)[0]


@pytest.mark.parametrize("payload, scored", [
    ({"serve": "structure"}, True),
    ({"serve": "calibrated", "calibrated_on": {"runs": ["elsewhere"]}}, True),
    ({"serve": "calibrated", "calibrated_on": {"runs": ["r1"]}}, False),
    ({"serve": "calibrated"}, False),
])
def test_the_model_tier_hook_as_a_selector(payload, scored):
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FirstCandidate(), name="model")
    sel = evaluate.hook_model_selector(pm, FAM, LANE, payload)
    rep = by_name(evaluate.evaluate(rows(), FAM, [sel]))["model"]
    assert (rep.overall is not None) == scored
    if scored:
        assert rep.choices[(KEY, 16)] == "n64_k32_s1" and rep.overall.missing == 0


def test_agreement_of_two_tables(tmp_path):
    one = table(tmp_path, [(64, "n64_k32_s1"), (256, "n64_k64_s1"), (None, "torch")], "a.json")
    two = table(tmp_path, [(64, "n64_k32_s1"), (None, "torch")], "b.json")
    report = evaluate.evaluate(rows(), FAM, [evaluate.TableSelector("one", one, FAM),
                                             evaluate.TableSelector("two", two, FAM)])
    assert evaluate.agreement(report, "one", "two") == pytest.approx(4 / 5)
    assert evaluate.agreement(report, "one", "two", tol=0.3) == pytest.approx(1.0)


def test_the_figure_title_stays_clear_of_the_panel_titles(tmp_path, monkeypatch):
    """The shipped gemm log's seven panels under the figure's title (they overlapped)."""
    from pathlib import Path

    from oasr_core import plots

    figures = []
    real_save = plots._save

    def keep(fig, path):
        if fig._suptitle is not None and str(path).endswith("plot.png"):
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            figures.append((fig._suptitle.get_window_extent(renderer),
                            [ax.title.get_window_extent(renderer) for ax in fig.axes
                             if ax.get_visible()]))
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    log = Path(__file__).resolve().parents[1] / "db/sm90/measurements/gemm.jsonl"
    result = CliRunner().invoke(evaluate_cmd, ["--log", str(log), "--plot",
                                               str(tmp_path / "plot.png")], obj=CliState())
    assert result.exit_code == 0, result.output
    suptitle, panel_titles = figures[0]
    assert len(panel_titles) == 7 and all(t.y1 < suptitle.y0 for t in panel_titles)


def test_region_labels_never_overlap_and_the_legend_names_every_region(tmp_path, monkeypatch):
    """The shipped conv1d log: labels only where they fit (none overlapping), every region's
    colour in the figure's legend, a one-config panel drawn as a line, torch above the
    served line, plain tick labels."""
    from pathlib import Path

    from oasr_core import plots

    seen = {}
    real_save = plots._save

    def keep(fig, path):
        if str(path).endswith("plot.png"):
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            seen["legend"] = [t.get_text() for t in fig.legends[0].get_texts()]
            seen["panels"] = [
                {"labels": [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts],
                 "legend": [t.get_text() for t in ax.get_legend().get_texts()],
                 "z": {line.get_label(): line.get_zorder() for line in ax.get_lines()},
                 "ticks": [t.get_text() for t in ax.get_xticklabels(minor=True)]}
                for ax in fig.axes if ax.get_visible()]
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    repo = Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(evaluate_cmd, [
        "--log", str(repo / "db/sm90/measurements/conv1d.jsonl"),
        "--db", f"shipped={repo / 'db/sm90/conv1d.json'}", "--plot", str(tmp_path / "plot.png")],
        obj=CliState())
    assert result.exit_code == 0, result.output
    assert "torch (or not served)" in seen["legend"]
    for panel in seen["panels"]:
        boxes = [box for _, box in panel["labels"]]
        assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
        assert {text for text, _ in panel["labels"]} - {"torch"} <= set(seen["legend"])
        assert panel["z"]["torch"] > panel["z"]["served by shipped"]
        assert not any("\\times" in t or "×" in t for t in panel["ticks"])
    assert any(any(e.startswith("the one measured config") for e in p["legend"])
               for p in seen["panels"])
