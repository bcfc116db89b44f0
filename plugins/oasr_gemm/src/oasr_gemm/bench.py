"""The gemm family's bench adapter: ``Family.make_bench`` for ``oasr tune build``.

For one problem it allocates the operands once (weight copies as the protocol's L2 policy
asks), the fp32 reference and torch's own output (the numerics gate's yardstick), and returns
one arm per choice: a config of the lane (launched through its prepared call, exactly as the
served op launches it) or ``torch`` (cuBLAS through ``addmm``, as the op's torch path runs it).

An exhaustive build measures the lane's whole space, so the arms come from the lane's full
module (``oasr_gemm.jit.full_spec``), loaded once per process; a pruned build compiles only the
configs it times, one small module per signature, and installs each in :data:`FULL` before
measuring it (:func:`bench_modules`). A config whose unit failed to compile is reported as
rejected, never timed. ``gemm_activation`` is measured with SiLU, the activation of
the Conformer's feed-forward blocks; ReLU costs no more, GELU (erf) up to 1.75x more in the
epilogue at large M, so the op serves GELU calls on torch (``ops.MEASURED_ACTIVATIONS``).

``gemm_residual`` is measured with a residual operand and ``alpha = 0.5`` (the Conformer's
half-step feed-forward; alpha is a run-time scalar and costs the same at any value): its
kernel arms are the configs' fused-residual launchers, from :data:`FULL_RESIDUAL` (a module of
only those units, compiled on the build's first such signature) or from the signature's own
module in a pruned build; its torch arm is ``addmm`` then ``add`` into the output, as the op's
torch path runs it. The gate compares against an fp32 reference including the residual.

``gemm_log_softmax`` (the CTC head) times each config as the op serves it: the config's GEMM
with bias writing the logits, then the row log-softmax over them, launched as one call
(:class:`oasr_gemm.log_softmax.LogSoftmaxCall`, from the same lane modules as ``gemm``'s
arms); its torch arm is ``addmm`` then ``log_softmax`` into the output. The gate compares
against the fp32 log-softmax of the fp32 logits.

``bmm_tn`` / ``bmm_nn`` (op ``bmm``) time each split-free config's batched launcher of the
signature's layout (:data:`FULL_BMM`, a module of only those units, compiled on the build's
first signature of the layout; in a pruned build the signature's own module) against
``torch.bmm``, on ``L`` batches of ``M`` rows (:func:`bmm_batches`: the tiers key the op by
``L * M``); the second operand takes the weight's place in the L2 rotation. The gate compares
against the fp32 ``bmm``.

``group_gemm`` times each grouped launcher (:data:`FULL_GROUP`, or the signature's own
module in a pruned build) against the loop of ``addmm`` the op's torch path runs, on
:data:`BENCH_GROUPS` problems splitting the signature's rows (:func:`group_rows`: the tiers
key the op by the rows summed over the group); the group's stacked weights take the weight's
place in the L2 rotation. The problems' inputs and outputs are row blocks of one tensor each,
so the gate compares one output against the fp32 linears.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oasr_core.jit.libraries import Libraries
from oasr_core.kit.serving import LaunchError
from oasr_core.types import Config, Problem, Sentinel

from oasr_gemm.config_space import BMM_LAYOUTS, BMM_OPS, GROUP_OP, LOG_SOFTMAX_OP, RESIDUAL_OP

BENCH_ACTIVATION = "silu"
"""The activation ``gemm_activation`` is measured with."""


def _load_full(lane: str, arch: str) -> Mapping[str, Any]:
    from oasr_core import jit as core_jit

    from oasr_gemm import codegen, jit
    from oasr_gemm.launch import Kernel

    module = core_jit.load(jit.full_spec(lane, arch))
    return {c.id: Kernel.bind(module, c) for c in jit.lane_configs(lane, arch)
            if codegen.symbol(c) in module.exports}


FULL = Libraries(load=_load_full)
"""Every compiled config of a lane's full module by id, loaded once per (lane, arch)."""

BENCH_ALPHA = 0.5
"""The scalar ``gemm_residual`` is measured with."""


def _load_full_residual(lane: str, arch: str) -> Mapping[str, Any]:
    from oasr_core import jit as core_jit

    from oasr_gemm import codegen, jit
    from oasr_gemm.launch import ResidualKernel

    configs = [c for c in jit.lane_configs(lane, arch) if codegen.has_residual(c)]
    if not configs:
        return {}
    module = core_jit.load(jit.residual_full_spec(lane, arch))
    return {c.id: ResidualKernel.bind(module, c) for c in configs
            if codegen.residual_symbol(c) in module.exports}


FULL_RESIDUAL = Libraries(load=_load_full_residual)
"""Every compiled fused-residual launcher of a lane by config id, loaded once per (lane, arch)
(empty for a lane without any: its ``gemm_residual`` arms are rejected, torch is timed)."""


def _load_full_bmm(lane: str, arch: str, layout: str) -> Mapping[str, Any]:
    from oasr_core import jit as core_jit

    from oasr_gemm import codegen, jit
    from oasr_gemm.config_space import has_bmm
    from oasr_gemm.launch import BmmKernel

    configs = [c for c in jit.lane_configs(lane, arch) if has_bmm(c)]
    if not configs:
        return {}
    module = core_jit.load(jit.bmm_full_spec(lane, arch, layout))
    return {c.id: BmmKernel.bind(module, c, layout) for c in configs
            if codegen.bmm_symbol(c, layout) in module.exports}


FULL_BMM = {layout: Libraries(load=lambda lane, arch, layout=layout: _load_full_bmm(
    lane, arch, layout)) for layout in BMM_LAYOUTS}
"""Per layout, every compiled batched launcher of a lane by config id, loaded once per
(lane, arch)."""
BMM_LAYOUT_OF = {op: layout for layout, op in BMM_OPS.items()}
"""The layout of each of op ``bmm``'s keyed ops."""


def _load_full_group(lane: str, arch: str) -> Mapping[str, Any]:
    from oasr_core import jit as core_jit

    from oasr_gemm import codegen, jit
    from oasr_gemm.config_space import has_group
    from oasr_gemm.launch import GroupKernel

    configs = [c for c in jit.lane_configs(lane, arch) if has_group(c)]
    if not configs:
        return {}
    module = core_jit.load(jit.group_full_spec(lane, arch))
    return {c.id: GroupKernel.bind(module, c) for c in configs
            if codegen.group_symbol(c) in module.exports}


FULL_GROUP = Libraries(load=_load_full_group)
"""Every compiled grouped launcher of a lane by config id, loaded once per (lane, arch)."""
BENCH_GROUPS = 4
"""Problems a ``group_gemm`` signature is timed with: the attention projections of different
inputs (``x W_q``, ``x W_k``, ``x W_v``, ``p W_pos``)."""


def group_rows(rows: int, groups: int = BENCH_GROUPS) -> tuple[int, ...]:
    """How a bench splits a ``group_gemm`` signature's ``rows`` over ``groups`` problems:
    evenly, the remainder on the first ones (fewer problems when there are fewer rows)."""
    groups = max(1, min(groups, rows))
    base, extra = divmod(rows, groups)
    return tuple(base + (g < extra) for g in range(groups))


def bmm_batches(n: int, k: int, rows: int) -> tuple[int, int]:
    """``(L, M)``: how a bench lays out ``rows = L * M`` rows of a bmm signature ``(N, K)``.

    The tiers key the op by the rows across the batch, not by the batch count, so a bench
    picks a batch: attention's products have M = T, the key length, which is N of the scores
    (``q @ k^T``: N = T, K = d_head) and K of the context (``probs @ v``: K = T, N = d_head),
    so M is the largest divisor of ``rows`` not above ``max(N, K)``."""
    top = max(1, min(rows, max(n, k)))
    m = next(d for d in range(top, 0, -1) if rows % d == 0)
    return rows // m, m


def bench_modules(lane: str):
    """``Lane.bench_modules`` of ``lane``: a pruned build compiles and installs into
    :data:`FULL` a module of only the configs it times (:mod:`oasr_core.kit.bench_modules`);
    a ``gemm_residual`` signature's module is :func:`residual_bench_modules`' instead."""
    from oasr_core.kit.bench_modules import BenchModules

    from oasr_gemm import codegen, jit
    from oasr_gemm.launch import Kernel

    def bind(module: Any, configs: Sequence[Config]) -> Mapping[str, Any]:
        return {c.id: Kernel.bind(module, c) for c in configs
                if codegen.symbol(c) in module.exports}

    return BenchModules(lane=lane, libraries=FULL, bind=bind,
                        spec_of=lambda arch, configs, dtypes, groups=None: jit.bench_spec(
                            lane, arch, configs, dtypes, groups),
                        variants={RESIDUAL_OP: residual_bench_modules(lane),
                                  **{BMM_OPS[layout]: bmm_bench_modules(lane, layout)
                                     for layout in BMM_LAYOUTS},
                                  GROUP_OP: group_bench_modules(lane)})


def group_bench_modules(lane: str):
    """The bench modules of ``lane``'s ``group_gemm`` signatures: a module of the timed
    configs' grouped units, installed into :data:`FULL_GROUP`."""
    from oasr_core.kit.bench_modules import BenchModules

    from oasr_gemm import codegen, jit
    from oasr_gemm.config_space import has_group
    from oasr_gemm.launch import GroupKernel

    def bind(module: Any, configs: Sequence[Config]) -> Mapping[str, Any]:
        return {c.id: GroupKernel.bind(module, c) for c in configs
                if has_group(c) and codegen.group_symbol(c) in module.exports}

    return BenchModules(lane=lane, libraries=FULL_GROUP, bind=bind,
                        spec_of=lambda arch, configs, dtypes, groups=None:
                        jit.group_bench_spec(lane, arch, configs, dtypes))


def bmm_bench_modules(lane: str, layout: str):
    """The bench modules of ``lane``'s signatures of op ``bmm`` in ``layout``: a module of the
    timed configs' batched units, installed into :data:`FULL_BMM` (no bundles: a batched unit
    shares no object with the others)."""
    from oasr_core.kit.bench_modules import BenchModules

    from oasr_gemm import codegen, jit
    from oasr_gemm.config_space import has_bmm
    from oasr_gemm.launch import BmmKernel

    def bind(module: Any, configs: Sequence[Config]) -> Mapping[str, Any]:
        return {c.id: BmmKernel.bind(module, c, layout) for c in configs
                if has_bmm(c) and codegen.bmm_symbol(c, layout) in module.exports}

    return BenchModules(lane=lane, libraries=FULL_BMM[layout], bind=bind,
                        spec_of=lambda arch, configs, dtypes, groups=None:
                        jit.bmm_bench_spec(lane, arch, layout, configs, dtypes))


def residual_bench_modules(lane: str):
    """The bench modules of ``lane``'s ``gemm_residual`` signatures: a module of the timed
    configs' fused-residual units alone, installed into :data:`FULL_RESIDUAL`."""
    from oasr_core.kit.bench_modules import BenchModules

    from oasr_gemm import codegen, jit
    from oasr_gemm.launch import ResidualKernel

    def bind(module: Any, configs: Sequence[Config]) -> Mapping[str, Any]:
        return {c.id: ResidualKernel.bind(module, c) for c in configs
                if codegen.has_residual(c) and codegen.residual_symbol(c) in module.exports}

    return BenchModules(lane=lane, libraries=FULL_RESIDUAL, bind=bind,
                        spec_of=lambda arch, configs, dtypes, groups=None:
                        jit.residual_bench_spec(lane, arch, configs, dtypes, groups))


def device_operands(m: int, n: int, k: int, dtype: str, device: Any, seed: int
                    ) -> tuple[Any, Any, Any]:
    """``(a, w, bias)`` with :func:`oasr_gemm.numerics.make_operands`'s distributions (std 1,
    1/sqrt(k), 1), drawn on the measuring device. Drawn on the host, a 24032 x 4864 activation
    took a second per point, twice with cross-evaluation: a tenth of a whole build's
    measuring. The values differ from a host draw's; every arm and the gate see the same."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=gen, device=device, dtype=tdtype)
    w = torch.randn(n, k, generator=gen, device=device, dtype=tdtype).mul_(k ** -0.5)
    bias = torch.randn(n, generator=gen, device=device, dtype=tdtype)
    return a, w, bias


def device_residual(m: int, n: int, dtype: str, device: Any, seed: int) -> Any:
    """A residual ``[m, n]`` (std 1) drawn on the measuring device, apart from the operands'
    stream (:func:`device_operands` with the same seed)."""
    import torch

    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return torch.randn(m, n, generator=gen, device=device, dtype=tdtype)


def make_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The :class:`oasr_core.bench.BenchCase` of ``problem`` (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import benching

    from oasr_gemm import numerics

    if problem.op in BMM_LAYOUT_OF:
        return _make_bmm_bench(problem, choices, options)
    if problem.op == GROUP_OP:
        return _make_group_bench(problem, choices, options)
    n, k, m = problem.dim("N"), problem.dim("K"), problem.m
    act = BENCH_ACTIVATION if problem.op == "gemm_activation" else None
    fused_residual = problem.op == RESIDUAL_OP
    log_softmax = problem.op == LOG_SOFTMAX_OP
    where = benching.bench_device(options, FULL_RESIDUAL if fused_residual else FULL)
    a, w, bias = device_operands(m, n, k, problem.dtype, where.device, options.seed)
    weight_bytes = n * k * a.element_size()
    copies, weights = benching.weight_copies(w, options, weight_bytes)
    out = torch.empty(m, n, dtype=a.dtype, device=where.device)
    residual = (device_residual(m, n, problem.dtype, where.device, options.seed)
                if fused_residual else None)
    ref = numerics.reference(a, w, bias, act, residual, BENCH_ALPHA, log_softmax=log_softmax)
    torch_out = numerics.torch_output(a, w, bias, act, residual, BENCH_ALPHA,
                                      log_softmax=log_softmax)
    linear_out = torch.empty_like(out) if fused_residual or log_softmax else out

    def torch_arm(i: int) -> Any:
        torch.addmm(bias, a, weights[i].t(), out=linear_out)
        if act is not None:
            torch.nn.functional.silu(out, inplace=True)
        if residual is not None:
            torch.add(residual, linear_out, alpha=BENCH_ALPHA, out=out)
        if log_softmax:
            torch.log_softmax(linear_out, -1, out=out)
        return out

    def operands(wi: Any) -> tuple:
        if residual is None:
            return (a.data_ptr(), wi.data_ptr(), bias.data_ptr(), out.data_ptr())
        return (a.data_ptr(), wi.data_ptr(), bias.data_ptr(), residual.data_ptr(),
                out.data_ptr(), BENCH_ALPHA)

    what = ("the fused residual " if fused_residual else
            "the logits of the log-softmax " if log_softmax else "")

    def kernel_arm(cfg: Config) -> benching.Arm:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} has no fused-residual kernel compiled in the "
                              f"{options.lane} module" if fused_residual else
                              f"{cfg.id} is not compiled in the {options.lane} module")
        prepared = kernel.prepare(problem.dtype, m, n, k, act)
        if log_softmax:
            from oasr_core.runtime import device_arch_of

            from oasr_gemm import codegen
            from oasr_gemm import log_softmax as rows

            prepared = rows.compose(prepared, device_arch_of(where.index),
                                    codegen.DTYPE_CODES[problem.dtype], m, n)
        return benching.kernel_arm(prepared, where.index, [operands(wi) for wi in weights],
                                   out, f"{options.lane}/{cfg.id} refused {what}m={m} n={n} "
                                   f"k={k}")

    arms, rejected = benching.choice_arms(problem, choices, options, family="gemm",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=lambda o: numerics.numerics_gate(o, torch_out, ref,
                                                           dtype=problem.dtype))


def _make_bmm_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The bench case of a ``bmm_tn`` / ``bmm_nn`` signature (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import benching

    from oasr_gemm import numerics

    layout = BMM_LAYOUT_OF[problem.op]
    n, k, rows = problem.dim("N"), problem.dim("K"), problem.m
    batch, m = bmm_batches(n, k, rows)
    where = benching.bench_device(options, FULL_BMM[layout])
    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[problem.dtype]
    gen = torch.Generator(device=where.device).manual_seed(options.seed)
    a = torch.randn(batch, m, k, generator=gen, device=where.device, dtype=tdtype)
    stored = (batch, n, k) if layout == "tn" else (batch, k, n)
    b = torch.randn(*stored, generator=gen, device=where.device, dtype=tdtype).mul_(k ** -0.5)
    b_bytes = b.numel() * b.element_size()
    copies, bs = benching.weight_copies(b, options, b_bytes)

    def view(x: Any) -> Any:
        return x.transpose(1, 2) if layout == "tn" else x

    out = torch.empty(batch, m, n, dtype=tdtype, device=where.device)
    ref = numerics.bmm_reference(a, view(b))
    torch_out = torch.bmm(a, view(b))

    def torch_arm(i: int) -> Any:
        return torch.bmm(a, view(bs[i]), out=out)

    def kernel_arm(cfg: Config) -> benching.Arm:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} has no bmm {layout} kernel compiled in the "
                              f"{options.lane} module")
        prepared = kernel.prepare(problem.dtype, batch, m, n, k)
        return benching.kernel_arm(
            prepared, where.index,
            [(a.data_ptr(), bi.data_ptr(), out.data_ptr(), batch) for bi in bs], out,
            f"{options.lane}/{cfg.id} refused bmm {layout} batch={batch} m={m} n={n} k={k}")

    arms, rejected = benching.choice_arms(problem, choices, options, family="gemm",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=b_bytes, rejected=rejected,
                     gate=lambda o: numerics.numerics_gate(o, torch_out, ref,
                                                           dtype=problem.dtype))


def _make_group_bench(problem: Problem, choices: Sequence[Config | Sentinel], options: Any):
    """The bench case of a ``group_gemm`` signature (see the module docstring)."""
    import torch
    from oasr_core.bench import BenchCase
    from oasr_core.kit import benching

    from oasr_gemm import numerics

    n, k, rows = problem.dim("N"), problem.dim("K"), problem.m
    split = group_rows(rows)
    groups = len(split)
    where = benching.bench_device(options, FULL_GROUP)
    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[problem.dtype]
    gen = torch.Generator(device=where.device).manual_seed(options.seed)
    a = torch.randn(rows, k, generator=gen, device=where.device, dtype=tdtype)
    w = torch.randn(groups, n, k, generator=gen, device=where.device,
                    dtype=tdtype).mul_(k ** -0.5)
    bias = torch.randn(groups, n, generator=gen, device=where.device, dtype=tdtype)
    w_bytes = w.numel() * w.element_size()
    copies, stacks = benching.weight_copies(w, options, w_bytes)
    xs, biases = list(a.split(split)), list(bias.unbind(0))
    weights = [list(s.unbind(0)) for s in stacks]
    out = torch.empty(rows, n, dtype=tdtype, device=where.device)
    outs = list(out.split(split))
    ref = torch.cat([numerics.reference(x, wg, b) for x, wg, b in
                     zip(xs, weights[0], biases, strict=True)])
    torch_out = torch.cat([numerics.torch_output(x, wg, b) for x, wg, b in
                           zip(xs, weights[0], biases, strict=True)])

    def torch_arm(i: int) -> Any:
        for x, wg, b, o in zip(xs, weights[i], biases, outs, strict=True):
            torch.addmm(b, x, wg.t(), out=o)
        return out

    def kernel_arm(cfg: Config) -> benching.Arm:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} has no group_gemm kernel compiled in the "
                              f"{options.lane} module")
        prepared = kernel.prepare(problem.dtype, split, n, k)
        return benching.kernel_arm(
            prepared, where.index, [(xs, wi, biases, outs) for wi in weights], out,
            f"{options.lane}/{cfg.id} refused group_gemm G={groups} rows={rows} n={n} k={k}")

    arms, rejected = benching.choice_arms(problem, choices, options, family="gemm",
                                          torch_arm=lambda: torch_arm, kernel_arm=kernel_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=w_bytes, rejected=rejected,
                     gate=lambda o: numerics.numerics_gate(o, torch_out, ref,
                                                           dtype=problem.dtype))
