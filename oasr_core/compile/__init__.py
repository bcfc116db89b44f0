"""oasr inside ``torch.compile``: the ``"oasr"`` backend and its options.

``torch.compile(model, backend="oasr")`` (torch's ``torch_dynamo_backends`` entry point,
declared by this distribution) runs Inductor with the post-grad pass of
:mod:`oasr_core.compile.graph_pass`: linears (with their bias, activation and residual
epilogue) and 1-D convolutions go to the families' custom ops where the tiers (user,
system, cost model) choose oasr's kernel at that node's shape; every other node is
Inductor's to fuse, and an untuned shape stays as Inductor would run it. The families
declare what they serve through the ``oasr_compile_patterns`` hook; the core names none.

With options, the same backend is one call::

    import oasr_core.compile as oc
    compiled = torch.compile(model, backend=oc.backend(quantization="none"))

``backend(record=True)`` also counts every GEMM/conv site of each compiled graph, at each
call's sizes, as the family would call it (``.recorded``: census calls; ``oasr tune census
--compile`` writes a ShapeSet of them). The pass records a site's sizes as the graph has
them (ints, or expressions of a dynamic graph's size symbols), so one trace with dynamic
batch and frames serves every engine key. ``rewrite=False`` only records: Inductor stops
after its post-grad passes and each call returns zeros of the graph's output shapes, the
graph run on fake tensors (no code generated, no arithmetic).
"""

from __future__ import annotations

from typing import Any

from oasr_core.compile import gate
from oasr_core.compile.patterns import (
    BMM,
    CONV1D,
    CONV2D,
    LINEAR,
    Pattern,
    Served,
    Shared,
    Site,
    Slot,
)
from oasr_core.runtime import get_runtime

__all__ = ["BMM", "CONV1D", "CONV2D", "LINEAR", "OasrBackend", "Pattern", "Served", "Shared",
           "Site",
           "Slot", "backend", "oasr_backend"]


class OasrBackend:
    """A ``torch.compile`` backend: Inductor (``compile_fx``) with oasr's post-grad pass.

    ``quantization``: a scheme the W8A8 families serve (``"fp8_w8a8"``), whose patterns are
    asked first; ``arch``: the arch family to choose for (default: the current CUDA
    device's; without one nothing is rewritten, as oasr's ops would serve torch anyway);
    ``record``: collect the sites' family op shapes in :attr:`recorded`; ``rewrite``: False
    to only record; ``deploy_dtype``: the dtype an fp32 graph stands for (a census compiled
    on a CPU for an fp16 deployment); ``gate_graphs``: keep a graph's rewrite only where it
    measured faster than Inductor alone (:mod:`oasr_core.compile.gate`; default: on unless
    ``OASR_COMPILE_GATE=0``). :attr:`rewritten` counts the sites rewritten, by (family, op);
    :attr:`verdicts` holds the gate's verdicts.
    """

    def __init__(self, *, quantization: str = "none", arch: str | None = None,
                 record: bool = False, rewrite: bool = True,
                 deploy_dtype: str | None = None, gate_graphs: bool | None = None) -> None:
        from oasr_core.compile.graph_pass import Recorded

        self.quantization = quantization
        self.arch = arch
        self.recorded = Recorded() if record else None
        self.rewrite = rewrite
        self.deploy_dtype = deploy_dtype
        self.gate = gate.enabled() if gate_graphs is None else gate_graphs
        self.verdicts: list[gate.Verdict] = []
        """The measured gate's verdicts, one per gated graph (see :mod:`.gate`)."""
        self._pass: Any = None

    @property
    def graph_pass(self) -> Any:
        """The post-grad pass (built on first use: it loads the plugins)."""
        if self._pass is None:
            from oasr_core.compile.graph_pass import OasrPass
            from oasr_core.compile.patterns import collect_patterns
            rt = get_runtime()
            arch = self.arch if self.arch is not None else rt.device_arch()
            self._pass = OasrPass(collect_patterns(rt.pm, self.quantization), arch=arch,
                                  quantization=self.quantization, rewrite=self.rewrite,
                                  record=self.recorded, deploy_dtype=self.deploy_dtype,
                                  fingerprint=lambda: tiers_fingerprint(arch))
        return self._pass

    @property
    def rewritten(self) -> dict[tuple[str, str], int]:
        """Sites rewritten so far, by (family, op)."""
        return dict(self._pass.rewritten) if self._pass is not None else {}

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        from torch._inductor.compile_fx import compile_fx

        patches = {"post_grad_custom_post_pass": self.graph_pass}
        if self.recorded is None:
            if self.rewrite and self.gate and gate.measurable(example_inputs):
                return self._gated(gm, example_inputs, patches)
            return compile_fx(gm, example_inputs, config_patches=patches)
        self.graph_pass.take_templates()
        if self.rewrite:
            inner = compile_fx(gm, example_inputs, config_patches=patches)
        else:
            # Record only: Inductor runs up to its post-grad passes (the graph it would
            # lower), the pass records it and stops.
            try:
                compile_fx(gm, example_inputs, config_patches=patches)
            except Exception as exc:  # Inductor wraps what a pass raises (InductorError)
                if not _stopped(exc):
                    raise
            inner = _shapes_only(gm)
        return _recording(inner, self.graph_pass.take_templates(), _size_symbols(gm),
                          self.recorded)

    def _gated(self, gm: Any, example_inputs: Any, patches: dict) -> Any:
        """Compile ``gm`` with the pass; when it moved sites, also as Inductor alone, and
        keep the faster (:mod:`oasr_core.compile.gate`; a stored verdict compiles once)."""
        import copy

        import torch
        from torch._inductor.compile_fx import compile_fx

        key = gate.graph_key(gm.code, example_inputs, self.graph_pass.uuid())
        known = gate.recall(key)
        if known == gate.KEEP_INDUCTOR:
            self.verdicts.append(gate.Verdict(known, why="stored"))
            return compile_fx(gm, example_inputs)
        if known == gate.KEEP_OASR:
            self.verdicts.append(gate.Verdict(known, why="stored"))
            return compile_fx(gm, example_inputs, config_patches=patches)
        plain = copy.deepcopy(gm)
        before = sum(self.graph_pass.rewritten.values())
        # Caches off for this compile: a cached graph would skip the pass, which then could
        # not say whether it moved a site.
        with torch._functorch.config.patch(enable_autograd_cache=False):
            rewritten = compile_fx(gm, example_inputs,
                                   config_patches={**patches, "fx_graph_cache": False})
        sites = sum(self.graph_pass.rewritten.values()) - before
        if sites == 0:
            return rewritten
        inductor = compile_fx(plain, example_inputs)
        verdict = gate.choose(rewritten, inductor, example_inputs, sites,
                              bound=gate.agreement(self.quantization))
        gate.remember(key, verdict)
        self.verdicts.append(verdict)
        return rewritten if verdict.keep == gate.KEEP_OASR else inductor


def _size_symbols(gm: Any) -> list[tuple[int, int | None, Any]]:
    """``(input index, dim or None, symbol)`` for every graph input size that is a plain
    symbol (a dynamic dimension, or a size passed as a SymInt input)."""
    import sympy
    import torch

    out = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymInt):
            if isinstance(value.node.expr, sympy.Symbol):
                out.append((i, None, value.node.expr))
        elif isinstance(value, torch.Tensor):
            for d, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    out.append((i, d, size.node.expr))
    return out


def _recording(inner: Any, templates: list, symbols: list, recorded: Any) -> Any:
    """``inner`` counting ``templates``' calls, at each call's sizes, into ``recorded``."""

    def bind(args: Any) -> dict:
        out = {}
        for i, d, symbol in symbols:
            try:
                out[symbol] = int(args[i]) if d is None else int(args[i].shape[d])
            except (IndexError, TypeError, AttributeError):
                continue
        return out

    def count(args: Any) -> None:
        sizes = bind(args) if symbols else {}
        for template in templates:
            call = template.call(sizes)
            if call is not None:
                recorded[call] += 1

    if getattr(inner, "_boxed_call", False):
        def run_boxed(args: Any) -> Any:
            count(args)
            return inner(args)

        run_boxed._boxed_call = True  # type: ignore[attr-defined]
        return run_boxed

    def run(*args: Any) -> Any:
        count(args)
        return inner(*args)

    return run


def _shapes_only(gm: Any) -> Any:
    """What a record-only graph returns instead of running: zeros of its outputs' shapes and
    dtypes, on their devices (the graph run on fake tensors: no arithmetic); a graph that
    fake tensors cannot run runs as traced. A census reads shapes, not values."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map

    def run(*args: Any) -> Any:
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                out = gm(*args)
        except Exception:  # an op without a fake kernel: the graph as traced
            return gm(*args)
        return tree_map(lambda t: torch.zeros(t.shape, dtype=t.dtype, device=t.device)
                        if isinstance(t, torch.Tensor) else t, out)

    return run


def _stopped(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or wraps, the record-only pass's stop."""
    from oasr_core.compile.graph_pass import StopAfterRecording

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, StopAfterRecording):
            return True
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
        seen += 1
    return False


def backend(*, quantization: str = "none", arch: str | None = None, record: bool = False,
            rewrite: bool = True, deploy_dtype: str | None = None,
            gate_graphs: bool | None = None) -> OasrBackend:
    """The oasr backend with options, for ``torch.compile(model, backend=backend(...))``
    (see :class:`OasrBackend`)."""
    return OasrBackend(quantization=quantization, arch=arch, record=record, rewrite=rewrite,
                       deploy_dtype=deploy_dtype, gate_graphs=gate_graphs)


_DEFAULT: OasrBackend | None = None


def oasr_backend(gm: Any, example_inputs: Any) -> Any:
    """The backend torch finds as ``backend="oasr"`` (default options)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = OasrBackend()
    return _DEFAULT(gm, example_inputs)


def tiers_fingerprint(arch: str | None) -> str:
    """The tier files in force on ``arch``, by path, size and modification time: part of
    the compiled graph's cache key, so a changed table compiles anew."""
    if arch is None:
        return "no-arch"
    rt = get_runtime()
    parts = []
    for name in sorted(rt.registry.families):
        tiers = rt.tiers(rt.registry.family(name), arch)
        for path in (tiers.user_path, tiers.system_path):
            try:
                st = path.stat() if path is not None else None
            except OSError:
                st = None
            parts.append(f"{name}:{path}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}")
    return "|".join(parts)
