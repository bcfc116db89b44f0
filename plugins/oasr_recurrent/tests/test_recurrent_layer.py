"""An nn.LSTM one step at a time: lstm_layer_step equals the module's forward in every layout
it takes, and a routed nn.LSTM serves a step of one token through the op (its torch path on a
CPU) while every other call runs the module's own forward."""

from __future__ import annotations

import pytest
import torch
from oasr_core.routing import own_forwards, route, through_ops, unroute

from oasr_recurrent import ops
from oasr_recurrent.layer import layer_forward, layer_widths, lstm_layer_step, steps, torch_only


def _lstm(input_size=16, hidden=24, layers=2, **kwargs):
    torch.manual_seed(0)
    return torch.nn.LSTM(input_size, hidden, layers, **kwargs).eval()


def _state(layers, batch, hidden, seed=1):
    gen = torch.Generator().manual_seed(seed)
    shape = (layers, batch, hidden) if batch else (layers, hidden)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


def _equal(got, want):
    (y, (h, c)), (y2, (h2, c2)) = got, want
    assert y.shape == y2.shape and h.shape == h2.shape and c.shape == c2.shape
    for a, b in ((y, y2), (h, h2), (c, c2)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_one_step_equals_the_modules_forward(layers, batch_first, with_state, bias):
    lstm = _lstm(layers=layers, batch_first=batch_first, bias=bias)
    x = torch.randn(5, 1, 16) if batch_first else torch.randn(1, 5, 16)
    state = _state(layers, 5, 24) if with_state else None
    ops.reset_stats()
    with torch.no_grad():
        _equal(lstm_layer_step(lstm, x, state), lstm(x, state))
    assert ops.stats() == {"torch:cpu": layers}, "one lstm_step per layer"


def test_an_unbatched_step_equals_the_modules_forward():
    lstm = _lstm(layers=2)
    x, state = torch.randn(1, 16), _state(2, 0, 24)
    with torch.no_grad():
        _equal(lstm_layer_step(lstm, x, state), lstm(x, state))
        _equal(lstm_layer_step(lstm, x), lstm(x))


def test_a_decode_loop_carries_the_state_like_the_module():
    lstm = _lstm(layers=2, batch_first=True)
    ours = theirs = None
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 1, 16)
            y, ours = lstm_layer_step(lstm, x, ours)
            y2, theirs = lstm(x, theirs)
            torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_what_the_step_does_not_serve_runs_the_modules_forward():
    ops.reset_stats()
    with torch.no_grad():
        for lstm in (_lstm(bidirectional=True), _lstm(proj_size=8)):
            assert not steps(lstm)
            x = torch.randn(1, 2, 16)
            _equal(lstm_layer_step(lstm, x), lstm(x))
        training = _lstm(dropout=0.5).train()
        torch.manual_seed(3)
        y = lstm_layer_step(training, torch.ones(1, 2, 16))[0]
        torch.manual_seed(3)
        assert torch.equal(y, training(torch.ones(1, 2, 16))[0])
    assert ops.stats() == {}
    with pytest.raises(ValueError, match=r"^layer_step: x_t of shape \(2, 3, 16\) is not one "
                                         r"step of input size 16 \(batch_first=True\)$"):
        lstm_layer_step(_lstm(batch_first=True), torch.randn(2, 3, 16))


def test_the_routed_forward_steps_only_one_token_inputs():
    lstm = _lstm(layers=2, batch_first=True)
    ops.reset_stats()
    with torch.no_grad():
        x = torch.randn(4, 1, 16)
        _equal(layer_forward(lstm, x), lstm(x))
        assert ops.stats() == {"torch:cpu": 2}
        ops.reset_stats()
        seq = torch.randn(4, 7, 16)
        _equal(layer_forward(lstm, seq), lstm(seq))
        packed = torch.nn.utils.rnn.pack_padded_sequence(seq, [7, 5, 3, 1], batch_first=True)
        got = layer_forward(lstm, packed)
        want = lstm(packed)
        assert torch.equal(got[0].data, want[0].data)
    assert ops.stats() == {}, "sequences and packed input are the module's own"


def test_route_leaves_an_untuned_lstm_its_own_forward_and_through_ops_steps_it():
    model = torch.nn.Sequential(_lstm(layers=2, batch_first=True))
    plain = _lstm(layers=2, batch_first=True)
    assert route(model, linear=False, conv1d=False) == {"Linear": 0, "Conv1d": 0, "LSTM": 1}
    lstm = model[0]
    assert torch_only(lstm, "fp16"), "no device, no tier: every call is torch's"
    assert own_forwards(model) == 1 and "forward" not in lstm.__dict__
    x = torch.randn(2, 1, 16)
    ops.reset_stats()
    with torch.no_grad():
        _equal(lstm(x), plain(x))
        assert ops.stats() == {}, "its own forward: the op is not on the path"
        with through_ops():
            assert "forward" in lstm.__dict__
            _equal(lstm(x), plain(x))
            assert ops.stats() == {"torch:cpu": 2}
            ops.reset_stats()
            seq = torch.randn(2, 6, 16)
            _equal(lstm(seq), plain(seq))
            assert ops.stats() == {}, "a sequence is the module's own forward"
    assert "forward" not in lstm.__dict__
    assert unroute(model) == 1


def test_route_does_not_count_an_lstm_when_asked_not_to_or_when_none_serves(plugin_manager):
    model = torch.nn.Sequential(_lstm(), torch.nn.LSTM(8, 8))
    assert route(model, linear=False, conv1d=False, lstm=False) == {"Linear": 0, "Conv1d": 0}
    assert route(model, linear=False, conv1d=False, pm=plugin_manager) == {"Linear": 0,
                                                                         "Conv1d": 0}
    assert route(model, linear=False, conv1d=False) == {"Linear": 0, "Conv1d": 0, "LSTM": 2}
    unroute(model)


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_modules_the_step_cannot_serve_keep_their_own_forward_whatever_the_tiers():
    for lstm in (_lstm(bidirectional=True), _lstm(proj_size=8),
                 torch.nn.GRU(16, 24, bidirectional=True)):
        assert torch_only(lstm, "fp16")


def test_layer_widths_key_each_layer():
    assert layer_widths(_lstm(16, 24, 3)) == ((16, 24), (24, 24), (24, 24))
