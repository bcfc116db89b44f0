"""GPU tests of each W8A8 format's GEMMs (run on the H200 with ``pytest -m gpu``): every config
of both lanes, both ops, graphs, selection, torch.compile, the counted torch path and the bench
arms, once per format (int8 ``scaled_mm``, fp8 e4m3 ``scaled_mm_fp8``).

Every config of both lanes that runs on this device is compiled (the lanes' full modules), then
run for both ops at several shapes (M = 1, 16, 100, 2152; N that no tile divides; K up to 8192
for Stream-K and deep accumulation), with and without bias, fp16 and bf16 outputs, the
out_scale as a value and as a device tensor, eagerly and under CUDA-graph capture. What an
output is checked against is the format's claim (:class:`Int8`, :class:`E4M3`):

- int8: bitwise (``torch.equal``) the torch reference -- the exact int32 accumulator, then the
  same fp32 ops in the same order (:mod:`oasr_scaled_mm.reference`); the quant op saturates to
  [-128, 127].
- fp8 e4m3: within the stated bound of the fp32 reference of the same operands
  (:mod:`oasr_scaled_mm_fp8.numerics`), fast-accumulation, promoted and staged alike; the quant
  op saturates to +-448 and keeps NaN. A tolerance claim, not a bitwise one: the test of the
  fast versus the promoted main loop asserts both are within the bound and reports how far
  apart they are.

What only one format has (int8: every variant gives the same bits, the exact torch path below
``_int_mm``'s rows; fp8: saturation and NaN per tile, fast against promoted accumulation, its
quantizer kernel, the quantized linear's unquantized route) is a test named for it. The fp8 rows
carry the ``fp8`` mark (``-m "gpu and fp8"``) and are skipped where ``oasr_scaled_mm_fp8`` is not
installed or the GPU is older than sm89; each fp8 test runs on a fresh runtime holding the fp8
plugin alone, as that plugin's own tests do.
"""

from __future__ import annotations

import abc
import functools
import importlib
import math
import os

import pytest
import torch
from oasr_core.kernel_testing import device_arch, gpu_marks

pytestmark = gpu_marks()

SHAPES = ((1, 768, 256), (16, 784, 512), (100, 1536, 1024), (2152, 784, 256), (64, 256, 8192))
"""(M, N, K); 784 = 16 x 49 is a multiple of no tile width; K = 8192 for Stream-K and deep
accumulation."""
E4M3_DTYPE = torch.float8_e4m3fn


class UnderTest(abc.ABC):
    """One W8A8 format under test: its family's modules and how its outputs are checked."""

    name: str
    package: str
    out_dtypes: tuple[torch.dtype, ...]
    """The mm op's output dtypes, its default first."""
    quant_dtype: torch.dtype
    sentinels: tuple[str, ...]
    """The sentinel arms its bench offers (names of :class:`oasr_core.types.Sentinel`)."""
    bias_dtype: torch.dtype | None
    """The 16-bit bias the selection test passes (None: the output dtype); made fp32 exactly."""

    def __init__(self) -> None:
        module = importlib.import_module
        self.ops = module(self.package)
        self.cs = module(f"{self.package}.config_space")
        self.jit = module(f"{self.package}.jit")
        self.launch = module(f"{self.package}.launch")
        self.numerics = module(f"{self.package}.numerics")
        self.reference = module(f"{self.package}.reference")
        self.supports = module(f"{self.package}.feasibility").supports
        self.record = next(v for v in vars(module(f"{self.package}.format")).values()
                           if type(v).__name__ == "Format" and v.package == self.package)
        self.mm, self.quant = (getattr(self.ops, op) for op in self.cs.OPS)

    def fits(self, config, m, n, k, op) -> bool:
        from oasr_core.types import Problem

        return self.supports(config, Problem(self.cs.FAMILY, op, self.record.dtype,
                                             (("N", n), ("K", k)), m))

    def value(self, a, w, a_scale, w_scale, bias=None):
        """The fp32 value before the output rounding."""
        r = self.reference
        return r.scale(r.exact_acc(a.reshape(-1, a.shape[-1]), w), a_scale, w_scale, bias)

    @abc.abstractmethod
    def mm_want(self, a, w, a_scale, w_scale, bias, out_dtype):
        """What the mm op's output is checked against."""

    @abc.abstractmethod
    def quant_want(self, value, out_scale):
        """What the quant op's output is checked against, from the fp32 ``value``."""

    @abc.abstractmethod
    def check(self, got, want, what) -> float:
        """Assert the format's claim of ``got`` against ``want``; the error it measured."""

    @abc.abstractmethod
    def saturated(self, q) -> int:
        """How many of the quant op's outputs ``q`` sit at the saturation value."""

    def explain(self, out, op, a, w, a_scale, w_scale, bias) -> str:
        """More words for a bench arm the gate refused."""
        return ""


class Int8(UnderTest):
    """int8: bitwise the torch reference (:mod:`oasr_scaled_mm.reference`)."""

    name, package = "int8", "oasr_scaled_mm"
    out_dtypes, quant_dtype = (torch.float16, torch.bfloat16), torch.int8
    sentinels = ("HEURISTIC", "TORCH")
    bias_dtype = torch.float16

    def mm_want(self, a, w, a_scale, w_scale, bias, out_dtype):
        return self.reference.scaled_mm(a, w, a_scale, w_scale, bias, out_dtype)

    def quant_want(self, value, out_scale):
        return self.reference.quantize_output(value, out_scale)

    def check(self, got, want, what) -> float:
        verdict = self.numerics.numerics_gate(got, want)
        assert verdict, f"{what}: {verdict.reason}"
        return 0.0

    def saturated(self, q) -> int:
        return int((q == 127).sum() + (q == -128).sum())

    def explain(self, out, op, a, w, a_scale, w_scale, bias) -> str:
        # Which side is off: the arm or the gate's yardstick (the heuristic's output).
        if op != self.cs.OP_MM:
            return ""
        same = bool(torch.equal(out, self.value(a, w, a_scale, w_scale, bias).to(out.dtype)))
        return f"; the arm {'equals' if same else 'differs from'} the exact reference"


class E4M3(UnderTest):
    """fp8 e4m3: within the bound of the fp32 reference (:mod:`oasr_scaled_mm_fp8.numerics`)."""

    name, package = "fp8", "oasr_scaled_mm_fp8"
    out_dtypes, quant_dtype = (torch.bfloat16, torch.float16), E4M3_DTYPE
    sentinels = ("HEURISTIC", "TORCH", "UNQUANTIZED")
    bias_dtype = None

    def mm_want(self, a, w, a_scale, w_scale, bias, out_dtype):
        return self.reference.scaled_mm_value(a, w, a_scale, w_scale, bias)

    def quant_want(self, value, out_scale):
        return (value / out_scale).clamp(-448, 448)

    def check(self, got, want, what) -> float:
        verdict = self.numerics.within(got, want)
        assert verdict, f"{what}: {verdict.reason} (worst {verdict.error:.2e} of max |ref|)"
        return verdict.error

    def saturated(self, q) -> int:
        return int((q.float().abs() == 448).sum())


FORMATS = {"int8": Int8, "fp8": E4M3}


def _installed(name: str) -> bool:
    try:
        importlib.import_module(FORMATS[name].package)
    except ImportError:
        return False
    return True


def _param(name: str, *values):
    marks = [pytest.mark.fp8] if name == "fp8" else []
    return pytest.param(name, *values, marks=marks, id="-".join((name, *values)))


def _cases() -> list:
    """``(format, lane, config id)`` of every config each installed format runs here."""
    arch = device_arch()
    if arch is None:
        return []
    out = []
    for name in FORMATS:
        if not _installed(name):
            continue
        package = FORMATS[name].package
        cs = importlib.import_module(f"{package}.config_space")
        jit = importlib.import_module(f"{package}.jit")
        out += [_param(name, lane, c.id) for lane in cs.LANES
                for c in jit.lane_configs(lane, arch)]
    return out


CASES = _cases()


def _tested(name: str, monkeypatch, tmp_path_factory):
    """The format under test, as a fixture's generator; fp8 on its own fresh runtime."""
    if name == "fp8":
        pytest.importorskip("oasr_scaled_mm_fp8")
        if torch.cuda.get_device_capability() < (8, 9):
            pytest.skip("fp8 needs sm89+")
    tested = FORMATS[name]()
    if name == "int8":   # the conftest's runtime holds the int8 plugin alone
        yield tested
        return
    from oasr_core.testing import isolated_plugin_runtime

    setting = isolated_plugin_runtime(
        monkeypatch, tmp_path_factory, importlib.import_module(f"{tested.package}.hooks"),
        tested.cs.FAMILY, serving=(tested.launch.SERVING,))
    next(setting)
    yield tested
    next(setting, None)


@pytest.fixture(params=[_param(name) for name in FORMATS])
def fmt(request, monkeypatch, tmp_path_factory):
    yield from _tested(request.param, monkeypatch, tmp_path_factory)


@pytest.fixture
def int8(monkeypatch, tmp_path_factory):
    yield from _tested("int8", monkeypatch, tmp_path_factory)


@pytest.fixture
def fp8(monkeypatch, tmp_path_factory):
    yield from _tested("fp8", monkeypatch, tmp_path_factory)


@functools.cache
def _kernels(name: str) -> dict:
    """``(op, config id) -> Kernel`` of every config of the format's lanes on this device."""
    from oasr_core import jit as core_jit

    tested = FORMATS[name]()
    arch = device_arch()
    lanes = [lane for lane in tested.cs.LANES if tested.jit.lane_configs(lane, arch)]
    specs = [tested.jit.full_spec(lane, arch) for lane in lanes]
    core_jit.prebuild(specs, jobs=os.cpu_count())
    found = {}
    for lane, spec in zip(lanes, specs, strict=True):
        found.update(tested.launch.bind_all(core_jit.load(spec, build_missing=False),
                                            tested.jit.lane_configs(lane, arch)))
    return found


def _kernel(fmt: UnderTest, op: str, lane: str, cid: str):
    kernels = _kernels(fmt.name)
    if (op, cid) not in kernels:
        pytest.fail(f"{lane}/{cid}: unit {fmt.cs.unit_name(fmt.cs.config(lane, cid), op)} did "
                    "not compile or load")
    return kernels[(op, cid)]


@functools.cache
def _operands(name, m, n, k, bias, seed):
    return FORMATS[name]().numerics.make_operands(m, n, k, bias=bias, device="cuda", seed=seed)


def _captured(step, stream):
    """``step`` run once on ``stream`` (warm-up), then captured there: the graph and what the
    captured call returned."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = step()
    return graph, out


@pytest.mark.parametrize(("fmt", "lane", "cid"), CASES, indirect=["fmt"])
def test_config_keeps_the_format_claim_for_both_ops(fmt, lane, cid):
    config = fmt.cs.config(lane, cid)
    ran = 0
    for i, (m, n, k) in enumerate(SHAPES):
        a, a_scale, w, w_scale, bias = _operands(fmt.name, m, n, k, i % 2 == 0, i)
        if fmt.fits(config, m, n, k, fmt.cs.OP_MM):
            mm = _kernel(fmt, fmt.cs.OP_MM, lane, cid)
            for out_dtype in fmt.out_dtypes:
                got = mm.run(a, w, a_scale, w_scale, bias, out_dtype=out_dtype)
                want = fmt.mm_want(a, w, a_scale, w_scale, bias, out_dtype)
                torch.cuda.synchronize()
                fmt.check(got, want, f"{cid} {out_dtype} m={m} n={n} k={k} "
                                     f"bias={bias is not None}")
                ran += 1
        if fmt.fits(config, m, n, k, fmt.cs.OP_QUANT):
            quant = _kernel(fmt, fmt.cs.OP_QUANT, lane, cid)
            value = fmt.value(a, w, a_scale, w_scale, bias)
            scale = fmt.numerics.out_scale_for(value) * 0.5      # half the range: some saturate
            want = fmt.quant_want(value, scale)
            by_value = quant.run(a, w, a_scale, w_scale, bias, out_scale=scale)
            by_tensor = quant.run(a, w, a_scale, w_scale, bias,
                                  out_scale=torch.tensor([scale], device="cuda"))
            torch.cuda.synchronize()
            assert by_value.dtype == fmt.quant_dtype
            fmt.check(by_value, want, f"{cid} quant m={m} n={n} k={k}")
            assert torch.equal(by_value.view(torch.uint8), by_tensor.view(torch.uint8)), \
                f"{cid} quant (device out_scale) m={m}"
            assert fmt.saturated(by_value) > 0 or m * n < 2000
            ran += 1
    assert ran >= 4, f"{cid}: only {ran} cases fit"


@pytest.mark.parametrize(("fmt", "lane", "cid"), CASES, indirect=["fmt"])
def test_config_under_cuda_graph_capture(fmt, lane, cid):
    config = fmt.cs.config(lane, cid)
    m, n, k = 1000, 784, 1024
    a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(m, n, k, device="cuda", seed=5)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    qout = torch.empty(m, n, dtype=fmt.quant_dtype, device="cuda")
    scale_t = torch.tensor([0.02], device="cuda")
    mm = _kernel(fmt, fmt.cs.OP_MM, lane, cid)
    quant = (_kernel(fmt, fmt.cs.OP_QUANT, lane, cid)
             if fmt.cs.serves(config, fmt.cs.OP_QUANT) else None)   # int8 Stream-K: none
    stream = torch.cuda.Stream()
    fmt.launch.reserve_workspace(stream=stream)

    def step():
        mm.run(a, w, a_scale, w_scale, bias, out_dtype=torch.bfloat16, out=out)
        if quant is not None:
            quant.run(a, w, a_scale, w_scale, bias, out_scale=scale_t, out=qout)

    graph, _ = _captured(step, stream)
    fresh, fresh_scale = fmt.numerics.make_operands(m, n, k, device="cuda", seed=6)[:2]
    a.copy_(fresh)
    a_scale.copy_(fresh_scale)
    scale_t.fill_(0.03)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    fmt.check(out, fmt.mm_want(a, w, a_scale, w_scale, bias, torch.bfloat16),
              f"{cid} graph replay")
    if quant is not None:
        fmt.check(qout, fmt.quant_want(fmt.value(a, w, a_scale, w_scale, bias), 0.03),
                  f"{cid} quant graph replay")


@pytest.mark.parametrize(("fmt", "lane", "cid"), [c for c in CASES if c.values[0] == "fp8"],
                         indirect=["fmt"])
def test_fp8_quant_saturates_and_keeps_nan(fmt, lane, cid):
    a, a_scale, w, w_scale, bias = _operands(fmt.name, 100, 1536, 1024, True, 3)
    quant = _kernel(fmt, fmt.cs.OP_QUANT, lane, cid)
    tiny = quant.run(a, w, a_scale, w_scale, bias, out_scale=1e-6).float()
    nan = quant.run(a, w, a_scale, w_scale, bias, out_scale=math.nan).float()
    torch.cuda.synchronize()
    assert float(tiny.abs().amax()) == 448.0 and not tiny.isnan().any()
    assert nan.isnan().all()


def test_int8_every_variant_gives_the_same_bits(int8):
    m, n, k = 300, 784, 2048
    a, a_scale, w, w_scale, bias = int8.numerics.make_operands(m, n, k, device="cuda", seed=7)
    kernels = _kernels(int8.name)
    outs = {cid: kernels[(int8.cs.OP_MM, cid)].run(a, w, a_scale, w_scale, bias)
            for (op, cid) in kernels if op == int8.cs.OP_MM}
    torch.cuda.synchronize()
    first = next(iter(outs.values()))
    assert all(torch.equal(o, first) for o in outs.values())
    assert torch.equal(first.cpu(), int8.reference.scaled_mm(a.cpu(), w.cpu(), a_scale.cpu(),
                                                             w_scale.cpu(), bias.cpu()))


@pytest.mark.fp8
def test_fp8_fast_and_promoted_accumulation_are_both_within_the_bound_at_deep_k(fp8):
    """The tolerance claim's reason: the fast main loop and the promoted one differ in bits."""
    a, a_scale, w, w_scale, bias = _operands(fp8.name, 512, 1024, 8192, False, 8)
    ref = fp8.reference.scaled_mm_value(a, w, a_scale, w_scale, bias)
    kernels = _kernels(fp8.name)
    errors = {}
    for cid in ("pp_128x128x128_c1x1_fa", "pp_128x128x128_c1x1"):
        if (fp8.cs.OP_MM, cid) in kernels:
            got = kernels[(fp8.cs.OP_MM, cid)].run(a, w, a_scale, w_scale, bias)
            torch.cuda.synchronize()
            errors[cid] = fp8.check(got, ref, cid)
    if not errors:
        pytest.skip("no sm90 lane on this device")
    print("worst error / max|ref| at K=8192:", errors)


@pytest.mark.parametrize("out_index", [0, 1], ids=["default_out", "other_out"])
def test_ops_through_selection(fmt, out_index):
    out_dtype = fmt.out_dtypes[out_index]
    for m, n, k in ((1, 768, 256), (16, 1536, 512), (2152, 768, 1024)):
        a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(m, n, k, device="cuda",
                                                                  seed=m)
        x = a.view(2, m // 2, k) if m % 2 == 0 else a
        b16 = bias.to(fmt.bias_dtype or out_dtype)
        got = fmt.mm(x, w, a_scale, w_scale, b16, out_dtype=out_dtype)
        fmt.check(got.view(m, n), fmt.mm_want(a, w, a_scale, w_scale, b16, out_dtype),
                  f"{fmt.cs.OP_MM} {m}")
        out = torch.empty(*x.shape[:-1], n, dtype=fmt.quant_dtype, device="cuda")
        q = fmt.quant(x, w, a_scale, w_scale, 0.05, None, out=out)
        assert q is out
        fmt.check(q.view(m, n), fmt.quant_want(fmt.value(a, w, a_scale, w_scale), 0.05),
                  f"{fmt.cs.OP_QUANT} {m}")
        assert fmt.ops.select_config(n, k, m) is not None
    assert fmt.ops.stats() == {}, fmt.ops.stats()


def test_unsupported_inputs_take_the_counted_torch_path(fmt):
    a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(64, 200, 256, device="cuda")
    fmt.check(fmt.mm(a, w, a_scale, w_scale, bias),
              fmt.mm_want(a, w, a_scale, w_scale, bias, fmt.out_dtypes[0]), "unaligned N")
    a2, s2, w2, ws2, _ = fmt.numerics.make_operands(64, 256, 256, device="cuda")
    strided = a2.t().contiguous().t()
    fmt.check(fmt.mm(strided, w2, s2, ws2), fmt.mm_want(a2, w2, s2, ws2, None, fmt.out_dtypes[0]),
              "non-contiguous")
    assert fmt.ops.stats() == {"torch:unaligned": 1, "torch:noncontiguous": 1}


def test_int8_torch_path_is_exact_below_int_mm_rows(int8):
    """The torch path's exact accumulator below ``_int_mm``'s 17 rows."""
    for m in (1, 16):
        a, s, w, ws, _ = int8.numerics.make_operands(m, 200, 256, device="cuda", seed=m)
        assert torch.equal(int8.quant(a, w, s, ws, 0.02).cpu(),
                           int8.reference.scaled_mm_quant(a.cpu(), w.cpu(), s.cpu(), ws.cpu(),
                                                          0.02))
    assert int8.ops.stats() == {"torch:unaligned": 2}


def test_a_quantized_two_layer_step_inside_a_cuda_graph(fmt):
    m, n, k = 640, 512, 768
    a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(m, n, k, device="cuda", seed=9)
    w2, ws2 = fmt.numerics.make_operands(1, k, n, device="cuda", seed=10)[2:4]
    scale_t = torch.tensor([0.05], device="cuda")
    ones = torch.ones(m, device="cuda")
    stream = torch.cuda.Stream()
    fmt.ops.reserve_workspace(stream=stream)

    def step():
        h = fmt.quant(a, w, a_scale, w_scale, scale_t, bias)
        return h, fmt.mm(h, w2, ones * scale_t, ws2, out_dtype=torch.bfloat16)

    graph, (h, y) = _captured(step, stream)
    a.copy_(fmt.numerics.make_operands(m, n, k, device="cuda", seed=11)[0])
    graph.replay()
    torch.cuda.synchronize()
    fmt.check(h, fmt.quant_want(fmt.value(a, w, a_scale, w_scale, bias), scale_t),
              "graph: quant")
    fmt.check(y, fmt.mm_want(h, w2, ones * scale_t, ws2, None, torch.bfloat16),
              "graph: second GEMM")
    assert fmt.ops.stats() == {}


def test_torch_compile_runs_the_custom_ops(fmt):
    a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(256, 512, 256, device="cuda",
                                                              seed=12)

    def f(a):
        return fmt.mm(a, w, a_scale, w_scale, bias, out_dtype=torch.bfloat16) * 2

    got = torch.compile(f, fullgraph=True)(a)
    torch.cuda.synchronize()
    fmt.check(got, fmt.mm_want(a, w, a_scale, w_scale, bias, torch.bfloat16) * 2,
              "torch.compile")


@pytest.mark.fp8
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [256, 1000, 4096])
def test_fp8_quantizer_kernel_is_bitwise_the_torch_definition(fp8, dtype, k):
    quantize_kernel = importlib.import_module(f"{fp8.package}.quantize_kernel")
    x = torch.randn(300, k, device="cuda").to(dtype) * 3
    x[7] = 0
    x[11, 5] = math.nan
    got = quantize_kernel.quantize_rows_cuda(x, device_arch())
    assert got is not None, "the quantizer kernel did not load"
    q, scale = got
    want_q, want_scale = fp8.numerics.quantize_rows(x)
    torch.cuda.synchronize()
    assert torch.equal(scale.isnan(), want_scale.isnan())
    assert torch.equal(scale.nan_to_num(), want_scale.nan_to_num())
    same = q.view(torch.uint8) == want_q.view(torch.uint8)
    both_nan = q.float().isnan() & want_q.float().isnan()
    assert bool((same | both_nan).all())
    assert float(scale[7]) == 1.0 and q[11].float().isnan().all()


@pytest.mark.fp8
def test_fp8_quantized_linear_serves_f_linear_where_the_table_says_unquantized(fp8, tmp_path,
                                                                              monkeypatch):
    from oasr_core import database, runtime
    from oasr_core.types import Sentinel

    quantize = importlib.import_module(f"{fp8.package}.quantize")
    rt = runtime.get_runtime()
    family = rt.registry.family(fp8.cs.FAMILY)
    lane = rt.registry.active_lane(fp8.cs.FAMILY, device_arch())
    entry = database.Entry(regions=((256, Sentinel.UNQUANTIZED.value), (None, "heuristic")))
    key = database.signature_key(family, fp8.cs.OP_MM, None, (512, 768))
    database.write_entries(database.tier_path(tmp_path, device_arch(), family), family=family,
                           arch=device_arch(), lane=lane.name, entries={key: entry}, configs={},
                           soft={})
    monkeypatch.setenv("OASR_TUNE_USER_DB", str(tmp_path))
    rt.reload()
    layer = torch.nn.Linear(768, 512, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(4, 50, 768, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(1000, 768, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(quantize.quantized_linear(small, layer), layer(small))
    assert fp8.ops.unquantized(512, 768, 200, 0) and not fp8.ops.unquantized(512, 768, 1000, 0)
    y = quantize.quantized_linear(big, layer)
    rel = float((y.float() - layer(big).float()).abs().amax() / layer(big).float().abs().amax())
    assert 0 < rel < 0.1
    assert fp8.ops.stats() == {}


@pytest.mark.parametrize("op_index", [0, 1], ids=["mm", "quant"])
def test_bench_arms_pass_the_gate(fmt, op_index):
    from oasr_core.bench import BenchOptions
    from oasr_core.build import resolve_choice
    from oasr_core.runtime import get_runtime
    from oasr_core.types import Problem, Sentinel

    op = fmt.cs.OPS[op_index]
    rt = get_runtime()
    family = rt.registry.family(fmt.cs.FAMILY)
    lane = rt.registry.active_lane(fmt.cs.FAMILY, device_arch())
    options = BenchOptions(lane=lane.name, resolve=functools.partial(resolve_choice, family,
                                                                     lane))
    sentinels = [Sentinel[s] for s in fmt.sentinels]
    for m, n, k in ((8, 768, 256), (1000, 784, 1024)):
        problem = Problem(fmt.cs.FAMILY, op, fmt.record.dtype, (("N", n), ("K", k)), m)
        choices = [c for c in lane.config_space if lane.supports(c, problem)]
        case = family.make_bench(problem, [*choices, *sentinels], options)
        want = {"heuristic", "torch", *(c.id for c in choices)}
        if Sentinel.UNQUANTIZED in sentinels:
            if op == fmt.cs.OP_MM:
                want.add("unquantized")
            else:
                assert "unquantized" in case.rejected
        assert set(case.arms) >= want, case.rejected
        a, a_scale, w, w_scale, bias = fmt.numerics.make_operands(m, n, k, device="cuda",
                                                                  seed=options.seed)
        for name, run in case.arms.items():
            out = run(0)
            verdict = case.gate(out)
            torch.cuda.synchronize()
            assert verdict, (f"{op} m={m} {name}: {verdict.reason}"
                             f"{fmt.explain(out, op, a, w, a_scale, w_scale, bias)}; the "
                             f"heuristic is {options.config_of(Sentinel.HEURISTIC, problem).id}")
