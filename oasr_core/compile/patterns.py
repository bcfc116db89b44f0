"""What families declare to the compile pass: patterns, the sites they are offered, and the
call that serves a site.

The core finds the *sites* in a post-grad FX graph (:mod:`oasr_core.compile.graph_pass`): a
linear (``mm``/``addmm`` of a 2-D weight read transposed, with its bias, the activation, the
residual add or the log-softmax after it), a batched product (``bmm`` of two 3-D operands:
attention written without SDPA), or a 1-D or 2-D convolution (``aten.convolution`` with a
3-D or 4-D weight, and the activation after it). It names no
family: a family answers ``oasr_compile_patterns`` with :class:`Pattern` records, each a
``kind`` of site and a ``serve`` callable that looks at a :class:`Site` (shape, dtype,
epilogue) and returns a :class:`Served` call of one of its custom ops, or None to leave the
site to Inductor.
``serve`` decides through :meth:`Site.tiers_serve`, which asks the tiers exactly as the op
would at run time, so a site is rewritten only where oasr's kernel is the tiers' choice at
that shape.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from oasr_core.errors import OasrWarning

LINEAR = "linear"
BMM = "bmm"
CONV1D = "conv1d"
CONV2D = "conv2d"
KINDS = (LINEAR, BMM, CONV1D, CONV2D)
"""The kinds of site the pass finds."""


class Slot(enum.Enum):
    """A value of the site that a :class:`Served` call takes as an argument: the core puts
    the graph node (or constant) in its place."""

    X = "x"
    """The activation: ``[M, K]`` rows for a linear; the first operand ``[L, M, K]`` of a
    batched product; channels-last ``[B, T, Cin]`` for a 1-D convolution, NHWC
    ``[B, H, W, Cin]`` for a 2-D one (the core permutes torch's channels-first input and
    the output back, see :class:`Served`)."""
    OTHER = "other"
    """A batched product's second operand ``[L, K, N]``, with the strides the graph gives it
    (:attr:`Site.layout`)."""
    WEIGHT = "weight"
    """torch's weight: ``[N, K]`` for a linear, ``[Cout, Cin / groups, k]`` for a 1-D conv,
    ``[Cout, Cin / groups, kh, kw]`` for a 2-D one."""
    BIAS = "bias"
    """The bias (``[N]`` / ``[Cout]``), or None."""
    RESIDUAL = "residual"
    """The residual a linear's output is added to, as ``[M, N]`` rows."""
    ALPHA = "alpha"
    """The residual add's scale of the linear's output (a float)."""
    ACTIVATION = "activation"
    """The activation's name (a str)."""
    NORM_X = "norm_x"
    """A normed linear's (:attr:`Site.norm`) LayerNorm input ``[..., K]``."""
    NORM_WEIGHT = "norm_weight"
    """That LayerNorm's weight ``[K]``, or None."""
    NORM_BIAS = "norm_bias"
    """That LayerNorm's bias ``[K]``, or None."""
    NORM_EPS = "norm_eps"
    """That LayerNorm's epsilon (a float)."""
    BN_MEAN = "bn_mean"
    """A convolution's eval BatchNorm (:attr:`Site.batch_norm`): its running mean ``[Cout]``."""
    BN_VAR = "bn_var"
    """Its running variance ``[Cout]``."""
    BN_WEIGHT = "bn_weight"
    """Its weight ``[Cout]``, or None."""
    BN_BIAS = "bn_bias"
    """Its bias ``[Cout]``, or None."""
    BN_EPS = "bn_eps"
    """Its epsilon (a float)."""


@attrs.frozen
class Shared:
    """An argument of a :class:`Served` call that is another op's output: ``target(*args)``
    (``args`` values or :class:`Slot` members), item ``index`` of its tuple (None: the
    output itself). The pass emits one such call per graph for equal arguments, so the
    linears after one LayerNorm share the rows it quantized."""

    target: Any
    args: tuple[Any, ...]
    index: int | None = None


@attrs.frozen
class Site:
    """One candidate for a family's op: a linear or a 1-D convolution, with one choice of
    how much of the epilogue after it to take.

    The pass offers a node several sites, the most fused first (bias + activation, or bias
    + residual; then bias alone; then the bare product), and takes the first a pattern
    serves. ``m`` is None when the rows depend on a dynamic (marked) dimension: the op then
    chooses per call, by the tiers' M regions.
    """

    kind: str
    dtype: str
    """``fp16``, ``bf16``, ``fp32`` (the activation's dtype)."""
    m: int | None
    """Rows of the product: ``M`` of a linear, ``L * M`` of a batched product (its rows
    across the batch), ``B * T_out`` of a 1-D conv,
    ``B * H_out * W_out`` of a 2-D one (None: dynamic)."""
    dims: tuple[tuple[str, int], ...]
    """``N``, ``K`` of a linear or a batched product; ``Cin, Cout, k, stride, pad, dil,
    groups`` of a 1-D conv;
    ``Cin, Cout, W, kh, kw, sh, sw, ph, pw, dh, dw, groups`` of a 2-D one (``W`` the input
    width, static: the feature axis of a speech front end)."""
    bias: bool
    activation: str | None = None
    residual: bool = False
    alpha: float = 1.0
    point: str | None = None
    """A conv's exact point ``<B>x<T>`` (``<B>x<H>`` for a 2-D one; None when dynamic, or
    for a linear)."""
    batch_norm: bool = False
    """A convolution followed by an eval BatchNorm (the ``BN_*`` slots), which the served
    op applies (folded into its weight and bias); its ``activation`` is the one after the
    norm. Offered only to patterns that fold it (:attr:`Pattern.folds_batch_norm`)."""
    log_softmax: bool = False
    """A linear whose output (bias included) goes into a log-softmax over its last dim, in
    its own dtype (a CTC head): the served op computes both, the site's value being the
    log-softmax's output. A family that does not look at it must not serve such a site
    (it would drop the log-softmax); the pass offers the bare linear after it."""
    norm: bool = False
    """A linear whose input is a LayerNorm's output over its last dim (the ``NORM_*`` slots
    then hold the norm's input and parameters): a quantized family may quantize the rows in
    the norm, once for every linear after it. A family that does not look at it serves the
    site as the plain linear (``Slot.X`` is the norm's output)."""
    layout: str | None = None
    """A batched product's second operand: ``"tn"`` when it is the transposed view of a
    contiguous ``[L, N, K]`` tensor (``q @ k^T``), ``"nn"`` when it is a contiguous ``[L, K,
    N]`` one (``probs @ v``); None for other sites (a product with other strides is no
    site)."""
    batch: int | None = None
    """A batched product's batch count ``L`` (None: dynamic, or another kind of site)."""
    arch: str | None = None
    """The arch family the choice is made for (``sm90``); None: no GPU, nothing rewritten
    unless the backend's ``arch`` option names one."""
    quantization: str = "none"
    tiers_serve: Callable[..., bool] = attrs.field(default=None, repr=False, eq=False)
    """The pass's decision helper; call :meth:`serves`."""

    def dim(self, name: str) -> int:
        """The value of dim ``name``."""
        return dict(self.dims)[name]

    def serves(self, family: str, op: str, dims: Sequence[int], *, dtype: str | None = None,
               untuned: Callable[[Any], bool] | None = None) -> bool:
        """Whether the tiers serve ``op`` of ``family`` at this site with a config of the
        family (not torch): the op's own choice at the site's static shape, or, for a
        dynamic ``m``, a user or system entry of the signature naming a config in some M
        region (the op then serves by region at run time).

        ``dtype``: the family's key dtype where it is not the activation's (a W8A8 family
        keys its int8/fp8 operands); ``untuned(selection)``: the family's own verdict on a
        static shape no tuned tier covers (a W8A8 family's untuned route, which predicts
        whether its quantized layer beats the layer in its dtype), where otherwise such a
        site stays Inductor's."""
        return self.tiers_serve(family, op, tuple(dims), self, dtype=dtype, untuned=untuned)


@attrs.frozen
class Served:
    """How a family serves a site: ``target`` (a torch custom op overload) called with
    ``args`` (values, or :class:`Slot` members the core fills in).

    ``channels_last``: the op takes and returns channels-last data (``[B, T, C]`` for a 1-D
    convolution, NHWC for a 2-D one); the core hands it the permuted input (a copy only
    where that is cheap, see the pass) and gives its consumers the permuted-back view of its
    output, so no consumer changes.
    """

    target: Any
    args: tuple[Any, ...]
    family: str
    op: str
    channels_last: bool = False


@attrs.frozen
class Pattern:
    """A family's declaration: it serves sites of ``kind`` through ``serve``."""

    name: str
    family: str
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    serve: Callable[[Site], Served | None] = attrs.field(repr=False)
    description: str = ""
    folds_batch_norm: bool = False
    """Whether ``serve`` takes convolution sites with an eval BatchNorm after them
    (:attr:`Site.batch_norm`): the norm is then the op's to apply."""
    scheme: str = "none"
    """The quantization scheme the plugin declared it for (set by :func:`collect_patterns`):
    the pass asks a scheme's patterns before full precision's."""


def collect_patterns(pm: Any, quantization: str = "none") -> tuple[Pattern, ...]:
    """Every pattern the plugins declare for ``quantization`` (``oasr_compile_patterns``),
    in plugin order; a quantized scheme's patterns first, then full precision's (a layer a
    scheme does not quantize stays full precision). Answers that are not :class:`Pattern`
    records are dropped with one warning naming the plugin."""
    import warnings

    out: list[Pattern] = []
    schemes = dict.fromkeys((quantization, "none"))
    for scheme in schemes:
        for impl in pm.hook.oasr_compile_patterns.get_hookimpls():
            try:
                given = {"quantization": scheme}
                got = impl.function(**{a: given[a] for a in impl.argnames if a in given})
            except Exception as exc:  # a broken plugin never takes the compile down
                warnings.warn(f"oasr compile: plugin {impl.plugin_name} raised "
                              f"{type(exc).__name__} in oasr_compile_patterns: {exc}; its "
                              "patterns are skipped", OasrWarning, stacklevel=2)
                continue
            for pattern in got or ():
                if isinstance(pattern, Pattern):
                    out.append(attrs.evolve(pattern, scheme=scheme))
                else:
                    warnings.warn(f"oasr compile: plugin {impl.plugin_name} answered "
                                  f"{type(pattern).__name__} in oasr_compile_patterns, not "
                                  "a Pattern; skipped", OasrWarning, stacklevel=2)
    return tuple(out)
