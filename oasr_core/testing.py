"""The oasr plugin test kit, a pytest plugin (``pytest11`` entry point ``oasr``).

Fixtures:

``plugin_manager``
    a fresh :class:`~oasr_core.plugins.OasrPluginManager` with no entry points loaded.
``register_plugin``
    ``register_plugin(obj, name=None)`` registers a plugin on that manager, checks its hooks,
    and unregisters it after the test.
``fake_family``
    registers :class:`FakeFamilyPlugin` (family ``fake``, lane ``fake_lane``) and returns it.
``fake_int8_family``
    registers :class:`FakeInt8Plugin` (family ``fake_int8``, lane ``fake_int8_lane``, the
    ``int8_w8a8`` quantized linear) and returns it.
``fake_distribution``
    ``fake_distribution(name, entry_points=..., modules=...)`` puts an installed-looking
    distribution on ``sys.path``, so entry-point loading can be tested with real metadata.
``cli_runner``
    ``run(*args, plugin_manager=None)`` invokes the ``oasr`` CLI in-process with a
    :class:`click.testing.CliRunner`, bound to the test's manager.
``cuda_like``
    while the test runs, every tensor reports CUDA device 0 to ``is_cuda`` and
    ``get_device`` (overridden on ``torch.Tensor``'s Python class, which torch's own code never
    reads), so an op files its plans under device 0 while its torch math runs on the CPU.

:func:`aten_calls` lists the aten ops a call dispatches (views, copies and allocations
included): what tells a torch-served call from torch's own on a CPU.

Builds and censuses run on a CPU against these fakes: :class:`ScriptedBench` is a scripted
device (a family's ``make_bench`` plus a :class:`~oasr_core.bench.ScriptedTimer` timing each
arm by a model such as :func:`fake_time_us` or :func:`fake_int8_time_us`, and a bitwise
numerics gate); :func:`fake_int8_linear` quantizes a linear layer online and calls
:func:`fake_int8_scaled_mm`, which the ``fake_int8`` family's recorder patch records.

Family plugins also get a contract suite: subclass :class:`FamilyContract` (or call
:func:`check_family_contract`) with the plugin's hooks module. Importing this module is cheap:
it loads no entry point and does not import torch. Its asserts carry their own messages, so
pytest need not rewrite it (PYTEST_DONT_REWRITE) and test modules may import it before pytest
registers it as a plugin.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from oasr_core import hookimpl
from oasr_core.plugins import OasrPluginManager, make_plugin_manager
from oasr_core.registry import Registry
from oasr_core.types import Config, Family, Lane, Problem, Sentinel, thaw

pytest_plugins = ["oasr_core.smoke_builds"]
"""The background nvcc compiles of the suites' ``SMOKE_UNITS`` (the ``smoke_builds`` fixture)."""

FAKE_FAMILY = "fake"
FAKE_OP = "fake"
FAKE_LANE = "fake_lane"
FAKE_DEFAULT = "n128_k64_s1"
_FAKE_TILES = (  # id, tile_n, tile_k, split_k, stages
    ("n64_k32_s1", 64, 32, 1, 4),
    ("n64_k64_s1", 64, 64, 1, 3),
    ("n128_k64_s1", 128, 64, 1, 3),
    ("n128_k64_s2", 128, 64, 2, 3),
    ("n128_k128_s4", 128, 128, 4, 2),
    ("n256_k64_s8", 256, 64, 8, 2),
)


def _fake_feasible(config: Config) -> bool:
    """Shared memory of a 128-row CTA tile fits in 228 KiB (fp16 operands)."""
    p = config.params
    return p["stages"] * (128 + p["tile_n"]) * p["tile_k"] * 2 <= 228 * 1024


def _fake_supports(config: Config, problem: Problem) -> bool:
    """Aligned N, and no more split-K slices than K has tiles."""
    k_tiles = math.ceil(problem.dim("K") / config.params["tile_k"])
    return problem.dim("N") % 8 == 0 and config.params["split_k"] <= k_tiles


def fake_family_record() -> Family:
    """The ``fake`` family: dims N, K; fp16/bf16 with a ``half`` class; DEFAULT and TORCH."""
    return Family(name=FAKE_FAMILY, ops=(FAKE_OP,), dims=("N", "K"), dtypes=("fp16", "bf16"),
                  dtype_classes={"half": ("fp16", "bf16")},
                  sentinels={Sentinel.DEFAULT, Sentinel.TORCH},
                  description="test family of oasr_core.testing")


def fake_lane_record() -> Lane:
    """The ``fake_lane`` lane: six explicit configs on sm80..sm90, the default on sm90."""
    space = [Config(id=cid, lane=FAKE_LANE,
                    params={"tile_n": n, "tile_k": k, "split_k": s, "stages": st})
             for cid, n, k, s, st in _FAKE_TILES]
    return Lane(name=FAKE_LANE, family=FAKE_FAMILY, arch_families=("sm80", "sm86", "sm89", "sm90"),
                default_on=("sm90",), config_space=space, default_config=FAKE_DEFAULT,
                is_feasible=_fake_feasible, supports=_fake_supports)


class FakeFamilyPlugin:
    """A plugin registering family ``fake`` and its lane ``fake_lane`` (no kernels).

    ``make_bench`` (e.g. :meth:`ScriptedBench.make_bench`) makes the family measurable.
    """

    def __init__(self, make_bench: Callable[..., Any] | None = None) -> None:
        self.make_bench = make_bench

    @hookimpl
    def oasr_register_families(self) -> list[Family]:
        return [attrs.evolve(fake_family_record(), make_bench=self.make_bench)]

    @hookimpl
    def oasr_register_lanes(self) -> list[Lane]:
        return [fake_lane_record()]


def fake_time_us(name: str, config: Config | None, problem: Problem) -> float:
    """A plausible GPU time of a ``fake`` arm: waves of 128-row CTAs, a K loop and split-K
    overhead; torch (``config`` None) by its flops."""
    m, n, k = problem.m, problem.dim("N"), problem.dim("K")
    if config is None:
        return 2.7 + 2 * m * n * k / 250e12 * 1e6
    p = config.params
    ctas = math.ceil(m / 128) * math.ceil(n / p["tile_n"]) * p["split_k"]
    k_iters = math.ceil(k / p["split_k"] / p["tile_k"])
    per_wave = 0.3 + k_iters * 0.05 * p["tile_n"] / 64 * p["tile_k"] / 64
    return 2.0 + math.ceil(ctas / 132) * per_wave + 0.5 * (p["split_k"] > 1)


# -- the fake int8 family: a heuristic fallback, no dtype in keys, bitwise numerics -------

FAKE_INT8_FAMILY = "fake_int8"
FAKE_INT8_OPS = ("scaled_mm", "scaled_mm_quant")
"""The GEMM with a half-precision output, and the one quantizing its output to int8."""
FAKE_INT8_LANE = "fake_int8_lane"
FAKE_INT8_QUANTIZATION = "int8_w8a8"
FAKE_INT8_ACTIVATIONS = ("fp16", "bf16")
"""Activation dtypes the fake ``int8_w8a8`` linear takes (``Family.quantizations``)."""
FAKE_INT8_SMS = 132
"""SMs of the device the heuristic and the timing model assume."""
_FAKE_INT8_TILES = (  # id, tile_m, tile_n, stream_k
    ("m64_n64", 64, 64, False),
    ("m64_n128", 64, 128, False),
    ("m128_n64", 128, 64, False),
    ("m128_n128", 128, 128, False),
    ("m128_n256", 128, 256, False),
    ("sk_m128_n128", 128, 128, True),
    ("sk_m128_n256", 128, 256, True),
)


def _fake_int8_supports(config: Config, problem: Problem) -> bool:
    """16-aligned N and K; a Stream-K tile only for ``scaled_mm`` (no quantizing Stream-K)."""
    if problem.dim("N") % 16 or problem.dim("K") % 16:
        return False
    return not config.params["stream_k"] or problem.op == "scaled_mm"


def fake_int8_heuristic(problem: Problem, lane: Lane) -> Config:
    """The ``fake_int8`` shape heuristic: the largest data-parallel tile launching at least
    half a wave of CTAs, else the smallest; never a Stream-K tile."""
    tiles = sorted((c for c in lane.config_space if not c.params["stream_k"]),
                   key=lambda c: (c.params["tile_m"] * c.params["tile_n"], c.id))
    m, n = problem.m, problem.dim("N")
    for config in reversed(tiles):
        ctas = math.ceil(m / config.params["tile_m"]) * math.ceil(n / config.params["tile_n"])
        if 2 * ctas >= FAKE_INT8_SMS:
            return config
    return tiles[0]


@attrs.frozen
class GateVerdict:
    """A numerics gate's answer: truthy when the output passes; ``reason`` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def fake_int8_bitwise_gate(output: Any, reference: Any) -> GateVerdict:
    """Every int8 variant computes the same bits: anything else is wrong."""
    if output == reference:
        return GateVerdict(True)
    return GateVerdict(False, "differs bitwise from the heuristic's variant")


def fake_int8_scaled_mm(xq: Any, wq: Any, x_scale: Any, w_scale: Any, bias: Any = None,
                        out_dtype: Any = None) -> Any:
    """The fake int8 GEMM op ``[..., K] x [N, K]^T``: only makes the output (works on meta)."""
    import torch

    return torch.empty((*xq.shape[:-1], wq.shape[0]), device=xq.device,
                       dtype=out_dtype or torch.float16)


def fake_int8_linear(x: Any, layer: Any, activation: str | None = None) -> Any:
    """``activation(layer(x))`` the W8A8 way: x quantized per token, the weight per output
    channel, the activation in torch."""
    import torch

    from oasr_core.layers import activate

    def quantize(t: Any) -> tuple[Any, Any]:
        scale = t.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
        return torch.clamp(torch.round(t / scale), -128, 127).to(torch.int8), scale

    xq, x_scale = quantize(x)
    wq, w_scale = quantize(layer.weight)
    # Through the module global, which the census recorder rebinds to its wrapper.
    return activate(fake_int8_scaled_mm(xq, wq, x_scale, w_scale, layer.bias,
                                        out_dtype=x.dtype), activation)


def record_fake_int8_scaled_mm(xq: Any, wq: Any, x_scale: Any = None, w_scale: Any = None,
                               bias: Any = None, out_dtype: Any = None) -> Any:
    """The census :class:`~oasr_core.census.Call` of :func:`fake_int8_scaled_mm`."""
    from oasr_core.census.recorder import Call, dtype_name

    n, k = int(wq.shape[0]), int(wq.shape[1])
    m = xq.numel() // k
    return Call(family=FAKE_INT8_FAMILY, op="scaled_mm", dtype=dtype_name(xq.dtype),
                dims=(("N", n), ("K", k)), m=m, elements=m * k + n * k + m * n,
                flops=2 * m * n * k, weight_elements=n * k)


def fake_int8_recorder_patches() -> list[Any]:
    """The ``fake_int8`` family's recorder patches: :func:`fake_int8_scaled_mm`."""
    from oasr_core.census.recorder import RecorderPatch

    return [RecorderPatch(family=FAKE_INT8_FAMILY,
                          target="oasr_core.testing:fake_int8_scaled_mm",
                          record=record_fake_int8_scaled_mm)]


def fake_int8_family_record(make_bench: Callable[..., Any] | None = None) -> Family:
    """The ``fake_int8`` family: ops scaled_mm and scaled_mm_quant, dims N, K, int8 keyed
    without ``dt=``, the shape heuristic as fallback, bitwise numerics."""
    return Family(name=FAKE_INT8_FAMILY, ops=FAKE_INT8_OPS, dims=("N", "K"), dtypes=("int8",),
                  key_dtype=False, sentinels={Sentinel.HEURISTIC}, fallback=Sentinel.HEURISTIC,
                  sentinel_heuristic=fake_int8_heuristic,
                  recorder_patches=fake_int8_recorder_patches,
                  numerics_gate=fake_int8_bitwise_gate, make_bench=make_bench,
                  quantizations={FAKE_INT8_QUANTIZATION: FAKE_INT8_ACTIVATIONS},
                  description="int8 test family of oasr_core.testing")


def fake_int8_lane_record() -> Lane:
    """The ``fake_int8_lane`` lane: five data-parallel and two Stream-K tiles, no cost model."""
    space = [Config(id=cid, lane=FAKE_INT8_LANE,
                    params={"tile_m": tm, "tile_n": tn, "stream_k": sk})
             for cid, tm, tn, sk in _FAKE_INT8_TILES]
    return Lane(name=FAKE_INT8_LANE, family=FAKE_INT8_FAMILY,
                arch_families=("sm80", "sm86", "sm89", "sm90"), default_on=("sm90",),
                config_space=space, default_config="m128_n128", supports=_fake_int8_supports)


def fake_int8_time_us(name: str, config: Config | None, problem: Problem) -> float:
    """A plausible GPU time of a ``fake_int8`` arm.

    Data-parallel tiles run in waves of ``FAKE_INT8_SMS`` CTAs, a CTA's K loop costing by
    its tile (a small tile does less per iteration, though less efficiently); a Stream-K
    tile spreads the whole K loop evenly over the SMs and pays a fixup, so it wins where
    few CTAs run deep K loops.
    """
    if config is None:
        raise ValueError(f"fake_int8 has no non-lane arm {name!r}")
    m, n, k = problem.m, problem.dim("N"), problem.dim("K")
    p = config.params
    ctas = math.ceil(m / p["tile_m"]) * math.ceil(n / p["tile_n"])
    iter_us = 0.02 * (p["tile_m"] * p["tile_n"] / (128 * 128)) ** 0.75
    k_iters = math.ceil(k / 64)
    if p["stream_k"]:
        return 3.0 + ctas * k_iters * iter_us / FAKE_INT8_SMS + 0.4
    return 2.0 + math.ceil(ctas / FAKE_INT8_SMS) * (0.4 + k_iters * iter_us)


def scripted_time_us(name: str, config: Config | None, problem: Problem) -> float:
    """:func:`fake_time_us` or :func:`fake_int8_time_us`, by the problem's family."""
    model = fake_int8_time_us if problem.family == FAKE_INT8_FAMILY else fake_time_us
    return model(name, config, problem)


TimeModel = Callable[[str, "Config | None", Problem], float]
"""``time_us(arm name, config it launches or None, problem) -> microseconds per call``."""


class ScriptedBench:
    """A scripted device for CPU builds: a family's ``make_bench`` and the timer it times by.

    ``make_bench`` (put it on a :class:`~oasr_core.types.Family`) builds a
    :class:`~oasr_core.bench.BenchCase` whose arms return the "bits" they compute: every
    variant computes the same bits (an exact integer accumulator), except configs named in
    ``broken``, and the gate compares them bitwise with the exact bits (those of the
    family's heuristic or default variant). :attr:`timer` (a
    :class:`~oasr_core.bench.ScriptedTimer`) times each arm by ``time_us`` at the problem
    being measured, with relative noise ``sigma_rel``. ``benched`` lists every problem
    measured with its arm names, in order.
    """

    def __init__(self, time_us: TimeModel = scripted_time_us, *, broken: Sequence[str] = (),
                 sigma_rel: float = 0.005, seed: int = 0) -> None:
        from oasr_core.bench import ScriptedTimer

        self.time_us = time_us
        self.broken = frozenset(broken)
        self.sigma_rel = sigma_rel
        self.benched: list[tuple[Problem, tuple[str, ...]]] = []
        self._arms: dict[str, tuple[Config | None, Problem]] = {}
        self.timer = ScriptedTimer(self._script, seed=seed)

    def _script(self, label: str) -> Any:
        from oasr_core.bench import ScriptedArm

        config, problem = self._arms[label]
        return ScriptedArm(ms=self.time_us(label, config, problem) / 1000.0,
                           sigma_rel=self.sigma_rel, issue_us=8.0 if config else 14.0)

    def _bits(self, config: Config | None, problem: Problem) -> tuple:
        if config is not None and config.id in self.broken:
            return ("wrong", config.id)
        return ("exact", problem.op, problem.dims, problem.m)

    def make_bench(self, problem: Problem, choices: Sequence[Config | Sentinel],
                   options: Any) -> Any:
        """``Family.make_bench``: one arm per choice (sentinels through ``options``)."""
        from oasr_core.bench import BenchCase

        self._arms = {}
        arms: dict[str, Callable[[int], Any]] = {}
        for choice in choices:
            name = choice.value if isinstance(choice, Sentinel) else choice.id
            config = options.config_of(choice, problem)
            self._arms[name] = (config, problem)
            arms[name] = lambda _i, c=config: self._bits(c, problem)
        self.benched.append((problem, tuple(arms)))
        reference = self._bits(None, problem)
        return BenchCase(arms=arms, gate=lambda out: fake_int8_bitwise_gate(out, reference))


class FakeInt8Plugin:
    """A plugin registering family ``fake_int8``, its lane ``fake_int8_lane`` and the
    ``int8_w8a8`` quantized linear (:func:`fake_int8_linear`).

    ``make_bench`` (e.g. :meth:`ScriptedBench.make_bench`) makes the family measurable.
    """

    def __init__(self, make_bench: Callable[..., Any] | None = None) -> None:
        self.make_bench = make_bench

    @hookimpl
    def oasr_register_families(self) -> list[Family]:
        return [fake_int8_family_record(self.make_bench)]

    @hookimpl
    def oasr_register_lanes(self) -> list[Lane]:
        return [fake_int8_lane_record()]

    @hookimpl
    def oasr_linear(self, dtype: str, quantization: str) -> Callable[..., Any] | None:
        if quantization != FAKE_INT8_QUANTIZATION or dtype not in FAKE_INT8_ACTIVATIONS:
            return None
        return fake_int8_linear


@pytest.fixture
def plugin_manager() -> OasrPluginManager:
    """A fresh plugin manager: no entry points loaded, not strict."""
    return make_plugin_manager(load_entrypoints=False, strict=False)


@pytest.fixture
def register_plugin(plugin_manager: OasrPluginManager) -> Iterator[Callable[..., Any]]:
    """``register(plugin, name=None) -> plugin`` on ``plugin_manager``; undone after the test."""
    registered: list[object] = []

    def register(plugin: object, name: str | None = None) -> object:
        plugin_manager.register(plugin, name=name)
        registered.append(plugin)
        plugin_manager.check_pending()
        return plugin

    yield register
    for plugin in reversed(registered):
        if plugin_manager.is_registered(plugin):
            plugin_manager.unregister(plugin)


@pytest.fixture
def fake_family(register_plugin: Callable[..., Any]) -> FakeFamilyPlugin:
    """A registered :class:`FakeFamilyPlugin` (plugin name ``fake``)."""
    return register_plugin(FakeFamilyPlugin(), name="fake")


@pytest.fixture
def fake_int8_family(register_plugin: Callable[..., Any]) -> FakeInt8Plugin:
    """A registered :class:`FakeInt8Plugin` (plugin name ``fake_int8``), not measurable."""
    return register_plugin(FakeInt8Plugin(), name="fake_int8")


@pytest.fixture
def cuda_like() -> Iterator[None]:
    """Every tensor reports CUDA device 0 to ``is_cuda`` and ``get_device`` while the test
    runs (see the module docstring); removed afterwards."""
    import torch

    names = ("is_cuda", "get_device")
    assert not any(name in torch.Tensor.__dict__ for name in names), \
        "cuda_like: torch.Tensor already overrides is_cuda or get_device"
    torch.Tensor.is_cuda = property(lambda self: True)
    torch.Tensor.get_device = lambda self: 0
    try:
        yield
    finally:
        for name in names:
            delattr(torch.Tensor, name)


def aten_calls(fn: Callable[[], Any]) -> list[str]:
    """The aten ops ``fn()`` dispatches, in order, by name (``aten.convolution.default``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[str] = []

    class Calls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(str(func))
            return func(*args, **(kwargs or {}))

    with Calls():
        fn()
    return calls


@pytest.fixture
def fake_distribution(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Path]]:
    """``make(name, *, version="1.0", entry_points={}, modules={}, group="oasr") -> Path``.

    Writes ``<name>-<version>.dist-info`` (METADATA, entry_points.txt) and the given modules
    (dotted name -> source) into a new directory on ``sys.path``; ``importlib.metadata`` then
    finds the distribution like an installed one. The modules are forgotten after the test.
    """
    modules_made: list[str] = []

    def make(name: str, *, version: str = "1.0", entry_points: Mapping[str, str] | None = None,
             modules: Mapping[str, str] | None = None, group: str = "oasr") -> Path:
        root = tmp_path_factory.mktemp(f"dist-{name}")
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        eps = "".join(f"{ep} = {target}\n" for ep, target in (entry_points or {}).items())
        (info / "entry_points.txt").write_text(f"[{group}]\n{eps}")
        for module, source in (modules or {}).items():
            path = root.joinpath(*module.split(".")).with_suffix(".py")
            for parent in path.relative_to(root).parents:
                (root / parent).mkdir(exist_ok=True)
                if parent != Path("."):
                    (root / parent / "__init__.py").touch()
            path.write_text(textwrap.dedent(source))
            modules_made.append(module)
        monkeypatch.syspath_prepend(str(root))
        return root

    yield make
    for module in modules_made:
        sys.modules.pop(module, None)


@pytest.fixture
def cli_runner(
    plugin_manager: OasrPluginManager, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Any]]:
    """``run(*args, plugin_manager=None, **invoke_kwargs) -> click.testing.Result``.

    Runs ``oasr <args>`` in-process on the test's manager (or the one given), with the user
    tuning tier disabled and exceptions propagating unless ``catch_exceptions=True``.
    """
    from click.testing import CliRunner

    from oasr_core import cli, runtime

    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    default_pm = plugin_manager
    runner = CliRunner()

    def run(*args: object, plugin_manager: OasrPluginManager | None = None, **kwargs: Any):
        kwargs.setdefault("catch_exceptions", False)
        state = cli.CliState(plugin_manager=plugin_manager or default_pm)
        return runner.invoke(cli.main, [str(a) for a in args], obj=state, **kwargs)

    yield run
    runtime.install_runtime(None)


def prebuilt_module(tmp_path_factory: pytest.TempPathFactory,
                    make_spec: Callable[[], Any]) -> Iterator[tuple[Any, Any]]:
    """``yield from`` it in a module-scoped fixture: ``make_spec()`` built by the core JIT
    (``oasr_core.jit.prebuild``, two jobs) into a fresh JIT directory, which stays the process's
    (``OASR_JIT_DIR``) until the fixture ends; yields ``(spec, build report)``."""
    from oasr_core import jit

    mp = pytest.MonkeyPatch()
    mp.setenv("OASR_JIT_DIR", str(tmp_path_factory.mktemp("jit")))
    try:
        spec = make_spec()
        (report,) = jit.prebuild([spec], jobs=2)
        yield spec, report
    finally:
        mp.undo()


def exported_symbols(library: Path) -> set[str]:
    """The dynamic symbols the shared library ``library`` defines (binutils' ``nm``); skips
    the calling test where ``nm`` is not installed."""
    import shutil

    if shutil.which("nm") is None:
        pytest.skip("binutils' nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(library)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def aot_pass_backend(graph_pass: Callable[[Any], Any], graphs: list[Any]) -> Callable[..., Any]:
    """A ``torch.compile`` backend that traces with AOTAutograd and Inductor's decompositions,
    runs ``graph_pass`` on the inference ATen graph (as the oasr backend does), appends that
    graph to ``graphs`` and runs it eagerly: a pass's rewrite, executed on any device."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._inductor.decomposition import select_decomp_table

    def fw(gm: Any, _example: Any) -> Any:
        graph_pass(gm.graph)
        gm.recompile()
        graphs.append(gm.graph)
        return gm.forward

    def backend(gm: Any, example: Any) -> Any:
        return aot_module_simplified(gm, example, fw_compiler=fw,
                                     decompositions=select_decomp_table())

    return backend


def family_cli(plugin: object, name: str) -> Callable[..., Any]:
    """``run(*args) -> click.testing.Result``: ``oasr <args>`` in-process on a fresh plugin
    manager holding only ``plugin`` (registered as ``name``, no entry points), exceptions
    propagating. For a family plugin's CLI tests."""
    from click.testing import CliRunner

    from oasr_core import cli

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(plugin, name=name)
    runner = CliRunner()

    def run(*args: object) -> Any:
        return runner.invoke(cli.main, [str(a) for a in args],
                             obj=cli.CliState(plugin_manager=pm), catch_exceptions=False)

    return run


def write_system_table(root: Path, family: Family, lane: str, arch: str,
                       configs: Mapping[str, Config], entries: Mapping[str, Any]) -> Path:
    """Write a hand-written system-tier tuning file ``<root>/system/<arch>/<family>.json``
    (schema 2, the family's current soft validators, ``configs`` by id, ``entries`` as the
    file holds them: ``{key: {"regions": [...], "points": {...}}}``); its path. Point
    ``OASR_TUNE_SYSTEM_DB`` at ``<root>/system`` to serve it."""
    raw = {
        "schema_version": 2, "family": family.name, "family_schema_version": 1,
        "arch": {"family": arch, "lane": lane},
        "validators": {"soft": dict(family.soft_validators())},
        "configs": {cid: config.to_json() for cid, config in configs.items()},
        "entries": dict(entries),
    }
    path = root / "system" / arch / f"{family.name}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(raw, indent=1))
    return path


def write_census(path: Path, points: Iterable[Mapping[str, Any]]) -> Path:
    """Write a census file (schema 1) of ``points`` (``{"family", "op", "dtype", "dims", "M",
    "calls", "weight"}`` rows, ``"point"`` optional) at ``path``; ``path``."""
    path.write_text(json.dumps({"schema_version": 1, "points": list(points)}))
    return path


def replay_scripted_build(run: Callable[..., Any], root: Path, family: Family, lane: Lane,
                          time_us: TimeModel, census: Path | Sequence[Mapping[str, Any]],
                          arch: str = "sm90", max_points: int = 4) -> tuple[Path, Any]:
    """Build ``family``'s live table for ``census`` (a census file, or its points, written to
    ``root/census.json``) on ``lane`` with a :class:`ScriptedBench` timing arms by ``time_us``
    (nothing compiled), then replay its measurement log through ``oasr tune build
    --from-log`` (``run``, e.g. :func:`family_cli`) and assert the replay is the same bytes;
    ``(log path, the replayed table)``."""
    from oasr_core import build
    from oasr_core.database import read_tuning_file

    if not isinstance(census, Path):
        census = write_census(root / "census.json", census)

    lane = attrs.evolve(lane, jit_specs=None)  # a scripted build compiles nothing
    bench = ScriptedBench(time_us)
    family = attrs.evolve(family, make_bench=bench.make_bench)
    shapes = build.read_censuses([census], family)
    live = root / "live" / arch / f"{family.name}.json"
    build.build_live(shapes, family=family, lane=lane, arch=arch, out=live, timer=bench.timer,
                     soft=dict(family.soft_validators()),
                     options=build.BuildOptions(max_points=max_points))
    log = live.parent / "measurements" / f"{family.name}.jsonl"
    out = root / "replay.json"
    result = run("tune", "build", "--from-log", log, "--fresh", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == live.read_bytes(), "the replay differs from the build"
    return log, read_tuning_file(out)


@attrs.frozen
class Contract:
    """What the contract checks look at: one plugin's records in a strict registry."""

    registry: Registry
    plugin: str
    families: tuple[Family, ...]
    lanes: tuple[Lane, ...]
    problems: tuple[Problem, ...]
    modules: tuple[str, ...]

    @classmethod
    def build(cls, plugin: object, *, requires: Sequence[object] = (),
              problems: Sequence[Problem] = (), modules: Sequence[str] = ()) -> Contract:
        """Register ``requires`` then ``plugin`` on a fresh strict manager and collect."""
        pm = make_plugin_manager(load_entrypoints=False, strict=True)
        for other in requires:
            pm.register(other)
        name = pm.register(plugin)
        pm.check_pending()
        registry = Registry.from_plugin_manager(pm, strict=True)
        families = tuple(f for f in registry.families.values()
                         if registry.provider("family", f.name).plugin == name)
        lanes = tuple(lane for lane in registry.lanes.values()
                      if registry.provider("lane", lane.name).plugin == name)
        return cls(registry, str(name), families, lanes,
                   tuple(problems) or _default_problems(registry, lanes),
                   tuple(dict.fromkeys((*_home_module(plugin), *modules))))


def _home_module(plugin: object) -> tuple[str, ...]:
    """The module a plugin lives in, unless it is a test module (not importable on its own)."""
    if isinstance(plugin, types.ModuleType):
        return (plugin.__name__,)
    module = sys.modules.get(type(plugin).__module__)
    filename = Path(getattr(module, "__file__", None) or "__main__").name
    if module is None or module.__name__ == "__main__" or filename.startswith(
            ("test_", "conftest")) or filename.endswith("_test.py"):
        return ()
    return (module.__name__,)


def _default_problems(registry: Registry, lanes: Sequence[Lane]) -> tuple[Problem, ...]:
    out = []
    for fam in map(registry.family, dict.fromkeys(lane.family for lane in lanes)):
        for n, m in ((256, 1), (256, 4096), (4096, 64), (4096, 4096)):
            for k in (64, 4096):
                dims = tuple((d, n if i == 0 else k) for i, d in enumerate(fam.dims))
                out.append(Problem(fam.name, fam.ops[0], fam.dtypes[0], dims, m))
    return tuple(out)


def check_records_validate(contract: Contract) -> None:
    """The plugin registers something, and every record passes its validators again."""
    assert contract.families or contract.lanes, f"plugin {contract.plugin!r} registers nothing"
    for record in (*contract.families, *contract.lanes):
        attrs.validate(record)
    for lane in contract.lanes:
        extra = set(lane.default_on) - set(lane.arch_families)
        assert not extra, f"lane {lane.name}: default_on {sorted(extra)} it does not run on"


def check_config_space(contract: Contract) -> None:
    """Every lane has configs, and its default config is statically feasible."""
    for lane in contract.lanes:
        assert lane.config_space, f"lane {lane.name}: empty config space"
        assert lane.is_feasible(lane.default), f"lane {lane.name}: default config is infeasible"
        bad = [c.id for c in lane.config_space if not lane.is_feasible(c)]
        assert not bad, f"lane {lane.name}: registered configs {bad[:5]} are infeasible"
        if lane.is_available is not None:  # before any module is loaded, all are available
            missing = [c.id for c in lane.config_space if not lane.is_available(c)]
            assert not missing, f"lane {lane.name}: {missing[:5]} unavailable with none loaded"


def check_configs_round_trip(contract: Contract) -> None:
    """Each config survives ``to_json`` -> JSON text -> ``from_json`` unchanged."""
    for lane in contract.lanes:
        for config in lane.config_space:
            try:
                raw = json.loads(json.dumps(config.to_json()))
            except (TypeError, ValueError) as exc:
                raise AssertionError(f"lane {lane.name}: {config.id} params are not JSON: "
                                     f"{exc}") from exc
            back = Config.from_json(config.id, raw)
            assert back == config, f"lane {lane.name}: {config.id} comes back as {back!r}"
            assert thaw(back.params) == thaw(config.params), f"{config.id}: params changed"


def check_predicates_pure(contract: Contract) -> None:
    """Feasibility predicates return bools, the same answer twice, and mutate nothing."""
    for lane in contract.lanes:
        for config in lane.config_space:
            before = json.dumps(config.to_json(), sort_keys=True)
            answers = [lane.is_feasible(config) for _ in range(2)]
            assert all(isinstance(a, bool) for a in answers), (
                f"{lane.name}: is_feasible({config.id}) is not a bool")
            assert answers[0] == answers[1], f"{lane.name}: is_feasible({config.id}) changed"
            for problem in contract.problems:
                if problem.family != lane.family:
                    continue
                copy = attrs.evolve(problem)
                answers = [lane.supports(config, problem) for _ in range(2)]
                assert all(isinstance(a, bool) for a in answers), (
                    f"{lane.name}: supports({config.id}, {problem}) is not a bool")
                assert answers[0] == answers[1], f"{lane.name}: supports({config.id}) changed"
                assert problem == copy, f"{lane.name}: supports({config.id}) mutated the problem"
            after = json.dumps(config.to_json(), sort_keys=True)
            assert before == after, f"{lane.name}: a predicate mutated config {config.id}"


_IMPORT_PROBE = """
import importlib, json, sys
spawned = []
def audit(event, args):
    if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"):
        spawned.append(event + " " + repr(args)[:200])
sys.addaudithook(audit)
for name in sys.argv[1:]:
    importlib.import_module(name)
torch = sys.modules.get("torch")
cuda = bool(torch is not None and torch.cuda.is_initialized())
print(json.dumps({"spawned": spawned, "cuda": cuda}))
"""


def check_jit_module_lazy(contract: Contract) -> None:
    """JIT modules are classes, and importing the plugin's modules compiles nothing.

    The modules are imported in a fresh interpreter that records every process it would start
    (a compiler run) and whether CUDA was initialised.
    """
    for lane in contract.lanes:
        jit = lane.jit_module
        assert jit is None or isinstance(jit, type), (
            f"lane {lane.name}: jit_module must be a class the core instantiates, got a "
            f"{type(jit).__name__} instance")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, *contract.modules], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"importing {contract.modules} failed:\n{proc.stderr}"
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not probe["spawned"], f"importing {contract.modules} started {probe['spawned']}"
    assert not probe["cuda"], f"importing {contract.modules} initialised CUDA"


# Purity first: the space checks ask the predicates, which means nothing if they are impure;
# the round trip before both, since they serialise configs.
CONTRACT_CHECKS: tuple[Callable[[Contract], None], ...] = (
    check_records_validate, check_configs_round_trip, check_predicates_pure,
    check_config_space, check_jit_module_lazy,
)


def check_family_contract(plugin: object, **kwargs: Any) -> Contract:
    """Run every contract check on ``plugin``; keyword arguments go to :meth:`Contract.build`."""
    contract = Contract.build(plugin, **kwargs)
    for check in CONTRACT_CHECKS:
        check(contract)
    return contract


class FamilyContract:
    """Subclass as ``TestGemmContract(FamilyContract)`` with ``plugin = oasr_gemm.hooks``.

    ``requires`` lists plugins the records depend on (a lane package needs its family's
    plugin), ``problems`` the shapes to probe predicates with (default: a grid over the
    family's dims), ``modules`` further modules whose import must compile nothing.
    ``entry_point`` (``("gemm", "oasr_gemm.hooks")``) adds a check that the distribution
    declares it, in its installed metadata or in ``pyproject`` (the plugin's pyproject.toml).
    """

    plugin: ClassVar[object]
    requires: ClassVar[Sequence[object]] = ()
    problems: ClassVar[Sequence[Problem]] = ()
    modules: ClassVar[Sequence[str]] = ()
    entry_point: ClassVar[tuple[str, str] | None] = None
    pyproject: ClassVar[Path | None] = None

    def test_entry_point_is_declared(self) -> None:
        if self.entry_point is None:
            pytest.skip("no entry_point named for this plugin")
        check_entry_point(*self.entry_point, pyproject=self.pyproject)

    @pytest.fixture(scope="class")
    @classmethod
    def contract(cls, request: pytest.FixtureRequest) -> Contract:
        return Contract.build(cls.plugin, requires=cls.requires, problems=cls.problems,
                              modules=cls.modules)

    @pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__[6:])
    def test_contract(self, contract: Contract, check: Callable[[Contract], None]) -> None:
        check(contract)


def family_contract(plugin: Any, name: str, test_file: str, *, submodules: str = "",
                    **fields: Any) -> type:
    """A :class:`FamilyContract` subclass for the hooks module ``plugin`` of family ``name``:
    its entry point ``name = "<plugin's module>"`` declared in the plugin's ``pyproject.toml``
    (the folder above the one holding ``test_file``), and ``modules`` the plugin's package and
    its ``submodules`` (names relative to the package, white space apart); further keyword
    arguments set ``problems`` or ``requires``. Bind it to a ``Test*`` name of the test module
    (``TestConv1dContract = family_contract(oasr_conv1d.hooks, "conv1d", __file__)``)."""
    package = plugin.__name__.rpartition(".")[0]
    modules = (package, *(f"{package}.{m}" for m in submodules.split()))
    return type(f"Test{name.capitalize()}Contract", (FamilyContract,), {
        "plugin": plugin, "entry_point": (name, plugin.__name__), "modules": modules,
        "pyproject": Path(test_file).parents[1] / "pyproject.toml", **fields})


def check_activation_family(plugin: Any, name: str,
                            activations: Sequence[str] = ("relu", "gelu", "silu")) -> Family:
    """The one family record ``plugin`` registers, checked as a family whose ops are ``name``
    and ``name_<activation>`` per activation, keyed on the dynamic axis M with exact points,
    with the ``impl_hash`` (16 characters) and ``cutlass`` soft validators; returned for the
    family's own checks."""
    (family,) = plugin.oasr_register_families()
    assert family.name == name and family.stem == name, (family.name, family.stem)
    assert family.ops == (name, *(f"{name}_{a}" for a in activations)), family.ops
    assert family.dynamic_axis == "M" and family.exact_points, family
    soft = family.soft_validators()
    assert set(soft) == {"impl_hash", "cutlass"} and len(soft["impl_hash"]) == 16, soft
    return family


def check_entry_point(name: str, value: str, *, pyproject: Path | None = None) -> None:
    """The ``oasr`` entry point ``name = "value"`` is installed, or declared in ``pyproject``
    when the package is not installed with metadata."""
    from importlib import metadata

    declared = [ep for ep in metadata.entry_points(group="oasr") if ep.name == name]
    if declared:
        assert declared[0].value == value, (
            f"entry point {name!r} is {declared[0].value!r}, expected {value!r}")
        return
    assert pyproject is not None, f"entry point {name!r} is not installed"
    text = pyproject.read_text()
    assert f'[project.entry-points.oasr]\n{name} = "{value}"' in text, (
        f"{pyproject} does not declare the oasr entry point {name} = {value!r}")


def register_family_markers(config: pytest.Config) -> None:
    """Register the markers a family plugin's tests use (``gpu``, ``compile``)."""
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; run on the H200 with -m gpu")
    config.addinivalue_line(
        "markers", "compile: runs nvcc on real CUTLASS units (a minute or two on 2 cores)")


def isolated_plugin_runtime(monkeypatch: pytest.MonkeyPatch,
                            tmp_path_factory: pytest.TempPathFactory, hooks: object, name: str,
                            serving: Sequence[Any] = ()) -> Iterator[Any]:
    """A family plugin test's setting, as a generator for an autouse fixture to ``yield
    from``: the user tier off, an empty system tier, a fresh runtime holding only ``hooks``
    (registered as ``name``), and each :class:`oasr_core.kit.Serving` in ``serving`` with its
    counters zeroed and its libraries forgotten (before and after). Yields the runtime.
    """
    from oasr_core import runtime

    monkeypatch.setenv("OASR_TUNE_USER_DB", "off")
    monkeypatch.setenv("OASR_TUNE_SYSTEM_DB", str(tmp_path_factory.mktemp("empty-system")))
    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(hooks, name=name)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    for s in serving:
        s.reset_stats()
        s.libraries.forget()
    yield rt
    runtime.install_runtime(None)
    for s in serving:
        s.libraries.forget()



def plugin_runtime_fixture(package: str, name: str) -> Any:
    """An autouse fixture for a family plugin's ``conftest.py`` (``_isolated =
    plugin_runtime_fixture("oasr_<family>", "<family>")``): :func:`isolated_plugin_runtime`
    with ``<package>.hooks`` registered as ``name`` and ``<package>.launch.SERVING`` reset;
    each test gets the plugin alone on a fresh runtime, no developer tuning file leaking in."""
    @pytest.fixture(autouse=True)
    def _isolated(monkeypatch: pytest.MonkeyPatch,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        hooks = importlib.import_module(f"{package}.hooks")
        launch = importlib.import_module(f"{package}.launch")
        yield from isolated_plugin_runtime(monkeypatch, tmp_path_factory, hooks, name,
                                           serving=(launch.SERVING,))

    return _isolated

class ScriptedPlugin:
    """A real plugin's families and lanes (its ``hooks`` module), measured by a scripted
    device: each family's ``make_bench`` is ``bench.make_bench`` and no lane has JIT modules
    (a live build would otherwise compile the lanes' whole spaces first)."""

    def __init__(self, hooks: Any, bench: ScriptedBench) -> None:
        self.hooks = hooks
        self.bench = bench

    @hookimpl
    def oasr_register_families(self):
        return [attrs.evolve(f, make_bench=self.bench.make_bench)
                for f in self.hooks.oasr_register_families()]

    @hookimpl
    def oasr_register_lanes(self):
        return [attrs.evolve(lane, jit_specs=None) for lane in self.hooks.oasr_register_lanes()]


def install_scripted(hooks: Any, bench: ScriptedBench, name: str) -> Any:
    """A runtime of the real plugin ``hooks`` alone, measured by ``bench`` (a
    :class:`ScriptedPlugin` registered as ``name``), installed as the process's runtime
    (undo with ``oasr_core.runtime.install_runtime(None)``)."""
    from oasr_core import runtime

    pm = make_plugin_manager(load_entrypoints=False)
    pm.register(ScriptedPlugin(hooks, bench), name=name)
    rt = runtime.Runtime(pm=pm)
    runtime.install_runtime(rt)
    return rt


def pretend_cuda_device(index: int = 0, arch: str = "sm90", sm_count: int = 132) -> None:
    """Make the process runtime take CUDA device ``index`` for an ``arch`` GPU with
    ``sm_count`` SMs (selection and heuristics ask the runtime, which asks torch once)."""
    from oasr_core.runtime import DeviceFacts, get_runtime

    get_runtime().devices[index] = DeviceFacts(index=index, arch=arch, sm_count=sm_count)


def check_reload_refreshes(serving: Any, lane: str, arch: str, held: Mapping[Any, Any],
                           reference_more: Callable[[], None]) -> None:
    """A family's production module is kept across a reload while the tiers want nothing it
    lacks, and dropped by the reload after ``reference_more()`` makes the tiers reference a
    config that ``held`` (the module's kernels) lacks; a harness's library is never dropped.
    """
    from oasr_core import runtime

    serving.bind()
    serving.libraries.adopt(lane, arch, held)
    runtime.reload()
    assert (lane, arch) in dict(serving.libraries.items()), (
        "a reload with unchanged tiers dropped the production module")
    reference_more()
    runtime.reload()
    assert (lane, arch) not in dict(serving.libraries.items()), (
        "a reload whose tiers reference a config the module lacks kept the module")
    serving.libraries.install(lane, arch, held)
    runtime.reload()
    assert (lane, arch) in dict(serving.libraries.items()), "a harness's library was dropped"
