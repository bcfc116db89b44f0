"""Third-party distributions that reuse first-party names or are broken, installed for real
into a temporary site: the first-party family keeps working, each refusal is one line
naming both providers, and nothing prints a traceback.
"""

from __future__ import annotations

import pytest
from adversarial_site import json_out, make_distribution, oasr

STEAL_LANE = """
    import attrs
    from oasr_core import hookimpl

    @hookimpl
    def oasr_register_lanes():
        from oasr_gemm import hooks
        real = next(l for l in hooks.oasr_register_lanes() if l.name == "sm90_wgmma")
        first = real.config_space[0]
        return [attrs.evolve(real, config_space=(first,), default_config=first.id)]
"""
STEAL_FAMILY = """
    import attrs
    from oasr_core import hookimpl

    @hookimpl
    def oasr_register_families():
        from oasr_gemm import hooks
        return [attrs.evolve(hooks.oasr_register_families()[0], description="not gemm")]

    @hookimpl
    def oasr_register_lanes():
        from oasr_gemm import hooks
        lane = next(l for l in hooks.oasr_register_lanes() if l.name == "sm90_wgmma")
        space = tuple(attrs.evolve(c, lane="aaa_lane") for c in lane.config_space[:2])
        return [attrs.evolve(lane, name="aaa_lane", default_on=("sm90",), config_space=space,
                             default_config=space[0].id)]
"""
BROKEN = {
    "import_error": "raise ImportError('no such thing')\n",
    "exits": "import sys\nsys.exit(3)\n",
    "hook_raises": "from oasr_core import hookimpl\n\n@hookimpl\ndef oasr_register_families():"
                   "\n    raise RuntimeError('boom')\n",
    "garbage": "from oasr_core import hookimpl\n\n@hookimpl\ndef oasr_register_lanes():\n"
               "    return [object(), 'sm90_wgmma', None]\n",
    "bad_spec": "from oasr_core import hookimpl\n\n@hookimpl\ndef oasr_register_lanes(gpu):\n"
                "    return []\n",
}
SELECT = ("tune", "select", "--family", "gemm", "--op", "gemm_activation", "--dtype", "fp16",
          "--dim", "N=1024", "--dim", "K=256", "--m", "64", "--arch", "sm90", "--json")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """One site holding every adversarial distribution (names sorting before oasr-gemm)."""
    root = tmp_path_factory.mktemp("adversarial-site")
    make_distribution(root, "aaa-steal-lane", entry_points={"steal_lane": "steal_lane_hooks"},
                      modules={"steal_lane_hooks": STEAL_LANE})
    make_distribution(root, "aaa-steal-family",
                      entry_points={"steal_family": "steal_family_hooks"},
                      modules={"steal_family_hooks": STEAL_FAMILY})
    for name, source in BROKEN.items():
        make_distribution(root, f"aaa-{name.replace('_', '-')}",
                          entry_points={name: f"broken_{name}"},
                          modules={f"broken_{name}": source})
    return root


def test_gemm_is_served_from_the_shipped_table_despite_the_impostors(site):
    proc = oasr(site, *SELECT)
    assert "Traceback" not in proc.stderr
    sel = json_out(proc)
    assert sel["tier"] == "system" and sel["lane"] == "sm90_wgmma"
    assert sel["config"] == "ws_64x16x128_c1x1_swap"
    lines = proc.stderr.splitlines()
    lane_line = [x for x in lines if "lane 'sm90_wgmma' is registered by" in x]
    assert len(lane_line) == 1 and "oasr-gemm" in lane_line[0] and "aaa-steal-lane" in lane_line[0]
    family_line = [x for x in lines if "family 'gemm' is registered by" in x]
    assert len(family_line) == 1 and "aaa-steal-family" in family_line[0]
    assert any("aaa_lane" in x and "owner's lane is the default" in x for x in lines)


def test_plugins_lists_the_refusals_and_the_broken(site):
    proc = oasr(site, "plugins", "--json")
    assert "Traceback" not in proc.stderr
    rows = {r["name"]: r for r in json_out(proc)["plugins"]}
    assert "sm90_wgmma" in rows["gemm"]["lanes"] and "gemm" in rows["gemm"]["families"]
    assert rows["steal_lane"]["lanes"] == [] and rows["steal_family"]["families"] == []
    for name in BROKEN:
        assert rows[name]["status"] in ("failed", "loaded"), rows[name]
        assert rows[name]["failures"] or name == "garbage"


def test_status_and_strict_mode(site):
    proc = oasr(site, "tune", "status", "--arch", "sm90")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    strict = oasr(site, *SELECT, OASR_STRICT_PLUGINS="1")
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert len(strict.stderr.strip().splitlines()) == 1


CROSS_LANE = """
    import attrs
    from oasr_core import hookimpl
    from oasr_core.types import Family

    @hookimpl
    def oasr_register_families():
        return [Family(name="aaa", ops=("x",), dims=("N",), dtypes=("fp16",))]

    @hookimpl
    def oasr_register_lanes():
        from oasr_gemm import hooks
        real = next(l for l in hooks.oasr_register_lanes() if l.name == "sm90_wgmma")
        c = real.config_space[0]
        return [attrs.evolve(real, family="aaa", config_space=(c,), default_config=c.id,
                             default_on=("sm90",))]
"""


@pytest.fixture(scope="module")
def hijack_site(tmp_path_factory):
    """Distributions sorting before oasr-gemm that reuse its entry-point name (``gemm``) and,
    from a family of their own, its lane name (``sm90_wgmma``)."""
    root = tmp_path_factory.mktemp("hijack-site")
    make_distribution(root, "aaa-ep-gemm", entry_points={"gemm": "rel_ep_gemm"},
                      modules={"rel_ep_gemm": "x = 1\n"})
    make_distribution(root, "aaa-cross", entry_points={"aaa": "rel_cross"},
                      modules={"rel_cross": CROSS_LANE})
    return root


def test_a_namesake_entry_point_cannot_disable_a_family(hijack_site):
    proc = oasr(hijack_site, *SELECT)
    assert "Traceback" not in proc.stderr
    sel = json_out(proc)
    assert sel["tier"] == "system" and sel["lane"] == "sm90_wgmma"
    lines = [x for x in proc.stderr.splitlines() if "plugin name 'gemm'" in x]
    assert len(lines) == 1 and "aaa-ep-gemm" in lines[0] and "oasr-gemm" in lines[0]
    assert "namespace owner" in lines[0]


def test_another_familys_lane_cannot_take_a_lane_name(hijack_site):
    proc = oasr(hijack_site, *SELECT)
    sel = json_out(proc)
    assert sel["config"] == "ws_64x16x128_c1x1_swap", sel
    lines = [x for x in proc.stderr.splitlines() if "lane 'sm90_wgmma' is registered by" in x]
    assert len(lines) == 1 and "aaa-cross" in lines[0] and "oasr-gemm" in lines[0]


def test_strict_mode_refuses_a_name_conflict(hijack_site):
    strict = oasr(hijack_site, *SELECT, OASR_STRICT_PLUGINS="1")
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    lines = strict.stderr.strip().splitlines()
    assert len(lines) == 1 and "aaa-ep-gemm" in lines[0] and "oasr-gemm" in lines[0]


CLAIM_DEFAULT = """
    import attrs
    from oasr_core import hookimpl

    @hookimpl
    def oasr_register_lanes():
        from oasr_gemm import hooks
        lane = next(l for l in hooks.oasr_register_lanes() if l.name == "sm90_wgmma")
        space = tuple(attrs.evolve(c, lane="aaa_claim") for c in lane.config_space[:2])
        return [attrs.evolve(lane, name="aaa_claim", default_on=("sm90",), config_space=space,
                             default_config=space[0].id)]
"""


@pytest.fixture(scope="module")
def claim_site(tmp_path_factory):
    """A distribution adding a lane of gemm (a name of its own) that claims the default on
    sm90, which oasr-gemm's sm90_wgmma is."""
    root = tmp_path_factory.mktemp("claim-site")
    make_distribution(root, "aaa-claim", entry_points={"claim": "rel_claim"},
                      modules={"rel_claim": CLAIM_DEFAULT})
    return root


def test_a_default_lane_claim_is_refused_at_startup_under_strict(claim_site):
    proc = oasr(claim_site, *SELECT)
    assert json_out(proc)["lane"] == "sm90_wgmma"
    assert any("aaa_claim" in x and "owner's lane is the default" in x
               for x in proc.stderr.splitlines())
    assert oasr(claim_site, "plugins").returncode == 0
    # Strict: refused when the plugins load, by commands that resolve no gemm shape too.
    for args in (("plugins",), ("tune", "status", "--arch", "sm80"), SELECT):
        strict = oasr(claim_site, *args, OASR_STRICT_PLUGINS="1")
        assert strict.returncode == 2 and "Traceback" not in strict.stderr, args
        lines = strict.stderr.strip().splitlines()
        assert len(lines) == 1 and "lane 'aaa_claim'" in lines[0], lines
        assert "claims to be the default for family 'gemm' on sm90" in lines[0]


def test_a_slow_import_is_reported_and_refused_under_strict(tmp_path, monkeypatch):
    from oasr_core import plugins
    from oasr_core.errors import PluginLoadError

    make_distribution(tmp_path, "aaa-slow", entry_points={"slow": "rel_slow"},
                      modules={"rel_slow": "import time\ntime.sleep(0.3)\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "SLOW_IMPORT_S", 0.2)
    monkeypatch.setenv("OASR_PLUGINS", "slow")
    reported = []
    monkeypatch.setattr(plugins.OasrPluginManager, "report",
                        lambda self, message, **kw: reported.append(message))
    pm = plugins.make_plugin_manager(strict=False)
    assert pm.get_plugin("slow") is not None
    assert len(reported) == 1 and reported[0].startswith(
        "plugin 'slow' (aaa-slow 1.0) took 0.") and "the bound is 0.2 s" in reported[0]
    monkeypatch.delitem(__import__("sys").modules, "rel_slow")
    with pytest.raises(PluginLoadError, match=r"plugin 'slow' \(aaa-slow 1.0\) took .* refused"):
        plugins.make_plugin_manager(strict=True)
