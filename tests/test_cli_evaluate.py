"""``oasr tune evaluate`` as a user reads it: a legend, one row per file, a plain reason for a
model left out, the pictures it writes and where; the e2e bar chart."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_evaluate import _log, table

from oasr_core import evaluate, plots
from oasr_core.cli import CliState
from oasr_core.commands.evaluate import evaluate_cmd
from oasr_core.plugins import make_plugin_manager
from oasr_core.testing import FakeFamilyPlugin

PNG = b"\x89PNG"


def _run(*args):
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(FakeFamilyPlugin(), name="fake")
    return CliRunner().invoke(evaluate_cmd, [str(a) for a in args],
                              obj=CliState(plugin_manager=pm))


def test_table_ends_with_its_legend(tmp_path):
    res = _run("--log", _log(tmp_path))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[-2:] == evaluate.LEGEND
    assert "geo%: geometric mean" in lines[-1] and "miss:" in lines[-1]


def test_a_file_named_twice_is_scored_once(tmp_path, monkeypatch):
    table(tmp_path, [(64, "n64_k32_s1"), (None, "torch")])
    (tmp_path / "system" / "sm90").mkdir(parents=True)
    shipped = tmp_path / "system" / "sm90" / "fake.json"
    shipped.write_bytes((tmp_path / "t.json").read_bytes())
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path / "system"))
    res = _run("--log", _log(tmp_path), "--db", f"shipped={shipped}")
    assert res.exit_code == 0, res.output
    names = [line.split()[0] for line in res.stdout.splitlines()[1:5]]
    assert names.count("shipped") == 1 and "system" not in names
    assert "note: --db shipped is the same file as system" in res.stderr
    assert "agreement" not in res.stdout


def test_plot_writes_both_pictures_and_says_where(tmp_path):
    table(tmp_path, [(64, "n64_k32_s1"), (256, "n64_k64_s1"), (None, "torch")])
    out = tmp_path / "pics" / "fake.png"
    res = _run("--log", _log(tmp_path), "--db", f"new={tmp_path / 't.json'}", "--plot", out)
    assert res.exit_code == 0, res.output
    regret = tmp_path / "pics" / "fake_regret.png"
    assert f"wrote {out} and {regret}" in res.output
    assert out.read_bytes()[:4] == PNG and regret.read_bytes()[:4] == PNG
    bad = _run("--log", _log(tmp_path), "--plot", out, "--plot-table", "nope")
    assert bad.exit_code == 2 and "--plot-table nope: no such table" in bad.output


def test_regrets_are_those_the_table_scores(tmp_path):
    from oasr_core.measurements import read_logs
    from oasr_core.testing import fake_family_record

    _runs, rows, _ = read_logs([_log(tmp_path)])
    fam = fake_family_record()
    report = evaluate.evaluate(rows, fam, [evaluate.FixedSelector("torch", "torch")])
    got = plots.regrets(report, "torch")
    stats = report.selectors[0].overall
    assert len(got) == stats.n and max(got) == stats.max


def test_empty_log_is_a_clear_error(tmp_path):
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    res = _run("--log", log)
    assert res.exit_code == 2
    assert "no measurement row (it is empty)" in res.output and "--family" not in res.output


def test_model_left_out_says_why_in_words(tmp_path):
    sel = evaluate.ModelSelector("model", lambda p, m: None, None, frozenset({"r1"}))
    why = evaluate._excluded(sel, {"r1"})
    assert why.startswith("not scored: fitted on this log's run(s) r1")
    assert "--log of another run" in why


RESULT = {"model": "conformer", "batch": 8, "frames": 1024, "dtype": "fp16",
          "quantization": "none", "device": "NVIDIA H200", "torch": "2.11.0+cu130",
          "rows": [{"mode": "CUDA graph", "oasr_ms": 3.9, "torch_ms": 4.0},
                   {"mode": "eager", "oasr_ms": 15.0, "torch_ms": 14.0}]}


def test_e2e_bar_chart_from_saved_results(tmp_path, capsys):
    one = tmp_path / "a.json"
    one.write_text(json.dumps(RESULT))
    eager_only = dict(RESULT, rows=RESULT["rows"][1:], model="whisper_encoder")
    two = tmp_path / "b.json"
    two.write_text(json.dumps(eager_only))
    out = tmp_path / "e2e.png"
    assert plots.main(["e2e", str(one), str(two), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert out.read_bytes()[:4] == PNG
    assert plots.e2e_label(RESULT) == "conformer\nbatch 8 x 1024 frames, fp16"
