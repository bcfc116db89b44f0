"""GPU time by kernel class of a model's forward (torch.profiler), for the compile benchmark.

:func:`profile_kernels` runs a callable under ``torch.profiler`` (CUDA activity only) and
sums the device time of every kernel by class: GEMM, conv, attention, norms, pointwise,
copies, other. :func:`kernel_class` classifies a kernel by its name: cuBLAS/CUTLASS/nvjet
and Inductor's matmul templates are GEMMs; cuDNN and implicit-GEMM convolutions and oasr's
conv1d kernels are convs (checked before GEMM: an implicit-GEMM conv names "gemm" too);
flash/memory-efficient attention and softmax are attention; layer/batch/group norms are
norms (Inductor's fused kernels are classed by the ops in their names: a convolution's bias
add fused into a pointwise kernel is pointwise); Inductor's pointwise kernels are pointwise
unless every op fused into them only moves data (clone, permute, cat, ...), then they are
copies, as are memcpys and torch's copy kernels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

CLASSES = ("GEMM", "conv", "attention", "norms", "pointwise", "copies", "other")
_COPY_OPS = frozenset({"clone", "copy", "permute", "transpose", "view", "cat", "slice",
                       "select", "expand", "unsqueeze", "squeeze", "reshape", "contiguous",
                       "constant", "pad", "stack", "split", "as", "strided", "unsafe"})
_RULES = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax|efficient_attention", re.I)),
    ("norms", re.compile(r"layer_?norm|batch_?norm|group_?norm|rms_?norm|welford", re.I)),
    ("conv", re.compile(r"conv(?!ert)|fprop|cudnn|depthwise|dgrad|wgrad", re.I)),
    ("GEMM", re.compile(r"gemm|cutlass|xmma|cublas|nvjet|matmul|triton_tem|_mm_|sm90_", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy_kernel|direct_copy|cat_|catarray|transpose",
                          re.I)),
)


def kernel_class(name: str) -> str:
    """The class of a kernel named ``name`` (see the module docstring)."""
    fused = re.match(r"triton_(poi|per|red)_fused_?(.*?)(_\d+)?$", name)
    if fused is not None:
        ops = fused.group(2)
        for cls, rule in _RULES[:2]:
            if rule.search(ops):
                return cls
        tokens = {t for t in ops.split("_") if t and not t.isdigit()}
        if fused.group(1) == "poi":
            return "copies" if tokens and tokens <= _COPY_OPS else "pointwise"
        return "other"
    for cls, rule in _RULES:
        if rule.search(name):
            return cls
    if re.search(r"elementwise|vectorized|unrolled", name, re.I):
        return "pointwise"
    return "other"


@attrs.frozen
class KernelProfile:
    """Per class: milliseconds and kernels per forward; the heaviest kernels per class."""

    classes: tuple[tuple[str, float, float], ...]
    """(class, ms per forward, kernels per forward), in :data:`CLASSES` order."""
    top: tuple[tuple[str, str, float], ...]
    """(class, kernel name, ms per forward): the three heaviest kernels of each class."""
    forwards: int

    @property
    def total_ms(self) -> float:
        return sum(ms for _, ms, _ in self.classes)

    def table(self) -> list[str]:
        """A markdown table: class, ms, share, kernels per forward."""
        total = self.total_ms or 1.0
        lines = ["| kernel class | GPU ms / forward | share | kernels / forward |",
                 "|---|---:|---:|---:|"]
        lines += [f"| {c} | {ms:.3f} | {100 * ms / total:.1f}% | {n:g} |"
                  for c, ms, n in self.classes if n]
        lines.append(f"| total | {self.total_ms:.3f} | 100% | "
                     f"{sum(n for *_, n in self.classes):g} |")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"forwards": self.forwards,
                "classes": {c: {"ms": ms, "kernels": n} for c, ms, n in self.classes},
                "top": [{"class": c, "kernel": k[:200], "ms": ms} for c, k, ms in self.top]}


def summarize(kernels: list[tuple[str, float]], forwards: int) -> KernelProfile:
    """A :class:`KernelProfile` of ``(kernel name, microseconds)`` events over ``forwards``."""
    ms: dict[str, float] = dict.fromkeys(CLASSES, 0.0)
    count: dict[str, int] = dict.fromkeys(CLASSES, 0)
    by_name: dict[tuple[str, str], float] = {}
    for name, us in kernels:
        cls = kernel_class(name)
        ms[cls] += us / 1000.0
        count[cls] += 1
        by_name[(cls, name)] = by_name.get((cls, name), 0.0) + us / 1000.0
    top = []
    for cls in CLASSES:
        named = sorted(((v, n) for (c, n), v in by_name.items() if c == cls), reverse=True)
        top += [(cls, n, v / forwards) for v, n in named[:3]]
    return KernelProfile(classes=tuple((c, ms[c] / forwards, count[c] / forwards)
                                       for c in CLASSES),
                         top=tuple(top), forwards=forwards)


def profile_kernels(fn: Callable[[], Any], forwards: int = 5) -> KernelProfile:
    """Run ``fn`` once to warm up, then ``forwards`` times under ``torch.profiler`` (CUDA
    activity); every kernel and memcpy's device time, by class."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn()
        torch.cuda.synchronize()
    kernels = []
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(event, "device_time", None)
        if us is None:
            us = getattr(event, "cuda_time", 0.0)
        kernels.append((event.name, float(us)))
    return summarize(kernels, forwards)
