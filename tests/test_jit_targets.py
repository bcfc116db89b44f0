"""The JIT helpers plugins share: an arch family's nvcc target and a compile-set variable."""

from __future__ import annotations

import pytest

from oasr_core.errors import ConfigurationError
from oasr_core.jit import compile_set, family_target


@pytest.mark.parametrize(("family", "target"), [("sm80", "80"), ("sm86", "86"),
                                                ("sm89", "89"), ("sm90", "90a"),
                                                ("sm100", "100a"), ("sm120", "120a")])
def test_family_target(family, target):
    assert family_target(family) == target


@pytest.mark.parametrize("bad", ["90", "smX", "sm9", "gfx90a"])
def test_family_target_refuses_what_is_not_a_family(bad):
    with pytest.raises(ValueError, match="arch family"):
        family_target(bad)


def test_compile_set_reads_the_plugins_variable(monkeypatch):
    monkeypatch.delenv("OASR_X_COMPILE_SET", raising=False)
    assert compile_set("OASR_X_COMPILE_SET") == "tuned"
    monkeypatch.setenv("OASR_X_COMPILE_SET", " ALL ")
    assert compile_set("OASR_X_COMPILE_SET") == "all"
    monkeypatch.setenv("OASR_X_COMPILE_SET", "some")
    with pytest.raises(ConfigurationError, match="OASR_X_COMPILE_SET='some'"):
        compile_set("OASR_X_COMPILE_SET")
