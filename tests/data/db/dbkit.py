"""Test families, lanes and a writer process for the tuning-database tests.

Imported by tests/test_database_*.py (through :func:`load`-style importlib loading, since
``tests/data`` is not a package) and run as a script by the concurrency tests:
``python dbkit.py write PATH WRITER COUNT`` writes COUNT entries one ``write_entries`` call
at a time; ``python dbkit.py churn PATH`` rewrites the file until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from oasr_core import database
from oasr_core.types import Config, Family, Lane, Sentinel

ARCH = "sm90"
IMPL = {"impl_hash": "1234", "cutlass": "c0ffee"}


def gemm_family(**overrides) -> Family:
    """A gemm-like family: dims N, K; ``half`` serves fp16 and bf16."""
    fields = dict(name="gemm", ops=("gemm", "gemm_activation"), dims=("N", "K"),
                  dtypes=("fp16", "bf16"), dtype_classes={"half": ("fp16", "bf16")},
                  sentinels={Sentinel.DEFAULT, Sentinel.TORCH, Sentinel.FUSED},
                  soft_validators=lambda: dict(IMPL))
    fields.update(overrides)
    return Family(**fields)


def conv_family() -> Family:
    """A conv1d-like family with exact points."""
    return Family(name="conv1d", ops=("conv1d",), dims=("Cin", "Cout", "k"), dtypes=("fp16",),
                  exact_points=True)


def _ladder(problem, lane):
    return lane.default


def quant_family() -> Family:
    """A scaled_mm-like family: keys without dtype, a heuristic fallback."""
    return Family(name="scaled_mm", ops=("scaled_mm", "scaled_mm_quant"), dims=("N", "K"),
                  dtypes=("int8",), key_dtype=False, sentinels={Sentinel.HEURISTIC},
                  fallback=Sentinel.HEURISTIC, sentinel_heuristic=_ladder)


def _configs(lane: str, ids: tuple[str, ...]) -> list[Config]:
    return [Config(id=i, lane=lane, params={"tile": [32 * (n + 1), 64, 64], "stages": 3})
            for n, i in enumerate(ids)]


GEMM_IDS = ("b32x64x64_w16x32x64_s3", "b64x64x64_w32x32x64_s3", "b128x128x64_s3")
A, B, C = GEMM_IDS


def lanes() -> dict[str, Lane]:
    """Every test lane by name: two gemm lanes on sm90, one on sm80 only, conv and quant."""
    made = [
        Lane(name="sm90_wgmma", family="gemm", arch_families=("sm90",), default_on=("sm90",),
             config_space=_configs("sm90_wgmma", GEMM_IDS), default_config=C),
        Lane(name="sm80_mma", family="gemm", arch_families=("sm80", "sm90"),
             config_space=_configs("sm80_mma", ("m1", "m2")), default_config="m1"),
        Lane(name="sm80_only", family="gemm", arch_families=("sm80",),
             config_space=_configs("sm80_only", ("o1",)), default_config="o1"),
        Lane(name="conv_lane", family="conv1d", arch_families=("sm90",),
             config_space=_configs("conv_lane", ("p", "r")), default_config="r"),
        Lane(name="quant_lane", family="scaled_mm", arch_families=("sm90",),
             config_space=_configs("quant_lane", ("small", "big")), default_config="big"),
    ]
    return {lane.name: lane for lane in made}


def configs(lane: str = "sm90_wgmma") -> dict[str, Config]:
    """The configs of a test lane, by id."""
    return {c.id: c for c in lanes()[lane].config_space}


def gemm_key(n: int, k: int = 256, op: str = "gemm", dt: str = "half") -> str:
    """A gemm signature key."""
    return database.signature_key(gemm_family(), op, dt, {"N": n, "K": k})


def example_entry(**overrides) -> database.Entry:
    """The spec's example entry: [[512, A], [2152, B], [null, torch]]."""
    fields = dict(regions=((512, A), (2152, B), (None, "torch")), source="aot",
                  evidence={"M=416": {A: [0.0061, 0.0001, 9], "_l2": "cold"}},
                  notes=("M=416*: A (2.00x vs default)",))
    fields.update(overrides)
    return database.Entry(**fields)


def write(path, entries, *, soft=None, lane="sm90_wgmma", **kw) -> database.TuningFile:
    """``write_entries`` for the gemm family on sm90 with the lane's configs."""
    return database.write_entries(path, family=gemm_family(), arch=ARCH, lane=lane,
                                  entries=entries, configs=configs(lane),
                                  soft=IMPL if soft is None else soft, **kw)


def load(path) -> database.TuningFile:
    """``load_tuning_file`` for the gemm family on sm90 with every test lane."""
    return database.load_tuning_file(path, family=gemm_family(), arch=ARCH, lanes=lanes())


def _writer(path: str, writer: str, count: int) -> None:
    for i in range(count):
        key = gemm_key(1000 + i, k=64 * (int(writer) + 1))
        entry = example_entry(evidence={"writer": writer, "i": i})
        write(path, {key: entry}, lock_timeout=300)


def _churn(path: str) -> None:
    bulk = {"pad": ["x" * 64] * 64}
    i = 0
    while True:
        key = gemm_key(1 + i % 4000)
        write(path, {key: example_entry(evidence={"i": i, **bulk})})
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    command, target, *rest = sys.argv[1:]
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    if command == "write":
        _writer(target, rest[0], int(rest[1]))
    elif command == "churn":
        _churn(target)
    else:
        raise SystemExit(f"unknown command {command!r}")
