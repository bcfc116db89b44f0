"""The held-out encoders of benchmarks/heldout_encoders.py: each builds from its config, every
nn.Linear (and Conv1d) is routed to oasr's ops, and the routed model computes the torch model's
output on a CPU; their widths are ones the shipped gemm table does not cover."""

from __future__ import annotations

import json

import pytest
import torch
from bench_scripts import ROOT, script

from oasr_core.routing import route

MODELS = {"wav2vec2_like": (2, 24, 512), "whisper_like": (2, 80, 40),
          "zipformer_like": (2, 24, 80)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_routed_heldout_encoder_computes_the_torch_model(name):
    factory = getattr(script("heldout_encoders"), name)
    torch.manual_seed(0)
    model = factory(layers=1).eval()
    twin = factory(layers=1).eval()
    twin.load_state_dict(model.state_dict())
    counts = route(model, dtype="fp16")
    assert counts["Linear"] == sum(isinstance(m, torch.nn.Linear) for m in twin.modules()) > 0
    x = torch.randn(*MODELS[name])
    with torch.inference_mode():
        assert torch.allclose(model(x), twin(x), atol=1e-5)


def test_their_widths_are_not_in_the_shipped_gemm_table():
    entries = json.loads((ROOT / "db" / "sm90" / "gemm.json").read_text())["entries"]
    covered = {tuple(int(p.split("=")[1]) for p in key.split("|")[3:5]) for key in entries}
    heldout = script("heldout_encoders")
    for name in MODELS:
        widths = {tuple(m.weight.shape) for m in getattr(heldout, name)(layers=1).modules()
                  if isinstance(m, torch.nn.Linear)}
        assert widths and not widths & covered, (name, widths & covered)
