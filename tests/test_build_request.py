"""``oasr tune build``'s options as one record: every option lands in ``BuildRequest`` (the
knobs in its ``BuildOptions``), so the command passes one value down, not its options."""

from __future__ import annotations

from pathlib import Path

import pytest

from oasr_core.build import BuildOptions
from oasr_core.commands.build import BuildRequest, build_cmd
from oasr_core.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "db" / "sm90" / "measurements" / "gemm.jsonl"


def _request(*args: str) -> BuildRequest:
    return BuildRequest.from_cli(build_cmd.make_context("build", list(args)).params)


def test_a_replay_request_carries_the_flags_as_knobs():
    request = _request("--from-log", str(LOG), "--fresh", "--no-fill", "--no-resume",
                       "--top-k", "5", "--out", "/tmp/x.json", "--family", "gemm")
    assert request.from_logs == (LOG,) and request.family == "gemm"
    assert request.out == "/tmp/x.json" and request.censuses == ()
    assert request.options == BuildOptions(fresh=True, fill=False, resume=False, top_k=5)
    assert request.options.effort is None


def test_a_live_request_defaults_to_the_default_effort_level(tmp_path):
    census = tmp_path / "census.json"
    request = _request("--census", str(census), "--census", str(census), "--seed", "3",
                       "--working-set-bytes", "1000", "--json")
    assert request.censuses == (census, census) and request.seed == 3
    assert request.working_set_bytes == 1000 and request.as_json
    assert request.options.effort == "default" and request.options.fill
    assert _request("--census", str(census), "--effort", "quick").options.effort == "quick"


def test_every_option_of_the_command_is_a_field_of_the_request_or_a_knob():
    fields = {a.name for a in BuildRequest.__attrs_attrs__} - {"options"}
    knobs = {a.name for a in BuildOptions.__attrs_attrs__}
    inverted = {"no_fill": "fill", "no_resume": "resume"}
    for param in build_cmd.params:
        assert param.name in fields or inverted.get(param.name, param.name) in knobs, param.name


def test_a_malformed_arch_is_refused_when_the_request_is_made():
    with pytest.raises(ConfigurationError, match="--arch 'h200' is not an arch family"):
        _request("--from-log", str(LOG), "--arch", "h200")
