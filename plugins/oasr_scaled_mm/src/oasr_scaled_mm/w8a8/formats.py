"""The number format of a W8A8 family, as data: what int8 and fp8 e4m3 differ by.

Everything else -- the family and lane records, the census recorder, the quantized linear and
its weight cache, the activation quantizer's module, the untuned route, the scaled GEMM's C ABI
and ops -- is written once in :mod:`oasr_scaled_mm.w8a8` and reads one :class:`Format`. A
family's package holds its record (``oasr_scaled_mm.format.INT8``,
``oasr_scaled_mm_fp8.format.E4M3``), its kernels (``csrc/``), config spaces, feasibility,
numerics gate, fitted ladder and route, and registers its own family name, so each family's
tuning tables keep their keys. The shared code finds a family's modules by name under
``Format.package`` (``<package>.ops``, ``.quantize``, ...), imported when first needed and
looked up at call time, so a recorder or a test that rebinds a module attribute is seen.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType

import attrs

from oasr_scaled_mm.w8a8.row_quantizer import RowFormat


@attrs.frozen
class LaneFormat:
    """One lane of a format: its name, where it runs, whether it is on by default there, its
    description (``Lane.description``) and the name of its JIT modules (one library per arch;
    the JIT cache knows the lane's libraries by it)."""

    name: str
    arch_families: tuple[str, ...]
    default_on: tuple[str, ...]
    description: str
    module: str


def lane_formats(title: str, arches: Mapping[str, Sequence[str]],
                 modules: Mapping[str, str]) -> tuple[LaneFormat, ...]:
    """A format's lanes, in the order of ``modules`` (lane -> the name of its JIT modules):
    each runs on its ``arches`` (the family's ``feasibility.ARCHES``) and is on by default
    there, except a CUTLASS 2.x lane where one of the format's 3.x (``*_wgmma``) lanes also
    runs; described by its CUTLASS generation and ``title``."""
    hopper = {lane for lane in modules if lane.endswith("_wgmma")}
    taken = {arch for lane in hopper for arch in arches[lane]}
    return tuple(
        LaneFormat(lane, tuple(arches[lane]),
                   tuple(a for a in arches[lane] if lane in hopper or a not in taken),
                   f"CUTLASS 3.x {title} TMA + wgmma, fused scale EVT" if lane in hopper
                   else f"CUTLASS 2.x {title} mma.sync, fused scale EVT", module)
        for lane, module in modules.items())


@attrs.frozen(kw_only=True)
class Format:
    """A W8A8 family's number format (see the module docstring).

    ``package``: the family's package; ``title``: the format as prose names it (``int8``,
    ``fp8 e4m3``); ``dtype``: the operands' dtype as the census spells it (``int8``,
    ``float8_e4m3fn``); ``element``: its short name as an output dtype (``int8``, ``fp8``);
    ``linear_dtypes``: the activation dtypes the quantized linear takes, its default first;
    ``row_format``: the activation quantizer's numerics; ``quantizer_namespace``: the C++
    namespace of the quantizer's JIT module (:attr:`quantizer`); ``reference``: ``(module,
    function)`` under the package of the torch definition its kernel matches bit for bit;
    ``lane_modules``: lane -> the name of its JIT modules, in lane order. ``lanes`` (per lane,
    :class:`LaneFormat`) default to :func:`lane_formats` over ``<package>.feasibility.ARCHES``;
    ``family`` and ``ops``
    (``(mm, quant)``, each also the name of its function in ``<package>.ops``) default to
    ``<package>.config_space``'s ``FAMILY`` and ``OPS``; ``quantization`` (the scheme the
    quantized linear answers) to ``<element>_w8a8``; ``description`` to the family's one line.
    """

    package: str
    title: str
    dtype: str
    element: str
    linear_dtypes: tuple[str, ...]
    row_format: RowFormat
    quantizer_namespace: str
    reference: tuple[str, str]
    lane_modules: tuple[tuple[str, str], ...] = attrs.field(
        converter=lambda m: tuple(dict(m).items()))
    lanes: tuple[LaneFormat, ...] = attrs.field(default=attrs.Factory(
        lambda self: lane_formats(self.title, self.module("feasibility").ARCHES,
                                  dict(self.lane_modules)), takes_self=True))
    family: str = attrs.field(default=attrs.Factory(
        lambda self: self.module("config_space").FAMILY, takes_self=True))
    ops: tuple[str, str] = attrs.field(default=attrs.Factory(
        lambda self: tuple(self.module("config_space").OPS), takes_self=True))
    quantization: str = attrs.field(default=attrs.Factory(
        lambda self: f"{self.element}_w8a8", takes_self=True))
    description: str = attrs.field(default=attrs.Factory(
        lambda self: f"{self.title} W8A8 A W^T with per-token / per-channel scales (+bias, "
                     f"+{self.element} out)", takes_self=True))

    @property
    def quantizer(self) -> tuple[str, str, str]:
        """``(symbol, module, C++ namespace)`` of the activation quantizer's JIT module:
        ``<namespace>_rows``, ``<family>_quantize_rows``, the namespace."""
        ns = self.quantizer_namespace
        return f"{ns}_rows", f"{self.family}_quantize_rows", ns

    @property
    def op_mm(self) -> str:
        return self.ops[0]

    @property
    def op_quant(self) -> str:
        return self.ops[1]

    @property
    def cache_attr(self) -> str:
        """The attribute of an ``nn.Linear`` holding its quantized weight."""
        return f"_oasr_{self.quantization}"

    def module(self, name: str) -> ModuleType:
        """The family's module ``<package>.<name>``: imported once, then one dict lookup
        (``importlib.import_module`` costs about 1 us a call, and the quantized linear asks
        for two modules per call)."""
        try:
            return _MODULES[self.package, name]
        except KeyError:
            module = _MODULES[self.package, name] = importlib.import_module(
                f"{self.package}.{name}")
            return module


_MODULES: dict[tuple[str, str], ModuleType] = {}
"""The modules :meth:`Format.module` imported, by (package, name)."""
