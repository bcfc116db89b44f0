"""The conv1d family's op names (importable without torch): ``conv1d`` and one fused op per
activation, each keyed on its own in a tuning file."""

from __future__ import annotations

ACTIVATIONS = ("relu", "gelu", "silu")
OPS = ("conv1d", *(f"conv1d_{a}" for a in ACTIVATIONS))
