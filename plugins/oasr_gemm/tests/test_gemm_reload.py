"""A reload that references a config the loaded production module lacks drops that module."""

from __future__ import annotations

from oasr_core import database
from oasr_core.runtime import get_runtime
from oasr_core.testing import check_reload_refreshes

from oasr_gemm import jit, launch
from oasr_gemm.config_space import LANE_SM90


def test_reload_drops_a_module_missing_a_newly_referenced_config(tmp_path, monkeypatch):
    base = jit.production_ids(LANE_SM90, "sm90")
    extra = next(c for c in jit.lane_configs(LANE_SM90, "sm90") if c.id not in base)

    def reference_extra():
        monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
        family = get_runtime().registry.family("gemm")
        key = database.signature_key(family, "gemm", "fp16", (512, 256))
        database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                               arch="sm90", lane=LANE_SM90,
                               entries={key: database.Entry(regions=((None, extra.id),))},
                               configs={extra.id: extra}, soft={})

    check_reload_refreshes(launch.SERVING, LANE_SM90, "sm90", {i: object() for i in base},
                           reference_extra)
