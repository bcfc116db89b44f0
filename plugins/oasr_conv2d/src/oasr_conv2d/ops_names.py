"""The conv2d family's op names (importable without torch): ``conv2d`` and one fused op per
activation (the spec's ``conv2d_activation``), each keyed on its own in a tuning file."""

from __future__ import annotations

ACTIVATIONS = ("relu", "gelu", "silu")
OPS = ("conv2d", *(f"conv2d_{a}" for a in ACTIVATIONS))
DIMS = ("Cin", "Cout", "W", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "groups")
"""A conv2d signature's static dims: channels, the input width (the feature axis: 80 mel bins,
fixed per model) and the window per axis. The dynamic axis is ``M = B * H_out * W_out``; the
exact point ``"<B>x<H>"`` fixes the batch and the input height (frames)."""
