"""What the W8A8 families' tests share: a family built on a scripted device.

:class:`ScriptedFormat` installs a W8A8 family's plugin on the test kit's scripted device
(:class:`oasr_core.testing.ScriptedBench`, no GPU) with a user tier under the test's
``tmp_path``, and can build its sm90 lane over a small census into that tier: the scripted
times make ``F.linear`` (the ``unquantized`` arm) win below M = 1024 and the quantized kernels
above, one tile the most. Only tests import this module (it imports ``oasr_core.testing``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from oasr_core import build
from oasr_core.testing import ScriptedBench, install_scripted
from oasr_core.types import Sentinel

ARCH = "sm90"


class ScriptedFormat:
    """A W8A8 family (``package``) on the scripted device; :attr:`fastest` is the config id
    the device makes fastest above M = 1024. :meth:`build` writes its user-tier table."""

    def __init__(self, package: str, fastest: str, tmp_path: Path, monkeypatch: Any) -> None:
        self.fastest = fastest
        self.cs = importlib.import_module(f"{package}.config_space")
        self.ops = importlib.import_module(f"{package}.ops")
        self.hooks = importlib.import_module(f"{package}.hooks")
        self.bench = ScriptedBench(self.time_us, sigma_rel=0.002)
        monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path / "user"))
        self.rt = install_scripted(self.hooks, self.bench, self.cs.FAMILY)
        self.out = tmp_path / "user" / ARCH / f"{self.cs.FAMILY}.json"
        self.key = f"{self.cs.FAMILY}|op={self.cs.OP_MM}|N=256|K=1024"

    def time_us(self, name: str, config: Any, problem: Any) -> float:
        """F.linear wins below M=1024 (the quantizer's launch costs more than the quantized
        GEMM saves there); above, the quantized kernels, :attr:`fastest` the most."""
        if name == Sentinel.UNQUANTIZED.value:
            return 5.0 if problem.m < 1024 else 60.0
        if name == Sentinel.TORCH.value:
            return 9.0 if problem.m < 1024 else 30.0
        if config is not None and config.id == self.fastest and problem.m >= 1024:
            return 15.0
        return 8.0 if problem.m < 1024 else 25.0

    def build(self) -> Any:
        """The sm90 lane built over N, K in {256, 1024} at M 64, 512, 4096 into the user tier
        (:attr:`out`, its log beside it), the runtime reloaded; the build's result."""
        family = self.rt.registry.family(self.cs.FAMILY)
        census = build.census_from_widths(family, "256,1024", "64,512,4096", op=self.cs.OP_MM)
        result = build.build_live(census, family=family,
                                  lane=self.rt.registry.lane(self.cs.LANE_SM90), arch=ARCH,
                                  out=self.out, timer=self.bench.timer,
                                  soft={"impl_hash": f"{self.cs.FAMILY}-test"},
                                  options=build.BuildOptions(fill=False))
        self.rt.reload()
        return result
