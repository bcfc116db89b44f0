"""ArchProfile: what the cost model knows about a GPU.

Two kinds of facts, kept apart because they are obtained differently:

- *queried* facts come from the driver (SMs, shared memory per block and per SM, registers
  and threads per SM, L2 size, arch family, SKU name); they are cheap and always current;
- *micro-benchmarked* facts (DRAM and L2 bandwidth, tensor throughput per dtype class, eager
  and in-graph launch cost) take a few seconds of GPU time, so :meth:`ArchProfile.measure`
  caches them per SKU in the user tier (``<user_root>/arch/<sku>_<sms>.json``); with
  ``OASR_TUNE_USER_DB=off`` nothing is read or written.

:meth:`ArchProfile.synthetic` gives table profiles for arch families without a device (tests,
cross-builds); their benchmarked numbers are sustained figures of a representative SKU, not
data sheet peaks. Nothing here imports torch until :meth:`measure` or :meth:`query` runs.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from oasr_core.database import user_root
from oasr_core.database.codec import read_document
from oasr_core.errors import ConfigurationError
from oasr_core.files import atomic_write
from oasr_core.types import freeze, thaw

SCHEMA_VERSION = 1
"""``schema_version`` of a profile's JSON form (and of the cache files)."""
PROTOCOL = 1
"""Version of the micro-benchmarks; a cache written by another protocol is measured anew."""
DTYPE_CLASSES = ("half", "int8", "fp8")
"""Tensor-throughput classes: fp16/bf16, int8 (int32 accumulate), fp8 e4m3."""

_KIB, _MIB = 1024, 1024 * 1024
_SYNTHETIC: dict[str, dict[str, Any]] = {
    # arch: SKU, SMs, smem/block opt-in, smem/SM, threads/SM, L2, DRAM GB/s, L2 GB/s,
    # sustained tensor TFLOP/s per class, eager and in-graph launch us.
    "sm80": dict(sku="synthetic A100-SXM", sms=108, smem_per_block=163 * _KIB,
                 smem_per_sm=164 * _KIB, max_threads_per_sm=2048, l2_bytes=40 * _MIB,
                 dram_gbps=1500.0, l2_gbps=6000.0, tensor_tflops={"half": 250.0, "int8": 500.0},
                 launch_us_eager=5.0, launch_us_graph=1.0),
    "sm86": dict(sku="synthetic RTX-A6000", sms=84, smem_per_block=99 * _KIB,
                 smem_per_sm=100 * _KIB, max_threads_per_sm=1536, l2_bytes=6 * _MIB,
                 dram_gbps=700.0, l2_gbps=2000.0, tensor_tflops={"half": 120.0, "int8": 240.0},
                 launch_us_eager=5.0, launch_us_graph=1.0),
    "sm89": dict(sku="synthetic L40S", sms=142, smem_per_block=99 * _KIB,
                 smem_per_sm=100 * _KIB, max_threads_per_sm=1536, l2_bytes=96 * _MIB,
                 dram_gbps=800.0, l2_gbps=5000.0,
                 tensor_tflops={"half": 300.0, "int8": 600.0, "fp8": 600.0},
                 launch_us_eager=5.0, launch_us_graph=0.9),
    "sm90": dict(sku="synthetic H100/H200-SXM", sms=132, smem_per_block=227 * _KIB,
                 smem_per_sm=228 * _KIB, max_threads_per_sm=2048, l2_bytes=60 * _MIB,
                 dram_gbps=4000.0, l2_gbps=10000.0,
                 tensor_tflops={"half": 750.0, "int8": 1400.0, "fp8": 1400.0},
                 launch_us_eager=5.5, launch_us_graph=0.8),
    "sm100": dict(sku="synthetic B200", sms=148, smem_per_block=227 * _KIB,
                  smem_per_sm=228 * _KIB, max_threads_per_sm=2048, l2_bytes=126 * _MIB,
                  dram_gbps=6500.0, l2_gbps=16000.0,
                  tensor_tflops={"half": 1600.0, "int8": 3200.0, "fp8": 3200.0},
                  launch_us_eager=5.0, launch_us_graph=0.8),
    "sm120": dict(sku="synthetic RTX-5090", sms=170, smem_per_block=99 * _KIB,
                  smem_per_sm=100 * _KIB, max_threads_per_sm=1536, l2_bytes=96 * _MIB,
                  dram_gbps=1500.0, l2_gbps=6000.0,
                  tensor_tflops={"half": 200.0, "int8": 700.0, "fp8": 400.0},
                  launch_us_eager=4.5, launch_us_graph=0.8),
}
SYNTHETIC_ARCHES = tuple(_SYNTHETIC)
"""Arch families :meth:`ArchProfile.synthetic` knows."""


def _positive(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"ArchProfile.{attribute.name}={value!r} must be a positive number")


def _rates(_inst: object, attribute: attrs.Attribute, value: Mapping[str, float]) -> None:
    for k, v in value.items():
        if k not in DTYPE_CLASSES:
            raise ValueError(f"ArchProfile.tensor_tflops: unknown dtype class {k!r} "
                             f"(known: {', '.join(DTYPE_CLASSES)})")
        _positive(_inst, attribute, v)
    if "half" not in value:
        raise ValueError("ArchProfile.tensor_tflops needs the 'half' class")


@attrs.frozen
class ArchProfile:
    """Queried and micro-benchmarked facts of one GPU (or a synthetic arch family)."""

    arch: str
    """Arch family, ``sm90``."""
    sku: str
    """Device name as the driver reports it (``NVIDIA H200``), or ``synthetic ...``."""
    sms: int = attrs.field(validator=_positive)
    """Streaming multiprocessors."""
    smem_per_block: int = attrs.field(validator=_positive)
    """Opt-in maximum shared memory per block, bytes."""
    smem_per_sm: int = attrs.field(validator=_positive)
    """Shared memory per SM, bytes."""
    regs_per_sm: int = attrs.field(validator=_positive)
    """32-bit registers per SM."""
    max_threads_per_sm: int = attrs.field(validator=_positive)
    """Resident threads per SM."""
    l2_bytes: int = attrs.field(validator=_positive)
    """L2 cache size, bytes."""
    dram_gbps: float = attrs.field(validator=_positive)
    """Sustained device-memory bandwidth (copy of a buffer far larger than L2), GB/s."""
    l2_gbps: float = attrs.field(validator=_positive)
    """Sustained L2 bandwidth (copy of a buffer that stays in L2), GB/s."""
    tensor_tflops: Mapping[str, float] = attrs.field(converter=freeze, validator=_rates)
    """Dense GEMM throughput per dtype class (``half``, ``int8``, ``fp8``), TFLOP/s; a class
    the device does not support is absent."""
    launch_us_eager: float = attrs.field(validator=_positive)
    """Wall time per eager call of a tiny op (host issue bound), us."""
    launch_us_graph: float = attrs.field(validator=_positive)
    """Cost of one more tiny kernel node in a replayed CUDA graph, us."""
    source: str = "synthetic"
    """``device`` (measured now), ``cache`` (measured earlier), ``queried`` (driver facts with
    synthetic benchmarks) or ``synthetic``."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (what caches and a tuning file's model payload hold)."""
        raw = {"schema_version": SCHEMA_VERSION, "protocol": PROTOCOL}
        raw.update({a.name: thaw(getattr(self, a.name)) for a in attrs.fields(ArchProfile)})
        return raw

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ArchProfile:
        """Inverse of :meth:`to_json`; refuses a newer schema and unknown fields."""
        data = dict(raw)
        version = data.pop("schema_version", None)
        data.pop("protocol", None)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ConfigurationError(
                f"arch profile schema_version {version!r} is not readable by this oasr "
                f"(reads <= {SCHEMA_VERSION}); upgrade oasr or re-measure the profile")
        names = {a.name for a in attrs.fields(cls)}
        extra = set(data) - names
        if extra:
            raise ConfigurationError(f"arch profile has unknown fields: {', '.join(sorted(extra))}")
        data["tensor_tflops"] = dict(data.get("tensor_tflops", {}))
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"malformed arch profile: {exc}") from exc

    @classmethod
    def synthetic(cls, arch: str) -> ArchProfile:
        """A table profile of arch family ``arch`` (sm80, sm86, sm89, sm90, sm100, sm120)."""
        try:
            row = _SYNTHETIC[arch]
        except KeyError:
            raise ConfigurationError(
                f"no synthetic arch profile for {arch!r} (known: {', '.join(SYNTHETIC_ARCHES)})"
            ) from None
        return cls(arch=arch, regs_per_sm=65536, source="synthetic", **row)

    def with_live(self, live: ArchProfile) -> ArchProfile:
        """This profile's benchmarked facts with ``live``'s queried ones (SMs, memory sizes).

        A tuning file built on one SKU serves a sibling (an H100 PCIe reading the H200's
        file): occupancy and waves must use the device that runs.
        """
        queried = ("sku", "sms", "smem_per_block", "smem_per_sm", "regs_per_sm",
                   "max_threads_per_sm", "l2_bytes")
        return attrs.evolve(self, **{k: getattr(live, k) for k in queried})

    @classmethod
    def query(cls, device: Any = None) -> ArchProfile:
        """Driver facts of ``device`` (torch), with the nearest synthetic benchmarked facts."""
        queried = _query(device)
        return cls(**queried, **_benchmarked(_nearest(queried["arch"])), source="queried")

    @classmethod
    def measure(cls, device: Any = None, *, refresh: bool = False,
                use_cache: bool = True) -> ArchProfile:
        """Query ``device`` and micro-benchmark it, or read the user tier's cache for its SKU.

        ``refresh`` re-measures and rewrites the cache; ``use_cache=False`` neither reads
        nor writes it. Takes a few seconds of GPU time when it measures; refuses to run
        inside a CUDA-graph capture.
        """
        queried = _query(device)
        path = cache_path(queried["sku"], queried["sms"]) if use_cache else None
        if path is not None and not refresh:
            cached = _read_cache(path, queried)
            if cached is not None:
                return cached
        bench = _MicroBench(device, queried["l2_bytes"])
        profile = cls(**queried, **bench.run(), source="device")
        if path is not None:
            _write_cache(path, profile)
        return profile


def _benchmarked(arch: str) -> dict[str, Any]:
    row = _SYNTHETIC[arch]
    keys = ("dram_gbps", "l2_gbps", "tensor_tflops", "launch_us_eager", "launch_us_graph")
    return {k: row[k] for k in keys}


def _nearest(arch: str) -> str:
    """The synthetic family closest to ``arch`` (same major version, else sm80)."""
    if arch in _SYNTHETIC:
        return arch
    major = re.match(r"sm(\d+?)(\d)$", arch)
    same = [a for a in SYNTHETIC_ARCHES if major and a.startswith(f"sm{major.group(1)}")]
    return same[0] if same else "sm80"


def sku_slug(sku: str) -> str:
    """A file-name-safe form of a device name (``NVIDIA H200`` -> ``NVIDIA_H200``)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", sku).strip("_") or "unknown"


def cache_path(sku: str, sms: int) -> Path | None:
    """``<user_root>/arch/<sku>_<sms>.json``, or None when the user tier is off."""
    root = user_root()
    return None if root is None else root / "arch" / f"{sku_slug(sku)}_{sms}.json"


def _read_cache(path: Path, queried: Mapping[str, Any]) -> ArchProfile | None:
    try:
        raw = read_document(path, error=ConfigurationError)
        if not isinstance(raw, dict) or raw.get("protocol") != PROTOCOL:
            return None
        profile = ArchProfile.from_json(raw)
    except (OSError, ValueError, ConfigurationError):
        return None
    if any(getattr(profile, k) != v for k, v in queried.items()):
        return None
    return attrs.evolve(profile, source="cache")


def _write_cache(path: Path, profile: ArchProfile) -> None:
    atomic_write(path, json.dumps(profile.to_json(), indent=1, sort_keys=True) + "\n")


def _query(device: Any) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise ConfigurationError("ArchProfile.query/measure need a CUDA device; use "
                                 "ArchProfile.synthetic(arch) without one")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None \
        else torch.device(device)
    props = torch.cuda.get_device_properties(dev)
    arch = f"sm{props.major}{props.minor}"
    fallback = _SYNTHETIC[_nearest(arch)]

    def prop(name: str, default: int) -> int:
        value = getattr(props, name, None)
        return int(value) if isinstance(value, int) and value > 0 else int(default)

    return {
        "arch": arch, "sku": str(props.name), "sms": int(props.multi_processor_count),
        "smem_per_block": prop("shared_memory_per_block_optin", fallback["smem_per_block"]),
        "smem_per_sm": prop("shared_memory_per_multiprocessor", fallback["smem_per_sm"]),
        "regs_per_sm": prop("regs_per_multiprocessor", 65536),
        "max_threads_per_sm": prop("max_threads_per_multi_processor",
                                   fallback["max_threads_per_sm"]),
        "l2_bytes": prop("L2_cache_size", fallback["l2_bytes"]),
    }


class _MicroBench:
    """The micro-benchmarks behind the measured facts: plain torch ops in CUDA graphs, timed
    with events, medians of repeated replays (GPU.md: graphs, events, medians, random data)."""

    def __init__(self, device: Any, l2_bytes: int) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device)
        self.l2_bytes = l2_bytes

    def run(self) -> dict[str, Any]:
        torch = self.torch
        if torch.cuda.is_current_stream_capturing():
            raise ConfigurationError("ArchProfile.measure cannot run inside a CUDA-graph capture")
        with torch.cuda.device(self.device), torch.no_grad():
            eager, graph = self.launch_us()
            return {"dram_gbps": self.copy_gbps(max(256 * _MIB, 8 * self.l2_bytes), calls=4),
                    "l2_gbps": self.copy_gbps(max(_MIB, self.l2_bytes // 4), calls=32),
                    "tensor_tflops": self.tensor_tflops(),
                    "launch_us_eager": eager, "launch_us_graph": graph}

    def time_us(self, fn: Callable[[], object], calls: int, reps: int = 15) -> float:
        """Median per-call time of ``fn`` replayed ``calls`` times in one CUDA graph (falls
        back to event-timed eager loops when the op cannot be captured)."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
            run = graph.replay
        except RuntimeError:
            torch.cuda.synchronize()

            def run() -> None:
                for _ in range(calls):
                    fn()
        run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        return statistics.median(times)

    def copy_gbps(self, nbytes: int, calls: int) -> float:
        torch = self.torch
        src = torch.randn(nbytes // 2, device=self.device, dtype=torch.float16)
        dst = torch.empty_like(src)
        t_us = self.time_us(lambda: dst.copy_(src), calls=calls)
        return 2 * src.numel() * 2 / (t_us * 1e3)

    def tensor_tflops(self) -> dict[str, float]:
        """Dense 4096^3 GEMMs: short bursts, so the clocks are those small problems see."""
        torch, n = self.torch, 4096
        flop = 2.0 * n**3
        a = torch.randn(n, n, device=self.device, dtype=torch.float16)
        b = torch.randn(n, n, device=self.device, dtype=torch.float16)
        runs: dict[str, Callable[[], object]] = {"half": lambda: torch.mm(a, b.t())}
        a8 = torch.randint(-8, 8, (n, n), device=self.device, dtype=torch.int8)
        b8 = torch.randint(-8, 8, (n, n), device=self.device, dtype=torch.int8)
        runs["int8"] = lambda: torch._int_mm(a8, b8.t())
        if hasattr(torch, "float8_e4m3fn"):
            a_f8, b_f8 = (a * 0.1).to(torch.float8_e4m3fn), (b * 0.1).to(torch.float8_e4m3fn)
            one = torch.ones((), device=self.device, dtype=torch.float32)
            runs["fp8"] = lambda: torch._scaled_mm(a_f8, b_f8.t(), scale_a=one, scale_b=one,
                                                   out_dtype=torch.bfloat16)
        rates = {}
        for cls, fn in runs.items():
            try:
                rates[cls] = flop / (self.time_us(fn, calls=4, reps=10) * 1e6)
            except (RuntimeError, TypeError, NotImplementedError):
                if cls == "half":
                    raise
        return rates

    def launch_us(self) -> tuple[float, float]:
        """Eager: wall time per call of 256 tiny adds. Graph: the slope between a 72-node and
        an 8-node graph of the same add (replay overhead cancels)."""
        torch = self.torch
        x = torch.zeros(1, device=self.device)
        torch.cuda.synchronize()
        eager = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(256):
                x.add_(1)
            torch.cuda.synchronize()
            eager.append((time.perf_counter() - t0) * 1e6 / 256)
        short = self.time_us(lambda: x.add_(1), calls=8) * 8
        long = self.time_us(lambda: x.add_(1), calls=72) * 72
        return statistics.median(eager), max((long - short) / 64, 0.05)
