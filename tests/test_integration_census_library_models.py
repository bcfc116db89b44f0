"""Integration: the census and the ops on encoders written in a model library's style.

The models (``library_style_models``) follow a popular library's wav2vec2 and Whisper
encoders: configuration objects, a raw-audio ``Conv1d`` stack with padding 0 and strides, a
grouped positional convolution, GELU, pre- and post-norm layers, attention masks. They are
censused with the installed plugins (the real gemm and conv1d recorders and lanes), through
the command a user runs.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from click.testing import CliRunner
from library_style_models import feature_frames, wav2vec2_encoder

from oasr_core import cli
from oasr_core.census import shapeset
from oasr_core.census.recorder import Call, RecorderPatch, ShapeRecorder, Skip, check_call
from oasr_core.commands.census import census_cmd
from oasr_core.plugins import make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.types import Family

pytest.importorskip("oasr_conv1d")
pytest.importorskip("oasr_gemm")

SMALL_W2V = ("--param", "num_hidden_layers=1")


def _census(tmp_path, *args, name="out.json"):
    pm = make_plugin_manager()
    out = tmp_path / name
    result = CliRunner().invoke(census_cmd, [str(a) for a in (*args, "--out", out)],
                                obj=cli.CliState(plugin_manager=pm))
    assert result.exit_code == 0, (result.output, result.exception)
    return result, shapeset.load(out)


def _manifest(tmp_path, durations):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"duration": d}) + "\n" for d in durations))
    return path


def _conv_points(census):
    return {tuple(p.dims.values()) for p in census.points if p.family == "conv1d"}


def test_a_raw_audio_wav2vec2_style_encoder_is_censused(tmp_path):
    result, census = _census(
        tmp_path, "--model", "library_style_models:wav2vec2_encoder", *SMALL_W2V,
        "--input", "B,T", "--frames-per-second", 16000, "--service-mode", "offline",
        "--max-batch-size", 2, "--manifest", _manifest(tmp_path, (2.0, 3.5)), "--json")
    # The engine's frame counts are samples: 0.64 s granularity at 16 kHz.
    assert census.provenance["keys"] == {"offline:B2xT61440": 1.0}
    frames = feature_frames(61440)
    # Padding-0, strided feature-encoder convolutions are points (pad=0 is a valid dim).
    dims = ("Cin", "Cout", "k", "stride", "pad", "dil", "groups")
    convs = {dict(zip(dims, d, strict=True))["k"]: dict(zip(dims, d, strict=True))
             for d in _conv_points(census)}
    assert {c["pad"] for c in convs.values()} == {0}
    assert convs[3]["stride"] == 2 and convs[2]["stride"] == 2
    # Linears at the feature frame rate: the projection and the layer's.
    gemm = {(p.dims["N"], p.dims["K"]) for p in census.points if p.family == "gemm"}
    assert {(768, 512), (768, 768), (3072, 768), (768, 3072)} <= gemm
    assert {p.m for p in census.points if p.family == "gemm"} == {2 * frames}
    # The grouped positional convolution (kernel 128, 16 groups) has no lane config: torch's.
    summary = json.loads(result.stdout)
    torch_only = {s["reason"].split(":")[0]: s for s in summary["skipped"]
                  if "no lane config" in s["reason"]}
    conv = torch_only["conv1d"]
    assert conv["calls"] == 1
    assert "groups=16" in conv["examples"][0] and "k=128" in conv["examples"][0]
    assert (768, 768, 128, 1, 64, 1, 16) not in _conv_points(census)
    # The attention products are op bmm (their head views copied contiguous by matmul: NN);
    # at 191 frames their rows are not 16-byte aligned, so no config runs them: torch's.
    attention = torch_only["gemm"]
    assert frames == 191 and attention["calls"] == 2 and attention["examples"] == [
        f"gemm|op=bmm_nn|dt=fp16|N={frames}|K=64", f"gemm|op=bmm_nn|dt=fp16|N=64|K={frames}"]
    assert not any(p.op.startswith("bmm") for p in census.points)


def test_the_summary_prints_one_line_per_skip_reason(tmp_path):
    result, census = _census(
        tmp_path, "--model", "library_style_models:wav2vec2_encoder", *SMALL_W2V,
        "--param", "do_stable_layer_norm=true", "--input", "B,T", "--frames-per-second",
        16000, "--service-mode", "offline", "--max-batch-size", 1,
        "--manifest", _manifest(tmp_path, (1.0,)))
    lines = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert len(lines) == len(census.provenance["skipped"]) >= 1
    assert any("no lane config" in line and "groups=16" in line for line in lines)
    assert any("no lane config" in line and "op=bmm_nn" in line for line in lines)


def test_a_whisper_style_encoder_with_pre_norm_and_gelu(tmp_path):
    _, census = _census(
        tmp_path, "--model", "library_style_models:whisper_encoder", "--param",
        "encoder_layers=1", "--input", "B,80,T", "--fixed-frames", 3000,
        "--service-mode", "offline", "--max-batch-size", 2,
        "--manifest", _manifest(tmp_path, (10.0, 20.0)))
    assert _conv_points(census) == {(80, 512, 3, 1, 1, 1, 1), (512, 512, 3, 2, 1, 1, 1)}
    assert {p.point for p in census.points if p.family == "conv1d"} == {"2x3000"}
    assert {(p.dims["N"], p.dims["K"], p.m) for p in census.points if p.family == "gemm"} == {
        (512, 512, 3000), (2048, 512, 3000), (512, 2048, 3000)}


def test_an_attention_mask_and_a_cpu_forward_are_recorded():
    from oasr_conv1d.recorder import recorder_patches as conv_patches
    from oasr_gemm.recorder import recorder_patches as gemm_patches

    model = wav2vec2_encoder(num_hidden_layers=1, hidden_size=64, intermediate_size=128,
                             num_attention_heads=4, conv_dim=[32] * 7,
                             num_conv_pos_embedding_groups=4).eval()
    mask = torch.ones(2, 8000, dtype=torch.long)
    mask[1, 4000:] = 0
    families = Registry.from_plugin_manager(make_plugin_manager()).families
    with ShapeRecorder([*gemm_patches(), *conv_patches()], deploy_dtype="fp16",
                       families=families) as rec, torch.inference_mode():
        out = model(torch.randn(2, 8000), mask)
    assert out.shape == (2, feature_frames(8000), 64) and torch.isfinite(out).all()
    families_seen = Counter(call.family for call in rec.counts.elements())
    assert families_seen == {"conv1d": 8, "gemm": 9}
    frames = feature_frames(8000)
    assert {(c.op, dict(c.dims)["N"], dict(c.dims)["K"], c.m) for c in rec.counts
            if c.op.startswith("bmm")} == {("bmm_nn", frames, 16, 2 * 4 * frames),
                                           ("bmm_nn", 16, frames, 2 * 4 * frames)}
    assert dict(rec.skipped) == {}


def test_a_grouped_convolution_is_served_by_torch_and_counted():
    import oasr_conv1d

    oasr_conv1d.reset_stats()
    x = torch.randn(2, 50, 64)
    w = torch.randn(64, 4, 9)
    got = oasr_conv1d.conv1d(x, w, None, 1, 4, 1, 16)
    want = torch.nn.functional.conv1d(x.transpose(1, 2), w, None, 1, 4, 1, 16).transpose(1, 2)
    torch.testing.assert_close(got, want)
    assert oasr_conv1d.stats() == {"torch:grouped": 1}


# -- the recorder never loses a census over one odd call --------------------------------------

FAMILY = Family(name="toy", ops=("op",), dims=("N", "pad"), dtypes=("fp16",),
                zero_dims={"pad"})


def _toy_call(n, pad=0, m=4):
    return Call(family="toy", op="op", dtype="fp16", dims=(("N", n), ("pad", pad)), m=m)


def test_check_call_takes_zero_only_where_the_family_says():
    assert check_call(_toy_call(8, 0), FAMILY) is None
    assert check_call(_toy_call(0, 0), FAMILY) == "dim N=0 is not a positive integer"
    assert check_call(_toy_call(8, -1), FAMILY) == "dim pad=-1 is not a non-negative integer"
    assert check_call(_toy_call(8, 0, m=0), FAMILY).startswith("M=0")
    assert check_call(_toy_call(8, -1)) == "dim pad=-1 is not an integer >= 0"
    with pytest.raises(ValueError, match="zero_dims"):
        Family(name="bad", ops=("op",), dims=("N",), dtypes=("fp16",), zero_dims={"K"})


def test_odd_calls_are_skipped_and_counted_never_fatal():
    seen = []

    def record(input, weight, bias=None):
        seen.append(input.shape)
        n = int(weight.shape[0])
        if n == 3:
            raise RuntimeError("odd")
        if n == 5:
            return Skip("five is not keyed", "N=5")
        return _toy_call(n, 0, m=0 if n == 9 else 4)

    patches = [RecorderPatch(family="toy", target="torch.nn.functional:linear", record=record)]
    x = torch.randn(4, 2)
    with pytest.warns(Warning, match="record failed"):
        with ShapeRecorder(patches, families={"toy": FAMILY}) as rec:
            for n in (8, 3, 5, 9, 8, 3):
                torch.nn.functional.linear(x, torch.randn(n, 2))
    assert rec.counts == {_toy_call(8): 2}
    assert dict(rec.skipped) == {
        "toy: its recorder of torch.nn.functional:linear failed (RuntimeError); see the "
        "warning": 2,
        "toy: five is not keyed": 1,
        "toy: not a valid point (M is not a positive integer)": 1}
    assert rec.examples["toy: five is not keyed"] == ["N=5"]
    assert len(seen) == 6


def test_a_shapeset_point_may_have_a_zero_dim():
    point = shapeset.ShapePoint(family="conv1d", op="conv1d", dtype="fp16",
                                dims={"Cin": 512, "pad": 0}, m=10)
    assert point.dims["pad"] == 0
    with pytest.raises(Exception, match="non-negative"):
        shapeset.ShapePoint(family="conv1d", op="conv1d", dtype="fp16",
                            dims={"Cin": 512, "pad": -1}, m=10)


def test_a_routed_library_style_encoder_computes_what_torch_does():
    """Serving code nobody wrote for oasr: ``oasr_core.route`` sends the library-style
    encoder's linears and convolutions through the families' ops; on CPU every call takes
    their torch path, the grouped positional convolution counted as ``grouped``."""
    import oasr_conv1d

    from oasr_core.routing import own_forwards, route, through_ops, unroute

    torch.manual_seed(0)
    model = wav2vec2_encoder(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                             num_attention_heads=4, conv_dim=[32] * 7,
                             num_conv_pos_embedding_groups=4,
                             do_stable_layer_norm=True).eval()
    audio = torch.randn(2, 8000)
    mask = torch.ones(2, 8000, dtype=torch.long)
    mask[0, 6000:] = 0
    with torch.inference_mode():
        want = model(audio, mask)
        counts = route(model, dtype="fp16")
        # No CUDA device in this process: every routed linear keeps its own forward (the
        # grouped positional conv, its weight parametrized, keeps the per-call plan).
        assert own_forwards(model) == counts["Linear"]
        torch.testing.assert_close(model(audio, mask), want, rtol=1e-5, atol=1e-5)
        oasr_conv1d.reset_stats()
        with through_ops():
            got = model(audio, mask)
    assert counts == {"Linear": 1 + 2 * 6, "Conv1d": 8}
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Sent through the ops on CPU, every routed conv runs its module's own forward, counted
    # as the torch path's (the raw-audio conv, the strided stack and the grouped positional
    # conv).
    assert oasr_conv1d.stats() == {"torch:cpu": 8}
    assert unroute(model) == sum(counts.values())


def test_a_model_whose_every_call_is_skipped_says_why(tmp_path, monkeypatch):
    (tmp_path / "census_attention_only.py").write_text(
        "import torch\n\n"
        "class Scores(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        q = x.view(x.shape[0], x.shape[1], 4, -1).transpose(1, 2)\n"
        "        return q @ q.transpose(-1, -2)\n\n"
        "def build():\n"
        "    return Scores()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(census_cmd, [
        "--model", "census_attention_only:build", "--service-mode", "offline",
        "--max-batch-size", "1", "--manifest", str(_manifest(tmp_path, (1.0,))),
        "--out", str(tmp_path / "o.json")], obj=cli.CliState(plugin_manager=make_plugin_manager()))
    assert result.exit_code == 2
    assert "nothing to tune; the calls seen were skipped, first 'gemm: no lane config runs the " \
        "shape; torch serves it'" in result.stderr
