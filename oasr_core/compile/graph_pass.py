"""The post-grad pass of the oasr compile backend: linears and 1-D convolutions of an
Inductor graph rewritten into the families' custom ops where the tiers choose oasr.

Inductor runs it as ``post_grad_custom_post_pass`` (the hook vLLM's compilation passes use),
on the ATen graph after Inductor's own post-grad passes and before lowering, so every node
it leaves alone is fused and scheduled by Inductor as usual.

What it finds (:mod:`oasr_core.compile.patterns` says what families declare):

* a **linear**: ``mm(a, permute(w, [1, 0]))`` or ``addmm(bias, a, permute(w, [1, 0]))``
  (``nn.Linear`` and ``F.linear`` after decomposition) with a 2-D weight, seen through the
  row views around it; then, each step only where the previous value has no other user, the
  bias add Inductor split off (``add(mm, bias)``), an activation (``relu``; SiLU and GELU as
  Inductor decomposes them, ``x / (1 + exp(-x))`` or ``x * sigmoid(x)``, and
  ``x * 0.5 * (1 + erf(x / sqrt(2)))``, with their fp32 casts), a
  residual add (``r + y``, ``r + alpha * y``), or a log-softmax over the last dim in the
  linear's dtype (``aten._log_softmax``, or as Inductor decomposes it: ``x - amax``, ``exp``,
  ``sum``, ``log`` and the subtraction, with their fp32 casts: a CTC head); and, on the input
  side, a LayerNorm over the
  last dim that the rows are (views of), as Inductor decomposes it (offered as a normed
  site: a quantized family may quantize the rows in the norm, once per norm,
  :class:`~oasr_core.compile.patterns.Shared`);
* a **batched product**: ``aten.bmm`` of two 3-D operands of one dtype (attention written
  without SDPA, relative-position terms; Inductor's graph has a 4-D ``matmul`` as views
  around a ``bmm``) whose second operand is the transposed view of a contiguous tensor
  (layout ``tn``) or contiguous (``nn``), with static N and K; its output replaced as is;
* a **1-D convolution**: ``aten.convolution`` with a 3-D weight, not transposed, and the
  activation after it. torch code writes it channels-first, ``[B, C, T]``; the families'
  conv kernels are channels-last. The pass hands the op the transposed input where that is
  free (the input is a transposed channels-last tensor, as ``conv(x.transpose(1, 2))``
  makes it) or cheap (a copy Inductor can fold into the producing pointwise kernel, or one
  at most a quarter of the output's size); otherwise the convolution stays Inductor's. The
  op's output reaches its consumers as the transposed view, so no consumer changes;
* a **2-D convolution** the same way, ``[B, C, H, W]`` to NHWC and back (a speech front
  end's input ``[B, 1, T, F]`` is NHWC already: one channel), with a static input width.

For each site the pass asks the patterns, most fused epilogue first, and rewrites the first
that serves; a pattern serves only where the tiers choose one of its family's configs at
the site's shape (:meth:`Site.serves`). Static shapes bake that choice into the graph;
a dynamic row count leaves it to the op, which chooses per call by M region.

With a recorder, every site's family op and shape is recorded as the family would call it
(whether or not the tiers serve it): ``oasr tune census --compile`` builds its ShapeSet from
that. Node metadata (fake values) is refreshed downstream of each rewrite so later decisions
see the layouts the rewritten graph produces.
"""

from __future__ import annotations

import hashlib
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from oasr_core.census.recorder import Call
from oasr_core.compile.patterns import (
    BMM,
    CONV1D,
    CONV2D,
    KINDS,
    LINEAR,
    Pattern,
    Served,
    Shared,
    Site,
    Slot,
)
from oasr_core.database import signature_key
from oasr_core.errors import OasrError
from oasr_core.runtime import get_runtime
from oasr_core.types import Sentinel, Tier

aten = torch.ops.aten
prims = torch.ops.prims

_VIEWS = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_CONV_DIMS = ("Cin", "Cout", "k", "stride", "pad", "dil", "groups")
_CONV2D_DIMS = ("Cin", "Cout", "W", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "groups")
_EXTERN = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default,
                     aten.convolution.default})


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _static(*values: Any) -> bool:
    return all(type(v) is int for v in values)


def _sole_user(node: Any) -> Any:
    users = list(node.users) if isinstance(node, torch.fx.Node) else []
    return users[0] if len(users) == 1 else None


def _is(node: Any, *targets: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        node.target in targets


# -- epilogue matchers: each returns (end node, value) or None ----------------------------

def _through_views(node: Any, width: Any) -> Any:
    """Follow single-user row views that keep the last dim ``width``."""
    while True:
        user = _sole_user(node)
        val = _val(user)
        if not (_is(user, *_VIEWS) and val is not None and val.shape[-1] == width):
            return node
        node = user


def _match_bias(node: Any, width: Any) -> tuple[Any, Any] | None:
    add = _sole_user(node)
    if not _is(add, aten.add.Tensor) or add.kwargs.get("alpha", 1) != 1 or len(add.args) != 2:
        return None
    other = add.args[1] if add.args[0] is node else add.args[0]
    val = _val(other)
    if val is None or val.dim() != 1 or val.shape[0] != width or val.dtype != _val(node).dtype:
        return None
    return add, other


def _match_activation(node: Any) -> tuple[Any, str] | None:
    user = _sole_user(node)
    if _is(user, aten.relu.default):
        return user, "relu"
    src = node
    if _is(user, prims.convert_element_type.default) and user.args[1] == torch.float32:
        src = user
    users = set(src.users)
    dtype = _val(node).dtype
    end, name = None, "silu"
    if len(users) == 2:
        neg = next((u for u in users if _is(u, aten.neg.default)), None)
        div = next((u for u in users if _is(u, aten.div.Tensor)), None)
        if neg is not None and div is not None and div.args[0] is src:
            exp = _sole_user(neg)
            add = _sole_user(exp) if _is(exp, aten.exp.default) else None
            if _is(add, aten.add.Tensor) and add.args[1] == 1 and div.args[1] is add and \
                    _sole_user(add) is div:
                end = div
        sig = next((u for u in users if _is(u, aten.sigmoid.default)), None)
        mul = next((u for u in users if _is(u, aten.mul.Tensor)), None)
        if sig is not None and mul is not None and _sole_user(sig) is mul and \
                set(mul.args) == {src, sig}:
            end = mul
        gelu = _match_gelu(src, users)
        if gelu is not None:
            end, name = gelu, "gelu"
    if end is None:
        return None
    back = _sole_user(end)
    if src is not node:
        if not (_is(back, prims.convert_element_type.default) and back.args[1] == dtype):
            return None
        end = back
    return end, name


def _match_gelu(src: Any, users: set) -> Any:
    """GELU (erf) as Inductor decomposes it: ``(x * 0.5) * (1 + erf(x * M_SQRT1_2))``."""
    half = next((u for u in users if _is(u, aten.mul.Tensor) and u.args[1] == 0.5), None)
    scaled = next((u for u in users if _is(u, aten.mul.Tensor) and u is not half
                   and isinstance(u.args[1], float) and abs(u.args[1] - 0.7071067811865476)
                   < 1e-12), None)
    if half is None or scaled is None or half.args[0] is not src or scaled.args[0] is not src:
        return None
    erf = _sole_user(scaled)
    add = _sole_user(erf) if _is(erf, aten.erf.default) else None
    if not (_is(add, aten.add.Tensor) and add.args[1] == 1):
        return None
    out = _sole_user(add)
    if _is(out, aten.mul.Tensor) and set(out.args) == {half, add} and _sole_user(half) is out:
        return out
    return None


def _match_residual(node: Any) -> tuple[Any, Any, float] | None:
    """``r + y``, ``r + alpha * y``, ``add(r, y, alpha=a)`` after ``node`` (y)."""
    alpha, y = 1.0, node
    user = _sole_user(node)
    if _is(user, aten.mul.Tensor) and len(user.args) == 2:
        scale = user.args[1] if user.args[0] is node else user.args[0]
        if isinstance(scale, (int, float)) and not isinstance(scale, bool):
            alpha, y, user = float(scale), user, _sole_user(user)
    if not _is(user, aten.add.Tensor) or len(user.args) != 2:
        return None
    if user.args[1] is y:
        residual = user.args[0]
        alpha *= float(user.kwargs.get("alpha", 1))
    elif user.args[0] is y and user.kwargs.get("alpha", 1) == 1:
        residual = user.args[1]
    else:
        return None
    rv, yv = _val(residual), _val(node)
    if rv is None or residual is node or tuple(rv.shape) != tuple(yv.shape) or \
            rv.dtype != yv.dtype:
        return None
    return user, residual, alpha


def _last_dim(dims: Any, rank: int) -> bool:
    """Whether a reduction's ``dims`` argument is the last dim alone (of a ``rank``-D value)."""
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    return len(dims) == 1 and type(dims[0]) is int and dims[0] in (-1, rank - 1)


def _match_log_softmax(node: Any) -> Any:
    """The end of a log-softmax over the last dim of ``node`` in its own dtype, or None:
    ``aten._log_softmax(y, dim, False)``, or as Inductor decomposes it,
    ``s = x - amax(x, [dim], True); s - log(sum(exp(s), [dim], True))`` on ``x`` (``y``, or
    its fp32 cast, the result cast back)."""
    val = _val(node)
    if val is None:
        return None
    rank, dtype = val.dim(), val.dtype
    user = _sole_user(node)
    if _is(user, aten._log_softmax.default):
        return user if _last_dim(user.args[1], rank) and not user.args[2] else None
    src = node
    if _is(user, prims.convert_element_type.default) and user.args[1] == torch.float32:
        src = user
    users = set(src.users)
    amax = next((u for u in users if _is(u, aten.amax.default)), None)
    sub = next((u for u in users if _is(u, aten.sub.Tensor)), None)
    if len(users) != 2 or amax is None or sub is None or amax.args[0] is not src or \
            not _last_dim(amax.args[1], rank) or not (len(amax.args) > 2 and amax.args[2]) or \
            tuple(sub.args) != (src, amax):
        return None
    shifted = set(sub.users)
    exp = next((u for u in shifted if _is(u, aten.exp.default)), None)
    out = next((u for u in shifted if _is(u, aten.sub.Tensor)), None)
    total = _sole_user(exp) if exp is not None and len(shifted) == 2 else None
    if not (_is(total, aten.sum.dim_IntList) and _last_dim(total.args[1], rank)
            and len(total.args) > 2 and total.args[2]):
        return None
    log = _sole_user(total)
    if not (_is(log, aten.log.default) and out is not None
            and tuple(out.args) == (sub, log) and _sole_user(log) is out):
        return None
    if src is node:
        return out
    back = _sole_user(out)
    return back if _is(back, prims.convert_element_type.default) and back.args[1] == dtype \
        else None


def _serve(pattern: Pattern, site: Site) -> Served | None:
    """``pattern.serve(site)``, except a BatchNorm site to a pattern that does not fold it."""
    if site.batch_norm and not pattern.folds_batch_norm:
        return None
    return pattern.serve(site)


def _cast_to(node: Any, dtype: Any) -> Any:
    """``node`` where its value has ``dtype``, else its sole user casting it to ``dtype``;
    None when neither."""
    if _val(node).dtype == dtype:
        return node
    cast = _sole_user(node)
    if _is(cast, prims.convert_element_type.default) and cast.args[1] == dtype:
        return cast
    return None


def _channel_vector(node: Any, width: Any) -> Any:
    """The ``[C]`` tensor behind ``node`` = ``unsqueeze(v, -1)`` (``v`` maybe cast to fp32),
    as a BatchNorm's decomposition reads its statistics and parameters; None otherwise."""
    if not (_is(node, aten.unsqueeze.default) and node.args[1] in (-1, 1)):
        return None
    v = node.args[0]
    if _is(v, prims.convert_element_type.default):
        v = v.args[0]
    return v if _vector(v, width) else None


def _match_batch_norm(node: Any, width: Any) -> tuple[Any, Any, Any, Any, Any, float] | None:
    """``(end, mean, var, weight, bias, eps)`` where ``node`` (a convolution's ``[B, C, T]``
    output) is followed, each step its sole user, by an eval BatchNorm as Inductor
    decomposes it: ``(y - mean) * (1 / sqrt(var + eps))`` (or ``rsqrt``), times the weight,
    plus the bias, cast back to ``y``'s dtype where the cast is its sole user (``end`` may
    stay fp32 where the activation after it computes in fp32 and casts once: torch 2.11's
    decomposition); None otherwise."""
    sub = _sole_user(node)
    if not (_is(sub, aten.sub.Tensor) and sub.args[0] is node):
        return None
    mean = _channel_vector(sub.args[1], width)
    mul = _sole_user(sub)
    if mean is None or not (_is(mul, aten.mul.Tensor) and mul.args[0] is sub):
        return None
    inv = mul.args[1]
    if not _is(inv, aten.unsqueeze.default):
        return None
    inv = inv.args[0]
    if _is(inv, aten.mul.Tensor) and inv.args[1] == 1:
        inv = inv.args[0]
    if _is(inv, aten.rsqrt.default):
        add = inv.args[0]
    elif _is(inv, aten.reciprocal.default) and _is(inv.args[0], aten.sqrt.default):
        add = inv.args[0].args[0]
    else:
        return None
    if not (_is(add, aten.add.Tensor) and isinstance(add.args[1], float)):
        return None
    var = add.args[0]
    if _is(var, prims.convert_element_type.default):
        var = var.args[0]
    if not _vector(var, width):
        return None
    end, weight, bias = mul, None, None
    step = _sole_user(end)
    if _is(step, aten.mul.Tensor) and step.args[0] is end:
        weight = _channel_vector(step.args[1], width)
        if weight is not None:
            end, step = step, _sole_user(step)
    if _is(step, aten.add.Tensor) and step.args[0] is end:
        bias = _channel_vector(step.args[1], width)
        if bias is not None:
            end, step = step, _sole_user(step)
    dtype = _val(node).dtype
    if _val(end).dtype != dtype and _is(step, prims.convert_element_type.default) and \
            step.args[1] == dtype:
        end = step
    return end, mean, var, weight, bias, float(add.args[1])


def _vector(node: Any, width: Any) -> bool:
    val = _val(node)
    return val is not None and val.dim() == 1 and val.shape[0] == width


def _match_layer_norm(a: Any, width: Any) -> tuple[Any, Any, Any, float] | None:
    """``(x, weight, bias, eps)`` where the rows ``a`` are (views of) a LayerNorm of ``x``
    over its last dim, as Inductor decomposes it: ``var_mean`` of the (fp32) input, ``(x -
    mean) * rsqrt(var + eps)``, times the weight, plus the bias, cast back; weight and bias
    (each may be absent) in ``x``'s dtype. None otherwise."""
    node = a
    while _is(node, *_VIEWS):
        node = node.args[0]
    dtype = _val(a).dtype
    if _is(node, prims.convert_element_type.default):
        if node.args[1] != dtype:
            return None
        node = node.args[0]
    weight = bias = None
    for op in (aten.add.Tensor, aten.mul.Tensor):
        if _is(node, op) and len(node.args) == 2:
            x0, x1 = node.args
            vec, rest = (x1, x0) if _vector(x1, width) else (x0, x1) if _vector(x0, width) \
                else (None, None)
            if vec is not None and _is(rest, aten.mul.Tensor, aten.add.Tensor):
                if op is aten.add.Tensor:
                    bias = vec
                else:
                    weight = vec
                node = rest
    if not (_is(node, aten.mul.Tensor) and len(node.args) == 2):
        return None
    sub, rs = node.args if _is(node.args[0], aten.sub.Tensor) else node.args[::-1]
    if not (_is(sub, aten.sub.Tensor) and _is(rs, aten.rsqrt.default)):
        return None
    add = rs.args[0]
    if not (_is(add, aten.add.Tensor) and isinstance(add.args[1], float)):
        return None
    var, eps = add.args
    xf, mean = sub.args[:2]
    if not (_is(var, operator.getitem) and _is(mean, operator.getitem) and var.args[1] == 0
            and mean.args[1] == 1 and var.args[0] is mean.args[0]):
        return None
    vm = var.args[0]
    if not _is(vm, aten.var_mean.correction) or vm.args[0] is not xf or \
            vm.kwargs.get("correction", 1) != 0 or not vm.kwargs.get("keepdim", False):
        return None
    rank = _val(xf).dim()
    if [d % rank for d in vm.args[1]] != [rank - 1]:
        return None
    x = xf.args[0] if _is(xf, prims.convert_element_type.default) else xf
    xv = _val(x)
    if xv is None or xv.dtype != dtype or xv.shape[-1] != width or any(
            p is not None and _val(p).dtype != dtype for p in (weight, bias)):
        return None
    return x, weight, bias, float(eps)


# -- the pass -----------------------------------------------------------------------------

class Recorded(Counter):
    """The family op calls a pass saw, as the census records them:
    :class:`oasr_core.census.recorder.Call` -> sites (one per site per run of a compiled
    graph)."""


def _expr(value: Any) -> Any:
    """A size as the pass records it: an int, the sympy expression of a symbolic size, or
    None."""
    if value is None or type(value) is int:
        return value
    node = getattr(value, "node", None)
    return node.expr if node is not None else None


@attrs.frozen
class Template:
    """One site's family op call with its sizes as the graph has them: ints for a static
    graph, sympy expressions of the graph's size symbols for a dynamic one (a census traced
    once serves every engine key of that shape class). :meth:`call` fills the sizes in."""

    site: Site
    family: str
    op: str
    dims: tuple[int, ...]
    dtype: str
    m: Any
    batch: Any = None
    t_in: Any = None

    def call(self, bind: dict) -> Any:
        """The :class:`~oasr_core.census.recorder.Call` at the sizes ``bind`` gives the
        graph's symbols (None where a size does not resolve to a positive int)."""
        sizes = []
        for value in (self.m, self.batch, self.t_in):
            if value is not None and type(value) is not int:
                try:
                    value = int(value.xreplace(bind))
                except (TypeError, ValueError):
                    return None
            sizes.append(value)
        m, batch, t_in = sizes
        if m is None or m < 1:
            return None
        point = f"{batch}x{t_in}" if batch is not None and t_in is not None else \
            self.site.point
        site = attrs.evolve(self.site, m=m, point=point)
        if site.kind == BMM:  # a batched product's sizes are its rows and its batch count
            site = attrs.evolve(site, point=self.site.point, batch=batch)
        return site_call(site, self.family, self.op, self.dims, self.dtype)


class StopAfterRecording(Exception):
    """Raised by a record-only pass once the graph is recorded: Inductor need generate no
    code for a census (the backend catches it and runs the graph as traced)."""


def site_call(site: Site, family: str, op: str, dims: Sequence[int],
              dtype: str | None = None) -> Any:
    """The census :class:`~oasr_core.census.recorder.Call` of ``op`` at ``site``: its dims
    named as the site's, traffic and flops from the site's shape; ``dtype`` the family's key
    dtype (default: the site's)."""
    named = tuple((name, int(v)) for (name, _), v in zip(site.dims, dims, strict=True))
    d = dict(named)
    m = site.m
    if site.kind == LINEAR:
        n, k = d["N"], d["K"]
        elements, flops, weight = m * k + n * k + m * n, 2 * m * n * k, n * k
        if site.log_softmax:  # the row pass reads and writes the output once more
            elements += 2 * m * n
    elif site.kind == BMM:  # L products; no weight: both operands are activations
        n, k = d["N"], d["K"]
        elements = m * k + (site.batch or 1) * k * n + m * n
        flops, weight = 2 * m * n * k, 0
    elif site.kind == CONV2D:
        cin, cout, groups = d["Cin"], d["Cout"], d["groups"]
        batch, h_in = (int(v) for v in site.point.split("x"))
        weight = cout * cin // groups * d["kh"] * d["kw"]
        elements = batch * h_in * d["W"] * cin + weight + m * cout
        flops = 2 * m * weight
    else:
        cin, cout, k, groups = d["Cin"], d["Cout"], d["k"], d["groups"]
        batch, t_in = (int(v) for v in site.point.split("x"))
        cpg = cin // groups
        weight = cout * cpg * k
        elements, flops = batch * t_in * cin + weight + m * cout, 2 * m * cout * cpg * k
    return Call(family=family, op=op, dtype=dtype or site.dtype, dims=named, m=m,
                point=site.point,
                elements=elements, flops=flops, weight_elements=weight)


class OasrPass(CustomGraphPass):
    """The post-grad pass (see the module docstring).

    ``patterns`` come from ``oasr_compile_patterns``; ``arch`` is the arch family choices
    are made for (None: the current CUDA device's; nothing is rewritten without one);
    ``rewrite`` False only records; ``record`` collects every site's family op shape;
    ``deploy_dtype`` names the dtype an fp32 graph stands for (a census compiled on a CPU
    for an fp16 deployment).
    """

    def __init__(self, patterns: Sequence[Pattern], *, arch: str | None = None,
                 quantization: str = "none", rewrite: bool = True,
                 record: Recorded | None = None, fingerprint: Callable[[], str] | None = None,
                 deploy_dtype: str | None = None) -> None:
        self.patterns = tuple(patterns)
        self.arch = arch
        self.quantization = quantization
        self.rewrite = rewrite
        self.record = record
        self.templates: list[Template] = []
        """The sites recorded since :meth:`take_templates` (with ``record``)."""
        self.fingerprint = fingerprint
        self.deploy_dtype = deploy_dtype
        self.rewritten: Counter = Counter()
        """``(family, op) -> sites rewritten`` over every graph this pass saw."""

    def take_templates(self) -> list[Template]:
        """The sites recorded since the last call (the graphs of one compile)."""
        out, self.templates = self.templates, []
        return out

    def uuid(self) -> Any:
        """Inductor's cache key part: this module's source, the options and the tiers in
        force (a changed tuning file compiles anew); None (no caching) while recording, so
        every graph is seen."""
        if self.record is not None:
            return None
        h = hashlib.sha256(Path(__file__).read_bytes())
        h.update(repr((self.arch, self.quantization, self.rewrite,
                       [(p.name, p.family, p.kind) for p in self.patterns])).encode())
        if self.fingerprint is not None:
            h.update(self.fingerprint().encode())
        return h.hexdigest()

    def __call__(self, graph: torch.fx.Graph) -> None:
        from torch._guards import detect_fake_mode

        fake = detect_fake_mode([_val(n) for n in graph.nodes if n.op == "placeholder"])
        rewriter = _Rewriter(self, graph, fake)
        rewriter.run()
        if not self.rewrite and self.record is not None:
            raise StopAfterRecording
        if rewriter.changed:
            graph.eliminate_dead_code()
            graph.lint()


class _Rewriter:
    def __init__(self, owner: OasrPass, graph: torch.fx.Graph, fake: Any) -> None:
        self.owner, self.graph, self.fake = owner, graph, fake
        self.dirty: set[Any] = set()
        self.changed = False
        self.probing, self.probed = False, None
        self.sizes: dict[int, tuple[Any, Any, Any]] = {}
        self.shared: dict[tuple, Any] = {}
        self.order: dict[Any, int] | None = None
        schemes = list(dict.fromkeys(p.scheme for p in owner.patterns))
        self.by_kind = {kind: [[p for p in owner.patterns if p.kind == kind and p.scheme == s]
                               for s in schemes] for kind in KINDS}

    def run(self) -> None:
        for node in list(self.graph.nodes):
            if node.op != "call_function" or not node.users:
                continue
            if any(a in self.dirty for a in node.all_input_nodes):
                self.refresh(node)
            if node.target in (aten.mm.default, aten.addmm.default):
                self.linear(node)
            elif node.target is aten.bmm.default:
                self.bmm(node)
            elif node.target is aten.convolution.default:
                self.conv(node)

    # -- metadata ---------------------------------------------------------------------------

    def refresh(self, node: Any) -> None:
        """Recompute ``node``'s fake value from its inputs' (a layout changed upstream)."""
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _val)
        try:
            with self.fake:
                node.meta["val"] = node.target(*args, **kwargs)
        except Exception:  # an op fake propagation cannot redo keeps its old value
            return
        self.dirty.add(node)

    def emit(self, target: Any, *args: Any) -> Any:
        node = self.graph.call_function(target, args)
        vals = torch.fx.node.map_arg(args, _val)
        with self.fake:
            node.meta["val"] = target(*vals)
        self.dirty.add(node)
        return node

    # -- decisions --------------------------------------------------------------------------

    def tiers_serve(self, family: str, op: str, dims: tuple[int, ...], site: Site, *,
                    dtype: str | None = None, untuned: Callable[[Any], bool] | None = None
                    ) -> bool:
        dtype = dtype if dtype is not None else site.dtype
        if self.probing:
            self.probed = (site, family, op, tuple(dims), dtype)
            return True
        if not self.owner.rewrite:
            return False
        return tiers_choose(family, op, dtype, dims, site.m, site.arch, site.point,
                            untuned=untuned)

    def offer(self, kind: str, sites: Sequence[Site]) -> tuple[Site, Served] | None:
        """The first (site, call) a pattern serves: the quantized scheme's patterns first
        (a layer the user asked quantized is quantized where that pays, its epilogue left to
        Inductor, before a fused full-precision op is considered), then full precision's;
        within each, most fused site first. With a recorder, the op the family would call
        at the first site it takes is recorded first."""
        groups = self.by_kind[kind]
        record = self.owner.record
        if record is not None:
            self.probing, self.probed = True, None
            try:
                if any(_serve(p, s) is not None for group in groups for s in sites
                       for p in group) and self.probed is not None:
                    self.record_probe(*self.probed)
            finally:
                self.probing = False
        for group in groups:
            for site in sites:
                for pattern in group:
                    served = _serve(pattern, site)
                    if served is not None:
                        return site, served
        return None

    def record_probe(self, site: Site, family: str, op: str, dims: tuple[int, ...],
                     dtype: str) -> None:
        """Keep the probed call as a :class:`Template` (its sizes as the graph has them)."""
        m, batch, t_in = self.sizes.get(id(site), (site.m, None, None))
        self.owner.templates.append(Template(site=site, family=family, op=op, dims=dims,
                                             dtype=dtype, m=_expr(m), batch=_expr(batch),
                                             t_in=_expr(t_in)))

    def site(self, kind: str, dtype: Any, m: Any, dims: Sequence[tuple[str, int]],
             sizes: tuple[Any, Any] = (None, None), **fields: Any) -> Site:
        """A :class:`Site`; ``sizes``: a conv's input ``(batch, frames)`` as the graph has
        them (a census of a dynamic graph fills them in per call)."""
        name = _DTYPES.get(dtype, str(dtype))
        if name == "fp32" and self.owner.deploy_dtype is not None:
            name = self.owner.deploy_dtype
        site = Site(kind=kind, dtype=name,
                    m=m if _static(m) else None, dims=tuple(dims), arch=self.owner.arch,
                    quantization=self.owner.quantization, tiers_serve=self.tiers_serve,
                    **fields)
        self.sizes[id(site)] = (m, *sizes)
        return site

    # -- linears ----------------------------------------------------------------------------

    def linear(self, node: Any) -> None:
        if node.target is aten.addmm.default:
            if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
                return
            bias, a, b = node.args[:3]
        else:
            bias, (a, b) = None, node.args[:2]
        if _is(b, aten.permute.default) and list(b.args[1]) == [1, 0]:
            w = b.args[0]
        elif _is(b, aten.t.default):
            w = b.args[0]
        else:
            return
        av, wv, ov = _val(a), _val(w), _val(node)
        if av is None or wv is None or ov is None or wv.dim() != 2 or av.dim() != 2 or \
                not wv.is_contiguous() or av.dtype != wv.dtype:
            return
        n, k = wv.shape
        m = av.shape[0]
        if not _static(n, k):
            return
        if bias is not None:
            bv = _val(bias)
            if bv is None or bv.dim() != 1 or bv.dtype != wv.dtype:
                return
        end = _through_views(node, n)
        if bias is None:
            got = _match_bias(end, n)
            if got is not None:
                end, bias = got[0], got[1]
                end = _through_views(end, n)
        dims = (("N", n), ("K", k))
        has_bias = bias is not None
        options: list[tuple[Site, Any, dict[Slot, Any]]] = []
        act = _match_activation(end)
        if act is not None:
            options.append((self.site(LINEAR, av.dtype, m, dims, bias=has_bias,
                                      activation=act[1]), act[0], {}))
        lsm = _match_log_softmax(end)
        if lsm is not None:
            options.append((self.site(LINEAR, av.dtype, m, dims, bias=has_bias,
                                      log_softmax=True), lsm, {}))
        res = _match_residual(end)
        if res is not None:
            options.append((self.site(LINEAR, av.dtype, m, dims, bias=has_bias, residual=True,
                                      alpha=res[2]), res[0], {Slot.RESIDUAL: res[1]}))
        norm = _match_layer_norm(a, k)
        if norm is not None:
            options.append((self.site(LINEAR, av.dtype, m, dims, bias=has_bias, norm=True), end,
                            dict(zip((Slot.NORM_X, Slot.NORM_WEIGHT, Slot.NORM_BIAS,
                                      Slot.NORM_EPS), norm, strict=True))))
        options.append((self.site(LINEAR, av.dtype, m, dims, bias=has_bias), end, {}))
        got = self.offer(LINEAR, [o[0] for o in options])
        if got is None or not self.owner.rewrite:
            return
        site, served = got
        _, last, extra = next(o for o in options if o[0] is site)
        with self.graph.inserting_before(last):
            fill = {Slot.X: a, Slot.WEIGHT: w, Slot.BIAS: bias, Slot.ALPHA: site.alpha,
                    Slot.ACTIVATION: site.activation, **extra}
            if Slot.RESIDUAL in extra:
                fill[Slot.RESIDUAL] = self.emit(aten.reshape.default, extra[Slot.RESIDUAL],
                                                [-1, n])
            out = self.emit(served.target, *(self.argument(x, fill) for x in served.args))
            shape = _val(last).shape
            if tuple(_val(out).shape) != tuple(shape):
                view = self.view_args(last, node)
                if view is None:
                    return
                out = self.emit(aten.reshape.default, out, view)
        self.replace(last, out, served)

    # -- batched products -------------------------------------------------------------------

    def bmm(self, node: Any) -> None:
        """A batched product site (the module docstring): ``bmm(a [L, M, K], b [L, K, N])``
        in one dtype, N and K static, ``b`` in a layout the family ops read; the served op
        replaces the node (same shape and dtype, contiguous)."""
        a, b = node.args[:2]
        av, bv, ov = _val(a), _val(b), _val(node)
        if av is None or bv is None or ov is None or av.dim() != 3 or bv.dim() != 3 or \
                av.dtype != bv.dtype:
            return
        batch, m, k = av.shape
        n = bv.shape[2]
        if not _static(n, k):
            return
        if bv.is_contiguous():
            layout = "nn"
        elif bv.transpose(1, 2).is_contiguous():
            layout = "tn"
        else:
            return
        site = self.site(BMM, av.dtype, batch * m, (("N", n), ("K", k)), (batch, None),
                         bias=False, layout=layout, batch=batch if _static(batch) else None)
        got = self.offer(BMM, [site])
        if got is None or not self.owner.rewrite:
            return
        _, served = got
        with self.graph.inserting_before(node):
            fill = {Slot.X: a, Slot.OTHER: b}
            out = self.emit(served.target, *(self.argument(x, fill) for x in served.args))
        if tuple(_val(out).shape) != tuple(ov.shape):
            return
        self.replace(node, out, served)

    def argument(self, value: Any, fill: dict) -> Any:
        """A :class:`Served` argument in the graph: a slot's node or value, a
        :class:`Shared` call's node (emitted once per graph for equal arguments, after its
        last input), or the value itself."""
        if isinstance(value, Slot):
            return fill[value]
        if not isinstance(value, Shared):
            return value
        args = tuple(self.argument(a, fill) for a in value.args)
        key = (value.target, args)
        node = self.shared.get(key)
        if node is None:
            inputs = [a for a in args if isinstance(a, torch.fx.Node)]
            anchor = max(inputs, key=self.position) if inputs else None
            if anchor is None or anchor.op == "placeholder":
                anchor = next(n for n in self.graph.nodes if n.op != "placeholder")
                point = self.graph.inserting_before(anchor)
            else:
                point = self.graph.inserting_after(anchor)
            with point:
                node = self.shared[key] = self.emit(value.target, *args)
        if value.index is None:
            return node
        item = self.shared.get((node, value.index))
        if item is None:
            with self.graph.inserting_after(node):
                item = self.shared[(node, value.index)] = self.emit(operator.getitem, node,
                                                                    value.index)
        return item

    def position(self, node: Any) -> int:
        """``node``'s place in the graph as it was before this pass (new nodes last)."""
        if self.order is None:
            self.order = {n: i for i, n in enumerate(self.graph.nodes)}
        return self.order.get(node, len(self.order))

    def view_args(self, last: Any, product: Any) -> Any:
        """A shape argument for the rows' original shape: the first row view's."""
        node = product
        while node is not last:
            node = _sole_user(node)
            if node is None:
                return None
            if _is(node, *_VIEWS):
                return node.args[1]
        shape = _val(last).shape
        return list(shape) if _static(*shape) else None

    def replace(self, last: Any, out: Any, served: Served) -> None:
        last.replace_all_uses_with(out)
        self.changed = True
        self.owner.rewritten[(served.family, served.op)] += 1

    # -- convolutions -----------------------------------------------------------------------

    def conv(self, node: Any) -> None:
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
        xv, wv, ov = _val(x), _val(w), _val(node)
        if wv is not None and wv.dim() == 4:
            self.conv2d(node)
            return
        if xv is None or wv is None or ov is None or transposed or wv.dim() != 3 or \
                xv.dim() != 3 or len(stride) != 1 or len(padding) != 1 or len(dilation) != 1:
            return
        batch, cin, t_in = xv.shape
        cout, _, kw = wv.shape
        t_out = ov.shape[2]
        if not _static(cin, cout, kw):
            return
        values = (cin, cout, kw, stride[0], padding[0], dilation[0], groups)
        dims = tuple(zip(_CONV_DIMS, values, strict=True))
        static = _static(batch, t_in, t_out)
        rows = batch * t_out
        point = f"{batch}x{t_in}" if static else None
        options: list[tuple[Site, Any] | tuple[Site, Any, dict]] = []
        has_bias = bias is not None
        bn = _match_batch_norm(node, cout)
        if bn is not None:
            extra = dict(zip((Slot.BN_MEAN, Slot.BN_VAR, Slot.BN_WEIGHT, Slot.BN_BIAS,
                              Slot.BN_EPS), bn[1:], strict=True))
            act = _match_activation(bn[0])
            act_end = _cast_to(act[0], xv.dtype) if act is not None else None
            if act_end is not None:
                options.append((self.site(CONV1D, xv.dtype, rows, dims, (batch, t_in),
                                          bias=has_bias, activation=act[1], point=point,
                                          batch_norm=True), act_end, extra))
            if _val(bn[0]).dtype == xv.dtype:
                options.append((self.site(CONV1D, xv.dtype, rows, dims, (batch, t_in),
                                          bias=has_bias, point=point, batch_norm=True), bn[0],
                                extra))
        act = _match_activation(node)
        if act is not None:
            options.append((self.site(CONV1D, xv.dtype, rows, dims, (batch, t_in),
                                      bias=has_bias, activation=act[1], point=point), act[0]))
        options.append((self.site(CONV1D, xv.dtype, rows, dims, (batch, t_in), bias=has_bias,
                                  point=point), node))
        self.conv_rewrite(CONV1D, options, x, w, bias, [0, 2, 1], [0, 2, 1])

    def conv2d(self, node: Any) -> None:
        """A 2-D convolution site (the module docstring): NCHW in, the op NHWC, NCHW out."""
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
        xv, wv, ov = _val(x), _val(w), _val(node)
        if xv is None or ov is None or transposed or xv.dim() != 4 or len(stride) != 2 or \
                len(padding) != 2 or len(dilation) != 2:
            return
        batch, cin, h_in, w_in = xv.shape
        cout, _, kh, kw = wv.shape
        h_out, w_out = ov.shape[2], ov.shape[3]
        if not _static(cin, cout, kh, kw, w_in, w_out, *stride, *padding, *dilation, groups):
            return
        values = (cin, cout, w_in, kh, kw, *stride, *padding, *dilation, groups)
        dims = tuple(zip(_CONV2D_DIMS, values, strict=True))
        static = _static(batch, h_in, h_out)
        rows = batch * h_out * w_out
        point = f"{batch}x{h_in}" if static else None
        options: list[tuple[Site, Any]] = []
        act = _match_activation(node)
        has_bias = bias is not None
        if act is not None:
            options.append((self.site(CONV2D, xv.dtype, rows, dims, (batch, h_in),
                                      bias=has_bias, activation=act[1], point=point), act[0]))
        options.append((self.site(CONV2D, xv.dtype, rows, dims, (batch, h_in), bias=has_bias,
                                  point=point), node))
        self.conv_rewrite(CONV2D, options, x, w, bias, [0, 2, 3, 1], [0, 3, 1, 2])

    def conv_rewrite(self, kind: str, options: Sequence[tuple[Any, ...]], x: Any, w: Any,
                     bias: Any, to_last: list[int], to_first: list[int]) -> None:
        """Offer a convolution's sites (most fused first, each with the node it ends at and,
        optionally, the slots it adds: a BatchNorm's) and
        rewrite the one a pattern serves: the input permuted ``to_last`` (channels-last; a
        copy only where :meth:`cheap_copy` says so, else the site stays Inductor's), the
        op, its output permuted ``to_first`` for the consumers."""
        got = self.offer(kind, [o[0] for o in options])
        if got is None or not self.owner.rewrite:
            return
        site, served = got
        chosen = next(o for o in options if o[0] is site)
        last, extra = chosen[1], (chosen[2] if len(chosen) > 2 else {})
        conv = options[-1][1]
        # Judged before the permute is emitted: it would count as another user of x.
        copy = not _val(x).permute(*to_last).is_contiguous()
        if copy and not self.cheap_copy(x, _val(x), _val(conv)):
            return
        with self.graph.inserting_before(last):
            xcl = self.emit(aten.permute.default, x, to_last)
            if copy:
                xcl = self.emit(aten.clone.default, xcl)
                xcl.kwargs = {"memory_format": torch.contiguous_format}
                with self.fake:
                    xcl.meta["val"] = _val(xcl.args[0]).clone(
                        memory_format=torch.contiguous_format)
            fill = {Slot.X: xcl, Slot.WEIGHT: w, Slot.BIAS: bias,
                    Slot.ACTIVATION: site.activation, **extra}
            out = self.emit(served.target, *(fill[a] if isinstance(a, Slot) else a
                                             for a in served.args))
            out = self.emit(aten.permute.default, out, to_first)
        self.replace(last, out, served)

    def cheap_copy(self, x: Any, xv: Any, ov: Any) -> bool:
        """Whether a channels-last copy of ``x`` costs less than the conv kernel saves: a
        pointwise producer with no other user (Inductor writes the copy in its kernel), or
        an input at most a quarter of the output's elements."""
        fused = x.op == "call_function" and len(x.users) == 1 and x.target not in _EXTERN \
            and x.target not in _VIEWS and not str(x.target).startswith("oasr")
        if fused:
            return True
        try:
            return 4 * xv.numel() <= ov.numel()
        except Exception:  # a symbolic size: no copy
            return False


def _tuned_tiers() -> frozenset:
    return frozenset({Tier.USER, Tier.SYSTEM, Tier.MODEL})


TUNED_TIERS = _tuned_tiers()
"""The tiers whose choice of a family config moves a site out of Inductor's hands. The
untuned fallback (a family's heuristic or default behind its untuned gate) is not among them:
that gate was measured against eager torch (transposes, cuDNN, separate activations), not
against Inductor, which runs a 1x1 convolution as a GEMM and fuses the pointwise work around
it. On the H200 the conv1d heuristic under compile made a torchaudio-style Conformer 0.82x of
torch.compile alone (benchmarks/results/h200_compile_library_conformer_untuned_gate.md)."""


def tiers_choose(family: str, op: str, dtype: str, dims: Sequence[int], m: int | None,
                 arch: str | None, point: str | None, *,
                 untuned: Callable[[Any], bool] | None = None) -> bool:
    """Whether the tiers serve ``op`` of ``family`` with one of its configs (not torch):
    :func:`oasr_core.select` at a static ``m``, answered by the user, system or cost-model
    tier (:data:`TUNED_TIERS`), or by another tier where the family's ``untuned(selection)``
    says its op pays there; for a dynamic one, whether a user or system entry of the
    signature names a config in some region (the op chooses per call)."""
    if arch is None:
        return False
    try:
        if m is not None:
            from oasr_core.selection import select

            sel = select(family, op, dtype, tuple(dims), m, arch, point=point)
            if sel.config is None or sel.choice is Sentinel.UNQUANTIZED:
                return False
            if sel.tier in TUNED_TIERS:
                return True
            return untuned is not None and bool(untuned(sel))
        return _entry_names_config(family, op, dtype, tuple(dims), arch)
    except OasrError:
        return False


_NOT_A_CONFIG = frozenset({Sentinel.TORCH, Sentinel.UNQUANTIZED})


def _entry_names_config(family: str, op: str, dtype: str, dims: tuple[int, ...],
                        arch: str) -> bool:
    rt = get_runtime()
    fam = rt.registry.family(family)
    if op not in fam.ops or dtype not in fam.dtypes:
        return False
    tiers = rt.tiers(fam, arch)
    for tf in (tiers.user, tiers.system):
        if tf is None:
            continue
        for dt in fam.key_dtypes(dtype):
            entry = tf.entries.get(signature_key(fam, op, dt, dims))
            if entry is not None and any(Sentinel.parse(c) not in _NOT_A_CONFIG
                                         for c in entry.choices()):
                return True
    return False

