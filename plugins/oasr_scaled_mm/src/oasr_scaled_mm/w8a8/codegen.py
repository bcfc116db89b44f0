"""C++ generation of a W8A8 family: one translation unit per (config, op), for its format.

A unit (:func:`oasr_core.jit.kit.c_abi_unit`) includes its lane's header (the family's
``csrc/<package>/<lane tag>.cuh``: the kernel types; the call record, parameter cache and launch
helpers are the kit's ``oasr_kit/*.cuh``). What the formats' headers share is written once in
this package's ``csrc/oasr_w8a8/*.cuh`` (:data:`SHARED_CSRC`, on every W8A8 unit's include
path): the launch pieces, and the kernel types' bodies, which a family's header includes
inside its ``struct Kernel`` after defining its element, accumulator and epilogue names as
``OASR_W8A8_*`` macros, so that the preprocessed units read as before. A unit names one
kernel type per output dtype (fp16 and bf16 for the mm op, the format's element for the quant
op) and exports two ``extern "C"`` functions::

    int32_t <prefix>_<lane tag>_<unit>(const CallArgs* call, a, w, a_scale, w_scale, bias,
                                       out_scale_ptr, float out_scale, d, stream)
    int64_t <prefix>_<lane tag>_<unit>_workspace(m, n, k, out_dtype)

``CallArgs`` (sizes, output dtype code as ``dtype``, workspace) is prepared once per shape
(:class:`oasr_core.jit.kit.CallArgs`); the launcher returns a status code. A kernel type is
``<namespace>::<lane tag>::Kernel<out, tile M, N, K, warp M, N, K (2.x) or cluster M, N (3.x),
stages, ...>`` (:meth:`UnitWriter.kernel_type`); a family's ``codegen`` module keeps what is its
format's -- its namespace (also its symbols' prefix), its element's C++ type and the template
arguments its lanes add after the stages -- and binds the names :meth:`UnitWriter.names`
gives. Output dtype codes are fp16 0, bf16 1, the format's element 2. Its ``impl_hash`` covers
that module, this one and the family's headers (and the kit's). Importing this module imports
no torch.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_scaled_mm.w8a8.formats import Format

SHARED_CSRC = Path(__file__).with_name("csrc")
"""The include dir of the headers every W8A8 format shares (``oasr_w8a8/*.cuh``)."""

OPERANDS = ("const void* a, const void* w, const void* a_scale, const void* w_scale, "
            "const void* bias, const void* out_scale_ptr, float out_scale, void* d")
"""The launcher's operands after the call record (the scaled C ABI)."""


CXX_HALF = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
"""The C++ types of the mm op's outputs."""


def cxx_bool(value: bool) -> str:
    """A template argument's spelling of ``value``."""
    return "true" if value else "false"


@attrs.frozen(eq=False)
class UnitWriter:
    """One W8A8 family's unit writer (see the module docstring): ``namespace`` of its C++ and
    prefix of its symbols (``oasr_smm``), ``element`` (the C++ type of the format's element,
    the quant op's output), ``template_args`` (lane -> config params -> the kernel type's
    arguments after the stages), ``source`` (the family's codegen file, hashed into
    ``impl_hash``). A lane's tag (``sm80``, ...: the header ``csrc/<package>/<tag>.cuh``, the
    kernel type's namespace and the symbol's part) is its name up to the first ``_``."""

    format: Format
    namespace: str
    element: str
    template_args: Mapping[str, Callable[[Mapping[str, Any]], Iterable[Any]]]
    source: Path

    @property
    def prefix(self) -> str:
        """Its symbols' prefix: the namespace."""
        return self.namespace

    @property
    def lane_tags(self) -> dict[str, str]:
        """Lane -> its tag (``sm90_int8_wgmma`` -> ``sm90``)."""
        return {lane: lane.split("_", 1)[0] for lane in self.template_args}

    @property
    def out_codes(self) -> dict[str, int]:
        """Output dtype name -> the code the call record carries."""
        return {"fp16": 0, "bf16": 1, self.format.element: 2}

    @property
    def op_out_dtypes(self) -> dict[str, tuple[str, ...]]:
        """Op -> its output dtype names."""
        return {self.format.op_mm: ("fp16", "bf16"), self.format.op_quant: (self.format.element,)}

    def csrc_dir(self) -> Path:
        """The include dir holding ``<package>/*.cuh`` (package data)."""
        return Path(str(resources.files(self.format.package) / "csrc"))

    def include_dirs(self) -> tuple[str, ...]:
        """The family's include dirs: its own headers, then the shared ``oasr_w8a8`` ones."""
        return (str(self.csrc_dir()), str(SHARED_CSRC))

    def symbol(self, config: Config, op: str | None = None) -> str:
        """The launcher's C symbol for ``config`` serving ``op`` (default: the mm op)."""
        unit_name = self.format.module("config_space").unit_name
        return (f"{self.prefix}_{self.lane_tags[config.lane]}_"
                f"{unit_name(config, op or self.format.op_mm)}")

    def workspace_symbol(self, config: Config, op: str | None = None) -> str:
        """The workspace query's C symbol for ``config`` serving ``op``."""
        return self.symbol(config, op) + "_workspace"

    def kernel_type(self, config: Config, out_dtype: str) -> str:
        """The C++ kernel type of ``config`` writing ``out_dtype`` (either lane): the output
        type, the tile, the warp tile (2.x) or cluster (3.x), the stages, then the lane's own
        arguments."""
        extra = self.template_args.get(config.lane)
        if extra is None:
            raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a "
                           f"{self.format.family} lane")
        p = config.params
        out = {**CXX_HALF, self.format.element: self.element}[out_dtype]
        args = [out, *p["tile"], *(p["warp"] if "warp" in p else p["cluster"]), p["stages"],
                *extra(p)]
        tag = self.lane_tags[config.lane]
        return f"{self.namespace}::{tag}::Kernel<{', '.join(map(str, args))}>"

    def unit_source(self, config: Config, op: str | None = None,
                    out_dtypes: Iterable[str] | None = None) -> str:
        """The translation unit of ``config`` for ``op`` (default: the mm op), with kernels
        for ``out_dtypes`` (default: every output of the op; a subset compiles faster)."""
        fmt = self.format
        op = op or fmt.op_mm
        cs = fmt.module("config_space")
        if not cs.serves(config, op):
            raise ValueError(f"config {config.id!r} has no {op} launcher (Stream-K)")
        allowed = self.op_out_dtypes[op]
        dtypes = tuple(out_dtypes) if out_dtypes is not None else allowed
        if not dtypes or any(d not in allowed for d in dtypes):
            raise ValueError(f"out_dtypes {dtypes!r} must be a non-empty subset of {allowed}")
        ns = self.namespace
        return kit.c_abi_unit(
            title=f"{fmt.package} {config.lane} unit {cs.unit_name(config, op)} "
                  f"({op}: {', '.join(dtypes)})",
            generator=f"{fmt.package}.codegen",
            header=f"{fmt.package}/{self.lane_tags[config.lane]}.cuh",
            kernels={self.out_codes[d]: self.kernel_type(config, d) for d in dtypes},
            symbol=self.symbol(config, op),
            operands=OPERANDS,
            prologue=f"  {ns}::Operands o{{a, w, static_cast<const float*>(a_scale),\n"
                     "      static_cast<const float*>(w_scale), static_cast<const float*>(bias),\n"
                     "      static_cast<const float*>(out_scale_ptr), out_scale, d};\n",
            run="run(o, *c, static_cast<cudaStream_t>(stream))",
            workspace_params="int64_t m, int64_t n, int64_t k, int32_t out_dtype",
            workspace_switch="out_dtype",
            workspace="workspace(m, n, k)",
        )

    @functools.cache  # noqa: B019 - one writer per family, alive for the process
    def impl_hash(self) -> str:
        """A short hash of what decides the generated code: the family's codegen module,
        this one, the family's headers, the shared ``oasr_w8a8`` ones and the kit's; an
        earlier hash where the family's ``equivalent_impls.json`` records this one as
        compiling to the same machine code (:func:`oasr_core.jit.kit.canonical_impl_hash`).
        The family's ``impl_hash`` soft validator: an entry measured under another
        implementation is marked stale."""
        digest = hashlib.sha256()
        digest.update(self.source.read_bytes())
        digest.update(Path(__file__).read_bytes())
        kit.hash_headers(digest, [self.csrc_dir() / self.format.package,
                                  SHARED_CSRC / "oasr_w8a8"])
        return kit.canonical_impl_hash(digest.hexdigest()[:16],
                                       self.source.with_name("equivalent_impls.json"))

    def names(self) -> dict[str, Any]:
        """What a family's ``codegen`` module names: ``csrc_dir``, ``include_dirs``, ``symbol``,
        ``workspace_symbol``, ``kernel_type``, ``unit_source``, ``impl_hash``, ``OUT_CODES``,
        ``OP_OUT_DTYPES``, ``STATUS`` and ``EQUIVALENTS``."""
        return {"csrc_dir": self.csrc_dir, "include_dirs": self.include_dirs, "symbol": self.symbol,
                "workspace_symbol": self.workspace_symbol, "kernel_type": self.kernel_type,
                "unit_source": self.unit_source, "impl_hash": self.impl_hash,
                "OUT_CODES": dict(self.out_codes), "OP_OUT_DTYPES": dict(self.op_out_dtypes),
                "STATUS": kit.STATUS,
                "EQUIVALENTS": self.source.with_name("equivalent_impls.json")}
