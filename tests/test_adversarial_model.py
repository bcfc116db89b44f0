"""A malformed cost-model payload in either tier: one warning naming the file, the model
tier skips it, the next tier answers, and ``oasr tune status`` reports the file unhealthy.

Real inputs: the shipped sm90 gemm table (its model serves ``WIN`` from the model tier).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from adversarial_files import json_paths
from click.testing import CliRunner

from oasr_core import runtime
from oasr_core.cli import CliState, main
from oasr_core.cost_model.model import CostModel
from oasr_core.errors import ConfigurationError
from oasr_core.selection import clear_memo, select
from oasr_core.types import Tier

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "db/sm90/gemm.json"
WIN = (512, 2048, 16)
"""An uncovered shape the shipped payload serves from the model tier."""

EDITS = {
    "groups_string": lambda m: m.__setitem__("groups", "x"),
    "configs_negative": lambda m: m.__setitem__("configs", -1),
    "knob_nested_list": lambda m: m["knobs"].__setitem__("max_ctas_per_sm", [[]]),
    "knob_zero": lambda m: m["knobs"].__setitem__("max_ctas_per_sm", 0),
    "knob_bool": lambda m: m["knobs"].__setitem__("sm_feed_cap", True),
    "knobs_list": lambda m: m.__setitem__("knobs", [1, 2]),
    "group_coeff_string": lambda m: m["groups"].__setitem__(next(iter(m["groups"])),
                                                            {"a": "1", "b": 1}),
    "ops_string": lambda m: m.__setitem__("ops", "gemm"),
    "profile_list": lambda m: m.__setitem__("profile", []),
    "profile_sms_string": lambda m: m["profile"].__setitem__("sms", "132"),
    "tflops_number": lambda m: m["profile"].__setitem__("tensor_tflops", 5),
    "fallback_span": lambda m: m["fallbacks"]["torch"]["gemm"].__setitem__("N", [1]),
    "fallback_coeff_negative": lambda m: m["fallbacks"]["torch"]["gemm"].__setitem__(
        "fixed_us", -1.0),
    "fallbacks_list": lambda m: m.__setitem__("fallbacks", [1]),
    "lane_number": lambda m: m.__setitem__("lane", 7),
}


def _tiers(tmp_path, monkeypatch, edit, tier) -> Path:
    """The shipped table, its model edited, as the ``tier`` file; the other tier empty."""
    doc = json.loads(SHIPPED.read_text())
    edit(doc["model"])
    roots = {t: tmp_path / t for t in ("user", "system")}
    for root in roots.values():
        (root / "sm90").mkdir(parents=True)
    path = roots[tier] / "sm90" / "gemm.json"
    path.write_text(json.dumps(doc))
    if tier == "user":  # the system tier keeps its good model: it must answer then
        shutil.copy(SHIPPED, roots["system"] / "sm90" / "gemm.json")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(roots["system"]))
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(roots["user"]))
    monkeypatch.delenv("OASR_TUNE_MODEL_FALLBACK", raising=False)
    runtime.install_runtime(None)
    clear_memo()
    return path


@pytest.mark.parametrize("tier", ["system", "user"])
@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_malformed_model_is_skipped_with_one_warning(tmp_path, monkeypatch, name, tier):
    path = _tiers(tmp_path, monkeypatch, EDITS[name], tier)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select("gemm", "gemm", "fp16", WIN[:2], WIN[2], "sm90")
        again = select("gemm", "gemm", "fp16", WIN[:2], WIN[2] + 8, "sm90")
    about = [w for w in caught if str(path) in str(w.message)]
    assert len(about) == 1 and "cost model is unusable" in str(about[0].message)
    if tier == "user":  # the system tier's model answers
        assert sel.tier is Tier.MODEL
    else:
        assert sel.tier is Tier.DEFAULT and sel.config is None
    assert again.tier in (Tier.MODEL, Tier.DEFAULT)


@pytest.mark.parametrize("name", ["groups_string", "configs_negative", "knob_nested_list"])
def test_cli_select_and_status_with_a_malformed_model(tmp_path, monkeypatch, name):
    path = _tiers(tmp_path, monkeypatch, EDITS[name], "system")
    runner = CliRunner()
    got = runner.invoke(main, ["tune", "select", "--family", "gemm", "--op", "gemm",
                               "--dtype", "fp16", "--dim", f"N={WIN[0]}", "--dim",
                               f"K={WIN[1]}", "--m", str(WIN[2]), "--arch", "sm90", "--json"],
                        obj=CliState())
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["tier"] == "default"
    status = runner.invoke(main, ["tune", "status", "--arch", "sm90"], obj=CliState())
    assert status.exit_code == 0, status.output
    line = next(x for x in status.stdout.splitlines() if str(path) in x)
    assert "UNHEALTHY" in line and "cost model" in line


def test_the_shipped_model_is_valid():
    CostModel.from_json(json.loads(SHIPPED.read_text())["model"])


def test_knobs_refuse_a_non_mapping():
    from oasr_core.cost_model.structure import Knobs

    with pytest.raises(ConfigurationError, match="knobs must be an object"):
        Knobs.from_json("x")


PAYLOAD = json.loads(SHIPPED.read_text())["model"]
PAYLOAD_PATHS = sorted((p for p in json_paths(PAYLOAD) if p), key=repr)


def _replace(doc, path, value):
    import copy

    doc = copy.deepcopy(doc)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


def test_a_payload_that_validates_always_predicts():
    """Property: any one value of the shipped payload replaced by any JSON value either is
    refused by ``from_json`` (one ConfigurationError) or gives a model whose predictions,
    for every config of the lane at a spread of shapes, are numbers."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from oasr_core.cost_model.features import features_of

    lane = runtime.get_runtime().registry.lane("sm90_wgmma")
    feats = [(c.id, features_of(c, lane.cost_features, lane.name)) for c in lane.config_space]
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(-2**40, 2**40)
        | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                   inner, max_size=3),
        max_leaves=6)

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(PAYLOAD_PATHS), value=json_values)
    def check(path, value):
        try:
            model = CostModel.from_json(_replace(PAYLOAD, path, value))
        except ConfigurationError as exc:
            assert "\n" not in str(exc)
            return
        for cid, f in feats[:12]:
            if f is None:
                continue
            for m, n, k in ((1, 64, 64), (16, 512, 2048), (20000, 4096, 4096)):
                t = model.predict(cid, f, m, n, k, "fp16")
                assert isinstance(t, float)
            model.predict_fallback("torch", "gemm", 16, 512, 512, "fp16")

    check()
