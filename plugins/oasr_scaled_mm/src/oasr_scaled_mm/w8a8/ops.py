"""The two ops of a W8A8 family, built once for its :class:`~oasr_scaled_mm.w8a8.formats.Format`.

A W8A8 family has a GEMM with a high-precision output (``<mm>(a, w, a_scale, w_scale,
bias=None, out_dtype=<default>, out=None)``) and one writing the format's element for the next
GEMM (``<quant>(a, w, a_scale, w_scale, out_scale, bias=None, out=None)``), ``a [..., K]`` and
``w [N, K]`` in the format's operand dtype, ``a_scale [M]`` and ``w_scale [N]`` float32,
``bias [N]`` fp16/bf16/fp32 or None. :func:`make_ops` builds, for a format:

- the eager functions (routed to the custom ops while ``torch.compile`` traces);
- the call path ``run(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)``: the
  arguments checked (the common case inline, anything else -- and every error -- by
  ``check``), the plan looked up (``serving.plans.table.get((op, out_dtype, N, K, M,
  device))``), the inline fast-path checks, the launch; anything else ends in the kit's counted
  torch path (``<package>.reference.torch_scaled_mm``) by reason (``cpu``, ``unaligned``,
  ``noncontiguous``, ``out_scale``, ``misaligned``, ``selected``, ``refused``);
- the miss path (the family module's ``_plan``, looked up at call time: a benchmark may rebind
  it), selection through ``oasr_core.select`` (the quant op never serves a config without a
  quantizing launcher, ``config_space.serves``: such a selection is warned about once and the
  shape heuristic's config serves), and the quantized linear's route (``unquantized``);
- the custom ops ``torch.ops.oasr.<mm>`` / ``torch.ops.oasr.<quant>`` over the family
  module's ``_run`` (looked up at call time, so a test that rebinds it is seen).

The family's ``ops`` module names what this returns, under its public names. Importing this
module imports no torch; :func:`make_ops` does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import attrs
from oasr_core.types import Config, Problem, Tier

from oasr_scaled_mm.w8a8 import scaled_ops
from oasr_scaled_mm.w8a8.formats import Format


@attrs.frozen
class Ops:
    """What :func:`make_ops` builds for one family (see the module docstring)."""

    mm: Callable[..., Any]
    quant: Callable[..., Any]
    select_config: Callable[..., Any]
    select_quant_config: Callable[..., Any]
    unquantized: Callable[..., bool]
    run: Callable[..., Any]
    check: Callable[..., tuple[int, int, int]]
    checked: Callable[..., tuple[int, int, int]]
    unsupported: Callable[..., str | None]
    plan: Callable[[tuple], Any]
    torch_path: Any
    out_names: dict
    custom_ops: tuple[Any, Any]
    format: Format

    def names(self) -> dict[str, Any]:
        """What a family's ``ops`` module names: its two ops (by their op names),
        ``select_config``, ``select_quant_config``, ``unquantized``, ``reserve_workspace``,
        ``stats`` / ``reset_stats`` / ``clear_memo`` (its ``Serving``'s), ``DTYPE`` (the
        operand dtype's name), ``TORCH``, ``SERVING``, the call path's pieces (``_run``, ``_check``,
        ``_checked``, ``_unsupported``, ``_plan``, ``_PLANS``, ``_torch_path``,
        ``_OUT_NAMES``, ``_CUSTOM_OPS``: the custom ops over ``_run``) and ``__all__``."""
        from oasr_core.kit import TORCH

        launch = self.format.module("launch")
        serving = launch.SERVING
        public = {self.mm.__name__: self.mm, self.quant.__name__: self.quant,
                  "select_config": self.select_config,
                  "select_quant_config": self.select_quant_config,
                  "unquantized": self.unquantized, "reserve_workspace": launch.reserve_workspace,
                  "stats": serving.stats, "reset_stats": serving.reset_stats,
                  "clear_memo": serving.clear}
        return {**public, "__all__": sorted(public), "DTYPE": self.format.dtype,
                "TORCH": TORCH, "_run": self.run, "_check": self.check,
                "_checked": self.checked, "_unsupported": self.unsupported, "_plan": self.plan,
                "SERVING": serving, "_PLANS": serving.plans, "_torch_path": self.torch_path,
                "_OUT_NAMES": self.out_names, "_CUSTOM_OPS": self.custom_ops}


def _named(fn: Callable[..., Any], module: str, name: str, doc: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    fn.__module__, fn.__doc__ = module, doc
    return fn


def make_ops(module: str, fmt: Format, *, operand_name: str) -> Ops:
    """The ops of ``fmt``'s family, for its ops module named ``module``: ``operand_name``
    spells the operand dtype in errors. The mm op's default output dtype is the format's first
    linear dtype (the other of fp16 / bf16 is also taken); the untuned route's predicate is
    ``<package>.untuned.<element>_wins`` (``wins(lane, n, k, m, *, quantizer)``)."""
    import torch
    from oasr_core.kit import TORCH
    from oasr_core.kit.ops import custom_op, into_out, resolve, torch_path

    default_out = {"fp16": torch.float16, "bf16": torch.bfloat16}[fmt.linear_dtypes[0]]
    wins = f"{fmt.element}_wins"

    serving = fmt.module("launch").SERVING
    cs, feasibility = fmt.module("config_space"), fmt.module("feasibility")
    family, op_mm, op_quant, dtype = fmt.family, fmt.op_mm, fmt.op_quant, fmt.dtype
    align, serves = feasibility.ALIGN, cs.serves
    quant_dtype = getattr(torch, fmt.dtype)
    other_out = torch.bfloat16 if default_out is torch.float16 else torch.float16
    out_names = {torch.float16: "fp16", torch.bfloat16: "bf16", quant_dtype: fmt.element}
    bias_dtypes = (torch.float16, torch.bfloat16, torch.float32)
    operand, f32 = quant_dtype, torch.float32
    compiling = torch.compiler.is_compiling
    plans = serving.plans
    ops_module: list[Any] = []

    def family_ops() -> Any:
        if not ops_module:
            ops_module.append(importlib.import_module(module))
        return ops_module[0]

    def reference(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any,
                  out_dtype: Any, out_scale: Any, out: Any) -> Any:
        result = fmt.module("reference").torch_scaled_mm(
            a, w, a_scale, w_scale, bias, out_dtype, out_scale if op == op_quant else None)
        return into_out(result, out)

    path = torch_path(serving, reference)

    def mm(a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any = None,
           out_dtype: Any = default_out, out: Any = None) -> Any:
        if compiling():
            return into_out(getattr(torch.ops.oasr, op_mm)(a, w, a_scale, w_scale, bias,
                                                          out_dtype), out)
        return run(op_mm, a, w, a_scale, w_scale, bias, out_dtype, None, out)

    def quant(a: Any, w: Any, a_scale: Any, w_scale: Any, out_scale: Any, bias: Any = None,
              out: Any = None) -> Any:
        if compiling():
            tensor, value = (out_scale, 1.0) if isinstance(out_scale, torch.Tensor) \
                else (None, float(out_scale))
            return into_out(getattr(torch.ops.oasr, op_quant)(a, w, a_scale, w_scale, tensor,
                                                             value, bias), out)
        return run(op_quant, a, w, a_scale, w_scale, bias, quant_dtype, out_scale, out)

    def select_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
        import oasr_core

        return oasr_core.select(family, op_mm, dtype, (n, k), m, arch).config

    def select_quant_config(n: int, k: int, m: int, arch: str | None = None) -> Config | None:
        import oasr_core
        from oasr_core.runtime import get_runtime

        sel = oasr_core.select(family, op_quant, dtype, (n, k), m, arch)
        config = sel.config
        if config is None or serves(config, op_quant):
            return config
        rt = get_runtime()
        rt.warn_once(f"{family}:quant-stream-k:{config.lane}:{config.id}",
                     f"{fmt.package}: the {sel.tier.value} tier names Stream-K config "
                     f"{config.id} for {op_quant} (N={n} K={k} M={m}); there is no quantizing "
                     "Stream-K launcher, so the shape heuristic's config serves instead")
        lane = rt.registry.lane(config.lane)
        problem = Problem(family=family, op=op_quant, dtype=dtype, dims=(("N", n), ("K", k)),
                          m=m)
        return fmt.module("heuristic").sentinel_heuristic(problem, lane)

    def unquantized(n: int, k: int, m: int, device: int, *, normed: bool = False) -> bool:
        predicate = getattr(fmt.module("untuned"), wins)

        def untuned_high(sel: Any) -> bool:
            return (sel.tier is Tier.HEURISTIC and sel.config is not None
                    and not predicate(sel.lane, n, k, m, quantizer=not normed))

        return scaled_ops.unquantized_route(serving, family, op_mm, dtype, n, k, m, device,
                                            untuned_high=untuned_high, label=fmt.package,
                                            variant=normed)

    out_choices = f"{default_out} or {other_out}"

    def check(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_dtype: Any,
              out_scale: Any, out: Any) -> tuple[int, int, int]:
        if not isinstance(a, torch.Tensor) or not isinstance(w, torch.Tensor):
            raise TypeError(f"{op}: a and w must be tensors")
        if a.dtype != operand or w.dtype != operand:
            raise TypeError(f"{op}: a and w must be {operand_name}, got {a.dtype} and "
                            f"{w.dtype}")
        if w.dim() != 2 or a.dim() < 1 or a.shape[-1] != w.shape[1]:
            raise ValueError(f"{op}: a [..., K] and w [N, K] do not match: a "
                             f"{tuple(a.shape)}, w {tuple(w.shape)}")
        n, k = w.shape
        m = a.numel() // k if k else 0
        for name, t, size in (("a_scale", a_scale, m), ("w_scale", w_scale, n)):
            if not isinstance(t, torch.Tensor) or t.dtype != f32:
                raise TypeError(f"{op}: {name} must be a float32 tensor, got "
                                f"{getattr(t, 'dtype', type(t).__name__)}")
            if t.numel() != size:
                raise ValueError(f"{op}: {name} must hold {size} values, got {tuple(t.shape)}")
        if bias is not None:
            if not isinstance(bias, torch.Tensor) or bias.dtype not in bias_dtypes:
                raise TypeError(f"{op}: bias must be an fp16/bf16/fp32 tensor or None")
            if bias.numel() != n or bias.dim() != 1:
                raise ValueError(f"{op}: bias must be [{n}], got {tuple(bias.shape)}")
        if op == op_mm and out_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"{op}: out_dtype must be {out_choices}, got {out_dtype}")
        if op == op_quant:
            if isinstance(out_scale, torch.Tensor):
                if out_scale.dtype != f32 or out_scale.numel() != 1:
                    raise TypeError(f"{op}: an out_scale tensor must hold one float32 value")
            elif not isinstance(out_scale, (float, int)) or isinstance(out_scale, bool):
                raise TypeError(f"{op}: out_scale must be a float or a float32 tensor")
        device = a.device
        for name, t in (("w", w), ("a_scale", a_scale), ("w_scale", w_scale), ("bias", bias),
                        ("out", out)):
            if t is not None and t.device != device:
                raise ValueError(f"{op}: {name} is on {t.device}, a on {device}")
        if out is not None:
            shape = (*a.shape[:-1], n)
            if tuple(out.shape) != shape or out.dtype != out_dtype:
                raise ValueError(f"{op}: out must be a {out_dtype} tensor of shape {shape}; "
                                 f"got {out.dtype} {tuple(out.shape)}")
        return n, k, m

    def checked(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any,
                out_dtype: Any, out_scale: Any, out: Any) -> tuple[int, int, int]:
        try:
            n, k = w.shape
            m = a.numel() // k
            device = a.device
            if (a.dtype is operand and w.dtype is operand and a.dim() >= 1 and a.shape[-1] == k
                    and a_scale.dtype is f32 and a_scale.numel() == m
                    and w_scale.dtype is f32 and w_scale.numel() == n
                    and w.device == device and a_scale.device == device
                    and w_scale.device == device and out is None
                    and (bias is None or (bias.dtype in bias_dtypes and bias.dim() == 1
                                          and bias.numel() == n and bias.device == device))
                    and (out_dtype is torch.float16 or out_dtype is torch.bfloat16
                         if op == op_mm else out_scale.__class__ is float)):
                return n, k, m
        except (AttributeError, TypeError, ValueError, ZeroDivisionError):
            pass  # not the common case: check names what is wrong
        return check(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)

    def unsupported(a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_scale: Any,
                    out: Any, n: int, k: int) -> str | None:
        if not a.is_cuda:
            return "cpu"
        if n % align or k % align:
            return "unaligned"
        if not (a.is_contiguous() and w.is_contiguous() and a_scale.is_contiguous()
                and w_scale.is_contiguous() and (bias is None or bias.is_contiguous())
                and (out is None or out.is_contiguous())):
            return "noncontiguous"
        if isinstance(out_scale, torch.Tensor) and out_scale.device != a.device:
            return "out_scale"
        return None

    launch = fmt.module("launch")
    out_scale_args, status_text = launch.out_scale_args, launch.status_text

    def run(op: str, a: Any, w: Any, a_scale: Any, w_scale: Any, bias: Any, out_dtype: Any,
            out_scale: Any, out: Any) -> Any:
        n, k, m = checked(op, a, w, a_scale, w_scale, bias, out_dtype, out_scale, out)
        dev = a.get_device()
        key = (op, out_dtype, n, k, m, dev)
        plan = plans.table.get(key) if dev >= 0 else None
        # A plan exists only for aligned N, K (the key holds them); the rest is per call,
        # checked inline, the reason looked up only when a check fails.
        if plan is None or plan is TORCH or not (
                a.is_cuda and a.is_contiguous() and w.is_contiguous()
                and a_scale.is_contiguous() and w_scale.is_contiguous()
                and (bias is None or bias.is_contiguous())
                and (out is None or out.is_contiguous())
                and (not isinstance(out_scale, torch.Tensor) or out_scale.get_device() == dev)):
            if a.device.type == "meta":
                return out if out is not None else a.new_empty((*a.shape[:-1], n),
                                                               dtype=out_dtype)
            reason = unsupported(a, w, a_scale, w_scale, bias, out_scale, out, n, k)
            if reason is not None:
                return path(reason, op, a, w, a_scale, w_scale, bias, out_dtype, out_scale,
                            out)
            if m == 0:
                return out if out is not None else a.new_empty((*a.shape[:-1], n),
                                                               dtype=out_dtype)
            if plan is None:  # the heuristic reads the device's SM count
                plan = resolve(dev, family_ops()._plan, key)
            if plan is TORCH:
                return path("selected", op, a, w, a_scale, w_scale, bias, out_dtype,
                            out_scale, out)
        if bias is not None and bias.dtype is not f32:
            bias = bias.to(f32)
        if out is None:
            out = plan.output(a, n, out_dtype)
        if out_scale is None:
            os_ptr, os_val = 0, 1.0
        elif out_scale.__class__ is float:
            os_ptr, os_val = 0, out_scale
        else:
            os_ptr, os_val = out_scale_args(out_scale)
        a_ptr, w_ptr, d_ptr = a.data_ptr(), w.data_ptr(), out.data_ptr()
        as_ptr, ws_ptr = a_scale.data_ptr(), w_scale.data_ptr()
        b_ptr = bias.data_ptr() if bias is not None else 0
        if (a_ptr | w_ptr | d_ptr | as_ptr | ws_ptr | b_ptr) & 15 or os_ptr & 3:
            return path("misaligned", op, a, w, a_scale, w_scale, bias, out_dtype, out_scale,
                        out)
        status = plan(dev, a_ptr, w_ptr, as_ptr, ws_ptr, b_ptr, os_ptr, os_val, d_ptr)
        if status:
            return path.refused(key, plan.config, status_text(status),
                                f"op={op} N={n} K={k} M={m}", op, a, w, a_scale, w_scale, bias,
                                out_dtype, out_scale, out)
        return out

    def plan(key: tuple) -> Any:
        return scaled_ops.plan_shape(serving, key, out_names=out_names, op_quant=op_quant,
                                     select_mm=family_ops().select_config,
                                     select_quant=family_ops().select_quant_config)

    def run_op(op: str, *args: Any) -> Any:
        return family_ops()._run(op, *args)

    def mm_fake(a, w, a_scale, w_scale, bias, out_dtype):
        return a.new_empty((*a.shape[:-1], w.shape[0]), dtype=out_dtype)

    def quant_op(a, w, a_scale, w_scale, out_scale_tensor, out_scale, bias):
        scale = out_scale_tensor if out_scale_tensor is not None else out_scale
        return run_op(op_quant, a, w, a_scale, w_scale, bias, quant_dtype, scale, None)

    def quant_fake(a, w, a_scale, w_scale, out_scale_tensor, out_scale, bias):
        return a.new_empty((*a.shape[:-1], w.shape[0]), dtype=quant_dtype)

    custom = (custom_op(op_mm, scaled_ops.MM_SCHEMA,
                        lambda a, w, a_scale, w_scale, bias, out_dtype: run_op(
                            op_mm, a, w, a_scale, w_scale, bias, out_dtype, None, None),
                        mm_fake),
              custom_op(op_quant, scaled_ops.QUANT_SCHEMA, quant_op, quant_fake))
    element = fmt.element
    return Ops(
        mm=_named(mm, module, op_mm, "``(a @ w.T) * a_scale * w_scale (+ bias)`` in "
                  "``out_dtype``; into ``out`` when given."),
        quant=_named(quant, module, op_quant, f"The {op_mm} value divided by ``out_scale``, "
                     f"rounded half-even and saturated, as {element}."),
        select_config=_named(select_config, module, "select_config",
                             f"The config serving ``{op_mm}`` at ``(N, K, M)`` on ``arch`` "
                             "(None: the torch path): ``oasr_core.select`` under the family's "
                             "tiers, memoised there per epoch."),
        select_quant_config=_named(
            select_quant_config, module, "select_quant_config",
            f"The config serving ``{op_quant}`` at ``(N, K, M)`` (None: the torch path). A "
            "config without a quantizing launcher (Stream-K) is warned about once and replaced "
            "by the shape heuristic's config."),
        unquantized=_named(
            unquantized, module, "unquantized",
            "Whether a quantized linear of width ``(N, K)`` at ``M`` rows on CUDA ``device`` "
            "runs in its activation dtype (``F.linear``): the tiers name "
            "``Sentinel.UNQUANTIZED`` there (a build measured the layer, the activation "
            "quantizer included, slower than the activation dtype), or no entry covers the "
            f"shape and the untuned route (``untuned.{wins}``) does not predict the heuristic's "
            "tile plus the quantizer to win (:func:`oasr_scaled_mm.w8a8.scaled_ops."
            "unquantized_route`, memoised per epoch). ``normed``: the activation comes "
            "quantized by its layer norm (:class:`oasr_core.layers.NormedRows`), so the untuned "
            "route counts no quantizer; a tuning entry's verdict, measured with the quantizer, "
            "stands."),
        run=_named(run, module, "_run", "One call of either op (see the module docstring)."),
        check=_named(check, module, "_check", "Validate the arguments; ``(N, K, M)``. Raises "
                     "TypeError/ValueError naming the problem."),
        checked=_named(checked, module, "_checked", "``(N, K, M)`` of valid arguments: the "
                       "common case checked inline, anything else (and every error) by "
                       ":func:`_check`."),
        unsupported=_named(unsupported, module, "_unsupported", "Why the kernels cannot take "
                           "these (already validated) operands; None when they can."),
        plan=_named(plan, module, "_plan", "Resolve one call shape: select a config, bind its "
                    "launcher, prepare it."),
        torch_path=path, out_names=out_names, custom_ops=custom, format=fmt)
