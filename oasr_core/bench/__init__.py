"""The benchmark protocol, generic over kernel families.

A family makes the arms (``Family.make_bench`` returns a :class:`BenchCase`); the protocol
(:func:`measure`) gates, times and compares them through a :class:`Timer`:
:class:`CudaGraphTimer` on a GPU, :class:`ScriptedTimer` in tests. See
:mod:`oasr_core.bench.protocol` for the steps and :mod:`oasr_core.bench.records` for the
records and a worked GEMM ``make_bench``. Importing this package does not import torch.
"""

from __future__ import annotations

from .conditions import NullProbe, NvmlProbe, SmiProbe, default_probe
from .cuda import CudaGraphTimer
from .protocol import bench_problem, measure, refuse_inside_capture
from .records import (
    MAD_TO_SIGMA,
    PROTOCOL_VERSION,
    ArmResult,
    ArmStatus,
    BenchCase,
    BenchError,
    BenchOptions,
    BenchResult,
    Conditions,
    DeviceFault,
    mad_sigma,
    median,
)
from .timer import SEPARATOR, ScriptedArm, ScriptedGraph, ScriptedTimer, Timer, check_timer

__all__ = [
    "MAD_TO_SIGMA",
    "PROTOCOL_VERSION",
    "SEPARATOR",
    "ArmResult",
    "ArmStatus",
    "BenchCase",
    "BenchError",
    "BenchOptions",
    "BenchResult",
    "Conditions",
    "CudaGraphTimer",
    "DeviceFault",
    "NullProbe",
    "NvmlProbe",
    "ScriptedArm",
    "ScriptedGraph",
    "ScriptedTimer",
    "SmiProbe",
    "Timer",
    "bench_problem",
    "check_timer",
    "default_probe",
    "mad_sigma",
    "measure",
    "median",
    "refuse_inside_capture",
]
