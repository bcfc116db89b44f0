"""C++ generation: one translation unit per compiled config of either lane.

A unit is a few lines (:func:`oasr_core.jit.kit.c_abi_unit`): it includes the lane's header
(``csrc/oasr_gemm/sm80.cuh`` or ``sm90.cuh``, where the kernels live; the call record, the
parameter cache and the launch helpers are the kit's ``oasr_kit/*.cuh``), names one kernel
type per dtype, and exports two ``extern "C"`` functions (see ``csrc/oasr_gemm/common.cuh``)::

    int32_t oasr_gemm_<lane>_<unit>(const CallArgs* call, a, w, bias, d, stream)
    int64_t oasr_gemm_<lane>_<unit>_workspace(m, n, k, dtype, split_k, int64_t* semaphores)

``CallArgs`` (sizes, dtype and activation codes, split-K factor, launch flags, workspace
pointers and sizes) is prepared once per shape (:class:`oasr_core.jit.kit.CallArgs`). The
launcher returns a :data:`STATUS` code; the workspace query returns the scratch bytes (-1
when the dtype is not compiled in or the shape is invalid) and writes the zeroed semaphore
bytes.

A 3.x config also has a fused-residual unit for op ``gemm_residual``, ``<unit>_res``
(:func:`residual_unit_source`, ``csrc/oasr_gemm/sm90_residual.cuh``): a separate translation
unit, compiled only where that op needs it, so the config's own unit keeps its text and key.

A split-free config (no split-K, no Stream-K) also has batched units for op ``bmm``, one per
layout of the second operand, ``<unit>_bmm_tn`` and ``<unit>_bmm_nn`` (:func:`bmm_unit_source`,
``csrc/oasr_gemm_bmm/``): separate translation units with headers of their own, so again no
existing unit changes.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from oasr_core.jit import kit
from oasr_core.types import Config

from oasr_gemm.config_space import BMM_LAYOUTS, LANE_SM80, LANE_SM90, has_bmm, has_group

DTYPE_CODES = {"fp16": 0, "bf16": 1}
ACT_CODES = {None: 0, "none": 0, "relu": 1, "gelu": 2, "silu": 3}
STATUS = kit.STATUS
_CXX_DTYPE = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
EQUIVALENTS = Path(__file__).with_name("equivalent_impls.json")
"""Implementation hashes recorded as building the same machine code as an earlier one
(:func:`oasr_core.jit.kit.canonical_impl_hash`)."""
_LANE_TAG = {LANE_SM80: "sm80", LANE_SM90: "sm90"}


def csrc_dir() -> Path:
    """The include dir holding ``oasr_gemm/*.cuh`` (package data)."""
    return Path(str(resources.files("oasr_gemm") / "csrc"))


def symbol(config: Config) -> str:
    """The launcher's C symbol for ``config`` (shared by configs of one unit)."""
    return f"oasr_gemm_{_LANE_TAG[config.lane]}_{config.params['unit']}"


def workspace_symbol(config: Config) -> str:
    """The workspace query's C symbol for ``config``."""
    return symbol(config) + "_workspace"


def sm80_kernel_type(config: Config, dtype: str) -> str:
    """The C++ type of a 2.x config's kernel for ``dtype``."""
    p = config.params
    decomp = 1 if p["stream_k"] else 2 if p["parallel_split_k"] else 0
    args = [_CXX_DTYPE[dtype], *p["tile"], *p["warp"], p["stages"], decomp]
    return f"oasr_gemm::sm80::Kernel<{', '.join(map(str, args))}>"


def sm90_kernel_type(config: Config, dtype: str) -> str:
    """The C++ type of a 3.x config's kernel for ``dtype``."""
    p = config.params
    schedule = p["schedule"]
    args = [
        _CXX_DTYPE[dtype], *p["tile"], *p["cluster"], p["stages"], kit.SM90_MAINLOOP[schedule],
        kit.SM90_EPILOGUE[schedule], kit.sm90_scheduler(p["stream_k"]),
        "true" if p["swap_ab"] else "false",
    ]
    if p.get("epilogue"):
        args += list(p["epilogue"])
    return f"oasr_gemm::sm90::Kernel<{', '.join(map(str, args))}>"


_KERNEL_TYPES = {LANE_SM80: sm80_kernel_type, LANE_SM90: sm90_kernel_type}


def kernel_type(config: Config, dtype: str) -> str:
    """The C++ kernel type of ``config`` for ``dtype`` (either lane)."""
    emit = _KERNEL_TYPES.get(config.lane)
    if emit is None:
        raise KeyError(f"config {config.id!r} belongs to lane {config.lane!r}, not a gemm lane")
    return emit(config, dtype)


_NO_GDC = """// CUTLASS 4.2's Stream-K scheduler does not compile with grid-dependency control
// (PersistentTileSchedulerSm90StreamK::is_last_tile), so this unit is built without it and
// always launched without programmatic dependent launch.
#undef CUTLASS_ENABLE_GDC_FOR_SM90
"""


_WORKSPACE_ABI = {
    "workspace_params": "int64_t m, int64_t n, int64_t k, int32_t dtype, int32_t split_k, "
                        "int64_t* semaphore_bytes",
    "workspace_switch": "dtype",
    "workspace": "workspace(m, n, k, split_k, semaphore_bytes)",
}
"""The workspace query every unit of the family exports (its own and its fused-residual)."""


def pdl_capable(config: Config) -> bool:
    """Whether ``config``'s kernel waits on the previous grid, so it may be launched with
    programmatic dependent launch: the 3.x kernels except Stream-K."""
    return config.lane == LANE_SM90 and not config.params.get("stream_k")


def unit_source(config: Config, dtypes: Iterable[str] = ("fp16", "bf16")) -> str:
    """The translation unit of ``config``'s compile unit, with kernels for ``dtypes``."""
    dtypes = tuple(dtypes)
    if not dtypes or any(d not in DTYPE_CODES for d in dtypes):
        raise ValueError(f"dtypes {dtypes!r} must be a non-empty subset of {tuple(DTYPE_CODES)}")
    flags = ("c->flags, " if pdl_capable(config) else "0, ") if config.lane == LANE_SM90 else ""
    return kit.c_abi_unit(
        title=f"oasr_gemm {config.lane} unit {config.params['unit']} ({', '.join(dtypes)})",
        generator="oasr_gemm.codegen",
        header="oasr_gemm/sm80.cuh" if config.lane == LANE_SM80 else "oasr_gemm/sm90.cuh",
        prelude="" if config.lane != LANE_SM90 or pdl_capable(config) else _NO_GDC,
        kernels={DTYPE_CODES[d]: kernel_type(config, d) for d in dtypes},
        symbol=symbol(config),
        operands="const void* a, const void* w, const void* bias, void* d",
        run="run(a, w, bias, d, c->m, c->n, c->k, c->act, c->split, c->workspace, "
            "c->workspace_bytes, c->semaphores, c->semaphore_bytes, "
            f"{flags}static_cast<cudaStream_t>(stream))",
        **_WORKSPACE_ABI,
    )


RESIDUAL_SUFFIX = "_res"
"""Suffix of a config's fused-residual unit and symbols (op ``gemm_residual``, sm90 only)."""
RESIDUAL_HEADER = "sm90_residual.cuh"
"""The header (under ``csrc/oasr_gemm``) only fused-residual units include."""


def residual_unit(config: Config) -> str:
    """The name of ``config``'s fused-residual translation unit (``<unit>_res``)."""
    return config.params["unit"] + RESIDUAL_SUFFIX


def residual_symbol(config: Config) -> str:
    """The fused-residual launcher's C symbol for ``config``."""
    return symbol(config) + RESIDUAL_SUFFIX


def residual_workspace_symbol(config: Config) -> str:
    """The fused-residual workspace query's C symbol for ``config``."""
    return residual_symbol(config) + "_workspace"


def has_residual(config: Config) -> bool:
    """Whether ``config``'s lane has a fused-residual kernel: the 3.x lane only (its epilogue
    visitor tree reads C; the 2.x lane's op serves torch)."""
    return config.lane == LANE_SM90


def residual_kernel_type(config: Config, dtype: str) -> str:
    """The C++ fused-residual kernel of a 3.x config for ``dtype``: ``sm90::Residual`` takes
    exactly the template arguments of the config's kernel pair (``sm90_kernel_type``)."""
    pair = sm90_kernel_type(config, dtype)
    return pair.replace("oasr_gemm::sm90::Kernel<", "oasr_gemm::sm90::Residual<", 1)


def residual_unit_source(config: Config, dtypes: Iterable[str] = ("fp16", "bf16")) -> str:
    """The fused-residual translation unit of a 3.x config (``D = alpha * (acc + bias) + C``,
    ``csrc/oasr_gemm/sm90_residual.cuh``), with kernels for ``dtypes``.

    Its launcher takes the residual after the bias and the run-time ``alpha`` after the
    output: ``(call, a, w, bias, residual, d, alpha, stream)``; the workspace query has the
    signature of the config's own unit.
    """
    dtypes = tuple(dtypes)
    if not has_residual(config):
        raise ValueError(f"config {config.id!r} ({config.lane}) has no fused-residual kernel")
    if not dtypes or any(d not in DTYPE_CODES for d in dtypes):
        raise ValueError(f"dtypes {dtypes!r} must be a non-empty subset of {tuple(DTYPE_CODES)}")
    flags = "c->flags, " if pdl_capable(config) else "0, "
    return kit.c_abi_unit(
        title=f"oasr_gemm {config.lane} unit {residual_unit(config)} ({', '.join(dtypes)}; "
              "fused residual)",
        generator="oasr_gemm.codegen",
        header=f"oasr_gemm/{RESIDUAL_HEADER}",
        prelude="" if pdl_capable(config) else _NO_GDC,
        kernels={DTYPE_CODES[d]: residual_kernel_type(config, d) for d in dtypes},
        symbol=residual_symbol(config),
        operands="const void* a, const void* w, const void* bias, const void* residual, "
                 "void* d, float alpha",
        run="run(a, w, bias, residual, d, alpha, c->m, c->n, c->k, c->split, c->workspace, "
            "c->workspace_bytes, c->semaphores, c->semaphore_bytes, "
            f"{flags}static_cast<cudaStream_t>(stream))",
        **_WORKSPACE_ABI,
    )


BMM_DIR = "oasr_gemm_bmm"
"""The directory (under :func:`csrc_dir`) of the batched units' headers."""
BMM_LAYOUT_CODES = {"tn": 0, "nn": 1}
"""``oasr_gemm::bmm::Layout`` of each layout of the second operand."""


def _check_bmm(config: Config, layout: str) -> None:
    if layout not in BMM_LAYOUTS:
        raise ValueError(f"bmm layout {layout!r} is not one of {BMM_LAYOUTS}")
    if not has_bmm(config):
        raise ValueError(f"config {config.id!r} ({config.lane}) has no bmm kernel (split-K or "
                         "Stream-K)")


def bmm_unit(config: Config, layout: str) -> str:
    """The name of ``config``'s batched translation unit for ``layout`` (``<unit>_bmm_tn``)."""
    _check_bmm(config, layout)
    return f"{config.params['unit']}_bmm_{layout}"


def bmm_symbol(config: Config, layout: str) -> str:
    """The batched launcher's C symbol of ``config`` for ``layout``."""
    return f"oasr_gemm_{_LANE_TAG[config.lane]}_{bmm_unit(config, layout)}"


def bmm_workspace_symbol(config: Config, layout: str) -> str:
    """The batched workspace query's C symbol of ``config`` for ``layout``."""
    return bmm_symbol(config, layout) + "_workspace"


def bmm_kernel_type(config: Config, dtype: str, layout: str) -> str:
    """The C++ batched kernel of ``config`` for ``dtype`` and ``layout``: the template
    arguments of the config's own kernel (``sm80_kernel_type``, ``sm90_kernel_type``) with
    the layout code after the ones that shape the main loop."""
    _check_bmm(config, layout)
    p, code = config.params, BMM_LAYOUT_CODES[layout]
    if config.lane == LANE_SM80:
        args = [_CXX_DTYPE[dtype], *p["tile"], *p["warp"], p["stages"], code]
        return f"oasr_gemm::bmm::sm80::Kernel<{', '.join(map(str, args))}>"
    schedule = p["schedule"]
    args = [
        _CXX_DTYPE[dtype], *p["tile"], *p["cluster"], p["stages"], kit.SM90_MAINLOOP[schedule],
        kit.SM90_EPILOGUE[schedule], kit.sm90_scheduler(False),
        "true" if p["swap_ab"] else "false", code,
    ]
    if p.get("epilogue"):
        args += list(p["epilogue"])
    return f"oasr_gemm::bmm::sm90::Kernel<{', '.join(map(str, args))}>"


def bmm_unit_source(config: Config, layout: str,
                    dtypes: Iterable[str] = ("fp16", "bf16")) -> str:
    """The batched translation unit of ``config`` for ``layout`` (``"tn"``: b is ``[L, N, K]``
    row-major, read transposed; ``"nn"``: b is ``[L, K, N]``), with kernels for ``dtypes``.

    Its launcher takes ``(call, a, b, d, batch, stream)``, ``call.m`` the per-batch M; the
    workspace query ``(m, n, k, batch, dtype)``. The 3.x units launch with programmatic
    dependent launch when ``call.flags`` asks (none is Stream-K)."""
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODES)
    _check_bmm(config, layout)
    sm90 = config.lane == LANE_SM90
    return kit.c_abi_unit(
        title=f"oasr_gemm {config.lane} unit {bmm_unit(config, layout)} ({', '.join(dtypes)}; "
              f"batched, layout {layout.upper()})",
        generator="oasr_gemm.codegen",
        header=f"{BMM_DIR}/{'sm90' if sm90 else 'sm80'}.cuh",
        kernels={DTYPE_CODES[d]: bmm_kernel_type(config, d, layout) for d in dtypes},
        symbol=bmm_symbol(config, layout),
        operands="const void* a, const void* b, void* d, int64_t batch",
        run="run(a, b, d, batch, c->m, c->n, c->k, c->workspace, c->workspace_bytes, "
            f"{'c->flags' if sm90 else '0'}, static_cast<cudaStream_t>(stream))",
        workspace_params="int64_t m, int64_t n, int64_t k, int64_t batch, int32_t dtype",
        workspace_switch="dtype",
        workspace="workspace(m, n, k, batch)",
    )


GROUP_DIR = "oasr_gemm_group"
"""The directory (under :func:`csrc_dir`) of the grouped units' headers (op ``group_gemm``)."""


def _check_group(config: Config) -> None:
    if not has_group(config):
        raise ValueError(f"config {config.id!r} ({config.lane}) has no group_gemm kernel (only "
                         "the split-free configs of the 2.x lane have one)")


def group_unit(config: Config) -> str:
    """The name of ``config``'s grouped translation unit (``<unit>_group``)."""
    _check_group(config)
    return f"{config.params['unit']}_group"


def group_symbol(config: Config) -> str:
    """The grouped launcher's C symbol of ``config``."""
    return f"oasr_gemm_{_LANE_TAG[config.lane]}_{group_unit(config)}"


def group_kernel_type(config: Config, dtype: str) -> str:
    """The C++ grouped kernel of ``config`` for ``dtype``: the 2.x config's block, warp and
    stage count (``oasr_gemm::group::sm80::Kernel``)."""
    _check_group(config)
    p = config.params
    args = [_CXX_DTYPE[dtype], *p["tile"], *p["warp"], p["stages"]]
    return f"oasr_gemm::group::sm80::Kernel<{', '.join(map(str, args))}>"


def group_unit_source(config: Config, dtypes: Iterable[str] = ("fp16", "bf16")) -> str:
    """The grouped translation unit of ``config`` (a split-free 2.x config; CUTLASS 2.x
    ``GemmGrouped``, ``csrc/oasr_gemm_group/sm80.cuh``) with kernels for ``dtypes``.

    Its launcher takes ``(call, xs, ws, bs, ds, rows, groups, stream)``, host arrays of the
    group's pointers and rows, ``call.n`` and ``call.k`` the problems' sizes and
    ``call.workspace`` the device records; the workspace query ``(groups, n, k, dtype)``."""
    dtypes = kit.unit_dtypes(dtypes, DTYPE_CODES)
    _check_group(config)
    return kit.c_abi_unit(
        title=f"oasr_gemm {config.lane} unit {group_unit(config)} ({', '.join(dtypes)}; "
              "grouped)",
        generator="oasr_gemm.codegen",
        header=f"{GROUP_DIR}/sm80.cuh",
        kernels={DTYPE_CODES[d]: group_kernel_type(config, d) for d in dtypes},
        symbol=group_symbol(config),
        operands="const void* const* xs, const void* const* ws, const void* const* bs, "
                 "void* const* ds, const int64_t* rows, int64_t groups",
        run="run(xs, ws, bs, ds, rows, groups, c->n, c->k, c->workspace, c->workspace_bytes, "
            "static_cast<cudaStream_t>(stream))",
        workspace_params="int64_t groups, int64_t n, int64_t k, int32_t dtype",
        workspace_switch="dtype",
        workspace="workspace(groups, n, k)",
    )


@functools.cache
def impl_hash() -> str:
    """A short hash of what decides the kernels' binaries: every config's generated unit (both
    lanes, both dtypes; a 3.x config's fused-residual unit and a split-free config's batched
    units too), the family's and the kit's headers and the lanes' compile flags
    (:func:`impl_digest`), under the name ``equivalent_impls.json`` records for it.

    It is the family's ``impl_hash`` soft validator: a tuning entry measured under another
    implementation is marked stale. The generator's own text is not hashed, so editing this
    module without changing a unit leaves the shipped tables current.
    """
    return kit.canonical_impl_hash(impl_digest(), EQUIVALENTS)


def impl_digest(*, residual: bool = True, bmm: bool = True, group: bool = True) -> str:
    """The digest :func:`impl_hash` names. ``residual=False`` leaves the fused-residual units
    and their header out, ``bmm=False`` the batched units and their headers
    (``csrc/oasr_gemm_bmm``), ``group=False`` the grouped units and their header
    (``csrc/oasr_gemm_group``): the digests of the family before they existed, which show
    that adding them changed no other unit's text or header (``equivalent_impls.json``)."""
    from oasr_gemm import jit
    from oasr_gemm.config_space import space

    digest = hashlib.sha256()
    for lane in (LANE_SM80, LANE_SM90):
        digest.update(" ".join((*jit.EXTRA_FLAGS, *jit.LANE_FLAGS[lane])).encode())
        seen = set()
        for config in space(lane):
            if config.params["unit"] not in seen:
                seen.add(config.params["unit"])
                digest.update(unit_source(config).encode())
                if residual and has_residual(config):
                    digest.update(residual_unit_source(config).encode())
                if bmm and has_bmm(config):
                    for layout in BMM_LAYOUTS:
                        digest.update(bmm_unit_source(config, layout).encode())
                if group and has_group(config):
                    digest.update(group_unit_source(config).encode())
    if residual:
        kit.hash_headers(digest, [csrc_dir() / "oasr_gemm"])
    else:
        _hash_headers_except(digest, RESIDUAL_HEADER)
    for wanted, folder in ((bmm, BMM_DIR), (group, GROUP_DIR)):
        if wanted:
            for header in sorted((csrc_dir() / folder).glob("*.cuh")):
                digest.update(header.name.encode())
                digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def _hash_headers_except(digest: hashlib._Hash, left_out: str) -> None:
    """:func:`oasr_core.jit.kit.hash_headers` of the family's headers without ``left_out``."""
    for header in [*(h for h in sorted((csrc_dir() / "oasr_gemm").glob("*.cuh"))
                     if h.name != left_out), *kit.headers()]:
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
