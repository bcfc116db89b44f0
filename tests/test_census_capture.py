"""OASR_CAPTURE: a live process records its calls and writes them at exit; --capture merges."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from test_census_support import GEMM_SRC

from oasr_core.census import capture, shapeset
from oasr_core.census.recorder import Call

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import torch
    from torch.nn.functional import linear   # bound before the capture starts

    import oasr_core.census as census
    from oasr_gemm.recorder import recorder_patches

    assert census.capture_from_env(patches=recorder_patches()) is not None
    x, w = torch.randn(6, 32), torch.randn(64, 32)
    for _ in range(3):
        linear(x, w)
    torch.nn.Linear(64, 16)(linear(x, w))
    x @ torch.randn(32, 8)
""")


def test_a_live_process_writes_its_calls_at_exit(tmp_path):
    pattern = tmp_path / "capture-{pid}.json"
    env = {**os.environ, capture.ENV: str(pattern), "OASR_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(GEMM_SRC)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = list(tmp_path.glob("capture-*.json"))
    assert len(files) == 1 and files[0].name != pattern.name, "{pid} is substituted"
    recorded = shapeset.load(files[0])
    counts = Counter({(p.dims["N"], p.dims["K"], p.m): p.calls for p in recorded.points})
    assert counts == {(64, 32, 6): 4, (16, 64, 6): 1, (8, 32, 6): 1}
    assert all(not p.must and p.eager_fraction == 1.0 and p.keys == ("capture",)
               for p in recorded.points)
    assert {p.dtype for p in recorded.points} == {"fp32"}, "a live process records real dtypes"
    assert recorded.provenance["source"] == "capture"
    assert int(files[0].stem.split("-")[1]) == recorded.provenance["pid"]


def test_capture_is_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(capture.ENV, raising=False)
    assert capture.capture_from_env(patches=[]) is None
    monkeypatch.setenv(capture.ENV, "  ")
    assert capture.capture_from_env(patches=[]) is None


def _call(m: int, n: int = 256) -> Call:
    return Call(family="gemm", op="gemm", dtype="fp16", dims={"N": n, "K": 256}, m=m,
                elements=m * 256 * 2 + n * 256, flops=2 * m * n * 256, weight_elements=n * 256)


def test_merging_a_capture_scales_it_to_its_share_and_keeps_it_eager():
    census = shapeset.ShapeSet(
        points=[shapeset.ShapePoint(family="gemm", op="gemm", dtype="fp16",
                                    dims={"N": 256, "K": 256}, m=64, calls=3.0, weight=0.3,
                                    must=True, keys=("offline:B4xT256",)),
                shapeset.ShapePoint(family="gemm", op="gemm", dtype="fp16",
                                    dims={"N": 256, "K": 256}, m=128, calls=1.0, weight=0.2,
                                    must=True, keys=("offline:B8xT256",))],
        working_set_bytes=1234, provenance={"workload": "conformer"})
    recording = capture.capture_shapeset(Counter({_call(64): 20, _call(1, 1024): 80}),
                                         {"source": "capture"})
    merged = capture.merge_capture(census, recording, share=0.5, origin="cap.json")
    points = {(p.dims["N"], p.m): p for p in merged.points}
    assert sum(p.calls for p in merged.points) == pytest.approx(8.0), "half the traffic"
    assert points[(256, 64)].calls == pytest.approx(3.0 + 0.8)
    assert points[(256, 64)].eager_fraction == pytest.approx(0.8 / 3.8)
    assert points[(256, 64)].must and "capture" in points[(256, 64)].keys
    decode = points[(1024, 1)]
    assert decode.calls == pytest.approx(3.2) and not decode.must
    assert decode.eager_fraction == 1.0 and decode.keys == ("capture",)
    assert merged.working_set_bytes == 1234
    assert merged.provenance["workload"] == "conformer"
    assert merged.provenance["captures"][0]["file"] == "cap.json"
    assert merged.provenance["captures"][0]["scale"] == pytest.approx(0.04)
    with pytest.raises(ValueError):
        capture.merge_capture(census, recording, share=1.0)
