"""OASR_CAPTURE: a live process records its calls and writes them at exit; --capture merges."""

from __future__ import annotations

from collections import Counter

import pytest

from oasr_core.census import capture, shapeset
from oasr_core.census.recorder import Call


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


def test_the_one_call_a_capturing_process_makes_is_a_top_level_name(monkeypatch, tmp_path):
    """``OASR_CAPTURE`` names the file; ``oasr_core.capture_from_env()`` (what the README's
    environment table and "Your own model" name) starts the recording; unset, it is a no-op."""
    import oasr_core

    monkeypatch.delenv("OASR_CAPTURE", raising=False)
    assert oasr_core.capture_from_env is capture.capture_from_env
    assert oasr_core.capture_from_env() is None
