"""``benchmarks/recurrent_vs_torch.py`` off the GPU: its options, the refusal without a device,
and its report read from measured rows (the GPU parts not run)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from bench_scripts import BENCH, script

pytest.importorskip("oasr_recurrent")


def test_it_answers_help_and_refuses_without_a_device_or_an_arch():
    path = BENCH / "recurrent_vs_torch.py"
    out = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--host-config" in out.stdout
    import torch

    if not torch.cuda.is_available():
        bad = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
        assert bad.returncode == 2 and "pass --arch with --prebuild-only" in bad.stderr


def test_the_report_states_the_protocol_and_puts_the_host_cost_first():
    bench = script("recurrent_vs_torch")
    args = bench._args([])
    assert (args.widths, args.batches, args.back_to_back) == (bench.WIDTHS, bench.BATCHES,
                                                              False)
    assert args.ops.split(",") == ["lstm_step", "rnn_tanh_step", "rnn_relu_step", "gru_step"]
    point = {"op": "lstm_step", "I": 640, "H": 640, "B": 1, "dtype": "fp16", "torch_us": 9.0,
             "module_us": 12.0, "served_us": 9.1, "served": "torch", "served_gate": True,
             "best": "u1_r1_t128_s1", "best_us": 3.0, "best_gbps": 2184.0,
             "failed": ["u8_r16_t256_s1: refused"]}
    rnn = {**point, "op": "rnn_relu_step", "torch_us": 6.0, "module_us": 8.0, "best_us": 2.0,
           "failed": []}
    host = [{"model": "rnnt_predictor 1x640", "B": 4, "nn.LSTM_wall_us": 30.0,
             "oasr_wall_us": 15.0, "nn.LSTM_issue_us": 28.0, "oasr_issue_us": 12.0,
             "oasr_fallbacks": {}}]
    text = bench._report([point, rnn], host, ["- timing mode: separated"], ["- built"], "H200")
    assert text.index("## Eager host cost") < text.index("## Summary") < text.index("## Points")
    assert "| rnnt_predictor 1x640 | 4 | 30.00 | 15.00 | 2.00x |" in text
    assert "- lstm_step: best config / torch.lstm_cell: geomean 3.000x" in text
    assert "- lstm_step: best config / nn.LSTM one step: geomean 4.000x" in text
    assert "- rnn_relu_step: best config / torch.rnn_relu_cell: geomean 3.000x" in text
    assert "- rnn_relu_step: best config / nn.RNN one step: geomean 4.000x" in text
    assert text.index("### lstm_step") < text.index("### rnn_relu_step")
    assert "| 640x640 | 1 | 9.00 | 12.00 | u1_r1_t128_s1 | 3.00 | 3.000x | 4.000x | 2184 |" in text
    assert "| 640x640 | 1 | 6.00 | 8.00 | u1_r1_t128_s1 | 2.00 | 3.000x | 4.000x |" in text
    assert "- lstm_step 640x640 B=1: u8_r16_t256_s1: refused" in text
