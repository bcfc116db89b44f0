"""The family-agnostic half of a family's ``make_bench``: device, weight copies, arms.

A family's bench adapter allocates its operands and reference, writes its torch arm and its
gate, and leaves the rest here:

- :func:`bench_device`: the measuring device, its index and the lane's kernels loaded from the
  family's whole-space libraries for that device's arch;
- :func:`weight_copies`: the weight and the clones the protocol's L2 policy asks for;
- :func:`kernel_arm`: the arm launching a prepared call (:class:`~oasr_core.kit.PreparedCall`)
  on the current stream with the operands of each weight copy, exactly as the served op does;
- :func:`choice_arms`: one arm per choice, or the reason it was rejected.

Imports torch on first use (the build's CPU paths never call these).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from oasr_core.jit.kit import STATUS
from oasr_core.kit.serving import LaunchError
from oasr_core.runtime import device_arch_of
from oasr_core.types import Config, Problem, Sentinel

Arm = Callable[[int], Any]
"""``run(copy_index) -> output``, the protocol's arm."""


@attrs.frozen
class BenchDevice:
    """Where one problem is measured."""

    device: Any
    """The ``torch.device`` of the options."""
    index: int
    """Its CUDA index (the current device's when the options name none)."""
    kernels: Mapping[Any, Any]
    """The measured lane's kernels on this device's arch (empty without a lane)."""


def bench_device(options: Any, full: Any) -> BenchDevice:
    """The device of ``options`` and the kernels of ``options.lane`` from ``full`` (a
    :class:`~oasr_core.jit.libraries.Libraries` of whole-space modules by (lane, arch))."""
    import torch

    dev = torch.device(options.device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    lane = options.lane
    kernels = (full.get(lane, device_arch_of(index)) or {}) if lane else {}
    return BenchDevice(dev, index, kernels)


def weight_copies(w: Any, options: Any, weight_bytes: int) -> tuple[int, list[Any]]:
    """``(copies, weights)``: how many weight copies the L2 policy asks for at
    ``weight_bytes`` each, and ``w`` followed by that many minus one clones."""
    copies = options.copies_for(weight_bytes)
    return copies, [w] + [w.clone() for _ in range(copies - 1)]


def kernel_arm(prepared: Any, index: int, operands: Sequence[Sequence[Any]], out: Any,
               what: str) -> Arm:
    """The arm launching ``prepared`` on device ``index``'s current stream with
    ``operands[copy_index]`` (the launcher's arguments for each weight copy) and returning
    ``out``; a refusal raises :class:`~oasr_core.kit.LaunchError` naming ``what``."""
    import torch

    stream_of = torch._C._cuda_getCurrentRawStream
    launch = prepared.launch
    per_copy = [tuple(o) for o in operands]

    def run(i: int) -> Any:
        status = launch(index, stream_of(index), *per_copy[i])
        if status:
            raise LaunchError(f"{what}: {STATUS.get(status, f'unknown status {status}')}")
        return out

    return run


def choice_arms(problem: Problem, choices: Sequence[Config | Sentinel], options: Any, *,
                family: str, torch_arm: Callable[[], Arm],
                kernel_arm: Callable[[Config], Arm],
                sentinel_arms: Mapping[Sentinel, Callable[[], Arm]] | None = None,
                ) -> tuple[dict[str, Arm], dict[str, str]]:
    """``(arms, rejected)``: one arm per choice, named by config id or sentinel value.

    A choice that resolves to a lane config (``options.config_of``) gets ``kernel_arm(config)``;
    ``torch`` gets ``torch_arm()``; another sentinel without a config gets its factory in
    ``sentinel_arms`` (a family's own non-lane path, e.g. ``unquantized``) or is rejected. An
    arm factory that raises rejects its choice with the exception's message (a refused shape
    is one rejected arm, not a failed build).
    """
    arms: dict[str, Arm] = {}
    rejected: dict[str, str] = {}
    own = {Sentinel.TORCH: torch_arm, **(sentinel_arms or {})}
    for choice in choices:
        name = choice.value if isinstance(choice, Sentinel) else choice.id
        cfg = options.config_of(choice, problem)
        if cfg is None and choice not in own:
            rejected[name] = f"{name} has no {family} launcher"
            continue
        try:
            arms[name] = own[choice]() if cfg is None else kernel_arm(cfg)
        except Exception as exc:  # noqa: BLE001 - recorded as the arm's rejection
            rejected[name] = str(exc)
    return arms, rejected


def float_operands(m: int, n: int, k: int, *, bias: bool = True, seed: int = 0
                   ) -> tuple[Any, Any, Any]:
    """The float ``(x [m, k], w [n, k], bias [n] | None)`` on the host (std 1, 1/sqrt(k), 1)
    a quantized family's operands quantize (``oasr_scaled_mm.w8a8.numerics``): a bench arm that
    times the quantizer, or the unquantized layer, starts from them."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(m, k, generator=gen)
    wf = torch.randn(n, k, generator=gen) / k ** 0.5
    b = torch.randn(n, generator=gen) if bias else None
    return x, wf, b


def unquantized_arm(x: Any, weights: Sequence[Any], bias: Any, out: Any,
                    refused: str | None = None) -> Callable[[], Arm]:
    """The ``unquantized`` sentinel's arm factory of a W8A8 family: the layer in its
    activation dtype, ``F.linear`` of ``x`` and ``weights[copy]`` with ``bias`` (for a 2-D
    input, this addmm) into the fixed ``out``. ``refused``: why the op has no such path (its
    consumer reads the quantized output); the factory then raises that."""

    def factory() -> Arm:
        if refused is not None:
            raise LaunchError(refused)
        import torch

        def run(i: int) -> Any:
            return torch.addmm(bias, x, weights[i].t(), out=out)

        return run

    return factory


def record_case(problem: Problem, choices: Sequence[Config | Sentinel], options: Any, *,
                family: str, where: BenchDevice, record: Any, out_shape: Sequence[int],
                operands: tuple[Any, Any, Any], pack: Callable[[Any], Any] | None,
                torch_fn: Callable[[Any], Any], reference: Any, gate: Callable[..., Any],
                what: str) -> Any:
    """The :class:`oasr_core.bench.BenchCase` of a family whose kernels take a shape record
    (:class:`~oasr_core.kit.records.RecordKernel`) and ``x, w, bias, out`` pointers: the
    weight's copies (:func:`weight_copies`), packed for the kernels by ``pack`` (None: no
    config takes this weight, so only torch and sentinels run), the torch arm
    ``torch_fn(weight)``, a kernel arm per compiled config over ``record``, and the gate
    ``gate(output, torch_output, reference, dtype=...)``. ``what`` names the call shape in a
    refusal (``B=8 T=3000``)."""
    import torch

    from oasr_core.bench import BenchCase

    x, w, bias = operands
    weight_bytes = w.numel() * w.element_size()
    copies, torch_weights = weight_copies(w, options, weight_bytes)
    packed = [pack(wi) for wi in torch_weights] if pack is not None else []
    out = torch.empty(tuple(out_shape), dtype=x.dtype, device=where.device)
    torch_out = torch_fn(w)
    plans: list[Any] = []

    def torch_arm(i: int) -> Any:
        return torch_fn(torch_weights[i])

    def record_arm(cfg: Config) -> Arm:
        kernel = where.kernels.get(cfg.id)
        if kernel is None:
            raise LaunchError(f"{cfg.id} is not compiled in the {options.lane} module")
        plan = kernel.prepare(record, problem.dtype, activation_of(problem.op, family))
        plans.append(plan)
        ptrs = [plan.operands(x.data_ptr(), wi.data_ptr(), bias.data_ptr(), out.data_ptr())
                for wi in packed]
        return kernel_arm(plan.prepared, where.index, ptrs, out,
                          f"{options.lane}/{cfg.id} refused {problem.op} at {what}")

    arms, rejected = choice_arms(problem, choices, options, family=family,
                                 torch_arm=lambda: torch_arm, kernel_arm=record_arm)
    return BenchCase(arms=arms, copies=copies, weight_bytes=weight_bytes, rejected=rejected,
                     gate=lambda o, _plans=plans: gate(o, torch_out, reference,
                                                       dtype=problem.dtype))


def activation_of(op: str, family: str) -> str | None:
    """The activation a fused op name carries (``conv1d_gelu`` -> ``gelu``; ``conv1d`` ->
    None): ``<family>_<activation>``."""
    return None if op == family else op.removeprefix(family + "_")
