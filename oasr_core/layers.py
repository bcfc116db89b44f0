"""The protocol between the reference models and the families' layers.

A model built for oasr (the reference encoders of :mod:`oasr_core.census.models`, or a
user's) asks the installed plugins once, when it is built, for the callables that serve its
layers: ``oasr_linear`` for its linears (:func:`served_linear`) and ``oasr_layer`` for other
layer kinds by torch module class name (:func:`served_layers`). Each answer is called as
``(x, layer, activation=None)`` (:data:`Linear`, :data:`Layer`); a linear that also takes
``residual`` and ``alpha`` keywords fuses the block's residual add (:func:`takes_residual`),
one that takes a ``log_softmax`` keyword a CTC head's log-softmax over its output
(:func:`takes_log_softmax`).
An activation a family does not fuse is applied in torch (:func:`activate`).

A family may answer ``oasr_layer("LayerNorm", ...)`` with a callable that defers the norm:
:class:`NormedRows` stands for ``norm(x)`` and is handed to the linears after it, each asking
for the form it runs on; everything else takes the tensor (:func:`dense`).

This module sits below the census and the kit (both use it) and imports no torch at import
time.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oasr_core.errors import ConfigurationError, PluginError

Linear = Callable[..., Any]
"""``(x, layer, activation=None) -> activation(layer(x))`` with a plugin's ops (the answer of
``oasr_linear``); ``activation`` is None or a name of :data:`ACTIVATIONS`. One that also
takes keyword arguments ``residual`` and ``alpha`` returns ``residual + alpha * layer(x)``
for them; one that takes a keyword ``log_softmax`` returns ``log_softmax(layer(x), dim=-1)``
for ``log_softmax=True``. One may also carry ``forward``, ``(layer, x) -> layer(x)``, which
:func:`oasr_core.route` binds as a routed module's forward, and ``torch_only``,
``(layer, dtype) -> bool``: True where every call of that module (at activation ``dtype``,
no activation, any input) is torch's under the tiers in force, so :func:`oasr_core.route`
leaves it its own forward until the tiers change (a ``Conv1d`` answer may carry one too)."""

Layer = Callable[..., Any]
"""``(x, layer, activation=None) -> activation(layer(x))`` channels-last, for a layer kind
other than linear (the answer of ``oasr_layer``). A ``Conv1d`` answer may also carry
``channels_first``, ``(layer, x) -> layer(x)`` on torch's layout ``[B, C, T]`` in and
out: :func:`oasr_core.route` binds it as a routed module's forward. An ``LSTM`` answer
(``x`` and the output are the module's own input and output sequence) carries ``forward``,
``(layer, input, hx=None) -> layer(input, hx)``, which :func:`oasr_core.route` binds as a
routed ``nn.LSTM``'s forward, and may carry ``torch_only`` as a linear answer does."""

ACTIVATIONS = ("relu", "gelu", "silu")
"""The activations a reference model puts after a layer, by name (torch's functions of the
same names)."""

LAYER_KINDS = ("Conv1d", "Conv2d", "LayerNorm")
"""The layer kinds (torch module class names) the reference models ask ``oasr_layer`` for."""


@functools.cache
def _activation_functions() -> Mapping[str, Callable[[Any], Any]]:
    from torch.nn import functional as F

    return {name: getattr(F, name) for name in ACTIVATIONS}


def activate(y: Any, activation: str | None) -> Any:
    """``activation(y)`` in torch (``y`` itself for None)."""
    return y if activation is None else _activation_functions()[activation](y)


def takes_residual(linear: Linear) -> bool:
    """Whether a plugin's linear takes ``residual`` (and ``alpha``) keyword arguments."""
    try:
        params = inspect.signature(linear).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    return "residual" in params and "alpha" in params


def takes_log_softmax(linear: Linear) -> bool:
    """Whether a plugin's linear takes a ``log_softmax`` keyword argument (a CTC head's
    linear and log-softmax over its output in one call)."""
    try:
        params = inspect.signature(linear).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    return "log_softmax" in params


Quantize = Callable[["NormedRows"], tuple[Any, Any]]
"""``(handle) -> (q, scale)``: a family's quantized rows of ``norm(x)``."""


class NormedRows:
    """``norm(x)`` for the linears after a layer norm (see the module docstring): ``x`` the
    input rows ``[..., K]``, ``norm`` the ``nn.LayerNorm`` over ``K``, ``scheme`` the
    quantization whose linears take :meth:`quantized`, ``quantize`` how it is computed.
    ``note``, when given, is a two-element list whose items the handle sets True when its
    dense and its quantized form are first asked for (how a family's norm learns what the
    linears after a norm take: a family's answer to ``oasr_layer("LayerNorm", ...)``, such
    as the W8A8 families' ``oasr_scaled_mm.w8a8.normed.layer_norm_answer``)."""

    __slots__ = ("x", "norm", "scheme", "_quantize", "_dense", "_quantized", "_note")

    def __init__(self, x: Any, norm: Any, scheme: str, quantize: Quantize,
                 note: list[bool] | None = None) -> None:
        self.x = x
        self.norm = norm
        self.scheme = scheme
        self._quantize = quantize
        self._dense: Any = None
        self._quantized: tuple[Any, Any] | None = None
        self._note = note

    @property
    def shape(self) -> Any:
        return self.x.shape

    @property
    def dtype(self) -> Any:
        return self.x.dtype

    @property
    def device(self) -> Any:
        return self.x.device

    @property
    def is_cuda(self) -> bool:
        return self.x.is_cuda

    def numel(self) -> int:
        return self.x.numel()

    def size(self, *dim: int) -> Any:
        return self.x.size(*dim)

    def dim(self) -> int:
        return self.x.dim()

    def dense(self) -> Any:
        """``norm(x)`` as a tensor (torch's layer norm), computed once."""
        if self._dense is None:
            from torch.nn import functional as F

            if self._note is not None:
                self._note[0] = True
            n = self.norm
            self._dense = F.layer_norm(self.x, n.normalized_shape, n.weight, n.bias, n.eps)
        return self._dense

    def quantized(self) -> tuple[Any, Any]:
        """The scheme's quantized rows ``(q [..., K], scale float32 [...])`` of ``norm(x)``,
        computed once."""
        if self._quantized is None:
            if self._note is not None:
                self._note[1] = True
            self._quantized = self._quantize(self)
        return self._quantized

    def __repr__(self) -> str:
        return (f"NormedRows({self.scheme}, x {tuple(self.x.shape)} {self.x.dtype}, "
                f"computed: {', '.join(self.computed()) or 'nothing'})")

    def computed(self) -> tuple[str, ...]:
        """Which forms have been computed (``"dense"``, ``"quantized"``), for tests and
        reports."""
        return tuple(name for name, got in (("dense", self._dense), ("quantized",
                                                                      self._quantized))
                     if got is not None)


def dense(x: Any) -> Any:
    """``x`` as a tensor: a :class:`NormedRows`'s :meth:`~NormedRows.dense`, anything else
    itself."""
    return x.dense() if isinstance(x, NormedRows) else x


def _ask(pm: Any, hook_name: str, what: str, **kwargs: Any) -> Any:
    hook = getattr(getattr(pm, "hook", None), hook_name, None)
    if hook is None:
        return None
    try:
        return hook(**kwargs)
    except Exception as exc:
        raise PluginError(f"hook {hook_name} raised {type(exc).__name__} for {what}: {exc}; "
                          "report this to the plugin's author(s)") from exc


def _check_linear(linear: Any, hook_name: str, what: str) -> None:
    if isinstance(linear, type) or not callable(linear):
        hint = " Have you forgotten the `()`?" if isinstance(linear, type) else ""
        raise PluginError(f"hook {hook_name} answered a {type(linear).__name__} for {what}, "
                          f"not a callable (x, layer, activation=None) -> tensor.{hint}")


def _deprecated_quantized(pm: Any, quantization: str) -> Callable[..., Any] | None:
    """The answer of the deprecated ``oasr_quantized_linear``, as an ``oasr_linear`` one."""
    what = f"quantization {quantization!r}"
    quantized = _ask(pm, "oasr_quantized_linear", what, quantization=quantization)
    if quantized is None:
        return None
    _check_linear(quantized, "oasr_quantized_linear", what)

    def linear(x: Any, layer: Any, activation: str | None = None) -> Any:
        return activate(quantized(x, layer), activation)

    return linear


def served_linear(pm: Any, *, dtype: str, quantization: str = "none",
                  required: bool = False) -> Callable[..., Any] | None:
    """The plugins' linear for ``dtype`` and ``quantization`` (``oasr_linear``).

    A scheme other than ``"none"`` falls back to the deprecated ``oasr_quantized_linear``.
    None when no plugin answers for ``"none"`` (the reference models then call torch),
    unless ``required``. Raises :class:`~oasr_core.errors.ConfigurationError` when no
    installed plugin serves a quantized scheme (or a required full-precision one), and
    :class:`~oasr_core.errors.PluginError` when a hook raises or answers something that is
    not callable.
    """
    what = f"dtype {dtype!r}, quantization {quantization!r}"
    linear = _ask(pm, "oasr_linear", what, dtype=dtype, quantization=quantization)
    if linear is not None:
        _check_linear(linear, "oasr_linear", what)
        return linear
    if quantization != "none":
        linear = _deprecated_quantized(pm, quantization)
        if linear is None:
            raise ConfigurationError(
                f"quantization {quantization!r}: no installed plugin provides a quantized "
                f"linear for it at dtype {dtype!r} (hook oasr_linear), and the reference "
                "workloads run unquantized without one; install the plugin of the quantized "
                "GEMM family (see `oasr plugins`)")
        return linear
    if required:
        raise ConfigurationError(f"family_ops=true: no installed plugin serves {dtype} linear "
                                 "layers (hook oasr_linear); install a GEMM family plugin (see "
                                 "`oasr plugins`) or pass --param family_ops=false")
    return None


def served_layers(pm: Any, *, dtype: str, quantization: str = "none",
                  kinds: Sequence[str] = LAYER_KINDS) -> dict[str, Callable[..., Any]]:
    """The plugins' callables for each layer kind in ``kinds`` (``oasr_layer``), by kind.

    A kind no plugin answers for the scheme is asked again unquantized (a scheme quantizes
    only what its family serves); a kind no plugin serves is left out (torch runs it).
    Raises :class:`~oasr_core.errors.PluginError` when a hook raises or answers something
    that is not callable.
    """
    out = {}
    for kind in kinds:
        for scheme in dict.fromkeys((quantization, "none")):
            what = f"layer kind {kind!r}, dtype {dtype!r}, quantization {scheme!r}"
            layer = _ask(pm, "oasr_layer", what, kind=kind, dtype=dtype, quantization=scheme)
            if layer is not None:
                _check_linear(layer, "oasr_layer", what)
                out[kind] = layer
                break
    return out
