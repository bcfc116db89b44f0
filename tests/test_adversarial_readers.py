"""Every JSON reader has the same guards: a file nested too deeply or over the size limit is
one line naming the file (and the limit), through every CLI reader; a large legal user tier
is read lazily (only looked-up entries are structured) after its first full check.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from adversarial_files import big_user_tier
from click.testing import CliRunner

from oasr_core import database, runtime
from oasr_core.cli import CliState, main
from oasr_core.database.codec import MAX_DEPTH, parse_text, read_document
from oasr_core.database.schema import LazyEntries
from oasr_core.errors import DatabaseError
from oasr_core.selection import clear_memo, select
from oasr_core.types import Tier

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "db/sm90/gemm.json"
LOG = ROOT / "db/sm90/measurements/gemm.jsonl"


def _invoke(*args):
    runtime.install_runtime(None)
    return CliRunner().invoke(main, list(args), obj=CliState())


def _one_error_line(got, *needles):
    assert got.exit_code == 2, got.output
    assert "Traceback" not in got.output
    [line] = [x for x in got.stderr.splitlines() if x.startswith("error:")]
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture
def deep(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"points": ' + "[" * 5000 + "]" * 5000 + "}")
    return path


def test_depth_guard_at_the_limit():
    assert parse_text(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, origin="x")
    with pytest.raises(DatabaseError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_text(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), origin="x")
    # brackets inside strings do not count
    assert parse_text(json.dumps({"a": "[" * 500}).encode(), origin="x") == {"a": "[" * 500}


def test_a_deep_census_through_every_census_reader(deep, tmp_path):
    _one_error_line(_invoke("tune", "build", "--census", str(deep), "--family", "gemm",
                            "--arch", "sm90", "--out", str(tmp_path / "o.json")),
                    str(deep), "nested")
    _one_error_line(_invoke("tune", "status", "--arch", "sm90", "--census", str(deep)),
                    str(deep), "nested")


@pytest.mark.parametrize("reader", ["select", "status", "diff", "from_log", "evaluate"])
def test_the_size_limit_is_one_line_naming_file_and_limit(reader, tmp_path, monkeypatch):
    system = tmp_path / "system" / "sm90"
    system.mkdir(parents=True)
    shutil.copy(SHIPPED, system / "gemm.json")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(system.parent))
    monkeypatch.setenv("OASR_MAX_FILE_MB", "0.01")  # 10 KiB: the shipped file is ~44
    if reader in ("select", "status"):
        args = (["tune", "select", "--family", "gemm", "--op", "gemm_activation", "--dtype",
                 "fp16", "--dim", "N=1024", "--dim", "K=256", "--m", "64", "--arch", "sm90"]
                if reader == "select" else ["tune", "status", "--arch", "sm90"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _invoke(*args)
        assert got.exit_code == 0, got.output
        text = got.output + " ".join(str(w.message) for w in caught)
        assert "MiB limit on files oasr reads (OASR_MAX_FILE_MB)" in text
        assert str(system / "gemm.json") in text
        return
    if reader == "diff":
        got = _invoke("tune", "diff", str(system / "gemm.json"), str(system / "gemm.json"))
    elif reader == "from_log":
        got = _invoke("tune", "build", "--from-log", str(LOG), "--out",
                      str(tmp_path / "out.json"))
    else:
        got = _invoke("tune", "evaluate", "--log", str(LOG), "--db",
                      f"x={system / 'gemm.json'}")
    _one_error_line(got, "OASR_MAX_FILE_MB", "MiB limit")


def test_a_directory_or_missing_file_is_one_line(tmp_path):
    for path in (tmp_path, tmp_path / "missing.json"):
        with pytest.raises(DatabaseError) as info:
            read_document(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.fixture
def big(tmp_path, monkeypatch):
    """A 3000-entry user tier (a laziness check, not a timing)."""
    user = tmp_path / "user"
    path = big_user_tier(user / "sm90" / "gemm.json", 3000)
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(user))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(ROOT / "db"))
    runtime.install_runtime(None)
    clear_memo()
    return path


def test_a_large_user_tier_is_checked_in_full_until_oasr_writes_it_then_read_lazily(big):
    """A file copied into the tier is checked in full on every read and reading records
    nothing; once an oasr writer has written (and so checked) it, later reads structure only
    the entries they look up."""
    first = select("gemm", "gemm", "fp16", (64, 8), 16, "sm90")
    assert first.tier is Tier.USER
    assert not (big.parent.parent / ".validated").exists(), "a read records nothing"
    rt = runtime.get_runtime()
    fam = rt.registry.family("gemm")
    assert len(rt.tiers(fam, "sm90").user.entries._made) == 3000
    tf = database.read_tuning_file(big)
    key = "gemm|op=gemm|dt=half|N=8|K=8"
    database.write_entries(big, family=fam, arch="sm90", lane=tf.arch.lane,
                           entries={key: tf.entries[key]}, configs=tf.configs,
                           soft=tf.validators.soft)
    assert [p for p in (big.parent.parent / ".validated").rglob("*") if p.is_file()]
    runtime.install_runtime(None)  # a new process, as far as the tiers go
    clear_memo()
    again = select("gemm", "gemm", "fp16", (64, 8), 16, "sm90")
    assert again.tier is Tier.USER and again.config == first.config
    entries = runtime.get_runtime().tiers(fam, "sm90").user.entries
    assert isinstance(entries, LazyEntries) and len(entries._made) <= 2


def test_a_malformed_entry_skips_the_file_when_first_read(big):
    doc = json.loads(big.read_text())
    doc["entries"]["gemm|op=gemm|dt=half|N=8|K=16"]["regions"] = [[5, "nope"]]
    big.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select("gemm", "gemm", "fp16", (64, 8), 16, "sm90")
    assert sel.tier is not Tier.USER
    assert any("user tier file skipped" in str(w.message) and "nope" in str(w.message)
               for w in caught)


def test_a_forged_mark_costs_only_the_bad_entry(big):
    doc = json.loads(big.read_text())
    bad = "gemm|op=gemm|dt=half|N=64|K=8"
    doc["entries"][bad]["regions"] = [[5, "nope"]]
    big.write_text(json.dumps(doc))
    fam = runtime.get_runtime().registry.family("gemm")
    from oasr_core.database import validated

    validated.record(validated.mark_for(big.read_bytes(), fam))  # as if checked before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select("gemm", "gemm", "fp16", (64, 8), 16, "sm90")
        other = select("gemm", "gemm", "fp16", (72, 8), 16, "sm90")
    assert sel.tier is Tier.SYSTEM or sel.tier is not Tier.USER
    assert other.tier is Tier.USER
    assert sum("user tier entry skipped" in str(w.message) for w in caught) == 1


def test_the_lazy_and_the_eager_reader_agree(big):
    fam = runtime.get_runtime().registry.family("gemm")
    lanes = {x.name: x for x in runtime.get_runtime().registry.lanes_of("gemm")}
    lazy = database.open_tuning_file(big, family=fam, arch="sm90", lanes=lanes)
    eager = database.load_tuning_file(big, family=fam, arch="sm90", lanes=lanes)
    assert lazy.dumps() == eager.dumps()
    assert lazy.referenced_configs() == eager.referenced_configs()


def test_a_deep_unbalanced_line_is_refused_in_linear_time():
    import time

    started = time.monotonic()
    with pytest.raises(DatabaseError, match="nested deeper"):
        parse_text(b"[" * 200_000 + b'{"M": 1}', origin="log.jsonl:1")
    assert time.monotonic() - started < 10, "the depth check must not be quadratic"


@pytest.mark.parametrize("field, value", [("M", {"x": 1}), ("M", 2**70), ("median_ms", [1]),
                                          ("sigma_ms", {}), ("n", [[]]), ("dims", [1, 2]),
                                          ("gate_error", "x"), ("status", "maybe")])
def test_a_log_row_of_the_wrong_types_is_an_unreadable_row(tmp_path, field, value):
    from oasr_core.measurements import read_logs

    lines = LOG.read_bytes().splitlines()[:80]
    rows = [json.loads(x) for x in lines]
    arm = next(i for i, r in enumerate(rows) if r.get("row") == "arm")
    rows[arm][field] = value
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, arms, bad = read_logs([log])
    assert bad == 1 and len(arms) == sum(r.get("row") == "arm" for r in rows) - 1
    for args in (["tune", "build", "--from-log", str(log), "--out", str(tmp_path / "o.json")],
                 ["tune", "evaluate", "--log", str(log), "--db", f"x={SHIPPED}"]):
        got = _invoke(*args)
        assert got.exit_code in (0, 2) and "Traceback" not in got.output, got.output
        assert got.exception is None or isinstance(got.exception, SystemExit)


def _schema_0(doc: dict, variant: str) -> dict:
    """The shipped table as an original OASR (schema 2, our version 0) file."""
    doc = json.loads(json.dumps(doc))
    doc.pop("schema_version")
    doc["schema"] = 2
    doc["arch"]["family"] = int(doc["arch"]["family"][2:])
    key = next(iter(doc["entries"]))
    if variant == "valid_m":
        doc["entries"][key]["valid_m"] = [1, 24032]
    elif variant == "sentinel_config":
        doc["configs"]["legacy_torch"] = {"kind": "torch"}
        doc["entries"][key]["regions"][-1][1] = "legacy_torch"
    return doc


@pytest.mark.parametrize("variant", ["plain", "valid_m", "sentinel_config"])
@pytest.mark.parametrize("tier", ["system", "user"])
def test_a_schema_0_file_reads_the_same_lazily_and_eagerly(tmp_path, monkeypatch, variant,
                                                           tier):
    """The runtime's lazy reader migrates entries too: a version-0 file the eager reader (and
    ``tune diff``) accepts is served, not skipped."""
    doc = _schema_0(json.loads(SHIPPED.read_text()), variant)
    root = tmp_path / tier
    path = root / "sm90" / "gemm.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(root if tier == "system" else ROOT / "db"))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(root) if tier == "user" else "off")
    runtime.install_runtime(None)
    clear_memo()
    rt = runtime.get_runtime()
    fam = rt.registry.family("gemm")
    lanes = {x.name: x for x in rt.registry.lanes_of("gemm")}
    lazy = database.open_tuning_file(path, family=fam, arch="sm90", lanes=lanes)
    eager = database.load_tuning_file(path, family=fam, arch="sm90", lanes=lanes)
    assert lazy.dumps() == eager.dumps()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = select("gemm", "gemm_activation", "fp16", (1024, 256), 64, "sm90")
    assert sel.tier is Tier(tier)
