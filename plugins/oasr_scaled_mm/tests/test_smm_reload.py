"""A reload that references a config the loaded production module lacks drops that module."""

from __future__ import annotations

from oasr_core import database
from oasr_core.runtime import get_runtime
from oasr_core.testing import check_reload_refreshes

from oasr_scaled_mm import jit, launch
from oasr_scaled_mm.config_space import FAMILY, LANE_SM90, OP_MM


def test_reload_drops_a_module_missing_a_newly_referenced_config(tmp_path, monkeypatch):
    held = {(OP_MM, i): object() for i in jit.production_ids(LANE_SM90, "sm90")}
    extra = next(c for c in jit.lane_configs(LANE_SM90, "sm90") if (OP_MM, c.id) not in held)

    def reference_extra():
        monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
        family = get_runtime().registry.family(FAMILY)
        entries = {database.signature_key(family, OP_MM, None, (768, 256)):
                   database.Entry(regions=((None, extra.id),))}
        database.write_entries(database.tier_path(tmp_path, "sm90", family), family=family,
                               arch="sm90", lane=LANE_SM90, entries=entries,
                               configs={extra.id: extra}, soft={})

    check_reload_refreshes(launch.SERVING, LANE_SM90, "sm90", held, reference_extra)
