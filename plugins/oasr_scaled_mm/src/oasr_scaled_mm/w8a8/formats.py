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


@attrs.frozen
class Format:
    """A W8A8 family's number format (see the module docstring).

    ``dtype``: the operands' dtype as the census spells it (``int8``, ``float8_e4m3fn``);
    ``element``: its short name as an output dtype (``int8``, ``fp8``); ``ops``: the family's
    two ops, ``(mm, quant)``, each also the name of its function in ``<package>.ops``;
    ``quantization``: the scheme the quantized linear answers; ``linear_dtypes``: the
    activation dtypes it takes; ``row_format``: the activation quantizer's numerics;
    ``quantizer``: ``(symbol, module, C++ namespace)`` of its JIT module; ``reference``:
    ``(module, function)`` under the package of the torch definition its kernel matches bit for
    bit; ``lanes``: per lane, :class:`LaneFormat`.
    """

    family: str
    package: str
    dtype: str
    element: str
    ops: tuple[str, str]
    quantization: str
    linear_dtypes: tuple[str, ...]
    row_format: RowFormat
    quantizer: tuple[str, str, str]
    reference: tuple[str, str]
    lanes: tuple[LaneFormat, ...]
    description: str

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
